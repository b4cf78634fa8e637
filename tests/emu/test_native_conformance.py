"""The native tier on the recorded H200 results and the corpus: every kernel it claims (a native plan) runs
there (`tier == "native"`) and gives the H200's bits (one-instruction and warp kernels) or the interpreter's
memory byte for byte (corpus kernels, random device memory); a kernel it does not claim falls back naming
the instruction. The interpreter's side of the same recordings is test_hw_reference.py. The corpus sweep
runs each source's sm_80 build in the suite; every other build (265 modules, minutes of the interpreter's time)
only with PTXFORGE_NATIVE_SWEEP=1."""

from __future__ import annotations

import glob
import os
from pathlib import Path

import numpy as np
import pytest
from conformance import hw_ops

from ptxforge.emu.errors import EmulatorError
from ptxforge.emu.launch import emu_device
from ptxforge.emu.native.plan import native_plan
from ptxforge.errors import LaunchError
from ptxforge.runtime.buffers import to_device
from ptxforge.runtime.launch_config import EmulatorOptions

pytest.importorskip("llvmlite")

HW = np.load(Path(__file__).resolve().parents[1] / "conformance" / "data" / "hw_reference_h200.npz")
CORPUS = Path(__file__).resolve().parents[1] / "corpus" / "ptx"
# at least this many of the recorded cases run natively (what the tier covers today: a regression guard)
MIN_NATIVE_EXACT, MIN_NATIVE_WARP = 112, 13


def _plan(kernel):
    layout, ops = emu_device().image(kernel.module).compiled(kernel.function)
    return native_plan(layout, ops, (256, 1, 1))


def _native_exact(case) -> bool:
    return _plan(hw_ops._kernel(case.ptx(), case.name)).native


# the recorded cases the default suite runs on the native tier (those it ran before the float modifiers; each is
# an LLVM compile, ~0.5 s of CPU); every
# other one with -m slow (the float forms are also held to the interpreter's bits on edge grids below, and the
# interpreter to the H200's by test_hw_reference.py)
# one or two recorded H200 cases per kind of instruction in the default suite (each an LLVM compile of about a
# second); every other recording the tier claims runs with -m slow
DEFAULT_H200 = {"add.rn.f32", "fma.rn.f32", "div.rn.f32", "sqrt.rn.f64", "cvt.rn.f32.f64", "cvt.rzi.u32.f32",
                "mul.hi.s32", "div.s32", "rem.u64", "bfe.s32", "prmt.b32", "popc.b64", "setp.gtu.f32", "lop3.b32",
                "dp4a.s32.u32", "vmad.neg.shr15.sat", "vavrg4"}


@pytest.mark.parametrize("case", [c if c.name in DEFAULT_H200 else pytest.param(c, marks=pytest.mark.slow)
                                  for c in hw_ops.EXACT], ids=lambda c: c.name)
