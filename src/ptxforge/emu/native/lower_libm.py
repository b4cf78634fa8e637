"""exp2 and log2 of a warp's f32 inputs as vector code, rounded to f32 exactly as the C library's rounds.

`approx.c_library` (the interpreter's ex2 / lg2 .approx.f32) is the C library's float64 exp2 / log2 rounded
once to f32. Called from LLVM (llvm.exp2 / llvm.log2 on <32 x double>) that is 32 scalar calls a warp; here
it is float64 vector code r, within a proved relative error E of the exact value, and a certainty test:

Both the exact value and the C library's lie in [r (1 - 2**-40), r (1 + 2**-40)] (`MARGIN`): 2**-40 exceeds
E + 2**-52 (glibc's exp2 and log2 are within 1 ulp) and the rounding of those two products (2**-53 each),
with room for a C library thousands of ulps off. Rounding to nearest f32 is monotone, so where both ends
round to the same f32 (`fptrunc`: subnormal and overflowing results too), so does the C library's value (and
the exact one): that lane's result is the C library's. A lane whose interval straddles a rounding boundary
(one in 2**15 to 2**17) makes its warp call the C library for every lane, as before.

exp2 (u = 2**-53):

    x = k + f   (k = rint(x), |f| <= 1/2; x is an f32, so f is exact)
    2**f ~ p(f) = sum (ln 2)**n / n! * f**n, n <= 11, by Horner (llvm.fmuladd: fused or not)
    r = p(f) * 2**k   (exact: 2**k built from exponent bits, |k| <= 200)

Worst at f = -1/2: the series' tail is below (ln2/2)**12 / 12! * 1.03 / 2**-0.5 < 2**-46.6; Horner's rounding
(Higham, Accuracy and Stability of Numerical Algorithms, 5.1) is at most gamma_22 * sum |c_n f**n| / p(f)
with gamma_22 = 22u / (1 - 22u) and sum |c_n f**n| / p(f) <= 2**(|f| - f) <= 2: below 2**-47.5; the
coefficients' own rounding adds 2u. E = 2**-45.9 (`EXP2_ERROR`; measured: 2**-46.7, at f near -1/2).
|x| > 200 is clamped to 200 (2**-200 rounds to +0 and 2**200 to +inf, as exp2(x) does for every x < -151
and x >= 128), NaN lanes compute exp2(-200) and are given their input back.

log2 (x > 0 and finite; +-0 -> -inf, +inf -> +inf, below 0 and NaN -> NaN, as the C library's):

    x = m * 2**e   (exponent bits; m in [sqrt(2)/2, sqrt(2)), exact)
    s = (m - 1) / (m + 1)   (|s| <= 0.1716: m - 1 exact, two roundings, 2u)
    log2(m) = s * q(s**2),  q(z) = sum 2 / (ln 2 * (2n + 1)) * z**n, n <= 8   (2 atanh(s) / ln 2)
    r = e + log2(m)

The series' tail is below z**9 / 19 / (1 - z) < 2**-49.9 of q (z = s**2 <= 0.0295), Horner's rounding of
q's positive terms at z >= 0 gamma_16 (16u), z's own error (5u) moves q by under u, the coefficients and
the product s * q 2u: log2(m) within 2**-48.2; e + log2(m) adds u and, with |e| >= 1 >= 2 |log2(m)|, keeps
the relative error below 2**-48.2 + u. E = 2**-48 (`LOG2_ERROR`; measured: 2**-49.7).

Each operation is a function of the module (`exp2_f32` / `log2_f32`, not inlined, and its cold C library
path), called from each instruction: as fast as inline code, and a kernel with many of them compiles each
once.
"""

from __future__ import annotations

import decimal
import functools
from collections.abc import Callable
from typing import TYPE_CHECKING

from llvmlite import ir as L

from ptxforge.emu.native import lower_round as R
from ptxforge.emu.native.lower import F32, F64, I1, I32, I64, V

if TYPE_CHECKING:
    from ptxforge.emu.native.warp import WarpEnv

