"""wgmma on the native tier against the interpreter, bit for bit.

One kernel written here runs several wgmma forms in turn (each an LLVM compile of the kernel's own code is
a second or more, so the forms share one): it stages a shared-memory image, and per form loads C (and A, if in
registers) from global memory into registers in register order, runs wgmma.mma_async between fence /
commit_group / wait_group and stores D. It runs on both tiers from the same inputs: element values of every
kind (normal, subnormal, signed zeros) with NaN and infinities planted in A, B and C, descriptors in each
swizzle mode (and DeepGEMM's K slices inside a 128-byte swizzled row), transposed operands, A in registers,
scale-d off, negated operands, two warpgroups, and (slow) lanes that exited; the integer forms (.s8/.u8 into
.s32) with C near the int32 limits, so that sums wrap, or clamp with .satfinite; the thread-instruction counts
agree too. The corpus kernels the interpreter's wgmma tests use (wgmma_variants, the DeepGEMM-shaped FP8
GEMM) run on both tiers with -m slow (each an LLVM compile of 5-25 s).
"""

from __future__ import annotations

import ml_dtypes
import numpy as np
import pytest
from emu_corpus import corpus_module

import ptxforge as pf
from ptxforge.emu.ops_wgmma import descriptor_addresses
from ptxforge.runtime.launch_config import EmulatorOptions

pytest.importorskip("llvmlite")

ESIZE = {"f16": 2, "bf16": 2, "tf32": 4, "e4m3": 1, "e5m2": 1, "s8": 1, "u8": 1}
K_OF = {"f16": 16, "bf16": 16, "tf32": 8, "e4m3": 32, "e5m2": 32, "s8": 32, "u8": 32}
INTEGER = ("s8", "u8")
SWIZZLE_CODE = {0: 0, 128: 1, 64: 2, 32: 3}
SPECIAL = {"f16": (0x7E00, 0xFC00), "bf16": (0x7FC0, 0x7F80), "tf32": (0x7FC00000, 0xFF800000),
           "e4m3": (0x7F, 0xFF), "e5m2": (0x7E, 0x7C)}  # (a NaN, an infinity; e4m3 has no infinity: NaNs)

# name: n, dt, at, bt, A in registers, trans-a, trans-b, scale-a, scale-b, swizzle, extra ("slice": the
# descriptors start 64 bytes into the 128-byte swizzled rows, as DeepGEMM's K slices; "no_c": scale-d off;
# "sat": .satfinite)
FORMS = {
    "e4m3_e5m2_f32": (16, "f32", "e4m3", "e5m2", False, 0, 0, 1, -1, 0, ""),
    "e4m3_f32_swz128_kslice": (16, "f32", "e4m3", "e4m3", False, 0, 0, 1, 1, 128, "slice"),
    "e5m2_f16_regs_swz32": (24, "f16", "e5m2", "e4m3", True, 0, 0, -1, 1, 32, ""),
    "f16_f16_regs_tb": (8, "f16", "f16", "f16", True, 0, 1, 1, -1, 0, ""),
    "bf16_f32_ta_swz128": (24, "f32", "bf16", "bf16", False, 1, 0, -1, 1, 128, ""),
    "tf32_f32_swz64_no_c": (8, "f32", "tf32", "tf32", False, 0, 0, 1, 1, 64, "no_c"),
}
# the integer forms (.s32 accumulators; C near INT32_MIN/MAX so that sums wrap, or clamp with .satfinite)
INT_FORMS = {
    "s8_u8_s32_swz128_sat": (24, "s32", "s8", "u8", False, 0, 0, 1, 1, 128, "sat"),
    "u8_s8_s32_regs": (8, "s32", "u8", "s8", True, 0, 0, 1, 1, 0, ""),
    "s8_s8_s32_regs_swz64_sat": (16, "s32", "s8", "s8", True, 0, 0, 1, 1, 64, "sat"),
    "u8_u8_s32_swz32_no_c": (8, "s32", "u8", "u8", False, 0, 0, 1, 1, 32, "no_c"),
}
SLOW_FORMS = {
    "e4m3_f32_n256": (256, "f32", "e4m3", "e4m3", False, 0, 0, 1, 1, 32, ""),
    "f16_f32_n128_ta_tb_swz64": (128, "f32", "f16", "f16", False, 1, 1, 1, 1, 64, ""),
    "bf16_f32_regs_n64_swz32": (64, "f32", "bf16", "bf16", True, 0, 1, -1, -1, 32, ""),
    "tf32_f32_regs_n32": (32, "f32", "tf32", "tf32", True, 0, 0, -1, 1, 0, ""),
    "e5m2_e4m3_f16_n128_swz128": (128, "f16", "e5m2", "e4m3", False, 0, 0, 1, 1, 128, "slice"),
}


