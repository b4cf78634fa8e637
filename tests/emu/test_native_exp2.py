"""ex2.approx.f32 and ex2.approx.ftz.f32 on the native tier (lower_exp2.py: float64 vector code, rounded to f32
where that rounding is certain, the C library's exp2 for a warp where it is not) against the interpreter's
`semantics.approx`, bit for bit, through a real PTX kernel: a strided sweep over every f32 with |x| <= 130,
the neighbours of 0 and of every integer in -152..130, the edges (subnormals with and without .ftz,
-126..-150, 128, NaN, inf) and inputs whose exp2 lies within 2**-46 of an f32 rounding boundary (where the
vector code's own rounding may differ from the C library's: those warps must take the C library's path).
The slow test sweeps about 16 million inputs and finds every such hard input with |x| <= 151."""

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

from ptxforge.emu.native import lower_exp2  # noqa: E402
from ptxforge.emu.native.lower import F64, I64, V  # noqa: E402

PTX = """.version 7.0
.target sm_80
.address_size 64
.visible .entry ex2(.param .u64 px, .param .u64 py, .param .u64 pz, .param .u32 n)
{
    .reg .pred %p<2>;
    .reg .b32 %r<8>;
    .reg .f32 %f<4>;
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
    ld.param.u64 %rd3, [pz];
    mul.wide.u32 %rd4, %r4, 4;
    add.s64 %rd5, %rd1, %rd4;
    add.s64 %rd6, %rd2, %rd4;
    add.s64 %rd7, %rd3, %rd4;
    ld.global.f32 %f1, [%rd5];
    ex2.approx.f32 %f2, %f1;
    ex2.approx.ftz.f32 %f3, %f1;
    st.global.f32 [%rd6], %f2;
    st.global.f32 [%rd7], %f3;
DONE:
    ret;
}
"""

# f32 inputs whose exp2 is within 2**-49 (relative) of a rounding boundary (-150: exactly on one, 2**-150),
# the closest of those test_every_hard_input_matches_the_interpreter finds
HARDEST = [0x3B429D37, 0xB52D1F9A, 0xB8D3D026, 0xBAEC2B40, 0xBCF3A937, 0xC3160000, 0x3A07857C, 0x3C02A9AD,
           0xBE1F29DE, 0x33B8AA3B, 0x36879CF7, 0xB466D4CB, 0x3DC9ABE2, 0xB338AA3B, 0xB338AA3C, 0xB4FDEA14,
           0xB5160A52, 0xB63B8CF0, 0xB8ACAD70, 0xB8BBD3A2, 0xBAE36F38, 0xBCAF4D02]


def _f32(values) -> np.ndarray:
    return np.asarray(values, np.float32).view(np.uint32)


def _edges() -> np.ndarray:
    sub = [1, 2, 0x3FF, 0x400000, 0x7FFFFF]
    named = [0, 0x7F800000, 0x7FC00000, 0x7F800001, 0x7FFFFFFF, 0x7F7FFFFF, 0x00800000, 0x3F800000, *sub]
    near = [-126, -127, -128, -148.5, -149, -149.5, -150, -151, -152, 127, 128, 129, 1024, -1024, 0.5, -0.5]
    near_bits = _f32(near)
    steps = np.arange(-3, 4, dtype=np.int64)
    around = (near_bits[:, None].astype(np.int64) + steps).ravel().astype(np.uint32)
    b = np.concatenate([np.array(named, np.uint32), around, _f32([127.99999, 127.9999, -125.99999, -149.99998])])
    return np.concatenate([b, b | np.uint32(1 << 31)])


