"""Exact rounding in LLVM vector IR, bit for bit as `ptxforge.emu.semantics.formats` rounds.

No rounding-mode register is touched: every directed rounding is computed from round-to-nearest IEEE
operations and integer steps. An f32 result in any mode is the exact value (or its float64 round-to-odd,
from `two_sum` / an `fma` remainder) rounded by `f64_to_f32` (round to nearest, then one step when the
nearest value lies on the wrong side); a narrow format (f16, bf16, tf32, e4m3, e5m2) is rounded by
`encode`, an integer rendering of `formats.encode`. Conversions out of 16-bit or narrower sources are
tables the interpreter's own `semantics.convert.cvt` fills (`table_lookup`).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np
from llvmlite import ir as L

from ptxforge.emu.native.lower import F32, F64, I1, I8, I32, I64, INT, NotNative, V
from ptxforge.emu.native.warp import splat
from ptxforge.emu.semantics.formats import _max_code as _formats_max_code

if TYPE_CHECKING:
    from ptxforge.emu.native.warp import WarpEnv
    from ptxforge.emu.semantics.formats import FloatFormat

SIGN32, EXP32, ONE32, NAN32 = 0x80000000, 0x7F800000, 0x3F800000, 0x7FFFFFFF


def c(t: L.Type, v: int | float) -> L.Constant:
    """A warp vector constant."""
    return L.Constant(V(t), v)


def isnan(b: L.IRBuilder, x: L.Value) -> L.Value:
    return b.fcmp_unordered("uno", x, x)


def two_sum(b: L.IRBuilder, x: L.Value, y: L.Value) -> tuple[L.Value, L.Value]:
    """formats.two_sum: s = fl(x + y) and the exact error e (x + y == s + e)."""
    s = b.fadd(x, y)
    z = b.fsub(s, x)
    e = b.fadd(b.fsub(x, b.fsub(s, z)), b.fsub(y, z))
    return s, e


def round_to_odd(b: L.IRBuilder, s: L.Value, e: L.Value) -> L.Value:
    """formats.round_to_odd: float64 s stepped one ulp toward the exact s + e when inexact and even."""
    ft = s.type
    need = b.and_(b.fcmp_ordered("!=", e, L.Constant(ft, 0.0)),
                  b.fcmp_ordered("<", _fabs(b, e), L.Constant(ft, float("inf"))))
    sb = b.bitcast(s, V(I64))
    even = b.icmp_unsigned("==", b.and_(sb, c(I64, 1)), c(I64, 0))
    same = b.icmp_unsigned("==", b.lshr(b.bitcast(e, V(I64)), c(I64, 63)), b.lshr(sb, c(I64, 63)))
    step = b.select(same, c(I64, 1), c(I64, -1))
    return b.bitcast(b.select(b.and_(need, even), b.add(sb, step), sb), V(F64))


def _fabs(b: L.IRBuilder, x: L.Value) -> L.Value:
    w = 64 if x.type.element == F64 else 32
    it = V(INT[w])
    return b.bitcast(b.and_(b.bitcast(x, it), L.Constant(it, (1 << (w - 1)) - 1)), x.type)


def fix_directed(b: L.IRBuilder, r_bits: L.Value, above: L.Value, below: L.Value, rnd: str) -> L.Value:
    """Bits of r = RN(x) stepped to x rounded in `rnd`: `above`/`below` say x > r / x < r (as values)."""
    it = r_bits.type
    w = it.element.width
    neg = b.icmp_unsigned("!=", b.lshr(r_bits, L.Constant(it, w - 1)), L.Constant(it, 0))
    one, minus = L.Constant(it, 1), L.Constant(it, -1)
    if rnd == "rn":
        return r_bits
    if rnd == "rz":  # |x| < |r|: one step toward zero
        move = b.select(neg, above, below)
        return b.select(move, b.add(r_bits, minus), r_bits)
    if rnd == "rp":  # x > r: one step toward +inf
        return b.select(above, b.add(r_bits, b.select(neg, minus, one)), r_bits)
    if rnd == "rm":  # x < r: one step toward -inf
        return b.select(below, b.add(r_bits, b.select(neg, one, minus)), r_bits)
    raise NotNative(f"rounding .{rnd} is not in the native tier yet")


def f64_to_f32(b: L.IRBuilder, v: L.Value, rnd: str) -> L.Value:
    """The f32 bits of float64 `v` rounded in `rnd` (formats.encode(v, F32, rnd); NaN: whatever fptrunc
    gives, for the caller to make canonical)."""
    r = b.fptrunc(v, V(F32))
    bits = b.bitcast(r, V(I32))
    if rnd == "rn":
        return bits
    back = b.fpext(r, V(F64))
    return fix_directed(b, bits, b.fcmp_ordered(">", v, back), b.fcmp_ordered("<", v, back), rnd)


def rm_zero_sign(b: L.IRBuilder, v: L.Value, x: L.Value, y: L.Value) -> L.Value:
    """`.rm`'s exact zero: -0 when an operand's sign bit is set (float64 `v`, operands `x`, `y`)."""
    zero = b.fcmp_ordered("==", v, L.Constant(V(F64), 0.0))
    sx = b.icmp_signed("<", b.bitcast(x, V(I64)), c(I64, 0))
    sy = b.icmp_signed("<", b.bitcast(y, V(I64)), c(I64, 0))
    return b.select(b.and_(zero, b.or_(sx, sy)), L.Constant(V(F64), -0.0), v)


# ---------------------------------------------------------------------------------------------- f32 finish
def ftz32(b: L.IRBuilder, bits: L.Value) -> L.Value:
    """Subnormal f32 bits -> the zero of their sign (floating.ftz32)."""
    sub = b.icmp_unsigned("==", b.and_(bits, c(I32, EXP32)), c(I32, 0))
    return b.select(sub, b.and_(bits, c(I32, SIGN32)), bits)


def nan32(b: L.IRBuilder, bits: L.Value) -> L.Value:
    return b.icmp_unsigned(">", b.and_(bits, c(I32, NAN32)), c(I32, EXP32))


def canon32(b: L.IRBuilder, bits: L.Value) -> L.Value:
    return b.select(nan32(b, bits), c(I32, NAN32), bits)


def sat32(b: L.IRBuilder, bits: L.Value) -> L.Value:
    """floating._sat32: NaN and negative (-0 too) -> +0, above 1.0 -> 1.0."""
    neg = b.icmp_unsigned("!=", b.and_(bits, c(I32, SIGN32)), c(I32, 0))
    out = b.select(b.or_(neg, nan32(b, bits)), c(I32, 0), bits)
    gt1 = b.fcmp_ordered(">", b.bitcast(bits, V(F32)), L.Constant(V(F32), 1.0))
    return b.select(gt1, c(I32, ONE32), out)


def finish32(b: L.IRBuilder, bits: L.Value, ftz: bool, sat: bool) -> L.Value:
    """floating._finish32: canonical NaN, then .ftz, then .sat."""
    r = canon32(b, bits)
    if ftz:
        r = ftz32(b, r)
    if sat:
        r = sat32(b, r)
    return r


# ---------------------------------------------------------------------------------------------- narrow formats
def _max_code(fmt: FloatFormat) -> int:
    return _formats_max_code(fmt)


def encode(b: L.IRBuilder, v: L.Value, fmt: FloatFormat, rnd: str, satfinite: bool = False) -> L.Value:
    """formats.encode(v, fmt, rnd, satfinite=...) of float64 `v` as <32 x i64> codes (the format's bits)."""
    if rnd not in ("rn", "rna", "rz", "rm", "rp") or fmt.bits > 32 or not fmt.signed:
        raise NotNative(f"rounding .{rnd} into {fmt.name} is not in the native tier yet")
    it = V(I64)
    u = b.bitcast(v, it)
    neg = b.icmp_signed("<", u, c(I64, 0))
    a = b.and_(u, c(I64, (1 << 63) - 1))
    is_nan = b.icmp_unsigned(">", a, c(I64, 0x7FF << 52))
    is_inf = b.icmp_unsigned("==", a, c(I64, 0x7FF << 52))
    exp = b.lshr(a, c(I64, 52))
    frac = b.and_(a, c(I64, (1 << 52) - 1))
    sub = b.icmp_unsigned("==", exp, c(I64, 0))
    sig = b.select(sub, frac, b.or_(frac, c(I64, 1 << 52)))
    e = b.sub(b.select(sub, c(I64, 1), exp), c(I64, 1023))
    emin = fmt.emin
    qe = b.select(b.icmp_signed("<", e, c(I64, emin)), c(I64, emin), e)
    shift = b.add(b.sub(qe, e), c(I64, 52 - fmt.mbits))
    shift = b.select(b.icmp_signed(">", shift, c(I64, 62)), c(I64, 62), shift)
    n = b.lshr(sig, shift)
    rem = b.and_(sig, b.sub(b.shl(c(I64, 1), shift), c(I64, 1)))
    half = b.shl(c(I64, 1), b.sub(shift, c(I64, 1)))
    inexact = b.icmp_unsigned("!=", rem, c(I64, 0))
    if rnd == "rn":
        odd = b.icmp_unsigned("!=", b.and_(n, c(I64, 1)), c(I64, 0))
        up = b.or_(b.icmp_unsigned(">", rem, half), b.and_(b.icmp_unsigned("==", rem, half), odd))
    elif rnd == "rna":
        up = b.icmp_unsigned(">=", rem, half)
    elif rnd == "rz":
        up = c(I1, 0)
    elif rnd == "rp":
        up = b.and_(inexact, b.not_(neg))
    else:
        up = b.and_(inexact, neg)
    n = b.add(n, b.zext(up, it))
    code = b.add(b.shl(b.sub(qe, c(I64, emin)), c(I64, fmt.mbits)), n)
    max_code = _max_code(fmt)
    inf_code = ((1 << fmt.ebits) - 1) << fmt.mbits
    finite = b.not_(b.or_(is_nan, is_inf))
    over = b.and_(finite, b.icmp_unsigned(">", code, c(I64, max_code)))
    if satfinite or not (fmt.has_inf or fmt.name == "e4m3"):
        ov = c(I64, max_code)
    elif fmt.name == "e4m3":
        ov = c(I64, fmt.nan or 0)
    else:
        to_inf = {"rn": c(I1, 1), "rna": c(I1, 1), "rz": c(I1, 0), "rp": b.not_(neg), "rm": neg}[rnd]
        ov = b.select(to_inf, c(I64, inf_code), c(I64, max_code))
    code = b.select(over, ov, code)
    if fmt.has_inf and not satfinite:
        inf_v = c(I64, inf_code)
    elif satfinite or fmt.name != "e4m3":
        inf_v = c(I64, max_code)
    else:
        inf_v = c(I64, fmt.nan or 0)
    code = b.select(is_inf, inf_v, code)
    code = b.or_(code, b.shl(b.zext(neg, it), c(I64, fmt.ebits + fmt.mbits)))
    nan_code = fmt.nan if fmt.nan is not None else max_code
    code = b.select(is_nan, c(I64, nan_code), code)
    return b.shl(code, c(I64, fmt.shift)) if fmt.shift else code


# ---------------------------------------------------------------------------------------------- tables
def table_lookup(env: WarpEnv, key: str, table: np.ndarray, index: L.Value) -> L.Value:
    """table[index] per lane, `table` (uint8/16/32/64, a power-of-two length) a constant of the module."""
    gen = env.gen
    tables = gen.__dict__.setdefault("_tables", {})
    t = INT[table.dtype.itemsize * 8]
    g = tables.get(key)
    if g is None:
        data = bytearray(np.ascontiguousarray(table).astype(table.dtype.newbyteorder("<")).tobytes())
        arr = L.ArrayType(I8, len(data))
        g = L.GlobalVariable(gen.module, arr, name=f"table{len(tables)}")
        g.global_constant = True
        g.linkage = "internal"
        g.initializer = L.Constant(arr, data)
        g.align = 64
        tables[key] = g
    b = env.b
    idx = b.zext(index, V(I64)) if index.type.element.width < 64 else index
    base = b.ptrtoint(g, I64)
    ptrs = b.inttoptr(b.add(splat(b, base), b.mul(idx, c(I64, t.width // 8))), V(t.as_pointer()))
    gather = env.module_intrinsic(f"llvm.masked.gather.v32i{t.width}.v32p0", V(t),
                                  [V(t.as_pointer()), I32, V(I1), V(t)])
    return b.call(gather, [ptrs, L.Constant(I32, t.width // 8), c(I1, 1), c(t, 0)])


# ---------------------------------------------------------------------------------------------- exact f64 signs
def split64(b: L.IRBuilder, v: L.Value) -> tuple[L.Value, L.Value]:
    """float64 `v` as (m, e): v == m * 2**e, |m| in [1, 2) with v's sign (subnormals too; zero: m = ±0 and
    e = -1074; not finite: m not finite)."""
    sub = b.fcmp_ordered("<", _fabs(b, v), L.Constant(V(F64), 2.0 ** -1022))
    w = b.select(sub, b.fmul(v, L.Constant(V(F64), 2.0 ** 64)), v)
    bits = b.bitcast(w, V(I64))
    field = b.and_(b.lshr(bits, c(I64, 52)), c(I64, 0x7FF))
    e = b.sub(b.sub(field, c(I64, 1023)), b.select(sub, c(I64, 64), c(I64, 0)))
    m = b.or_(b.and_(bits, c(I64, ~(0x7FF << 52))), c(I64, 1023 << 52))
    zero = b.fcmp_ordered("==", v, L.Constant(V(F64), 0.0))
    m = b.select(b.or_(zero, b.icmp_unsigned("==", field, c(I64, 0x7FF))), bits, m)
    return b.bitcast(m, V(F64)), b.select(zero, c(I64, -1074), e)


def pow2(b: L.IRBuilder, k: L.Value) -> L.Value:
    """2.0**k for i64 `k` clamped to [-1022, 1023]."""
    k = b.select(b.icmp_signed("<", k, c(I64, -1022)), c(I64, -1022), k)
    k = b.select(b.icmp_signed(">", k, c(I64, 1023)), c(I64, 1023), k)
    return b.bitcast(b.shl(b.add(k, c(I64, 1023)), c(I64, 52)), V(F64))


def sign_of_sum(b: L.IRBuilder, terms: list[L.Value]) -> L.Value:
    """A float64 with the sign of the exact sum of `terms` (float64, no overflow on the way): zero exactly when
    the sum is. The terms are grown into a nonoverlapping expansion (Shewchuk's Grow-Expansion: two_sum
    steps, exact with subnormals too), whose largest nonzero component has the sum's sign."""
    expansion = [terms[0]]
    for t in terms[1:]:
        q, grown = t, []
        for h in expansion:
            q, err = two_sum(b, q, h)
            grown.append(err)
        expansion = grown + [q]
    zero = L.Constant(V(F64), 0.0)
    out = expansion[0]
    for h in expansion[1:]:
        out = b.select(b.fcmp_ordered("!=", h, zero), h, out)
    return out