def _nd(n: int, dt: str) -> int:
    return n // 4 if dt == "f16" else n // 2


def _vector_access(op: str, reg: str, count: int, base: str, off: int) -> list[str]:
    """Registers reg0.. reg{count-1} loaded from or stored to [base + off] in order, four at a time (few
    memory instructions: each is a good part of the kernel's LLVM compile)."""
    out = []
    m = 4 if count % 4 == 0 else 2 if count % 2 == 0 else 1  # (each thread's words are 4 * count bytes apart)
    for j in range(0, count, m):
        regs = "{" + ",".join(f"{reg}{j + i}" for i in range(m)) + "}" if m > 1 else f"{reg}{j}"
        v = f".v{m}" if m > 1 else ""
        at = f"[{base}+{off + 4 * j}]"
        out.append(f"ld.global{v}.b32 {regs}, {at};" if op == "ld" else f"st.global{v}.b32 {at}, {regs};")
    return out


def kernel_ptx(forms: list[tuple], image: int, exit_lanes: bool) -> str:
    """The kernel: params img (the shared image, `image` bytes), c and d ([forms][thread][registers] words), a
    (A registers, [forms][thread][4] words), then A's and B's descriptor per form (their start relative to the
    image)."""
    lines = [".version 8.4", ".target sm_90a", ".address_size 64",
             ".visible .entry k(.param .u64 pimg, .param .u64 pc, .param .u64 pd, .param .u64 pa"
             + "".join(f", .param .u64 pda{i}, .param .u64 pdb{i}" for i in range(len(forms))) + ")",
             "{", ".reg .pred %p<4>;", ".reg .b32 %r<20>;", ".reg .b64 %rd<40>;", ".reg .b32 %a<4>;",
             *[f".reg .b32 %f{i}d<{_nd(f[0], f[1])}>;" for i, f in enumerate(forms)],
             f".shared .align 1024 .b8 sm[{image}];",
             "mov.u32 %r0, %tid.x;",
             *[f"ld.param.u64 %rd{i + 1}, [{p}];" for i, p in enumerate(("pimg", "pc", "pd", "pa"))],
             *[f"cvta.to.global.u64 %rd{i}, %rd{i};" for i in range(1, 5)],
             "shl.b32 %r1, %r0, 2;", "mov.u32 %r2, sm;",
             "$Lcopy:",
             f"setp.ge.u32 %p1, %r1, {image};", "@%p1 bra $Ldone;",
             "cvt.u64.u32 %rd6, %r1;", "add.u64 %rd7, %rd1, %rd6;", "ld.global.u32 %r4, [%rd7];",
             "add.u32 %r6, %r2, %r1;", "st.shared.u32 [%r6], %r4;",
             "mov.u32 %r7, %ntid.x;", "shl.b32 %r7, %r7, 2;", "add.u32 %r1, %r1, %r7;", "bra $Lcopy;",
             "$Ldone:", "bar.sync 0;",
             "shr.u32 %r8, %r2, 4;", "cvt.u64.u32 %rd8, %r8;"]  # (the image's start, for the descriptors)
    if exit_lanes:  # lanes 30 and 31 of every warp leave before the wgmmas
        lines += ["and.b32 %r11, %r0, 31;", "setp.ge.u32 %p3, %r11, 30;", "@%p3 ret;"]
    c_off = a_off = 0
    for i, (n, dt, at, bt, a_regs, ta, tb, sa, sb, _swz, extra) in enumerate(forms):
        nd = _nd(n, dt)
        k = K_OF[at]
        dregs = ",".join(f"%f{i}d{j}" for j in range(nd))
        imms = f", {sa}, {sb}" + ("" if at not in ("f16", "bf16") else (f", {tb}" if a_regs else f", {ta}, {tb}"))
        if at in INTEGER:
            imms = ""
        shape = f"m64n{n}k{k}" + (".satfinite" if "sat" in extra else "")
        lines += [f"ld.param.u64 %rd9, [pda{i}];", "add.u64 %rd20, %rd9, %rd8;",
                  f"ld.param.u64 %rd10, [pdb{i}];", "add.u64 %rd21, %rd10, %rd8;",
                  f"mul.wide.u32 %rd12, %r0, {4 * nd};", "add.u64 %rd13, %rd2, %rd12;", "add.u64 %rd14, %rd3, %rd12;",
                  *_vector_access("ld", f"%f{i}d", nd, "%rd13", c_off),
                  f"setp.{'eq' if extra == 'no_c' else 'ne'}.u32 %p2, %r0, 100000;"]  # (scale-d: every lane or none)
        if a_regs:
            lines += ["mul.wide.u32 %rd15, %r0, 16;", "add.u64 %rd16, %rd4, %rd15;",
                      *_vector_access("ld", "%a", 4, "%rd16", a_off)]
        a_op = "{%a0,%a1,%a2,%a3}" if a_regs else "%rd20"
        lines += ["wgmma.fence.sync.aligned;",
                  f"wgmma.mma_async.sync.aligned.{shape}.{dt}.{at}.{bt} {{{dregs}}}, {a_op}, %rd21, %p2{imms};",
                  "wgmma.commit_group.sync.aligned;", "wgmma.wait_group.sync.aligned 0;",
                  *_vector_access("st", f"%f{i}d", nd, "%rd14", c_off)]
        c_off += 256 * 4 * nd
        a_off += 256 * 16
    return "\n".join(lines + ["ret;", "}"]) + "\n"


