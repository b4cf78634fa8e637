"""Integer arithmetic: add/sub/mul/mad (lo, hi, wide, .sat, carry chains), div/rem, mul24/mad24, sad,
min/max (.relu, packed 16x2), abs/neg, dp4a/dp2a, cvt.pack-free helpers.

All operands are raw unsigned bits of the instruction type's width (uint16/32/64); `ty` is the PTX
type ('s32', '.u64', 's16x2', ...). Carry flags are bool arrays. Results are raw bits too.

Division by zero (unspecified in PTX) returns all ones for div and rem, for every type: measured
NVIDIA behaviour for 32-bit (the SASS sequences select ~0 when the divisor is zero). INT_MIN / -1
wraps to INT_MIN and INT_MIN % -1 is 0.
"""

from __future__ import annotations

import operator

import numpy as np

from . import _types as T

_U64 = np.uint64


def _info(ty):
    t = T.norm(ty)
    if t in ("u16x2", "s16x2"):
        raise ValueError(f"{ty}: packed type not supported by this operation")
    w = T.width(t)
    return t, w, T.is_signed(t)


def _packed16(fn, ty, *args, **kw):
    """Run a 16-bit op on both halves of 32-bit lanes (u16x2/s16x2)."""
    sub = "s16" if T.norm(ty)[0] == "s" else "u16"
    halves = [T.split16(a) for a in args]
    lo = fn(*(h[0] for h in halves), ty=sub, **kw)
    hi = fn(*(h[1] for h in halves), ty=sub, **kw)
    return T.pack16(lo, hi)


def _sat(vals: np.ndarray, w: int, signed: bool) -> np.ndarray:
    lo, hi = (-(1 << (w - 1)), (1 << (w - 1)) - 1) if signed else (0, (1 << w) - 1)
    return np.clip(vals, lo, hi)


def _wide_product(a: T.Bits, b: T.Bits, w: int, signed: bool) -> tuple[np.ndarray, np.ndarray]:
    """Exact product of two w-bit lanes as (hi, lo) raw w-bit halves (w <= 64)."""
    if w <= 32:
        p: np.ndarray
        if signed:
            p = T.signed_view(a, w).astype(np.int64) * T.signed_view(b, w).astype(np.int64)
        else:
            p = T.raw(a, w).astype(np.uint64) * T.raw(b, w).astype(np.uint64)
        p = p.view(np.uint64) if p.dtype == np.int64 else p
        m = _U64((1 << w) - 1)
        return ((p >> _U64(w)) & m).astype(T.udtype(w)), (p & m).astype(T.udtype(w))
    # 64x64 -> 128 with 32-bit limbs
    ua, ub = T.raw(a, 64), T.raw(b, 64)
    m32 = _U64(0xFFFFFFFF)
    a0, a1, b0, b1 = ua & m32, ua >> _U64(32), ub & m32, ub >> _U64(32)
    p00, p01, p10, p11 = a0 * b0, a0 * b1, a1 * b0, a1 * b1
    mid = (p00 >> _U64(32)) + (p01 & m32) + (p10 & m32)
    lo = (p00 & m32) | ((mid & m32) << _U64(32))
    hi = p11 + (p01 >> _U64(32)) + (p10 >> _U64(32)) + (mid >> _U64(32))
    if signed:  # signed correction: hi -= (a<0)*b + (b<0)*a
        hi = hi - np.where((ua >> _U64(63)) == 1, ub, _U64(0)) - np.where((ub >> _U64(63)) == 1, ua, _U64(0))
    return hi, lo


# --------------------------------------------------------------------------- add / sub


def add(a: T.Bits, b: T.Bits, ty: str = "s32", sat: bool = False, cc: bool = False,
        carry_in: T.Bits | None = None) -> np.ndarray | tuple[np.ndarray, np.ndarray]:
    """add{.sat}.type (u16..s64, u16x2, s16x2); .sat only for s32.

    cc=True (add.cc) or a carry_in (addc) returns (d, carry_out), see `add_cc`.
    """
    if cc or carry_in is not None:
        return add_cc(a, b, ty, carry_in)
    return _add_or_sub(add, operator.add, a, b, ty, sat)


def sub(a: T.Bits, b: T.Bits, ty: str = "s32", sat: bool = False, cc: bool = False,
        carry_in: T.Bits | None = None) -> np.ndarray | tuple[np.ndarray, np.ndarray]:
    """sub{.sat}.type; .sat only for s32. cc/carry_in (sub.cc, subc) return (d, borrow_out)."""
    if cc or carry_in is not None:
        return sub_cc(a, b, ty, carry_in)
    return _add_or_sub(sub, operator.sub, a, b, ty, sat)


