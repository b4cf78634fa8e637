"""Float min/max (NaN rules, .NaN, .xorsign.abs, .relu, three inputs), abs, neg, copysign, testp for
.f32 / .f64 (and the shared bit-level min/max used by .f16/.bf16). Operands are raw bits."""

from __future__ import annotations

import numpy as np

from . import _types as T
from .formats import BF16, F16, F32, F64, FloatFormat

_FMTS = {"f16": F16, "bf16": BF16, "f32": F32, "f64": F64}


def _geom(fmt: FloatFormat) -> tuple[type[np.unsignedinteger], np.unsignedinteger, np.unsignedinteger]:
    w = fmt.bits
    ud = T.udtype(w)
    sign = ud(1 << (w - 1))
    exp = ud(((1 << fmt.ebits) - 1) << fmt.mbits)
    return ud, sign, exp


def is_nan_bits(b: np.ndarray, fmt: FloatFormat) -> np.ndarray:
    ud, sign, exp = _geom(fmt)
    return (b & ~sign) > exp


def flush_bits(b: np.ndarray, fmt: FloatFormat) -> np.ndarray:
    """Subnormals -> sign-preserving zero."""
    ud, sign, exp = _geom(fmt)
    return np.where((b & exp) == 0, b & sign, b).astype(ud)


def _order_key(b, fmt):
    """A signed integer key whose order is the float order with -0 < +0 (non-NaN inputs)."""
    w = fmt.bits
    s = b.astype(np.uint64)
    neg = (s >> np.uint64(w - 1)) & np.uint64(1)
    mag = (s & np.uint64((1 << (w - 1)) - 1)).astype(np.int64)
    return np.where(neg == 1, -mag - 1, mag)


def minmax_bits(a: T.Bits, b: T.Bits, fmt: FloatFormat, pick_min: bool, *, ftz: bool = False, nan: bool = False,
                xorsign_abs: bool = False, relu: bool = False) -> np.ndarray:
    """min/max of two raw-bit arrays of format `fmt` per the PTX semantics."""
    ud, sign, exp = _geom(fmt)
    x, y = T.raw(a, fmt.bits), T.raw(b, fmt.bits)
    if ftz:
        x, y = flush_bits(x, fmt), flush_bits(y, fmt)
    if fmt.bits >= 32 and not xorsign_abs:
        return _minmax_fast(x, y, fmt, pick_min, nan, relu)
    xs = (x ^ y) & sign
    if xorsign_abs:
        x, y = x & ~sign, y & ~sign
    na, nb = is_nan_bits(x, fmt), is_nan_bits(y, fmt)
    ka, kb = _order_key(x, fmt), _order_key(y, fmt)
    take_a = (ka < kb) if pick_min else (ka > kb)
    r = np.where(take_a, x, y)
    r = np.where(na & ~nb, y, np.where(nb & ~na, x, r))
    canon = ud(fmt.nan)  # type: ignore[arg-type]  # f16, bf16, f32 and f64 have a NaN
    any_nan = (na | nb) if nan else (na & nb)
    if xorsign_abs:
        r = (r & ~sign) | xs
    r = np.where(any_nan, canon, r)
    if relu:
        r = np.where(((r & sign) != 0) & ~is_nan_bits(r, fmt), ud(0), r)
    return r.astype(ud)


def _minmax_fast(a, b, fmt, pick_min, nan, relu):
    """f32/f64 min/max with numpy's fmin/fmax (or minimum/maximum for .NaN), fixing -0/+0 and NaNs."""
    ud, sign, _ = _geom(fmt)
    fdt = np.float32 if fmt.bits == 32 else np.float64
    x, y = a.view(fdt), b.view(fdt)
    if nan:
        r = (np.minimum if pick_min else np.maximum)(x, y)
    else:
        r = (np.fmin if pick_min else np.fmax)(x, y)
    rb = r.view(ud)
    zeros = r == 0
    if zeros.any():  # -0.0 < +0.0: min takes a set sign bit, max a clear one
        both = zeros & (x == 0) & (y == 0)
        rb = np.where(both, (a | b) if pick_min else (a & b), rb)
    isn = np.isnan(r)
    if isn.any():
        rb = np.where(isn, ud(fmt.nan), rb)
    if relu:
        rb = np.where(((rb & sign) != 0) & ~isn, ud(0), rb)
    return rb.astype(ud, copy=False)


def _magnitude(x, fmt, ftz):
    ud, sign, _ = _geom(fmt)
    x = T.raw(x, fmt.bits)
    if ftz:
        x = flush_bits(x, fmt)
    return (x & ~sign).astype(ud)


