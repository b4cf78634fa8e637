"""exp2 of a warp's f32 inputs as vector code, rounded to f32 exactly as the C library's exp2 rounds.

`approx.c_library("ex2")` (the interpreter) is the C library's float64 exp2 rounded once to f32. Calling it
from LLVM (llvm.exp2.v32f64) is 32 scalar calls a warp; here it is float64 vector code instead:

    x = k + f   (k = rint(x), |f| <= 1/2; x is an f32, so f is exact)
    2**f ~ p(f) = sum (ln 2)**n / n! * f**n, n <= 11, by Horner (llvm.fmuladd: fused or not)
    r = p(f) * 2**k   (exact: 2**k built from exponent bits, |k| <= 200)

Error of r against 2**x, relative (u = 2**-53), worst at f = -1/2: the series' tail is below
(ln2/2)**12 / 12! * 1.03 / 2**-0.5 < 2**-46.6; Horner's rounding (Higham, Accuracy and Stability of Numerical
Algorithms, 5.1) is at most gamma_22 * sum |c_n f**n| / p(f) with gamma_22 = 22u / (1 - 22u) and
sum |c_n f**n| / p(f) <= 2**(|f| - f) <= 2: below 2**-47.5; the coefficients' own rounding adds 2u. So
|r - 2**x| <= E * 2**x with E = 2**-45.9 (`ERROR`; a sweep of 10.7 million f32 measures 2**-46.7, at f
near -1/2: tests/emu/test_native_exp2.py). glibc's exp2 is within 1 ulp (2**-52 relative).

Both the exact value and the C library's lie in [r (1 - 2**-40), r (1 + 2**-40)]: 2**-40 exceeds E + 2**-52
and the rounding of those two products (u each) with room for a C library thousands of ulps off. Rounding to
nearest f32 is monotone, so where both ends round to the same f32 (`fptrunc`, subnormal and overflow results
included), so does the C library's value (and the exact one): that lane's result is the C library's. A
lane whose interval straddles a rounding boundary (about one in 2**17) makes its warp call the C library
for every lane, as before. Inputs: NaN lanes compute exp2(-200) (their NaN is put back after), |x| > 200
is clamped to 200 (2**-200 rounds to +0 and 2**200 to +inf, as exp2(x) does for every x < -151 and
x >= 128).

Both are functions of the module (`exp2_f32`, not inlined, and its cold `exp2_libm`), called from each ex2:
as fast as inline code, and a kernel with many ex2 compiles each once.
"""

from __future__ import annotations

import decimal
import functools
from typing import TYPE_CHECKING

from llvmlite import ir as L

from ptxforge.emu.native import lower_round as R
from ptxforge.emu.native.lower import F32, F64, I1, I32, I64, V

if TYPE_CHECKING:
    from ptxforge.emu.native.warp import WarpEnv

DEGREE = 11
ERROR = 2.0 ** -45.9  # E: |r - 2**x| <= E * 2**x (the module docstring)
MARGIN = 2.0 ** -40  # relative half-width of the interval around r
CLAMP = 200.0
_MAGIC = 1.5 * 2.0 ** 52  # x + _MAGIC rounds x to an integer in the last bits (|x| < 2**51)


@functools.cache
def coefficients() -> tuple[float, ...]:
    """(ln 2)**n / n!, n = 0..DEGREE, each the float64 nearest the value (50-digit decimal arithmetic)."""
    ctx = decimal.Context(prec=50)
    ln2 = ctx.ln(decimal.Decimal(2))
    out, term = [], decimal.Decimal(1)
    for n in range(DEGREE + 1):
        out.append(float(term))
        term = ctx.divide(ctx.multiply(term, ln2), n + 1)
    return tuple(out)


