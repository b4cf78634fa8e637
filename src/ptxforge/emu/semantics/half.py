"""Half precision arithmetic: .f16 / .f16x2 / .bf16 / .bf16x2 add, sub, mul, fma (.rn by default,
any IEEE mode accepted), .ftz (f16), .sat, .relu, neg, abs, min/max (.NaN, .xorsign.abs, .relu).

Operands are raw bits: uint16 for f16/bf16, uint32 for the packed x2 types (element 0 in bits 0..15).
Results are computed exactly (or rounded to odd) in float64 and rounded once. NaN results are the
canonical 0x7fff.
"""

from __future__ import annotations

import numpy as np

from . import _types as T
from .float_misc import minmax_bits
from .floating import _sum_rn_to, sum_for_rounding
from .formats import (  # the bf16 roundings live in formats.py, which encode() uses too
    BF16,
    F16,
    NAN16,
    FloatFormat,
    encode,
    f32_to_bf16_rn,
    f64_to_bf16_rn,
    round_to_odd,
    two_sum,
)


def _fmt(ty):
    t = T.norm(ty)
    if t in ("f16", "f16x2"):
        return F16, t.endswith("x2")
    if t in ("bf16", "bf16x2"):
        return BF16, t.endswith("x2")
    raise ValueError(f"half-precision op on {ty!r}: expected f16, f16x2, bf16 or bf16x2")


def _lanes(fn, ty, args, kw):
    fmt, packed = _fmt(ty)
    if not packed:
        return fn(*(T.raw(x, 16) for x in args), fmt=fmt, **kw)
    halves = [T.split16(x) for x in args]
    lo = fn(*(h[0] for h in halves), fmt=fmt, **kw)
    hi = fn(*(h[1] for h in halves), fmt=fmt, **kw)
    return T.pack16(lo, hi)


def decode16(bits: T.Bits, fmt: FloatFormat) -> np.ndarray:
    """f16/bf16 bits -> float64."""
    b = T.raw(bits, 16)
    if fmt is F16:
        return b.view(np.float16).astype(np.float64)
    return (b.astype(np.uint32) << np.uint32(16)).view(np.float32).astype(np.float64)


def ftz16(bits: T.Bits, fmt: FloatFormat) -> np.ndarray:
    b = T.raw(bits, 16)
    emask = np.uint16(0x7C00 if fmt is F16 else 0x7F80)
    return np.where((b & emask) == 0, b & np.uint16(0x8000), b).astype(np.uint16)


def _round16(v, fmt, rnd):
    """float64 (exact or rounded-to-odd) -> f16/bf16 bits, one rounding."""
    if rnd == "rn":
        if fmt is F16:
            with np.errstate(over="ignore"):
                return v.astype(np.float16).view(np.uint16)
        return f64_to_bf16_rn(v)
    return encode(v, fmt, rnd)


def _post(r, fmt, ftz, sat, relu):
    r = T.raw(r, 16)
    emask = 0x7C00 if fmt is F16 else 0x7F80
    nan = (r & np.uint16(0x7FFF)) > np.uint16(emask)
    r = np.where(nan, NAN16, r)
    if ftz:
        r = ftz16(r, fmt)
    if sat:
        one = np.uint16(0x3C00 if fmt is F16 else 0x3F80)
        neg = (r >> np.uint16(15)) == 1
        nan = (r & np.uint16(0x7FFF)) > np.uint16(emask)
        r = np.where(neg | nan, np.uint16(0), r)
        r = np.where(decode16(r, fmt) > 1.0, one, r)
    if relu:
        neg = ((r >> np.uint16(15)) == 1) & ~((r & np.uint16(0x7FFF)) > np.uint16(emask))
        r = np.where(neg, np.uint16(0), r)
    return r.astype(np.uint16)


def _ins(fmt, ftz, *xs):
    if ftz:
        xs = [ftz16(x, fmt) for x in xs]
    return [decode16(x, fmt) for x in xs]