def _sweep(count: int, rng: np.random.Generator) -> np.ndarray:
    """Every `stride`-th f32 with |x| <= 130 (both signs, a random start), the 64 neighbours each side of 0
    and of every integer in -152..130, the subnormals' first 4096."""
    top = int(_f32(130.0))
    stride = max(1, 2 * top // count)
    start = int(rng.integers(0, stride))
    grid = np.arange(start, top, stride, dtype=np.uint32)
    ints = _f32(np.arange(-152, 131)).astype(np.int64)
    ints = (ints[:, None] + np.arange(-64, 65)).ravel()
    ints = ints[(ints >= 0) & (ints < 1 << 32)].astype(np.uint32)
    tiny = np.arange(0, 4096, dtype=np.uint32)
    return np.concatenate([grid, grid | np.uint32(1 << 31), ints, tiny, tiny | np.uint32(1 << 31)])


def _screen_hard(bits: np.ndarray, margin: float) -> np.ndarray:
    """Those of `bits` whose exp2 (numpy's, within an ulp of the C library's) is within `margin` (relative) of
    an f32 rounding boundary."""
    with np.errstate(all="ignore"):
        y = np.exp2(bits.view(np.float32).astype(np.float64))
        lo, hi = (y * (1 - margin)).astype(np.float32), (y * (1 + margin)).astype(np.float32)
    return bits[lo.view(np.uint32) != hi.view(np.uint32)]


def _run(bits: np.ndarray, level: str) -> None:
    """ex2.approx(.ftz).f32 of every input natively at `level`, checked against semantics.approx; each hard
    input is put in a warp of its own among easy ones (so the C library's path is taken there alone)."""
    n = -(-len(bits) // 256) * 256
    x = np.resize(bits, n).astype(np.uint32)
    y, z = np.zeros(n, np.uint32), np.zeros(n, np.uint32)
    k = pf.parse(PTX, filename="ex2.ptx").kernel("ex2")
    r = k.launch(grid=(n // 256,), block=(256,), args=[x, y, z, np.uint32(n)],
                 options=EmulatorOptions(tier="native", level=level))
    assert r.tier == "native", r.tier_note
    for got, ftz in ((y, False), (z, True)):
        want = approx.approx("ex2", x, "f32", ftz)
        bad = np.flatnonzero(got != want)
        assert not bad.size, (f"ex2.approx{'.ftz' * ftz}.f32 at {level}: {bad.size} of {n} differ, first "
                              f"x={x[bad[0]]:#010x}: native {got[bad[0]]:#010x}, interpreter {want[bad[0]]:#010x}")


def _with_hard(easy: np.ndarray, hard: np.ndarray) -> np.ndarray:
    """`easy` with one input of each warp (from the 7th on) replaced by a hard one."""
    out = easy.copy()
    slots = np.arange(len(hard)) * 32 + 7
    assert slots[-1] < len(out)
    out[slots] = hard
    return out


def test_ex2_f32_matches_the_interpreter_on_a_sweep_the_edges_and_hard_inputs():
    rng = np.random.default_rng(29)
    bits = np.concatenate([_sweep(250_000, rng), _edges()])
    hard = np.concatenate([np.array(HARDEST, np.uint32),
                           _screen_hard(rng.integers(0, 1 << 32, 1 << 21, dtype=np.uint64).astype(np.uint32),
                                        2.0 ** -38)])
    assert len(hard) > len(HARDEST)  # (random inputs near a boundary: about 30 of 2**21)
    _run(_with_hard(bits, hard), "opt")


def test_ex2_f32_at_the_quick_level_matches_the_interpreter():
    """-O0 (llvm.fmuladd unfused, most likely): the same bits."""
    rng = np.random.default_rng(30)
    bits = np.concatenate([_sweep(20_000, rng), _edges()])
    _run(_with_hard(bits, np.array(HARDEST, np.uint32)), "quick")


def test_the_polynomial_coefficients_are_the_series_of_2_to_the_x():
    cs = lower_exp2.coefficients()
    assert len(cs) == lower_exp2.DEGREE + 1 and cs[0] == 1.0 and cs[1] == math.log(2)
    assert all(abs(c - math.log(2) ** n / math.factorial(n)) <= 1e-15 * c for n, c in enumerate(cs))


def _approx_engine(opt: int):
    """(an MCJIT engine, a function (x) -> r of float64 arrays) running lower_exp2.exp2_approx, 32 at a time,
    compiled at codegen level `opt` (3: llvm.fmuladd fused on a host with FMA)."""
    m = L.Module()
    fn = L.Function(m, L.FunctionType(L.VoidType(), [F64.as_pointer(), F64.as_pointer(), I64]), "exp2_rows")
    muladd = L.Function(m, L.FunctionType(V(F64), [V(F64)] * 3), "llvm.fmuladd.v32f64")
    entry, loop, done = (fn.append_basic_block(n) for n in ("entry", "loop", "done"))
    b = L.IRBuilder(entry)
    b.branch(loop)
    b.position_at_end(loop)
    i = b.phi(I64)
    i.add_incoming(L.Constant(I64, 0), entry)
    x = b.load(b.bitcast(b.gep(fn.args[0], [i]), V(F64).as_pointer()), align=8)
    b.store(lower_exp2.exp2_approx(b, muladd, x), b.bitcast(b.gep(fn.args[1], [i]), V(F64).as_pointer()), align=8)
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
    run = ctypes.CFUNCTYPE(None, ctypes.c_void_p, ctypes.c_void_p, ctypes.c_int64)(
        engine.get_function_address("exp2_rows"))

    def exp2_rows(x: np.ndarray) -> np.ndarray:
        n = -(-len(x) // 32) * 32
        xs, out = np.zeros(n), np.empty(n)
        xs[:len(x)] = x
        run(xs.ctypes.data, out.ctypes.data, n)
        return out[:len(x)]
    return engine, exp2_rows


@pytest.mark.parametrize("opt", [0, 3])
def test_the_vector_exp2_is_within_the_proved_error(opt):
    """|r - 2**x| <= ERROR * 2**x, the bound lower_exp2's certainty test rests on: against the C library's exp2
    on a strided sweep of every f32 with |x| <= 200 (the C library within 2**-52: ERROR + 2**-52), against
    2**x in 40-digit decimal on inputs with f near -1/2 and 1/2 (where the bound is nearly reached)."""
    engine, exp2_rows = _approx_engine(opt)
    top = int(_f32(200.0))
    b = np.arange(0, top, 1499, dtype=np.uint32)
    x = np.concatenate([b, b | np.uint32(1 << 31)]).view(np.float32).astype(np.float64)
    r, lib = exp2_rows(x), approx.c_library("ex2")(x)
    assert (np.abs(r - lib) <= (lower_exp2.ERROR + 2.0 ** -52) * lib).all()
    rng = np.random.default_rng(32)
    k = rng.integers(-140, 127, 1000)
    f = np.where(rng.random(1000) < 0.5, -0.5, 0.5) + rng.uniform(-1e-3, 1e-3, 1000)
    x = (k + f).astype(np.float32).astype(np.float64)
    r = exp2_rows(x)
    ctx = decimal.Context(prec=40)
    ln2 = ctx.ln(decimal.Decimal(2))
    worst = max(abs(ctx.divide(decimal.Decimal(ri), ctx.exp(ctx.multiply(decimal.Decimal(xi), ln2))) - 1)
                for xi, ri in zip(x.tolist(), r.tolist(), strict=True))
    assert 0 < worst <= decimal.Decimal(lower_exp2.ERROR), worst
    del engine


@pytest.mark.slow  # (16 million inputs, the C library's exp2 of each one by one: a few seconds)
def test_a_16_million_input_sweep_matches_the_interpreter():
    """Every 140th f32 with |x| <= 130, every f32 in [-151, -125] and in [127, 128], every 4096th bit
    pattern of all (the huge, inf, NaN)."""
    rng = np.random.default_rng(31)
    dense = [np.arange(int(_f32(lo)), int(_f32(hi)) + 1, dtype=np.uint32) for lo, hi in ((125.0, 151.0),
                                                                                      (127.0, 128.0))]
    dense[0] |= np.uint32(1 << 31)
    everything = np.arange(0, 1 << 32, 4096, dtype=np.uint64).astype(np.uint32)
    bits = np.concatenate([_sweep(16_000_000, rng), *dense, everything, _edges()])
    for chunk in np.array_split(bits, 4):
        _run(chunk, "opt")


@pytest.mark.slow  # (numpy's screen of 2.3 billion inputs: about 15 s)
def test_every_hard_input_matches_the_interpreter():
    """Every f32 with |x| <= 151 whose exp2 lies within 2**-44 of a rounding boundary (about 800 of them),
    each in a warp of its own."""
    top = int(_f32(151.0))
    hard = []
    for sign in (0, 1 << 31):
        for s in range(0, top + 1, 1 << 24):
            b = np.arange(s, min(s + (1 << 24), top + 1), dtype=np.uint32) | np.uint32(sign)
            hard.append(_screen_hard(b, 2.0 ** -44))
    h = np.concatenate(hard)
    assert set(HARDEST) <= set(h.tolist()) and len(h) > 500
    _run(_with_hard(np.full(len(h) * 32 + 32, _f32(1.5)), h), "opt")