def exp2_approx(b: L.IRBuilder, muladd: L.Function, x: L.Value) -> L.Value:
    """r ~ 2**x for <32 x double> `x` (finite, |x| <= CLAMP), within E (the module docstring) relative;
    `muladd`: llvm.fmuladd.v32f64 (a fused or an unfused multiply-add: E holds for both)."""
    magic = L.Constant(V(F64), _MAGIC)
    t = b.fadd(x, magic)
    f = b.fsub(x, b.fsub(t, magic))  # exact
    k = b.sub(b.bitcast(t, V(I64)), R.c(I64, 0x4338000000000000))  # bits(_MAGIC + k) - bits(_MAGIC) = k
    cs = coefficients()
    p: L.Value = L.Constant(V(F64), cs[-1])
    for cn in reversed(cs[:-1]):
        p = b.call(muladd, [p, f, L.Constant(V(F64), cn)])
    scale = b.bitcast(b.shl(b.add(k, R.c(I64, 1023)), R.c(I64, 52)), V(F64))
    return b.fmul(p, scale)


def exp2_f32(env: WarpEnv, x32: L.Value) -> L.Value:
    """<32 x float> fptrunc(llvm.exp2(fpext(x32))), bit for bit (a NaN lane: its input): the vector code where
    every active lane's rounding is certain, else the C library's exp2 on every lane (a call of the module's
    `exp2_f32`)."""
    return env.b.call(_function(env), [x32, env.active()])


def _function(env: WarpEnv) -> L.Function:
    """The module's `exp2_f32` (<32 x float> x, <32 x i1> active lanes) -> <32 x float> and its cold
    `exp2_libm`, written once for every ex2 of the module."""
    module = env.gen.module
    f = module.globals.get("exp2_f32")
    if f is not None:
        return f
    slow_fn = L.Function(module, L.FunctionType(V(F32), [V(F64)]), "exp2_libm")
    slow_fn.linkage = "internal"
    for attr in ("noinline", "cold"):
        slow_fn.attributes.add(attr)
    b = L.IRBuilder(slow_fn.append_basic_block("entry"))
    libm = env.module_intrinsic("llvm.exp2.v32f64", V(F64), [V(F64)])
    b.ret(b.fptrunc(b.call(libm, [slow_fn.args[0]]), V(F32)))

    f = L.Function(module, L.FunctionType(V(F32), [V(F32), V(I1)]), "exp2_f32")
    f.linkage = "internal"
    f.attributes.add("noinline")  # (one copy: a call costs a warp's ex2 little, an inline copy its compile)
    x32, active = f.args
    entry, slow_bb, done_bb = (f.append_basic_block(s) for s in ("entry", "libm", "done"))
    b = L.IRBuilder(entry)
    x = b.fpext(x32, V(F64))
    # (x >= -CLAMP ? x : -CLAMP), NaN -> -CLAMP; then the upper clamp: one max and one min
    xs = b.select(b.fcmp_ordered(">=", x, L.Constant(V(F64), -CLAMP)), x, L.Constant(V(F64), -CLAMP))
    xs = b.select(b.fcmp_ordered("<=", xs, L.Constant(V(F64), CLAMP)), xs, L.Constant(V(F64), CLAMP))
    r = exp2_approx(b, env.module_intrinsic("llvm.fmuladd.v32f64", V(F64), [V(F64)] * 3), xs)
    lo = b.fptrunc(b.fmul(r, L.Constant(V(F64), 1.0 - MARGIN)), V(F32))
    hi = b.fptrunc(b.fmul(r, L.Constant(V(F64), 1.0 + MARGIN)), V(F32))
    unsure = b.icmp_unsigned("!=", b.bitcast(lo, V(I32)), b.bitcast(hi, V(I32)))
    any_unsure = b.icmp_unsigned("!=", b.bitcast(b.and_(unsure, active), I32), L.Constant(I32, 0))
    fast = b.select(R.isnan(b, x32), x32, lo)  # (lo: the rounding of r too, where certain)
    b.cbranch(any_unsure, slow_bb, done_bb)
    b.position_at_end(slow_bb)
    slow = b.call(slow_fn, [x])
    b.branch(done_bb)
    b.position_at_end(done_bb)
    out = b.phi(V(F32))
    out.add_incoming(fast, entry)
    out.add_incoming(slow, slow_bb)
    b.ret(out)
    return f