EXP2_DEGREE, LOG2_DEGREE = 11, 8
EXP2_ERROR = 2.0 ** -45.9  # E of exp2: |r - 2**x| <= E * 2**x (the module docstring)
LOG2_ERROR = 2.0 ** -48  # E of log2
MARGIN = 2.0 ** -40  # relative half-width of the interval around r
CLAMP = 200.0
_MAGIC = 1.5 * 2.0 ** 52  # x + _MAGIC rounds x to an integer in the last bits (|x| < 2**51)
_SQRT2 = 1.4142135623730951


@functools.cache
def exp2_coefficients() -> tuple[float, ...]:
    """(ln 2)**n / n!, n = 0..EXP2_DEGREE, each the float64 nearest the value (50-digit decimal arithmetic)."""
    ctx = decimal.Context(prec=50)
    ln2 = ctx.ln(decimal.Decimal(2))
    out, term = [], decimal.Decimal(1)
    for n in range(EXP2_DEGREE + 1):
        out.append(float(term))
        term = ctx.divide(ctx.multiply(term, ln2), n + 1)
    return tuple(out)


@functools.cache
def log2_coefficients() -> tuple[float, ...]:
    """2 / (ln 2 * (2n + 1)), n = 0..LOG2_DEGREE, each the float64 nearest the value."""
    ctx = decimal.Context(prec=50)
    ln2 = ctx.ln(decimal.Decimal(2))
    return tuple(float(ctx.divide(2, ctx.multiply(ln2, 2 * n + 1))) for n in range(LOG2_DEGREE + 1))


def _horner(b: L.IRBuilder, muladd: L.Function, cs: tuple[float, ...], x: L.Value) -> L.Value:
    p: L.Value = L.Constant(V(F64), cs[-1])
    for cn in reversed(cs[:-1]):
        p = b.call(muladd, [p, x, L.Constant(V(F64), cn)])
    return p


def exp2_approx(b: L.IRBuilder, muladd: L.Function, x: L.Value) -> L.Value:
    """r ~ 2**x for <32 x double> `x` (finite, |x| <= CLAMP), within EXP2_ERROR relative; `muladd`:
    llvm.fmuladd.v32f64 (fused or not: the bound holds for both)."""
    magic = L.Constant(V(F64), _MAGIC)
    t = b.fadd(x, magic)
    f = b.fsub(x, b.fsub(t, magic))  # exact
    k = b.sub(b.bitcast(t, V(I64)), R.c(I64, 0x4338000000000000))  # bits(_MAGIC + k) - bits(_MAGIC) = k
    return b.fmul(_horner(b, muladd, exp2_coefficients(), f), R.pow2(b, k))


def log2_approx(b: L.IRBuilder, muladd: L.Function, x: L.Value) -> L.Value:
    """r ~ log2(x) for <32 x double> `x` (positive normal float64s), within LOG2_ERROR relative."""
    bits = b.bitcast(x, V(I64))
    e = b.sub(b.lshr(bits, R.c(I64, 52)), R.c(I64, 1023))
    m = b.bitcast(b.or_(b.and_(bits, R.c(I64, (1 << 52) - 1)), R.c(I64, 1023 << 52)), V(F64))
    big = b.fcmp_ordered(">", m, L.Constant(V(F64), _SQRT2))
    m = b.select(big, b.fmul(m, L.Constant(V(F64), 0.5)), m)
    e = b.select(big, b.add(e, R.c(I64, 1)), e)
    one = L.Constant(V(F64), 1.0)
    s = b.fdiv(b.fsub(m, one), b.fadd(m, one))
    t = b.fmul(s, _horner(b, muladd, log2_coefficients(), b.fmul(s, s)))
    return b.fadd(b.sitofp(e, V(F64)), t)


def _exp2_lanes(b: L.IRBuilder, muladd: L.Function, x32: L.Value) -> tuple[L.Value, L.Value, L.Value]:
    """(r, lanes whose result is `special` instead, special) for exp2 of <32 x float> `x32`."""
    x = b.fpext(x32, V(F64))
    # (x >= -CLAMP ? x : -CLAMP), NaN -> -CLAMP; then the upper clamp: one max and one min
    xs = b.select(b.fcmp_ordered(">=", x, L.Constant(V(F64), -CLAMP)), x, L.Constant(V(F64), -CLAMP))
    xs = b.select(b.fcmp_ordered("<=", xs, L.Constant(V(F64), CLAMP)), xs, L.Constant(V(F64), CLAMP))
    return exp2_approx(b, muladd, xs), R.isnan(b, x32), x32