def _add_or_sub(fn, op, a, b, ty, sat):
    """The wrapping (or .sat s32) add or subtract shared by `add` and `sub`."""
    t = T.norm(ty)
    if t in ("u16x2", "s16x2"):
        return _packed16(fn, t, a, b)
    t, w, s = _info(t)
    if sat:
        if t != "s32":
            raise ValueError(f"{fn.__name__}.sat applies only to .s32")
        r = op(T.signed_view(a, 32).astype(np.int64), T.signed_view(b, 32).astype(np.int64))
        return _sat(r, 32, True).astype(np.int32).view(np.uint32)
    with np.errstate(over="ignore"):
        return op(T.raw(a, w), T.raw(b, w)).astype(T.udtype(w))


def add_cc(a: T.Bits, b: T.Bits, ty: str = "u32", carry_in: T.Bits | None = None) -> tuple[np.ndarray, np.ndarray]:
    """add.cc / addc / addc.cc on .u32/.s32/.u64/.s64: returns (d, carry_out).

    carry_in None means add.cc (no carry in); otherwise the CC.CF bool array (addc).
    """
    t, w, _ = _info(ty)
    ua, ub = T.raw(a, w), T.raw(b, w)
    s1 = ua + ub
    c1 = s1 < ua
    if carry_in is None:
        return s1, c1
    cin = np.asarray(carry_in, bool)
    s2 = s1 + cin.astype(T.udtype(w))
    c2 = cin & (s2 == 0)
    return s2.astype(T.udtype(w)), c1 | c2


def sub_cc(a: T.Bits, b: T.Bits, ty: str = "u32", carry_in: T.Bits | None = None) -> tuple[np.ndarray, np.ndarray]:
    """sub.cc / subc / subc.cc: d = a + ~b + 1 (sub.cc) or a + ~b + CF (subc); carry_out is the carry of
    that sum, so CC.CF = 1 when no borrow occurs (a >= b for sub.cc), as ptxas's IADD3.X computes it.

    One flag serves add and subtract chains alike: addc after sub.cc adds that "no borrow" bit.
    """
    t, w, _ = _info(ty)
    ub = T.raw(b, w)
    nb = ~ub
    if carry_in is None:
        carry_in = np.ones(np.shape(ub), bool)
    return add_cc(a, nb, ty, carry_in)


# --------------------------------------------------------------------------- mul / mad


def mul(a: T.Bits, b: T.Bits, ty: str = "s32", mode: str = "lo") -> np.ndarray:
    """mul.{lo,hi,wide}.type; .wide returns the 2w-bit product (16 and 32-bit types)."""
    t, w, s = _info(ty)
    if mode == "lo":
        return (T.raw(a, w) * T.raw(b, w)).astype(T.udtype(w))
    if w <= 32 and mode in ("hi", "wide"):
        if s:
            p = (T.signed_view(a, w).astype(np.int64) * T.signed_view(b, w).astype(np.int64)).view(np.uint64)
        else:
            p = T.raw(a, w).astype(np.uint64) * T.raw(b, w).astype(np.uint64)
        if mode == "wide":
            return p.astype(T.udtype(2 * w))
        return (p >> np.uint64(w)).astype(T.udtype(w))
    hi, lo = _wide_product(a, b, w, s)
    if mode == "hi":
        return hi
    if mode == "wide":
        if w > 32:
            raise ValueError("mul.wide supports only 16- and 32-bit types")
        return (hi.astype(T.udtype(2 * w)) << T.udtype(2 * w)(w)) | lo.astype(T.udtype(2 * w))
    raise ValueError(f"mul mode {mode!r}: expected 'lo', 'hi' or 'wide'")


def mad(a: T.Bits, b: T.Bits, c: T.Bits, ty: str = "s32", mode: str = "lo", sat: bool = False,
        carry_in: T.Bits | None = None, cc: bool = False) -> np.ndarray | tuple[np.ndarray, np.ndarray]:
    """mad.{lo,hi,wide}{.sat}.type and mad{c}.{lo,hi}{.cc}: a*b (+ part) + c.

    With cc=True or carry_in given returns (d, carry_out) (madc/mad.cc on u32/s32/u64/s64).
    .sat (s32 .hi only) clamps (a*b)>>32 + c to the s32 range.
    """
    t, w, s = _info(ty)
    if mode == "wide":
        p = mul(a, b, t, "wide")
        w2 = 2 * w
        if cc or carry_in is not None:
            return add_cc(p, c, f"u{w2}", carry_in)
        return (p + T.raw(c, w2)).astype(T.udtype(w2))
    p = mul(a, b, t, mode)
    if sat:
        if not (t == "s32" and mode == "hi"):
            raise ValueError("mad.sat applies only to mad.hi.sat.s32")
        r = T.signed_view(p, 32).astype(np.int64) + T.signed_view(c, 32).astype(np.int64)
        return _sat(r, 32, True).astype(np.int32).view(np.uint32)
    if cc or carry_in is not None:
        return add_cc(p, c, f"u{w}", carry_in)
    return (p + T.raw(c, w)).astype(T.udtype(w))