def test_instruction_on_the_native_tier_matches_the_h200(case):
    k = hw_ops._kernel(case.ptx(), case.name)
    plan = _plan(k)
    if not plan.native:
        assert f"{case.name}.ptx:" in plan.reason and "not in the native tier" in plan.reason, plan.reason
        return
    ins = case.make_inputs(hw_ops.REFERENCE_N, hw_ops.case_rng(case.name))
    n = len(ins[0])
    out = hw_ops.poisoned_output(case, n)
    pad = [np.zeros(n, np.uint32)] * (3 - len(ins))
    r = k.launch(grid=(n // 256,), block=(256,), args=[*ins, *pad, out, np.uint32(n)],
                 options=EmulatorOptions(tier="native"))
    assert r.tier == "native", r.tier_note
    want = HW[f"op/{case.name}"]
    assert bytes(HW[f"in/{case.name}"]).decode() == hw_ops.digest(ins)
    assert hw_ops.same_bits(out, want).all(), hw_ops.mismatch_report(case.name, ins, out, want)


def test_the_optimized_level_matches_the_h200():
    """The tests above run at the quick level (LLVM -O0: what a cold kernel gets); -O3 and its passes once, on a
    fused multiply-add (where a contraction or reassociation would show)."""
    case = next(c for c in hw_ops.EXACT if c.name == "fma.rn.f32")
    k = hw_ops._kernel(case.ptx(), case.name)
    ins = case.make_inputs(hw_ops.REFERENCE_N, hw_ops.case_rng(case.name))
    n = len(ins[0])
    out = hw_ops.poisoned_output(case, n)
    r = k.launch(grid=(n // 256,), block=(256,), args=[*ins, out, np.uint32(n)],
                 options=EmulatorOptions(tier="native", level="opt"))
    assert (r.tier, r.level) == ("native", "opt"), r.tier_note
    assert hw_ops.same_bits(out, HW[f"op/{case.name}"]).all()


@pytest.mark.parametrize("name", sorted(hw_ops.WARP_BODIES))
def test_warp_operation_on_the_native_tier_matches_the_h200(name):
    k = hw_ops._kernel(hw_ops.warp_case_ptx(name), name)
    plan = _plan(k)
    if not plan.native:
        assert "not in the native tier" in plan.reason, plan.reason
        return
    a, b = hw_ops.warp_inputs(name, hw_ops.REFERENCE_N)
    out = np.full(len(a), 0xA5A5A5A5, np.uint32)
    r = k.launch(grid=(len(a) // 256,), block=(256,), args=[a, b, out, np.uint32(len(a))],
                 options=EmulatorOptions(tier="native"))
    assert r.tier == "native", r.tier_note
    want = HW[f"warp/{name}"]
    assert (out == want).all(), hw_ops.mismatch_report(name, (a, b), out, want)


def test_the_native_tier_covers_the_recorded_cases_it_did():
    exact = sum(_native_exact(c) for c in hw_ops.EXACT)
    warp = sum(_plan(hw_ops._kernel(hw_ops.warp_case_ptx(n), n)).native for n in hw_ops.WARP_BODIES)
    assert exact >= MIN_NATIVE_EXACT and warp >= MIN_NATIVE_WARP, (exact, warp)


# ---------------------------------------------------------------------------------------------- the corpus
BUF = 1 << 16
GRID = (1,)  # (one block: kernels launched on shapes they were not written for would race between blocks)


def _args(kernel):
    rng = np.random.default_rng(7)
    out = []
    for p in kernel.function.params:
        t = p.type
        if t in (".u64", ".b64", ".s64"):
            out.append(to_device(rng.integers(0, 256, BUF, dtype=np.uint8)))
        elif t in (".f32", ".f64"):
            out.append((np.float32 if t == ".f32" else np.float64)(1.5))
        elif t[1] in "usb" and t[2:] in ("8", "16", "32"):
            out.append(np.dtype(("i" if t[1] == "s" else "u") + str(int(t[2:]) // 8)).type(8))
        else:
            return None
    return out


def _run(kernel, tier):
    args = _args(kernel)
    try:
        r = kernel.launch(grid=GRID, block=(128,), args=args, shared_mem=2048,
                          options=EmulatorOptions(tier=tier, threads=1, time_limit_s=60))
        outcome: object = r
    except (EmulatorError, LaunchError) as e:
        outcome = e
    mem = [a.to_host().tobytes() for a in args if hasattr(a, "to_host")]
    for a in args:
        if hasattr(a, "free"):
            a.free()
    return outcome, mem


def _modules(pattern: str) -> list[str]:
    return sorted(str(Path(p).relative_to(CORPUS)) for p in glob.glob(str(CORPUS / pattern)))


# ep_style_asm's kernels wait on flags that other GPUs set: alone on one GPU they spin (making progress: they
# read the clock) until the time limit on both tiers, four minutes of the suite for nothing either tier decides
SPINS_FOR_PEERS = "ep_style_asm"
SM80 = [m for m in _modules("cuda/*.sm_80.O3.ptx") if SPINS_FOR_PEERS not in m]
OTHERS = [m for m in _modules("*/*.ptx") if m not in SM80 and SPINS_FOR_PEERS not in m]
SWEEP_OTHERS = os.environ.get("PTXFORGE_NATIVE_SWEEP") == "1"


def _check_module(rel: str) -> None:
    import ptxforge as pf

    path = CORPUS / rel
    m = pf.parse(path.read_text(), filename=path.name)
    for f in m.functions:
        if not f.is_kernel:
            continue
        k = m.kernel(f.name)
        try:
            layout, ops = emu_device().image(m).compiled(f)
        except EmulatorError:
            continue  # (the interpreter's own tests cover what it refuses)
        if not native_plan(layout, ops, (128, 1, 1)).native or _args(k) is None:
            continue
        want, want_mem = _run(k, "interp")
        got, got_mem = _run(k, "native")
        if isinstance(want, Exception) or isinstance(got, Exception):
            assert type(got) is type(want), f"{f.name}: interpreter {want!r}; native {got!r}"
            continue
        assert got.tier == "native", f"{f.name}: {got.tier_note}"
        assert got.thread_instructions == want.thread_instructions, f.name
        assert got_mem == want_mem, f"{f.name}: the memory differs"


@pytest.mark.slow  # (the interpreter's side takes minutes; test_native_tier.py keeps 29 kernels in the fast suite)
@pytest.mark.parametrize("rel", SM80)
def test_corpus_module_on_both_tiers(rel):
    _check_module(rel)


@pytest.mark.slow
@pytest.mark.skipif(not SWEEP_OTHERS, reason="set PTXFORGE_NATIVE_SWEEP=1 to run every other build of the corpus "
                    "on both tiers (265 modules; the sm_80 builds run above)")
@pytest.mark.parametrize("rel", OTHERS)
def test_corpus_module_on_both_tiers_other_builds(rel):
    _check_module(rel)


# ---------------------------------------------------------------------------------------------- float edges
# Many forms of one operand width in one kernel, on grids of edge values (zeros, subnormals, infinities, NaN
# payloads, rounding ties, the largest finite values, saturation bounds) and every pair or triple of them:
# thread i reads a[i], b[i], c[i] and stores each form's result at out[i * K + k] (8 bytes a slot).
def _edges32() -> np.ndarray:
    vals = [0, 1 << 31, 1, 0x80000001, 0x007FFFFF, 0x807FFFFF, 0x00800000, 0x80800000, 0x3F800000, 0xBF800000,
            0x3F800001, 0x3F7FFFFF, 0x7F7FFFFF, 0xFF7FFFFF, 0x7F800000, 0xFF800000, 0x7FC00000, 0xFFC00000,
            0x7F800001, 0xFFC12345, 0x33800000, 0x33C00000, 0x3F000000, 0x3FC00000, 0xC0400000, 0x3EAAAAAB,
            0x4B800001, 0x43E00000, 0x43E80000, 0x47600000, 0x477FF000, 0x3F7FFF80]
    return np.array(vals, np.uint32)


def _edges64() -> np.ndarray:
    v = [0, 1 << 63, 1, (1 << 63) | 1, 0x000FFFFFFFFFFFFF, 0x0010000000000000, 0x3FF0000000000000,
         0xBFF0000000000000, 0x3FF0000000000001, 0x3FEFFFFFFFFFFFFF, 0x7FEFFFFFFFFFFFFF, 0xFFEFFFFFFFFFFFFF,
         0x7FF0000000000000, 0xFFF0000000000000, 0x7FF8000000000000, 0xFFF8000000012345, 0x7FF0000000000001,
         0x3CA0000000000000, 0x3FF8000000000000, 0x47EFFFFFE0000000, 0x47EFFFFFF0000000, 0x36A0000000000000,
         0x3E70000000000000, 0x3FF0000010000000, 0x3FF0000020000000, 0x3FD5555555555555]
    return np.array(v, np.uint64)


def _grid(edges: np.ndarray, arity: int, rng: np.random.Generator, extra: int) -> list[np.ndarray]:
    """Every `arity`-tuple of the edges, then `extra` random tuples (random bits and random edges mixed)."""
    mesh = [m.ravel() for m in np.meshgrid(*[edges] * arity, indexing="ij")]
    w = edges.dtype.itemsize * 8
    out = []
    for m in mesh:
        rand = rng.integers(0, 1 << w, extra, dtype=np.uint64).astype(edges.dtype)
        pick = rng.integers(0, len(edges), extra)
        rand = np.where(rng.random(extra) < 0.3, edges[pick], rand)
        out.append(np.concatenate([m, rand]))
    n = -(-len(out[0]) // 256) * 256
    return [np.resize(x, n) for x in out]


_REG = {16: "%h", 32: "%r", 64: "%rd"}


def _forms_kernel(forms: list[tuple[str, int]], win: int) -> str:
    """(instruction text with {d} {a} {b} {c}, destination width: 16/32/64, 1 for a predicate) forms."""
    body = []
    for k, (text, wd) in enumerate(forms):
        a, b, c = (f"{_REG[win]}{i}" for i in (1, 2, 3))
        if wd == 1:
            body += [text.format(d="%p1", a=a, b=b, c=c) + ";", "selp.b32 %r9, 1, 0, %p1;",
                     f"st.global.b32 [%rd11+{8 * k}], %r9;"]
        else:
            body += [text.format(d=f"{_REG[wd]}9", a=a, b=b, c=c) + ";",
                     f"st.global.b{wd} [%rd11+{8 * k}], {_REG[wd]}9;"]
    nb = win // 8
    lines = [".version 9.1", ".target sm_100f", ".address_size 64",
             ".visible .entry k(.param .u64 pa, .param .u64 pb, .param .u64 pc, .param .u64 po, .param .u32 n)",
             "{", ".reg .pred %p<4>;", ".reg .b16 %h<10>;", ".reg .b32 %r<12>;", ".reg .b64 %rd<12>;",
             "mov.u32 %r10, %ctaid.x;", "mov.u32 %r11, %ntid.x;", "mov.u32 %r9, %tid.x;",
             "mad.lo.s32 %r10, %r10, %r11, %r9;", "ld.param.u32 %r11, [n];", "setp.ge.u32 %p2, %r10, %r11;",
             "@%p2 bra DONE;"]
    for i, p in enumerate(("pa", "pb", "pc"), 1):
        lines += [f"ld.param.u64 %rd{i + 3}, [{p}];", f"mul.wide.u32 %rd8, %r10, {nb};",
                  f"add.s64 %rd{i + 3}, %rd{i + 3}, %rd8;", f"ld.global.b{win} {_REG[win]}{i}, [%rd{i + 3}];"]
    lines += ["ld.param.u64 %rd11, [po];", f"mul.wide.u32 %rd8, %r10, {8 * len(forms)};",
              "add.s64 %rd11, %rd11, %rd8;", *body, "DONE:", "ret;", "}"]
    return "\n".join(lines)


def _both_tiers(forms: list[tuple[str, int]], win: int, ins: list[np.ndarray]) -> None:
    import ptxforge as pf

    k = pf.parse(_forms_kernel(forms, win), filename="forms.ptx").kernel("k")
    plan = _plan(k)
    assert plan.native, plan.reason
    n = len(ins[0])
    ins = ins + [ins[0]] * (3 - len(ins))
    outs = {}
    for tier in ("interp", "native"):
        out = np.zeros(n * len(forms), np.uint64)
        r = k.launch(grid=(n // 256,), block=(256,), args=[*ins, out, np.uint32(n)],
                     options=EmulatorOptions(tier=tier))
        assert r.tier == tier, r.tier_note
        outs[tier] = out.reshape(n, len(forms))
    bad = []
    for j, (text, _) in enumerate(forms):
        diff = np.flatnonzero(outs["interp"][:, j] != outs["native"][:, j])
        if diff.size:
            i = diff[0]
            bad.append(f"{text}: {diff.size} lanes differ, first a={ins[0][i]:#x} b={ins[1][i]:#x} "
                       f"c={ins[2][i]:#x}: interp {outs['interp'][i, j]:#x} native {outs['native'][i, j]:#x}")
    assert not bad, "\n".join(bad)


_FLAGS32 = ("", ".ftz", ".sat", ".ftz.sat")
_RND = (".rn", ".rz", ".rm", ".rp")
F32_BINARY = [(f"{op}{r}{f}.f32 {{d}}, {{a}}, {{b}}", 32) for op in ("add", "sub", "mul") for r in _RND
              for f in _FLAGS32] + \
    [(f"div{r}{f}.f32 {{d}}, {{a}}, {{b}}", 32) for r in (*_RND, ".full", ".approx") for f in ("", ".ftz")] + \
    [(f"{op}{m}.f32 {{d}}, {{a}}, {{b}}", 32) for op in ("min", "max")
     for m in ("", ".ftz", ".NaN", ".xorsign.abs", ".ftz.NaN.xorsign.abs")] + \
    [("copysign.f32 {d}, {a}, {b}", 32)] + \
    [(f"cvt.rn{s}.{t}.f32 {{d}}, {{a}}, {{b}}", 16) for t in ("e4m3x2", "e5m2x2") for s in (".satfinite",
                                                                                           ".satfinite.relu")] + \
    [(f"cvt{r}{s}.{t}.f32 {{d}}, {{a}}, {{b}}", 32) for t in ("f16x2", "bf16x2") for r in _RND
     for s in ("", ".relu")]
F32_TERNARY = [(f"fma{r}{f}.f32 {{d}}, {{a}}, {{b}}, {{c}}", 32) for r in _RND for f in _FLAGS32] + \
    [("mad.rn.f32 {d}, {a}, {b}, {c}", 32), ("min.NaN.f32 {d}, {a}, {b}, {c}", 32),
     ("max.ftz.f32 {d}, {a}, {b}, {c}", 32)]
F32_UNARY = [(f"{op}{r}{f}.f32 {{d}}, {{a}}", 32) for op in ("sqrt", "rcp") for r in (*_RND, ".approx")
             for f in ("", ".ftz")] + \
    [(f"{op}.approx{f}.f32 {{d}}, {{a}}", 32) for op in ("ex2", "lg2", "sin", "cos")
     for f in ("", ".ftz")] + [("tanh.approx.f32 {d}, {a}", 32)] + \
    [("rsqrt.approx.f32 {d}, {a}", 32), ("rsqrt.approx.ftz.f32 {d}, {a}", 32), ("abs.ftz.f32 {d}, {a}", 32),
     ("neg.ftz.f32 {d}, {a}", 32)] + \
    [(f"testp.{t}.f32 {{d}}, {{a}}", 1) for t in ("finite", "infinite", "number", "notanumber", "normal",
                                                  "subnormal")] + \
    [(f"cvt{r}{f}.{t}.f32 {{d}}, {{a}}", 16) for t in ("f16", "bf16") for r in _RND for f in ("", ".sat", ".relu")] + \
    [(f"cvt{r}{f}.tf32.f32 {{d}}, {{a}}", 32) for r in (".rna", ".rn", ".rz") for f in ("", ".satfinite")] + \
    [(f"cvt{r}{f}.{t}.f32 {{d}}, {{a}}", 32 if t[1:] == "32" else 64) for t in ("s32", "u32", "s64", "u64")
     for r in (".rni", ".rzi", ".rmi", ".rpi") for f in ("", ".ftz")] + \
    [(f"cvt{r}{f}.f32.f32 {{d}}, {{a}}", 32) for r in ("", ".rni", ".rmi") for f in ("", ".ftz", ".sat")
     if r or f] + \
    [(f"cvt{f}.f64.f32 {{d}}, {{a}}", 64) for f in ("", ".ftz", ".sat")] + \
    [(f"cvt{r}{s}.f{w}.{t}32 {{d}}, {{a}}", w) for w in (32, 64) for t in "su" for r in _RND for s in ("", ".sat")]
F64_BINARY = [(f"{op}{r}.f64 {{d}}, {{a}}, {{b}}", 64) for op in ("add", "sub") for r in _RND] + \
    [(f"mul{r}.f64 {{d}}, {{a}}, {{b}}", 64) for r in _RND] + \
    [(f"div{r}.f64 {{d}}, {{a}}, {{b}}", 64) for r in _RND] + [("fma.rn.f64 {d}, {a}, {b}, {a}", 64),
     ("min.f64 {d}, {a}, {b}", 64), ("max.f64 {d}, {a}, {b}", 64), ("copysign.f64 {d}, {a}, {b}", 64)]
F64_UNARY = [(f"cvt{r}{f}.f32.f64 {{d}}, {{a}}", 32) for r in _RND for f in ("", ".ftz", ".sat")] + \
    [(f"cvt{r}.{t}.f64 {{d}}, {{a}}", 16) for t in ("f16", "bf16") for r in _RND] + \
    [(f"cvt{r}.{t}.f64 {{d}}, {{a}}", 32 if t[1:] == "32" else 64) for t in ("s32", "u32", "s64", "u64")
     for r in (".rni", ".rzi")] + \
    [(f"sqrt{r}.f64 {{d}}, {{a}}", 64) for r in _RND] + \
    [(f"rcp{r}.f64 {{d}}, {{a}}", 64) for r in _RND] + [("rcp.approx.ftz.f64 {d}, {a}", 64),
     ("rsqrt.approx.f64 {d}, {a}", 64), ("rsqrt.approx.ftz.f64 {d}, {a}", 64), ("abs.f64 {d}, {a}", 64),
     ("cvt.rmi.f64.f64 {d}, {a}", 64), ("cvt.sat.f64.f64 {d}, {a}", 64)] + \
    [(f"cvt{r}.f{w}.{t}64 {{d}}, {{a}}", w) for w in (32, 64) for t in "su" for r in _RND]
F64_TERNARY = [(f"{op}{r}.f64 {{d}}, {{a}}, {{b}}, {{c}}", 64) for op in ("fma", "mad") for r in _RND]
HALF_UNARY = [(f"cvt.f32.{t} {{d}}, {{a}}", 32) for t in ("f16", "bf16")] + \
    [("cvt.f64.f16 {d}, {a}", 64), ("cvt.rn.f16x2.e4m3x2 {d}, {a}", 32), ("cvt.rn.f16x2.e5m2x2 {d}, {a}", 32),
     ("cvt.rn.relu.f16x2.e4m3x2 {d}, {a}", 32), ("cvt.rzi.sat.u16.f16 {d}, {a}", 16),
     ("cvt.rn.f32.s16 {d}, {a}", 32), ("ex2.approx.f16 {d}, {a}", 16), ("ex2.approx.ftz.bf16 {d}, {a}", 16),
     ("tanh.approx.f16 {d}, {a}", 16), ("tanh.approx.bf16 {d}, {a}", 16)]
HALF_BINARY = [(f"{op}{r}{f}.{t} {{d}}, {{a}}, {{b}}", 32) for t in ("f16x2", "bf16x2") for op in ("add", "sub", "mul")
               for r in _RND for f in ("", ".sat", ".ftz")
               if not (f == ".ftz" and t == "bf16x2") and not (f == ".sat" and t == "bf16x2")] + \
    [(f"fma{r}{f}.{t} {{d}}, {{a}}, {{b}}, {{a}}", 32) for t in ("f16x2", "bf16x2") for r in (".rn",)
     for f in ("", ".relu")] + [("fma.rn.sat.f16x2 {d}, {a}, {b}, {b}", 32)] + \
    [(f"{op}{f}.{t} {{d}}, {{a}}", 32) for t in ("f16x2", "bf16x2") for op in ("neg", "abs")
     for f in ("", ".ftz") if not (f and t == "bf16x2")] + \
    [(f"{op}{m}.{t} {{d}}, {{a}}, {{b}}", 32) for t in ("f16x2", "bf16x2") for op in ("min", "max")
     for m in ("", ".NaN", ".xorsign.abs", ".ftz")
     if not (m == ".ftz" and t == "bf16x2")] + \
    [("ex2.approx.f16x2 {d}, {a}", 32), ("ex2.approx.ftz.bf16x2 {d}, {a}", 32), ("tanh.approx.f16x2 {d}, {a}", 32),
     ("tanh.approx.bf16x2 {d}, {a}", 32)]
PAIR_UNARY = [(f"cvt.rn.satfinite{r}.{t}.{s} {{d}}, {{a}}", 16) for t in ("e4m3x2", "e5m2x2")
              for s in ("f16x2", "bf16x2") for r in ("", ".relu")]


# what the default suite runs of each group (LLVM compiles about 0.2 s of CPU per form; every form: slow)
SMOKE = {
    "f32_binary": ("add.rz.ftz.sat.f32", "sub.rm.f32", "mul.rp.ftz.f32", "div.rz.f32", "div.approx.ftz.f32",
                   "min.ftz.NaN.xorsign.abs.f32", "cvt.rn.satfinite.e4m3x2.f32", "cvt.rz.relu.bf16x2.f32"),
    "f32_ternary": ("fma.rm.sat.f32", "fma.rp.ftz.f32"),
    "f32_unary": ("sqrt.rp.f32", "rcp.rm.ftz.f32", "rsqrt.approx.ftz.f32", "testp.subnormal.f32", "ex2.approx.f32",
                  "lg2.approx.ftz.f32", "sin.approx.f32", "cos.approx.ftz.f32", "tanh.approx.f32",
                  "cvt.rz.sat.f16.f32", "cvt.rna.tf32.f32", "cvt.rmi.ftz.s64.f32", "cvt.ftz.f64.f32",
                  "cvt.rz.f32.u32"),
    "f64_binary": ("add.rm.f64", "sub.rz.f64", "mul.rz.f64", "mul.rm.f64", "mul.rp.f64", "div.rz.f64",
                   "div.rm.f64", "div.rp.f64"),
    "f64_ternary": ("fma.rz.f64", "fma.rm.f64", "fma.rp.f64"),
    "f64_unary": ("cvt.rp.ftz.f32.f64", "cvt.rm.f16.f64", "cvt.rz.f32.s64", "cvt.rp.f64.u64",
                  "rcp.approx.ftz.f64", "sqrt.rz.f64", "sqrt.rm.f64", "sqrt.rp.f64", "rcp.rp.f64"),
    "half_unary": ("cvt.f32.bf16", "cvt.rn.f16x2.e4m3x2", "ex2.approx.ftz.bf16", "tanh.approx.f16"),
    "pair_unary": ("cvt.rn.satfinite.e5m2x2.f16x2",),
    "half_binary": ("add.rz.sat.f16x2", "mul.rm.bf16x2", "fma.rn.relu.bf16x2", "min.xorsign.abs.f16x2",
                    "neg.ftz.f16x2", "ex2.approx.f16x2"),
}


def _float_group(group: str, smoke: bool) -> None:
    rng = np.random.default_rng(29)
    e32, e64 = _edges32(), _edges64()
    h16 = np.concatenate([np.arange(0, 1 << 16, 7, dtype=np.uint16), np.array([0x7C00, 0xFC00, 0x7E00, 0x7FFF,
                                                                              0x3C00, 0x8000, 0x0001, 0x7F80,
                                                                              0x7F81, 0xFF80], np.uint16)])
    near = np.concatenate([e32, (e32[:, None] + np.arange(-2, 3).astype(np.uint32)).ravel()])
    cases = {
        "f32_binary": (F32_BINARY, 32, lambda: _grid(e32, 2, rng, 1024)),
        "f32_ternary": (F32_TERNARY, 32, lambda: _grid(e32[::2], 3, rng, 2048)),
        "f32_unary": (F32_UNARY, 32, lambda: _grid(near, 1, rng, 1024)),
        "f64_binary": (F64_BINARY, 64, lambda: _grid(e64, 2, rng, 1024)),
        "f64_ternary": (F64_TERNARY, 64, lambda: _grid(e64, 3, rng, 2048)),
        "f64_unary": (F64_UNARY, 64, lambda: _grid(e64, 1, rng, 1024)),
        "half_unary": (HALF_UNARY, 16, lambda: [np.resize(h16, -(-len(h16) // 256) * 256)]),
        "half_binary": (HALF_BINARY, 32, lambda: _grid(np.concatenate(
            [(h16[::97, None].astype(np.uint32) << 16) | np.array([0x7C00, 0x0001, 0x3C00, 0xFF80, 0x8000, 0x7BFF],
                                                                   np.uint32)]).ravel(), 2, rng, 1024)),
        "pair_unary": (PAIR_UNARY, 32, lambda: _grid(np.concatenate(
            [e32, rng.integers(0, 1 << 32, 2048, dtype=np.uint64).astype(np.uint32)]), 1, rng, 0)),
    }
    forms, win, make = cases[group]
    if smoke:
        forms = [f for f in forms if f[0].split()[0] in SMOKE[group]]
        assert len(forms) == len(SMOKE[group]), [f[0] for f in forms]
    _both_tiers(forms, win, make())


GROUPS = list(SMOKE)


@pytest.mark.parametrize("group", GROUPS)
def test_float_modifiers_on_edge_values_match_the_interpreter(group):
    """Rounding modes, .ftz, .sat, .relu, .satfinite, NaN payloads and the narrow formats: the native tier
    gives the interpreter's bits on every lane (a few forms of each group; every form below, slow)."""
    _float_group(group, smoke=True)


@pytest.mark.parametrize("group", ["f32_binary", "f32_ternary", "f64_binary", "f64_ternary"])
def test_directed_roundings_on_the_portable_path_match_the_interpreter(group, monkeypatch):
    """The exact float64 steps (lower_round.py) that a host without AVX-512 runs for .rz/.rm/.rp add, sub, mul
    and fma, forced here (lower_embedded.PORTABLE) whatever this host has."""
    from ptxforge.emu.native import lower_embedded

    monkeypatch.setattr(lower_embedded, "PORTABLE", True)
    _float_group(group, smoke=True)


def test_directed_roundings_use_the_hosts_embedded_rounding_where_it_has_it(monkeypatch):
    """On an AVX-512 host a directed fma is one instruction a register (its IR names the intrinsic); elsewhere, or
    with PORTABLE, it is the float64 steps."""
    import ptxforge as pf
    from ptxforge.emu.native import jit, lower_embedded

    def ir_text() -> str:
        k = pf.parse(_forms_kernel([("fma.rm.f32 {d}, {a}, {b}, {c}", 32), ("add.rp.f64 {d}, {a}, {b}", 64)], 64),
                     filename="forms.ptx").kernel("k")
        return _plan(k).ir_text

    assert ("llvm.x86.avx512.vfmadd.ps.512" in ir_text()) == jit.host_feature("avx512f")
    monkeypatch.setattr(lower_embedded, "PORTABLE", True)
    assert "llvm.x86.avx512" not in ir_text()


@pytest.mark.slow  # (about 200 forms: LLVM's compile of them takes minutes)
@pytest.mark.parametrize("group", GROUPS)
def test_every_float_form_on_edge_values_matches_the_interpreter(group):
    _float_group(group, smoke=False)


# ---------------------------------------------------------------------------------------------- mma.sync
def _hard_f64(rng: np.random.Generator, n: int) -> list[np.ndarray]:
    """(a, b, c) bits for directed .f64 fma and div: random magnitudes over the whole range; c within an ulp of
    -a*b (cancellation); products near the subnormals with tiny or moderate c; huge operands near overflow."""
    def f64(lo: int, hi: int) -> np.ndarray:
        return np.ldexp(rng.uniform(1, 2, n) * rng.choice([-1, 1], n), rng.integers(lo, hi, n))
    x2, y2 = f64(-600, 600), f64(-600, 600)
    with np.errstate(over="ignore"):
        near = -(x2 * y2)
    k = rng.integers(0, 4, n)
    near = np.where(k == 1, np.nextafter(near, np.inf), np.where(k == 2, np.nextafter(near, -np.inf), near))
    near = np.where(k == 3, f64(-1074, 1023), near)
    tiny_c = np.where(rng.random(n) < 0.5, f64(-1074, -1000), f64(-60, 60))
    a = np.concatenate([f64(-1074, 1023), x2, f64(-700, -400), f64(400, 1023)])
    b = np.concatenate([f64(-1074, 1023), y2, f64(-700, -400), f64(0, 700)])
    c = np.concatenate([f64(-1074, 1023), near, tiny_c, f64(900, 1024)])
    return [v.view(np.uint64) for v in (a, b, c)]


@pytest.mark.parametrize("portable", [False, True])
def test_directed_f64_fma_and_div_on_hard_inputs_match_the_interpreter(portable, monkeypatch):
    """fma/div/rcp .rz/.rm/.rp .f64 (the interpreter rounds them exactly with rationals): cancellations, tiny
    products and quotients, overflow; on the host's embedded rounding where it has it, and on the portable
    path."""
    from ptxforge.emu.native import lower_embedded

    monkeypatch.setattr(lower_embedded, "PORTABLE", portable)
    forms = [(f"fma{r}.f64 {{d}}, {{a}}, {{b}}, {{c}}", 64) for r in _RND[1:]] + \
        [(f"div{r}.f64 {{d}}, {{a}}, {{b}}", 64) for r in _RND[1:]] + [("rcp.rm.f64 {d}, {a}", 64)]
    _both_tiers(forms, 64, _hard_f64(np.random.default_rng(7), 2048))


def test_packed_16x2_integer_ops_match_the_interpreter():
    """add/min/max on .u16x2/.s16x2: each 16-bit half on its own (no carry between them)."""
    halves = np.array([0, 1, 0x7FFF, 0x8000, 0xFFFF, 0x8001, 0x1234], np.uint32)
    words = (halves[:, None] << 16 | halves[None, :]).ravel().astype(np.uint32)
    forms = [(f"{op}.{t} {{d}}, {{a}}, {{b}}", 32) for op in ("add", "min", "max") for t in ("u16x2", "s16x2")]
    _both_tiers(forms, 32, _grid(words, 2, np.random.default_rng(5), 1024))


def _mma_kernel(shape: str, ty: str) -> str:
    na = 4 if shape == "m16n8k16" else 2
    nb = na // 2
    regs = ", ".join
    lines = [".version 8.0", ".target sm_90", ".address_size 64",
             ".visible .entry k(.param .u64 pa, .param .u64 pb, .param .u64 pc, .param .u64 pd)", "{",
             ".reg .b32 %a<4>;", ".reg .b32 %b<2>;", ".reg .f32 %c<4>;", ".reg .f32 %d<4>;", ".reg .b32 %r<4>;",
             ".reg .b64 %rd<12>;", "mov.u32 %r1, %ctaid.x;", "mov.u32 %r2, %ntid.x;", "mov.u32 %r3, %tid.x;",
             "mad.lo.s32 %r1, %r1, %r2, %r3;", "mul.wide.u32 %rd9, %r1, 16;"]
    for i, p in enumerate(("pa", "pb", "pc", "pd")):
        lines += [f"ld.param.u64 %rd{i}, [{p}];", f"add.s64 %rd{i}, %rd{i}, %rd9;"]
    lines += [f"ld.global.b32 %a{i}, [%rd0+{4 * i}];" for i in range(na)]
    lines += [f"ld.global.b32 %b{i}, [%rd1+{4 * i}];" for i in range(nb)]
    lines += [f"ld.global.f32 %c{i}, [%rd2+{4 * i}];" for i in range(4)]
    lines += [f"mma.sync.aligned.{shape}.row.col.f32.{ty}.{ty}.f32 {{{regs(f'%d{i}' for i in range(4))}}}, "
              f"{{{regs(f'%a{i}' for i in range(na))}}}, {{{regs(f'%b{i}' for i in range(nb))}}}, "
              f"{{{regs(f'%c{i}' for i in range(4))}}};"]
    lines += [f"st.global.f32 [%rd3+{4 * i}], %d{i};" for i in range(4)] + ["ret;", "}"]
    return "\n".join(lines)


@pytest.mark.parametrize("shape,ty", [("m16n8k16", "f16"),
                                      *(pytest.param(s, t, marks=pytest.mark.slow)  # (LLVM: ~4 s CPU a kernel)
                                        for s, t in (("m16n8k16", "bf16"), ("m16n8k8", "f16"), ("m16n8k8", "bf16")))])
def test_mma_sync_on_the_native_tier_matches_the_interpreter(shape, ty):
    """mma.sync .f32 accumulators with .f16/.bf16 inputs: the tensor cores' fitted summation, bit for bit,
    on 64 warps of normal values of wide exponent spread, with subnormals, zeros of both signs, infinities
    and NaNs mixed into some warps."""
    import ml_dtypes

    import ptxforge as pf

    rng = np.random.default_rng(7)
    n = 64 * 32
    dt = np.float16 if ty == "f16" else ml_dtypes.bfloat16
    vals = (rng.standard_normal(n * 16) * np.exp2(rng.integers(-8, 8, n * 16))).astype(dt).view(np.uint16)
    special = np.array([0, 0x8000, 0x0001, 0x7C00 if ty == "f16" else 0x7F80, 0x7E00 if ty == "f16" else 0x7FC0,
                        0x0200 if ty == "f16" else 0x0040], np.uint16)
    hit = rng.random(n * 16) < 0.01
    vals = np.where(hit, special[rng.integers(0, len(special), n * 16)], vals)
    a = vals.view(np.uint32)[: n * 4].copy()
    b = vals.view(np.uint32)[n * 4: n * 8].copy()  # (each thread reads its first one or two words)
    c = (rng.standard_normal(n * 4) * np.exp2(rng.integers(-20, 20, n * 4))).astype(np.float32)
    c[rng.random(n * 4) < 0.005] = -0.0
    k = pf.parse(_mma_kernel(shape, ty), filename="mma.ptx").kernel("k")
    assert _plan(k).native, _plan(k).reason
    outs = {}
    for tier in ("interp", "native"):
        d = np.zeros(n * 4, np.uint32)
        r = k.launch(grid=(n // 256,), block=(256,), args=[a, b, c, d], options=EmulatorOptions(tier=tier))
        assert r.tier == tier, r.tier_note
        outs[tier] = d
    diff = np.flatnonzero(outs["interp"] != outs["native"])
    assert diff.size == 0, (diff.size, diff[:4], outs["interp"][diff[:4]], outs["native"][diff[:4]])