def _codes(rng, ty: str, count: int) -> np.ndarray:
    """Element codes of type `ty`: normal values of several magnitudes, some subnormal, zeros of both signs
    (integers: every code, the extremes often)."""
    if ty in INTEGER:
        codes = rng.integers(0, 256, count)
        codes = np.where(rng.random(count) < 0.3, np.array([0x7F, 0x80, 0xFF, 0])[rng.integers(0, 4, count)], codes)
        return codes.astype(np.uint8)
    x = rng.standard_normal(count) * np.exp2(rng.integers(-3, 4, count))
    kind = rng.random(count)
    tiny = {"f16": 2.0 ** -20, "bf16": 2.0 ** -130, "tf32": 2.0 ** -130, "e4m3": 2.0 ** -8, "e5m2": 2.0 ** -15}[ty]
    x = np.where(kind < 0.05, x * tiny, x)
    x = np.where((kind > 0.95) & (kind < 0.97), 0.0, np.where(kind >= 0.97, -0.0, x))
    if ty == "f16":
        return x.astype(np.float16).view(np.uint16)
    if ty == "bf16":
        return x.astype(ml_dtypes.bfloat16).view(np.uint16)
    if ty == "tf32":  # (the tensor cores drop the low 13 bits: random here)
        return x.astype(np.float32).view(np.uint32) ^ rng.integers(0, 1 << 13, count).astype(np.uint32)
    return x.astype(ml_dtypes.float8_e4m3fn if ty == "e4m3" else ml_dtypes.float8_e5m2).view(np.uint8)