def _fmt(ty):
    t = T.norm(ty)
    try:
        return _FMTS[t]
    except KeyError:
        raise ValueError(f"float op on {ty!r}: expected f32 or f64 (f16/bf16 live in half.py)") from None


def _minmax(is_min, a, b, c, ty, ftz, NaN, xorsign_abs, relu, abs):  # noqa: A002,N803
    fmt = _fmt(ty)
    if xorsign_abs and c is not None:
        raise ValueError(".xorsign cannot be used with three inputs")
    if abs:  # .abs: compare magnitudes (subnormals flushed first under .ftz)
        a, b = (_magnitude(x, fmt, ftz) for x in (a, b))
        c = None if c is None else _magnitude(c, fmt, ftz)
    if c is not None:
        r = minmax_bits(a, b, fmt, is_min, ftz=ftz, nan=NaN)
        return minmax_bits(r, c, fmt, is_min, ftz=ftz, nan=NaN, relu=relu)
    return minmax_bits(a, b, fmt, is_min, ftz=ftz, nan=NaN, xorsign_abs=xorsign_abs, relu=relu)


def min(a: T.Bits, b: T.Bits, c: T.Bits | None = None, ty: str = "f32", ftz: bool = False,  # noqa: A001
        NaN: bool = False, xorsign_abs: bool = False, relu: bool = False,  # noqa: N803
        abs: bool = False) -> np.ndarray:  # noqa: A002 - PTX modifier name
    """min{.ftz}{.NaN}{.xorsign.abs | .abs}.{f32,f64}, optional third input c."""
    return _minmax(True, a, b, c, ty, ftz, NaN, xorsign_abs, relu, abs)


def max(a: T.Bits, b: T.Bits, c: T.Bits | None = None, ty: str = "f32", ftz: bool = False,  # noqa: A001
        NaN: bool = False, xorsign_abs: bool = False, relu: bool = False,  # noqa: N803
        abs: bool = False) -> np.ndarray:  # noqa: A002 - PTX modifier name
    """max{.ftz}{.NaN}{.xorsign.abs | .abs}.{f32,f64}, optional third input c."""
    return _minmax(False, a, b, c, ty, ftz, NaN, xorsign_abs, relu, abs)


def abs(a: T.Bits, ty: str = "f32", ftz: bool = False) -> np.ndarray:  # noqa: A001 - PTX name
    """abs{.ftz}.{f32,f64}: clear the sign bit."""
    fmt = _fmt(ty)
    ud, sign, _ = _geom(fmt)
    x = T.raw(a, fmt.bits)
    if ftz:
        x = flush_bits(x, fmt)
    return (x & ~sign).astype(ud)


def neg(a: T.Bits, ty: str = "f32", ftz: bool = False) -> np.ndarray:
    """neg{.ftz}.{f32,f64}: flip the sign bit."""
    fmt = _fmt(ty)
    ud, sign, _ = _geom(fmt)
    x = T.raw(a, fmt.bits)
    if ftz:
        x = flush_bits(x, fmt)
    return (x ^ sign).astype(ud)


def copysign(a: T.Bits, b: T.Bits, ty: str = "f32") -> np.ndarray:
    """copysign.{f32,f64} d, a, b: b with the sign of a."""
    fmt = _fmt(ty)
    ud, sign, _ = _geom(fmt)
    return ((T.raw(b, fmt.bits) & ~sign) | (T.raw(a, fmt.bits) & sign)).astype(ud)


TESTP_OPS = ("finite", "infinite", "number", "notanumber", "normal", "subnormal")


def testp(a: T.Bits, op: str, ty: str = "f32") -> np.ndarray:
    """testp.op.{f32,f64} -> bool: finite, infinite, number, notanumber, normal, subnormal."""
    fmt = _fmt(ty)
    ud, sign, exp = _geom(fmt)
    x = T.raw(a, fmt.bits)
    e = x & exp
    m = x & ~(sign | exp)
    if op == "finite":
        return e != exp
    if op == "infinite":
        return (e == exp) & (m == 0)
    if op == "number":
        return ~((e == exp) & (m != 0))
    if op == "notanumber":
        return (e == exp) & (m != 0)
    if op == "normal":
        return (e != 0) & (e != exp)
    if op == "subnormal":
        return (e == 0) & (m != 0)
    raise ValueError(f"testp op {op!r}: expected one of {TESTP_OPS}")


T.quiet_functions(globals())
