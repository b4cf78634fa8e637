"""ex2.approx.f32 and lg2.approx.f32 (.ftz too) on the native tier (lower_libm.py: float64 vector code, rounded
to f32 where that rounding is certain, the C library's exp2 / log2 for a warp where it is not) against the
interpreter's `semantics.approx`, bit for bit, through a real PTX kernel: strided sweeps (every f32 with
|x| <= 130, every positive f32 above), the neighbours of 0, of every integer in -152..130 and of every power
of two, the edges (subnormals with and without .ftz, -126..-150, 128, +-0, NaN, inf, negative logarithms)
and inputs whose result lies within 2**-46 of an f32 rounding boundary (where the vector code's own rounding
may differ from the C library's: those warps must take the C library's path). The vector code's error is
held to the bound the module's proof rests on. The slow tests sweep 35 million inputs and find every such
hard input."""

from __future__ import annotations

import ctypes
import decimal
import math

import numpy as np
import pytest

import ptxforge as pf
from ptxforge.emu.semantics import approx
from ptxforge.runtime.launch_config import EmulatorOptions

llvm = pytest.importorskip("llvmlite.binding")
from llvmlite import ir as L  # noqa: E402  (after the importorskip: the native tier needs llvmlite)

from ptxforge.emu.native import lower_libm  # noqa: E402
from ptxforge.emu.native.lower import F64, I64, V  # noqa: E402

FORMS = [("ex2", False), ("ex2", True), ("lg2", False), ("lg2", True)]
PTX = """.version 7.0
.target sm_80
.address_size 64
.visible .entry k(.param .u64 px, .param .u64 py, .param .u32 n)
{
    .reg .pred %p<2>;
    .reg .b32 %r<8>;
    .reg .f32 %f<8>;
    .reg .b64 %rd<10>;
    mov.u32 %r1, %ctaid.x;
    mov.u32 %r2, %ntid.x;
    mov.u32 %r3, %tid.x;
    mad.lo.s32 %r4, %r1, %r2, %r3;
    ld.param.u32 %r5, [n];
    setp.ge.u32 %p1, %r4, %r5;
    @%p1 bra DONE;
    ld.param.u64 %rd1, [px];
    ld.param.u64 %rd2, [py];
    mul.wide.u32 %rd4, %r4, 4;
    add.s64 %rd5, %rd1, %rd4;
    mul.wide.u32 %rd4, %r4, 16;
    add.s64 %rd6, %rd2, %rd4;
    ld.global.f32 %f1, [%rd5];
    ex2.approx.f32 %f2, %f1;
    ex2.approx.ftz.f32 %f3, %f1;
    lg2.approx.f32 %f4, %f1;
    lg2.approx.ftz.f32 %f5, %f1;
    st.global.v4.f32 [%rd6], {%f2, %f3, %f4, %f5};
DONE:
    ret;
}
"""

# f32 inputs whose exp2 is within 2**-49 (relative) of a rounding boundary (-150: exactly on one, 2**-150),
# then inputs whose log2 is within 2**-46 (one of each significand): the closest of those
# test_every_hard_input_matches_the_interpreter finds
HARDEST = {
    "ex2": [0x3B429D37, 0xB52D1F9A, 0xB8D3D026, 0xBAEC2B40, 0xBCF3A937, 0xC3160000, 0x3A07857C, 0x3C02A9AD,
            0xBE1F29DE, 0x33B8AA3B, 0x36879CF7, 0xB466D4CB, 0x3DC9ABE2, 0xB338AA3B, 0xB338AA3C, 0xB4FDEA14,
            0xB5160A52, 0xB63B8CF0, 0xB8ACAD70, 0xB8BBD3A2, 0xBAE36F38, 0xBCAF4D02],
    "lg2": [0x002452A4, 0x0048A548, 0x00914A90, 0x2FD54996, 0x3EA07AB9, 0x37FFC006, 0x003AE024, 0x0075C048,
            0x00974467, 0x00EB8090, 0x2FF50F8C, 0x3D8D64DE, 0x3FEDDFFD, 0x1FA5FC89, 0x37A9DA4D, 0x37AD9642,
            0x37DB1BD1, 0x37DF57D9, 0x3DDE248E, 0x3DE485EB, 0x3F442160, 0x40707492, 0x00126379, 0x0037E6B1]}
NUMPY = {"ex2": np.exp2, "lg2": np.log2}


def _f32(values) -> np.ndarray:
    return np.asarray(values, np.float32).view(np.uint32)