def _layout(swizzle: int, esize: int, k_major: bool, mn: int, k: int) -> tuple[int, int]:
    """(LBO, SBO) of a dense canonical layout of an operand with `mn` rows (M or N) and `k` columns."""
    if swizzle == 0:  # 8 x 16-byte core matrices
        return (128, 256) if k_major else (128 * max(1, mn * esize // 16), 128)
    # swizzled: 8-row groups 8 * width apart; MN-major: the next width-byte block of M/N past every K group
    return (8 * swizzle * max(1, mn // 8), 8 * swizzle) if k_major else (8 * swizzle * max(1, k // 8), 8 * swizzle)


def _operand(rng, ty: str, swizzle: int, k_major: bool, mn: int, extra: str, plant: list) -> tuple[np.ndarray, int]:
    """(bytes, descriptor with start 0) of one operand's region: random elements, `plant` [(row, col, which)]
    (row/col of the layout's [strided, contiguous] grid) set to NaN or infinity."""
    k, es = K_OF[ty], ESIZE[ty]
    lbo, sbo = _layout(swizzle, es, k_major, mn, k)
    desc = ((lbo >> 4) << 16) | ((sbo >> 4) << 32) | (SWIZZLE_CODE[swizzle] << 62)
    if extra == "slice":
        desc += 64 >> 4
    rows, cols = (mn, k) if k_major else (k, mn)
    addr = descriptor_addresses(desc, rows, cols, es, k_major)
    size = -(-(int(addr.max()) + es) // 1024) * 1024
    codes = _codes(rng, ty, size // es)
    for r, c, which in plant:
        if ty not in INTEGER:
            codes[addr[r, c] // es] = SPECIAL[ty][which]
    return codes.view(np.uint8), desc


def run_forms(forms: list[tuple], block: int, exit_lanes: bool = False, seed: int = 0):
    """D of every form on both tiers: {tier: [D words [block, registers] per form]}, and the C words."""
    rng = np.random.default_rng(seed)
    regions, descs, cs, a_words = [], [], [], np.zeros((len(forms), 256, 4), np.uint32)
    base = 0
    for i, (n, dt, at, bt, a_regs, ta, tb, _sa, _sb, swz, extra) in enumerate(forms):
        for which, ty, trans, mn in (("a", at, ta, 64), ("b", bt, tb, n)):
            if which == "a" and a_regs:
                codes = _codes(rng, at, 256 * 16 // ESIZE[at])
                if at not in INTEGER:
                    codes[7] = SPECIAL[at][0]
                a_words[i] = codes.view(np.uint32).reshape(256, 4)
                continue
            plant = [(5, 3, 0), (40, 1, 1)] if which == "a" else [(1, 2, 1), (3, 0, 0)]
            plant = [(r % (mn if not trans else K_OF[ty]), c % (K_OF[ty] if not trans else mn), w) for r, c, w in plant]
            data, desc = _operand(rng, ty, swz, not trans, mn, extra, plant)
            descs.append(desc + (base >> 4))
            regions.append(data)
            base += data.size
        if a_regs:
            descs.insert(2 * i, 0)
        nd = _nd(n, dt)
        if dt == "s32":  # (extremes: sums that wrap or clamp)
            c = rng.integers(-(1 << 31), 1 << 31, (256, nd), dtype=np.int64).astype(np.int32)
            c.flat[::3] = np.int32(2 ** 31 - 1 - rng.integers(0, 1 << 20, c.size)[::3])
            c.flat[1::3] = np.int32(-(2 ** 31) + rng.integers(0, 1 << 20, c.size)[1::3])
        elif dt == "f32":
            c = rng.standard_normal((256, nd)).astype(np.float32)
            c.flat[[3, 77, 5, 6, 9]] = [np.inf, np.nan, -0.0, 1e-40, 3e38]
        else:
            c = rng.standard_normal((256, 2 * nd)).astype(np.float16)
            c.flat[[3, 77, 5, 6]] = [np.inf, np.nan, -0.0, 1e-6]
        cs.append(c.view(np.uint32).reshape(256, nd))
    image = np.concatenate(regions)
    src = kernel_ptx(forms, image.size, exit_lanes)
    kern = pf.parse(src, filename="wgmma_forms.ptx").kernel("k")
    c_all = np.concatenate([c.ravel() for c in cs])
    out, counts = {}, {}
    for tier in ("interp", "native"):
        d = np.full(c_all.size, 0xA5A5A5A5, np.uint32)
        r = kern.launch(grid=1, block=block, device="emu", options=EmulatorOptions(tier=tier),
                        args=[image, c_all, d, a_words, *[np.uint64(x) for x in descs]])
        assert r.tier == tier, r.tier_note
        counts[tier] = r.thread_instructions
        parts, at_ = [], 0
        for c in cs:
            parts.append(d[at_: at_ + c.size].reshape(c.shape)[:block])
            at_ += c.size
        out[tier] = parts
    assert counts["interp"] == counts["native"], counts
    return out, [c[:block] for c in cs]


def _check(names: list[str], out: dict, cs: list) -> None:
    for name, want, got, c in zip(names, out["interp"], out["native"], cs, strict=True):
        assert not np.array_equal(want, c), name  # the wgmma wrote D
        bad = np.argwhere(want != got)
        assert bad.size == 0, f"{name}: {len(bad)} of {want.size} registers differ, first (thread, register) " \
                              f"{bad[:4].tolist()}"


# the default suite's two forms (one kernel, two warpgroups: an LLVM compile of about 5 s): DeepGEMM's FP8 path,
# and A in registers with a transposed B into f16
DEFAULT = ("e4m3_f32_swz128_kslice", "f16_f16_regs_tb")


def test_wgmma_forms_on_the_native_tier_match_the_interpreter():
    out, cs = run_forms([FORMS[n] for n in DEFAULT], 256)
    _check(list(DEFAULT), out, cs)


def test_integer_wgmma_forms_on_the_native_tier_match_the_interpreter():
    out, cs = run_forms(list(INT_FORMS.values()), 128, seed=3)
    _check(list(INT_FORMS), out, cs)


@pytest.mark.slow
def test_other_wgmma_forms_on_the_native_tier_match_the_interpreter():
    rest = [n for n in FORMS if n not in DEFAULT]
    out, cs = run_forms([FORMS[n] for n in rest], 256, seed=2)
    _check(rest, out, cs)


@pytest.mark.slow
def test_wide_wgmma_forms_with_exited_lanes_match_the_interpreter():
    out, cs = run_forms(list(SLOW_FORMS.values()), 128, exit_lanes=True, seed=1)
    _check(list(SLOW_FORMS), out, cs)


# ------------------------------------------------------------------------------ the interpreter's corpus kernels
def _both_tiers(kern, grid, block, make_args):
    """The arrays of `make_args()` after a launch on each tier (whose thread-instruction counts agree)."""
    res, counts = {}, {}
    for tier in ("interp", "native"):
        args = make_args()
        r = kern.launch(grid=grid, block=block, device="emu", args=args, options=EmulatorOptions(tier=tier))
        assert r.tier == tier, r.tier_note
        res[tier] = [x for x in args if isinstance(x, np.ndarray)]
        counts[tier] = r.thread_instructions
    assert counts["interp"] == counts["native"], counts
    return res["interp"], res["native"]


VARIANTS = {  # kernel: (A type, A shape, B type, B^T shape, C type, C/D shape, scalar use_c or None)
    "wgmma_f16acc_m64n16k16": (np.float16, (64, 16), np.float16, (16, 16), np.float16, (64, 16), 1),
    "wgmma_f16acc_e4m3_m64n16k32": (ml_dtypes.float8_e4m3fn, (64, 32), ml_dtypes.float8_e4m3fn, (16, 32),
                                    np.float16, (64, 16), 1),
    "wgmma_f16acc_e5m2_e4m3_m64n8k32_rs": (ml_dtypes.float8_e5m2, (64, 32), ml_dtypes.float8_e4m3fn, (8, 32),
                                           np.float16, (64, 8), 1),
    "wgmma_tf32_m64n16k8": (np.float32, (64, 8), np.float32, (16, 8), np.float32, (64, 16), 0),
    "wgmma_tf32_m64n8k8_rs": (np.float32, (64, 8), np.float32, (8, 8), np.float32, (64, 8), 1),
    "wgmma_e4m3_e5m2_m64n16k32_rs": (ml_dtypes.float8_e4m3fn, (64, 32), ml_dtypes.float8_e5m2, (16, 32),
                                     np.float32, (64, 16), 1),
}


@pytest.mark.slow
@pytest.mark.parametrize("name", sorted(VARIANTS))
def test_corpus_wgmma_kernel_on_both_tiers(name):
    at, ashape, bt, bshape, ct, cshape, use_c = VARIANTS[name]
    def args():
        r = np.random.default_rng(4)
        a = r.standard_normal(ashape).astype(at)
        b = r.standard_normal(bshape).astype(bt)
        return [a, b, r.standard_normal(cshape).astype(ct), np.zeros(cshape, ct), np.int32(use_c)]
    want, got = _both_tiers(corpus_module("wgmma_variants_sm90a", "sm_90a.O3").kernel(name), 1, 128, args)
    assert all(x.tobytes() == y.tobytes() for x, y in zip(want, got, strict=True))
    assert np.any(want[3] != 0)


@pytest.mark.slow
def test_fp8_gemm_on_both_tiers():
    """The DeepGEMM-shaped FP8 GEMM (two math warpgroups, four wgmma m64n128k32 per 128 of K), 128x256x256."""
    m, n, k = 128, 256, 256

    def args():
        r = np.random.default_rng(0)
        a = r.standard_normal((m, k)).astype(ml_dtypes.float8_e4m3fn).view(np.uint8)
        b = r.standard_normal((n, k)).astype(ml_dtypes.float8_e4m3fn).view(np.uint8)
        sa = r.uniform(0.5, 2, (m, k // 128)).astype(np.float32)
        sb = r.uniform(0.5, 2, (n // 128, k // 128)).astype(np.float32)
        return [a, sa, b, sb, np.full((m, n), np.nan, np.float32), np.int32(m), np.int32(n), np.int32(k)]
    want, got = _both_tiers(corpus_module("fp8_gemm_sm90a", "sm_90a.O3").kernel("fp8_gemm_1d2d"),
                            (n // 128, m // 128), 256, args)
    assert np.isfinite(want[4]).all()
    assert want[4].tobytes() == got[4].tobytes()