def mul24(a: T.Bits, b: T.Bits, ty: str = "s32", mode: str = "lo") -> np.ndarray:
    """mul24.{lo,hi}.{u32,s32}: 24x24-bit product; .hi returns bits 47..16."""
    t, w, s = _info(ty)
    ua, ub = T.raw(a, 32).astype(np.int64) & 0xFFFFFF, T.raw(b, 32).astype(np.int64) & 0xFFFFFF
    if s:
        ua = np.where(ua & 0x800000, ua - (1 << 24), ua)
        ub = np.where(ub & 0x800000, ub - (1 << 24), ub)
    p = (ua * ub).view(np.uint64)
    if mode == "lo":
        return (p & _U64(0xFFFFFFFF)).astype(np.uint32)
    if mode == "hi":
        return ((p >> _U64(16)) & _U64(0xFFFFFFFF)).astype(np.uint32)
    raise ValueError(f"mul24 mode {mode!r}: expected 'lo' or 'hi'")


def mad24(a: T.Bits, b: T.Bits, c: T.Bits, ty: str = "s32", mode: str = "lo", sat: bool = False) -> np.ndarray:
    """mad24.{lo,hi}{.sat}.{u32,s32}; .sat only for mad24.hi.sat.s32."""
    p = mul24(a, b, ty, mode)
    if sat:
        r = T.signed_view(p, 32).astype(np.int64) + T.signed_view(c, 32).astype(np.int64)
        return _sat(r, 32, True).astype(np.int32).view(np.uint32)
    return (p + T.raw(c, 32)).astype(np.uint32)


def sad(a: T.Bits, b: T.Bits, c: T.Bits, ty: str = "u32") -> np.ndarray:
    """sad.type: c + |a - b|."""
    t, w, s = _info(ty)
    if s:
        x, y = T.signed_view(a, w), T.signed_view(b, w)
    else:
        x, y = T.raw(a, w), T.raw(b, w)
    ua, ub = T.raw(a, w), T.raw(b, w)
    d = np.where(x < y, ub - ua, ua - ub)
    return (d + T.raw(c, w)).astype(T.udtype(w))


# --------------------------------------------------------------------------- div / rem


def _division_operands(a, b, ty):
    """(width, signed, unsigned dtype, raw a, divisor with zeros replaced by 1, mask of zero divisors)."""
    _, w, s = _info(ty)
    ud = T.udtype(w)
    ua, ub = T.raw(a, w), T.raw(b, w)
    zero = ub == 0
    return w, s, ud, ua, np.where(zero, ud(1), ub), zero


def div(a: T.Bits, b: T.Bits, ty: str = "s32") -> np.ndarray:
    """div.type; x/0 = all ones, INT_MIN/-1 = INT_MIN."""
    w, s, ud, ua, safe_b, zero = _division_operands(a, b, ty)
    if s:
        sa, sb = ua.view(T.sdtype(w)), safe_b.view(T.sdtype(w))
        if w == 64:
            ovf = (sa == np.iinfo(np.int64).min) & (sb == -1)
            sb = np.where(ovf, 1, sb)
            q = np.abs(sa).view(np.uint64) // np.abs(sb).view(np.uint64)
            neg = (sa < 0) != (sb < 0)
            q = np.where(neg, -q.view(np.int64), q.view(np.int64)).view(np.uint64)
        else:
            x, y = sa.astype(np.int64), sb.astype(np.int64)
            q = np.abs(x) // np.abs(y)
            q = np.where((x < 0) != (y < 0), -q, q).astype(ud)
    else:
        q = ua // safe_b
    return np.where(zero, ud(T.mask(w)), q).astype(ud)