def _ins32(fmt, ftz, *xs):
    """f16/bf16 bits -> float32 arrays (exact)."""
    if ftz:
        xs = [ftz16(x, fmt) for x in xs]
    if fmt is F16:
        return [T.raw(x, 16).view(np.float16).astype(np.float32) for x in xs]
    return [(T.raw(x, 16).astype(np.uint32) << np.uint32(16)).view(np.float32) for x in xs]


def _from32(r, fmt):
    """float32 (correctly rounded result of f16/bf16 operands) -> f16/bf16 bits: the second rounding
    is innocuous because 24 >= 2 * 11 + 2 (Figueroa's double-rounding condition for + - * / sqrt)."""
    if fmt is F16:
        return r.astype(np.float16).view(np.uint16)
    return f32_to_bf16_rn(r.view(np.uint32))


def _add1(a, b, fmt, rnd, ftz, sat, relu):
    if rnd == "rn":
        x, y = _ins32(fmt, ftz, a, b)
        with np.errstate(all="ignore"):
            return _post(_from32(x + y, fmt), fmt, ftz, sat, relu)
    x, y = _ins(fmt, ftz, a, b)
    with np.errstate(all="ignore"):
        s, e = two_sum(x, y)
        v = round_to_odd(s, e)
        if rnd == "rm":
            v = np.where(v == 0, np.where(np.signbit(x) | np.signbit(y), -0.0, 0.0), v)
    return _post(_round16(v, fmt, rnd), fmt, ftz, sat, relu)


def _mul1(a, b, fmt, rnd, ftz, sat, relu):
    if rnd == "rn":
        x, y = _ins32(fmt, ftz, a, b)
        with np.errstate(all="ignore"):
            return _post(_from32(x * y, fmt), fmt, ftz, sat, relu)
    x, y = _ins(fmt, ftz, a, b)
    with np.errstate(all="ignore"):
        v = x * y
    return _post(_round16(v, fmt, rnd), fmt, ftz, sat, relu)


def _fma1(a, b, c, fmt, rnd, ftz, sat, relu):
    x, y, z = _ins(fmt, ftz, a, b, c)
    with np.errstate(all="ignore"):
        p = x * y
        if rnd == "rn":
            if fmt is F16:
                r = _sum_rn_to(p, z, np.float16, 41).view(np.uint16)
            else:
                r = f64_to_bf16_rn(sum_for_rounding(p, z, 44))
            return _post(r, fmt, ftz, sat, relu)
        s, e = two_sum(p, z)
        v = round_to_odd(s, e)
        if rnd == "rm":
            v = np.where(v == 0, np.where(np.signbit(p) | np.signbit(z), -0.0, 0.0), v)
    return _post(_round16(v, fmt, rnd), fmt, ftz, sat, relu)


def add(a: T.Bits, b: T.Bits, ty: str = "f16", rnd: str = "rn", ftz: bool = False, sat: bool = False,
        relu: bool = False) -> np.ndarray:
    """add{.rnd}{.ftz}{.sat}.{f16,f16x2,bf16,bf16x2}."""
    return _lanes(_add1, ty, (a, b), dict(rnd=rnd, ftz=ftz, sat=sat, relu=relu))


def sub(a: T.Bits, b: T.Bits, ty: str = "f16", rnd: str = "rn", ftz: bool = False, sat: bool = False,
        relu: bool = False) -> np.ndarray:
    """sub: a + (-b)."""
    fmt, packed = _fmt(ty)
    flip = 0x80008000 if packed else 0x8000
    nb = T.raw(b, 32 if packed else 16) ^ (np.uint32(flip) if packed else np.uint16(flip))
    return add(a, nb, ty, rnd, ftz, sat, relu)


def mul(a: T.Bits, b: T.Bits, ty: str = "f16", rnd: str = "rn", ftz: bool = False, sat: bool = False,
        relu: bool = False) -> np.ndarray:
    """mul{.rnd}{.ftz}{.sat}.{f16,f16x2,bf16,bf16x2}."""
    return _lanes(_mul1, ty, (a, b), dict(rnd=rnd, ftz=ftz, sat=sat, relu=relu))