def _log2_lanes(b: L.IRBuilder, muladd: L.Function, x32: L.Value) -> tuple[L.Value, L.Value, L.Value]:
    """(r, lanes whose result is `special` instead, special) for log2 of <32 x float> `x32`."""
    x = b.fpext(x32, V(F64))
    f32 = V(F32)
    ok = b.and_(b.fcmp_ordered(">", x, L.Constant(V(F64), 0.0)),
                b.fcmp_ordered("<", x, L.Constant(V(F64), float("inf"))))
    r = log2_approx(b, muladd, b.select(ok, x, L.Constant(V(F64), 1.0)))
    zero = b.fcmp_ordered("==", x32, L.Constant(f32, 0.0))
    inf = b.fcmp_ordered("==", x32, L.Constant(f32, float("inf")))
    special = b.select(zero, L.Constant(f32, float("-inf")),
                       b.select(inf, L.Constant(f32, float("inf")), L.Constant(f32, float("nan"))))
    return r, b.xor(ok, L.Constant(V(I1), [1] * 32)), special


_LANES: dict[str, Callable[[L.IRBuilder, L.Function, L.Value], tuple[L.Value, L.Value, L.Value]]] = {
    "exp2": _exp2_lanes, "log2": _log2_lanes}


def libm_f32(env: WarpEnv, fn: str, x32: L.Value) -> L.Value:
    """<32 x float> fptrunc(llvm.`fn`(fpext(x32))) for `fn` exp2 or log2, bit for bit (a NaN result: some
    NaN): the vector code where every active lane's rounding is certain, else the C library's `fn` on every
    lane (a call of the module's `fn`_f32)."""
    return env.b.call(_function(env, fn), [x32, env.active()])


def _function(env: WarpEnv, fn: str) -> L.Function:
    """The module's `fn`_f32 (<32 x float> x, <32 x i1> active lanes) -> <32 x float> and its cold `fn`_libm,
    written once for every instruction of the module that calls it."""
    module = env.gen.module
    f = module.globals.get(f"{fn}_f32")
    if f is not None:
        return f
    slow_fn = L.Function(module, L.FunctionType(V(F32), [V(F64)]), f"{fn}_libm")
    slow_fn.linkage = "internal"
    for attr in ("noinline", "cold"):
        slow_fn.attributes.add(attr)
    b = L.IRBuilder(slow_fn.append_basic_block("entry"))
    libm = env.module_intrinsic(f"llvm.{fn}.v32f64", V(F64), [V(F64)])
    b.ret(b.fptrunc(b.call(libm, [slow_fn.args[0]]), V(F32)))

    f = L.Function(module, L.FunctionType(V(F32), [V(F32), V(I1)]), f"{fn}_f32")
    f.linkage = "internal"
    f.attributes.add("noinline")  # (one copy: a call costs a warp's instruction little, an inline copy its compile)
    x32, active = f.args
    entry, slow_bb, done_bb = (f.append_basic_block(s) for s in ("entry", "libm", "done"))
    b = L.IRBuilder(entry)
    r, use_special, special = _LANES[fn](b, env.module_intrinsic("llvm.fmuladd.v32f64", V(F64), [V(F64)] * 3), x32)
    lo = b.fptrunc(b.fmul(r, L.Constant(V(F64), 1.0 - MARGIN)), V(F32))
    hi = b.fptrunc(b.fmul(r, L.Constant(V(F64), 1.0 + MARGIN)), V(F32))
    unsure = b.icmp_unsigned("!=", b.bitcast(lo, V(I32)), b.bitcast(hi, V(I32)))
    any_unsure = b.icmp_unsigned("!=", b.bitcast(b.and_(unsure, active), I32), L.Constant(I32, 0))
    fast = b.select(use_special, special, lo)  # (lo: the rounding of r too, where certain)
    b.cbranch(any_unsure, slow_bb, done_bb)
    b.position_at_end(slow_bb)
    slow = b.call(slow_fn, [b.fpext(x32, V(F64))])
    b.branch(done_bb)
    b.position_at_end(done_bb)
    out = b.phi(V(F32))
    out.add_incoming(fast, entry)
    out.add_incoming(slow, slow_bb)
    b.ret(out)
    return f