def rem(a: T.Bits, b: T.Bits, ty: str = "s32") -> np.ndarray:
    """rem.type (C semantics: sign of the dividend); x%0 = all ones."""
    w, s, ud, ua, safe_b, zero = _division_operands(a, b, ty)
    if s:
        sa, sb = ua.view(T.sdtype(w)), safe_b.view(T.sdtype(w))
        if w == 64:
            ovf = sb == -1
            sb = np.where(ovf, 1, sb)
            r = (np.abs(sa).view(np.uint64) % np.abs(sb).view(np.uint64)).view(np.int64)
            r = np.where(sa < 0, -r, r).view(np.uint64)
        else:
            x, y = sa.astype(np.int64), sb.astype(np.int64)
            r = np.abs(x) % np.abs(y)
            r = np.where(x < 0, -r, r).astype(ud)
    else:
        r = ua % safe_b
    return np.where(zero, ud(T.mask(w)), r).astype(ud)


# --------------------------------------------------------------------------- min / max / abs / neg


def _minmax(a, b, ty, relu, pick_min):
    t = T.norm(ty)
    if t in ("u16x2", "s16x2"):
        return _packed16(_minmax, t, a, b, relu=relu, pick_min=pick_min)
    t, w, s = _info(t)
    if s:
        x, y = T.signed_view(a, w), T.signed_view(b, w)
    else:
        x, y = T.raw(a, w), T.raw(b, w)
    r = np.minimum(x, y) if pick_min else np.maximum(x, y)
    if relu:
        if not s:
            raise ValueError(".relu applies only to signed types (s32, s16x2)")
        r = np.maximum(r, 0).astype(r.dtype)
    return r.view(T.udtype(w)) if s else r.astype(T.udtype(w))


def min(a: T.Bits, b: T.Bits, ty: str = "s32", relu: bool = False) -> np.ndarray:  # noqa: A001 - PTX name
    """min{.relu}.type (u16..s64, u16x2, s16x2)."""
    return _minmax(a, b, ty, relu, True)


def max(a: T.Bits, b: T.Bits, ty: str = "s32", relu: bool = False) -> np.ndarray:  # noqa: A001 - PTX name
    """max{.relu}.type."""
    return _minmax(a, b, ty, relu, False)


def abs(a: T.Bits, ty: str = "s32") -> np.ndarray:  # noqa: A001 - PTX name
    """abs.{s16,s32,s64}: |INT_MIN| = INT_MIN."""
    t, w, s = _info(ty)
    x = T.signed_view(a, w)
    return np.where(x < 0, (T.udtype(w)(0) - T.raw(a, w)), T.raw(a, w)).astype(T.udtype(w))


def neg(a: T.Bits, ty: str = "s32") -> np.ndarray:
    """neg.{s16,s32,s64}: two's complement negation."""
    t, w, s = _info(ty)
    return (T.udtype(w)(0) - T.raw(a, w)).astype(T.udtype(w))


# --------------------------------------------------------------------------- dot products


def _bytes(x, signed):
    u = T.raw(x, 32)
    out = []
    for i in range(4):
        v = ((u >> np.uint32(8 * i)) & np.uint32(0xFF)).astype(np.int64)
        out.append(np.where(v >= 128, v - 256, v) if signed else v)
    return out


def _halves(x, signed):
    u = T.raw(x, 32)
    out = []
    for i in range(2):
        v = ((u >> np.uint32(16 * i)) & np.uint32(0xFFFF)).astype(np.int64)
        out.append(np.where(v >= 32768, v - 65536, v) if signed else v)
    return out


def dp4a(a: T.Bits, b: T.Bits, c: T.Bits, atype: str = "s32", btype: str = "s32") -> np.ndarray:
    """dp4a.atype.btype: c + sum of four byte products (32-bit wrap)."""
    va, vb = _bytes(a, T.is_signed(atype)), _bytes(b, T.is_signed(btype))
    acc = T.signed_view(c, 32).astype(np.int64) if (T.is_signed(atype) or T.is_signed(btype)) \
        else T.raw(c, 32).astype(np.int64)
    for i in range(4):
        acc = acc + va[i] * vb[i]
    return (acc & 0xFFFFFFFF).astype(np.uint32)


def dp2a(a: T.Bits, b: T.Bits, c: T.Bits, atype: str = "s32", btype: str = "s32", mode: str = "lo") -> np.ndarray:
    """dp2a.{lo,hi}.atype.btype: c + a.h0*b.byte[k] + a.h1*b.byte[k+1], k = 0 (lo) or 2 (hi)."""
    va, vb = _halves(a, T.is_signed(atype)), _bytes(b, T.is_signed(btype))
    k = 0 if mode == "lo" else 2
    acc = T.signed_view(c, 32).astype(np.int64) if (T.is_signed(atype) or T.is_signed(btype)) \
        else T.raw(c, 32).astype(np.int64)
    acc = acc + va[0] * vb[k] + va[1] * vb[k + 1]
    return (acc & 0xFFFFFFFF).astype(np.uint32)


T.quiet_functions(globals())