def _edges() -> np.ndarray:
    sub = [1, 2, 0x3FF, 0x400000, 0x7FFFFF]
    named = [0, 0x7F800000, 0x7FC00000, 0x7F800001, 0x7FFFFFFF, 0x7F7FFFFF, 0x00800000, 0x3F800000, *sub]
    near = [-126, -127, -128, -148.5, -149, -149.5, -150, -151, -152, 127, 128, 129, 1024, -1024, 0.5, -0.5,
            1.0, 2.0, 1.4142135, 0.70710677]
    steps = np.arange(-3, 4, dtype=np.int64)
    around = (_f32(near)[:, None].astype(np.int64) + steps).ravel().astype(np.uint32)
    b = np.concatenate([np.array(named, np.uint32), around, _f32([127.99999, 127.9999, -125.99999, -149.99998])])
    return np.concatenate([b, b | np.uint32(1 << 31)])


def _sweep(count: int, rng: np.random.Generator) -> np.ndarray:
    """About `count` inputs: every so many f32 with |x| <= 130 (both signs, a random start) and positive ones
    above that (lg2), the 64 neighbours each side of 0, of every integer in -152..130 and of every power of
    two, 4096 subnormals each side of 0 and 4096 f32 each side of 1."""
    top, ceiling = int(_f32(130.0)), 0x7F800000
    stride = max(1, (top + ceiling) // count)
    start = int(rng.integers(0, stride))
    grid = np.arange(start, top, stride, dtype=np.uint32)
    above = np.arange(top + start, ceiling, stride, dtype=np.uint32)
    marks = np.concatenate([_f32(np.arange(-152, 131)), np.arange(1, 255, dtype=np.uint32) << 23]).astype(np.int64)
    marks = (marks[:, None] + np.arange(-64, 65)).ravel()
    marks = marks[(marks >= 0) & (marks < 1 << 32)].astype(np.uint32)
    tiny = np.arange(0, 4096, dtype=np.uint32)
    one = np.arange(0x3F800000 - 4096, 0x3F800000 + 4096, dtype=np.uint32)
    return np.concatenate([grid, grid | np.uint32(1 << 31), above, marks, tiny, tiny | np.uint32(1 << 31), one])


def _screen_hard(op: str, bits: np.ndarray, margin: float) -> np.ndarray:
    """Those of `bits` whose exp2 / log2 (numpy's, within an ulp of the C library's) is within `margin`
    (relative) of an f32 rounding boundary."""
    with np.errstate(all="ignore"):
        y = NUMPY[op](bits.view(np.float32).astype(np.float64))
        lo, hi = (y * (1 - margin)).astype(np.float32), (y * (1 + margin)).astype(np.float32)
    return bits[lo.view(np.uint32) != hi.view(np.uint32)]


def _run(bits: np.ndarray, level: str) -> None:
    """ex2 and lg2 .approx(.ftz).f32 of every input natively at `level`, checked against semantics.approx."""
    n = -(-len(bits) // 256) * 256
    x = np.resize(bits, n).astype(np.uint32)
    out = np.zeros((n, len(FORMS)), np.uint32)
    k = pf.parse(PTX, filename="libm.ptx").kernel("k")
    r = k.launch(grid=(n // 256,), block=(256,), args=[x, out, np.uint32(n)],
                 options=EmulatorOptions(tier="native", level=level))
    assert r.tier == "native", r.tier_note
    for j, (op, ftz) in enumerate(FORMS):
        got, want = out[:, j], approx.approx(op, x, "f32", ftz)
        bad = np.flatnonzero(got != want)
        assert not bad.size, (f"{op}.approx{'.ftz' * ftz}.f32 at {level}: {bad.size} of {n} differ, first "
                              f"x={x[bad[0]]:#010x}: native {got[bad[0]]:#010x}, interpreter {want[bad[0]]:#010x}")


def _with_hard(easy: np.ndarray, hard: np.ndarray) -> np.ndarray:
    """`easy` with one input of each warp (from the 7th on) replaced by a hard one (so the C library's path is
    taken in that warp alone)."""
    out = easy.copy()
    slots = np.arange(len(hard)) * 32 + 7
    assert slots[-1] < len(out)
    out[slots] = hard
    return out


def _hardest() -> np.ndarray:
    return np.array(HARDEST["ex2"] + HARDEST["lg2"], np.uint32)


def test_ex2_and_lg2_match_the_interpreter_on_a_sweep_the_edges_and_hard_inputs():
    rng = np.random.default_rng(29)
    bits = np.concatenate([_sweep(250_000, rng), _edges()])
    rand = rng.integers(0, 1 << 32, 1 << 21, dtype=np.uint64).astype(np.uint32)
    near = [_screen_hard(op, rand, 2.0 ** -38) for op in NUMPY]
    assert all(len(h) > 4 for h in near), [len(h) for h in near]  # (random inputs near a boundary)
    _run(_with_hard(bits, np.concatenate([_hardest(), *near])), "opt")


def test_ex2_and_lg2_at_the_quick_level_match_the_interpreter():
    """-O0 (llvm.fmuladd unfused, most likely): the same bits."""
    rng = np.random.default_rng(30)
    _run(_with_hard(np.concatenate([_sweep(20_000, rng), _edges()]), _hardest()), "quick")


def test_the_polynomial_coefficients_are_the_series():
    """exp2: (ln 2)**n / n!; log2: 2 / (ln 2 (2n + 1)), each within 2**-52 of what float arithmetic gives."""
    ln2 = math.log(2)
    cs = lower_libm.exp2_coefficients()
    assert len(cs) == lower_libm.EXP2_DEGREE + 1 and cs[0] == 1.0 and cs[1] == ln2
    assert all(abs(c - ln2 ** n / math.factorial(n)) <= 2.0 ** -50 * c for n, c in enumerate(cs))
    cs = lower_libm.log2_coefficients()
    assert len(cs) == lower_libm.LOG2_DEGREE + 1 and cs[0] == 2 / ln2
    assert all(abs(c - 2 / (ln2 * (2 * n + 1))) <= 2.0 ** -50 * c for n, c in enumerate(cs))


def _approx_engine(op: str, opt: int):
    """(an MCJIT engine, a function (x) -> r of float64 arrays) running lower_libm's exp2_approx or log2_approx
    on 32 at a time, compiled at codegen level `opt` (3: llvm.fmuladd fused on a host with FMA)."""
    m = L.Module()
    fn = L.Function(m, L.FunctionType(L.VoidType(), [F64.as_pointer(), F64.as_pointer(), I64]), "rows")
    muladd = L.Function(m, L.FunctionType(V(F64), [V(F64)] * 3), "llvm.fmuladd.v32f64")
    entry, loop, done = (fn.append_basic_block(n) for n in ("entry", "loop", "done"))
    b = L.IRBuilder(entry)
    b.branch(loop)
    b.position_at_end(loop)
    i = b.phi(I64)
    i.add_incoming(L.Constant(I64, 0), entry)
    x = b.load(b.bitcast(b.gep(fn.args[0], [i]), V(F64).as_pointer()), align=8)
    r = {"ex2": lower_libm.exp2_approx, "lg2": lower_libm.log2_approx}[op](b, muladd, x)
    b.store(r, b.bitcast(b.gep(fn.args[1], [i]), V(F64).as_pointer()), align=8)
    nxt = b.add(i, L.Constant(I64, 32))
    i.add_incoming(nxt, loop)
    b.cbranch(b.icmp_signed("<", nxt, fn.args[2]), loop, done)
    b.position_at_end(done)
    b.ret_void()
    llvm.initialize_native_target()
    llvm.initialize_native_asmprinter()
    tm = llvm.Target.from_default_triple().create_target_machine(
        cpu=llvm.get_host_cpu_name(), features=llvm.get_host_cpu_features().flatten(), opt=opt)
    engine = llvm.create_mcjit_compiler(llvm.parse_assembly(str(m)), tm)
    engine.finalize_object()
    run = ctypes.CFUNCTYPE(None, ctypes.c_void_p, ctypes.c_void_p, ctypes.c_int64)(engine.get_function_address("rows"))

    def rows(x: np.ndarray) -> np.ndarray:
        n = -(-len(x) // 32) * 32
        xs, out = np.ones(n), np.empty(n)
        xs[:len(x)] = x
        run(xs.ctypes.data, out.ctypes.data, n)
        return out[:len(x)]
    return engine, rows


def _worst_against_exact(op: str, x: np.ndarray, r: np.ndarray) -> decimal.Decimal:
    """max |r / f(x) - 1| over the inputs, f(x) (2**x or log2(x)) in 40-digit decimal arithmetic."""
    ctx = decimal.Context(prec=40)
    ln2 = ctx.ln(decimal.Decimal(2))

    def exact(xi: float) -> decimal.Decimal:
        d = decimal.Decimal(xi)
        return ctx.exp(ctx.multiply(d, ln2)) if op == "ex2" else ctx.divide(ctx.ln(d), ln2)
    return max(abs(ctx.divide(decimal.Decimal(ri), exact(xi)) - 1)
               for xi, ri in zip(x.tolist(), r.tolist(), strict=True))


@pytest.mark.parametrize("opt", [0, 3])
def test_the_vector_exp2_and_log2_are_within_the_proved_errors(opt):
    """|r - f(x)| <= E |f(x)|, the bound the certainty test rests on: against the C library's function on a
    strided sweep (f32 with |x| <= 200 for exp2, every positive f32 for log2; the C library within 2**-52:
    E + 2**-52), against f(x) in 40-digit decimal where the bound is nearly reached (exp2: x near k +- 1/2;
    log2: significands near sqrt(2) and sqrt(2)/2) and near 1 (log2's smallest results)."""
    rng = np.random.default_rng(32)
    for op, err, top in (("ex2", lower_libm.EXP2_ERROR, int(_f32(200.0))), ("lg2", lower_libm.LOG2_ERROR, 0x7F800000)):
        engine, rows = _approx_engine(op, opt)
        b = np.arange(1, top, 1499, dtype=np.uint32)
        x = (np.concatenate([b, b | np.uint32(1 << 31)]) if op == "ex2" else b).view(np.float32).astype(np.float64)
        r, lib = rows(x), approx.c_library(op)(x)
        nz = lib != 0
        assert (np.abs(r - lib)[nz] <= (err + 2.0 ** -52) * np.abs(lib[nz])).all(), op
        assert (r[~nz] == 0).all(), op
        if op == "ex2":
            hard = rng.integers(-140, 127, 1000) + np.where(rng.random(1000) < 0.5, -0.5, 0.5) + \
                rng.uniform(-1e-3, 1e-3, 1000)
        else:
            m = np.where(rng.random(1000) < 0.5, math.sqrt(2), math.sqrt(0.5)) * (1 + rng.uniform(-1e-3, 1e-3, 1000))
            hard = np.concatenate([m * 2.0 ** rng.integers(-140, 120, 1000), 1 + rng.uniform(-1e-3, 1e-3, 200)])
        hard = hard.astype(np.float32).astype(np.float64)
        hard = hard[hard != 1.0]
        worst = _worst_against_exact(op, hard, rows(hard))
        assert 0 < worst <= decimal.Decimal(err), (op, worst)
        del engine


@pytest.mark.slow  # (35 million inputs, the C library's exp2 of each one by one: about 5 s)
def test_a_35_million_input_sweep_matches_the_interpreter():
    """16 million of every f32 with |x| <= 130 and every positive one, every f32 in [-151, -125], in
    [127, 128] and in [1/2, 2], every 4096th bit pattern of all (the huge, inf, NaN)."""
    rng = np.random.default_rng(31)
    dense = [np.arange(int(_f32(lo)), int(_f32(hi)) + 1, dtype=np.uint32)
             for lo, hi in ((125.0, 151.0), (127.0, 128.0), (0.5, 2.0))]
    dense[0] |= np.uint32(1 << 31)
    everything = np.arange(0, 1 << 32, 4096, dtype=np.uint64).astype(np.uint32)
    bits = np.concatenate([_sweep(16_000_000, rng), *dense, everything, _edges()])
    for chunk in np.array_split(bits, 4):
        _run(chunk, "opt")


@pytest.mark.slow  # (numpy's screen of 4.4 billion inputs: about 20 s)
def test_every_hard_input_matches_the_interpreter():
    """Every f32 with |x| <= 151 whose exp2, and every positive f32 whose log2, lies within 2**-44 of a
    rounding boundary (about 800 and 3600 of them), each in a warp of its own."""
    found = []
    for op, ranges in (("ex2", [(sign, int(_f32(151.0)) + 1) for sign in (0, 1 << 31)]), ("lg2", [(0, 0x7F800000)])):
        hard = []
        for sign, top in ranges:
            for s in range(0, top, 1 << 24):
                b = np.arange(s, min(s + (1 << 24), top), dtype=np.uint32) | np.uint32(sign)
                hard.append(_screen_hard(op, b, 2.0 ** -44))
        h = np.concatenate(hard)
        assert set(HARDEST[op]) <= set(h.tolist()) and len(h) > 500, op
        found.append(h)
    h = np.concatenate(found)
    _run(_with_hard(np.full(len(h) * 32 + 32, _f32(1.5)), h), "opt")