def fma(a: T.Bits, b: T.Bits, c: T.Bits, ty: str = "f16", rnd: str = "rn", ftz: bool = False, sat: bool = False,
        relu: bool = False) -> np.ndarray:
    """fma.rnd{.ftz}{.sat|.relu}.{f16,f16x2,bf16,bf16x2}: one rounding."""
    return _lanes(_fma1, ty, (a, b, c), dict(rnd=rnd, ftz=ftz, sat=sat, relu=relu))


def _sign_op(a, ty, ftz, packed_op, scalar_op):
    """neg/abs: a bit operation on the sign bit(s), after flushing subnormals with .ftz."""
    fmt, packed = _fmt(ty)
    if packed:
        x = T.raw(a, 32)
        if ftz:
            lo, hi = T.split16(x)
            x = T.pack16(ftz16(lo, fmt), ftz16(hi, fmt))
        return _packed_nan_7fff(x, packed_op(x), fmt)
    x = ftz16(a, fmt) if ftz else T.raw(a, 16)
    return scalar_op(x)


def neg(a: T.Bits, ty: str = "f16", ftz: bool = False) -> np.ndarray:
    """neg{.ftz}: flip the sign bit(s)."""
    return _sign_op(a, ty, ftz, lambda x: x ^ np.uint32(0x80008000), lambda x: x ^ np.uint16(0x8000))


def abs(a: T.Bits, ty: str = "f16", ftz: bool = False) -> np.ndarray:  # noqa: A001 - PTX name
    """abs{.ftz}: clear the sign bit(s)."""
    return _sign_op(a, ty, ftz, lambda x: x & np.uint32(0x7FFF7FFF), lambda x: x & np.uint16(0x7FFF))


def _packed_nan_7fff(src, out, fmt):
    """An H200 gives 0x7fff for each NaN half of a packed neg/abs (tests/conformance/data), not the
    sign-flipped input."""
    exp = np.uint32(0x7C00 if fmt is F16 else 0x7F80)
    for shift in (0, 16):
        h = (src >> np.uint32(shift)) & np.uint32(0x7FFF)
        nan = ((h & exp) == exp) & ((h & ~exp & np.uint32(0x7FFF)) != 0)
        out = np.where(nan, (out & ~np.uint32(0xFFFF << shift)) | np.uint32(0x7FFF << shift), out)
    return out.astype(np.uint32)


def _minmax1(a, b, fmt, pick_min, ftz, nan, xorsign_abs, relu):
    return minmax_bits(a, b, fmt, pick_min, ftz=ftz, nan=nan, xorsign_abs=xorsign_abs, relu=relu)


def min(a: T.Bits, b: T.Bits, ty: str = "f16", ftz: bool = False, NaN: bool = False,  # noqa: A001,N803
        xorsign_abs: bool = False, relu: bool = False) -> np.ndarray:
    """min{.ftz}{.NaN}{.xorsign.abs}{.relu}.{f16,f16x2,bf16,bf16x2}."""
    return _lanes(_minmax1, ty, (a, b), dict(pick_min=True, ftz=ftz, nan=NaN,
                                             xorsign_abs=xorsign_abs, relu=relu))


def max(a: T.Bits, b: T.Bits, ty: str = "f16", ftz: bool = False, NaN: bool = False,  # noqa: A001,N803
        xorsign_abs: bool = False, relu: bool = False) -> np.ndarray:
    """max{.ftz}{.NaN}{.xorsign.abs}{.relu}.{f16,f16x2,bf16,bf16x2}."""
    return _lanes(_minmax1, ty, (a, b), dict(pick_min=False, ftz=ftz, nan=NaN,
                                             xorsign_abs=xorsign_abs, relu=relu))


T.quiet_functions(globals())
