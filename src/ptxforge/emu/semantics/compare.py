"""Comparison and selection: setp, set, selp, slct for integer and float types (f16x2/bf16x2 too).

Float comparisons: eq ne lt le gt ge are ordered (false when an input is NaN, ne included);
equ neu ltu leu gtu geu are unordered (true when an input is NaN); num and nan test for NaNs.
Integer comparisons: eq ne lt le gt ge (signed for .s types) and lo ls hi hs (unsigned).
"""

from __future__ import annotations

import numpy as np

from . import _types as T
from .float_misc import flush_bits
from .formats import BF16, F16, F32, F64, decode

_FLOATS = {"f16": F16, "bf16": BF16, "f32": F32, "f64": F64}
_INT_OPS = {"eq", "ne", "lt", "le", "gt", "ge", "lo", "ls", "hi", "hs"}
_FLOAT_OPS = {"eq", "ne", "lt", "le", "gt", "ge", "equ", "neu", "ltu", "leu", "gtu", "geu", "num", "nan"}
_BOOL_OPS = ("and", "or", "xor")


def _int_cmp(a, b, cmp, t):
    w = T.width(t)
    if cmp not in _INT_OPS:
        raise ValueError(f"comparison {cmp!r} on .{t}: expected one of {sorted(_INT_OPS)}")
    if cmp in ("lo", "ls", "hi", "hs") or not T.is_signed(t):
        x, y = T.raw(a, w), T.raw(b, w)
        cmp = {"lo": "lt", "ls": "le", "hi": "gt", "hs": "ge"}.get(cmp, cmp)
    else:
        x, y = T.signed_view(a, w), T.signed_view(b, w)
    return _ordered(x, y, cmp)


def _ordered(x, y, cmp):
    if cmp == "eq":
        return x == y
    if cmp == "ne":
        return x != y
    if cmp == "lt":
        return x < y
    if cmp == "le":
        return x <= y
    if cmp == "gt":
        return x > y
    if cmp == "ge":
        return x >= y
    raise ValueError(cmp)


def _float_cmp(xb, yb, cmp, fmt, ftz):
    if cmp not in _FLOAT_OPS:
        raise ValueError(f"comparison {cmp!r} on .{fmt.name}: expected one of {sorted(_FLOAT_OPS)}")
    if ftz:
        xb, yb = flush_bits(xb, fmt), flush_bits(yb, fmt)
    x, y = decode(xb, fmt), decode(yb, fmt)
    unord = np.isnan(x) | np.isnan(y)
    if cmp == "num":
        return ~unord
    if cmp == "nan":
        return unord
    if cmp.endswith("u"):
        with np.errstate(invalid="ignore"):
            return _ordered(x, y, cmp[:-1]) | unord
    with np.errstate(invalid="ignore"):
        return _ordered(x, y, cmp) & ~unord


def compare(a: T.Bits, b: T.Bits, cmp: str, ty: str, ftz: bool = False) -> np.ndarray | tuple[np.ndarray, np.ndarray]:
    """a CmpOp b as bool; for f16x2/bf16x2 returns (low-half result, high-half result)."""
    t = T.norm(ty)
    if t in ("f16x2", "bf16x2"):
        fmt = _FLOATS[t[:-2]]
        (al, ah), (bl, bh) = T.split16(a), T.split16(b)
        return _float_cmp(al, bl, cmp, fmt, ftz), _float_cmp(ah, bh, cmp, fmt, ftz)
    if t in _FLOATS:
        fmt = _FLOATS[t]
        return _float_cmp(T.raw(a, fmt.bits), T.raw(b, fmt.bits), cmp, fmt, ftz)
    return _int_cmp(a, b, cmp, t)


def _bool(x, op, c):
    if op is None:
        return x
    c = np.asarray(c, bool)
    if op == "and":
        return x & c
    if op == "or":
        return x | c
    if op == "xor":
        return x ^ c
    raise ValueError(f"BoolOp {op!r}: expected one of {_BOOL_OPS}")


def setp(a: T.Bits, b: T.Bits, cmp: str, ty: str, ftz: bool = False, bool_op: str | None = None,
         c: T.Bits | None = None) -> tuple[np.ndarray, np.ndarray]:
    """setp.CmpOp{.BoolOp}{.ftz}.type p|q, a, b{, c}: returns (p, q).

    Scalar types: p = (a cmp b) BoolOp c and q = !(a cmp b) BoolOp c.
    f16x2/bf16x2: p is the low-half result and q the high-half result, each BoolOp c.
    Pass c already negated for `!c`.
    """
    if bool_op is not None and c is None:
        raise ValueError(f"setp with BoolOp .{bool_op} needs the predicate operand c")
    r = compare(a, b, cmp, ty, ftz)
    if isinstance(r, tuple):
        return _bool(r[0], bool_op, c), _bool(r[1], bool_op, c)
    return _bool(r, bool_op, c), _bool(~r, bool_op, c)


def set_(a: T.Bits, b: T.Bits, cmp: str, dtype: str, stype: str, ftz: bool = False, bool_op: str | None = None,
         c: T.Bits | None = None) -> np.ndarray:
    """set.CmpOp{.BoolOp}{.ftz}.dtype.stype: 0xffffffff/0 for integer dtypes, 1.0/0.0 for f32;
    f16x2/bf16x2 sources give per-half 0xffff/0 (u32/s32 dtype) or 1.0/0.0 (f16x2/bf16x2 dtype)."""
    d = T.norm(dtype)
    r = compare(a, b, cmp, stype, ftz)
    if isinstance(r, tuple):
        lo, hi = _bool(r[0], bool_op, c), _bool(r[1], bool_op, c)
        one = {"u32": 0xFFFF, "s32": 0xFFFF, "f16x2": 0x3C00, "bf16x2": 0x3F80}.get(d)
        if one is None:
            raise ValueError(f"set with .{T.norm(stype)} source: dtype must be u32, s32, f16x2 or bf16x2")
        return T.pack16(np.where(lo, one, 0), np.where(hi, one, 0))
    r = _bool(r, bool_op, c)
    if d in ("u32", "s32", "b32"):
        return np.where(r, np.uint32(0xFFFFFFFF), np.uint32(0))
    if d == "f32":
        return np.where(r, np.uint32(0x3F800000), np.uint32(0))
    if d in ("f16", "bf16"):
        return np.where(r, np.uint16(0x3C00 if d == "f16" else 0x3F80), np.uint16(0))
    raise ValueError(f"set dtype {dtype!r}: expected u32, s32 or f32")


def selp(a: T.Bits, b: T.Bits, c: T.Bits) -> np.ndarray:
    """selp.type d, a, b, c: c ? a : b."""
    return np.where(np.asarray(c, bool), a, b)


def slct(a: T.Bits, b: T.Bits, c: T.Bits, ctype: str = "s32", ftz: bool = False) -> np.ndarray:
    """slct.dtype.{s32,f32} d, a, b, c: c >= 0 ? a : b (f32: -0 >= 0; NaN selects b)."""
    t = T.norm(ctype)
    if t == "s32":
        cond = T.signed_view(c, 32) >= 0
    elif t == "f32":
        cb = T.raw(c, 32)
        if ftz:
            cb = flush_bits(cb, F32)
        with np.errstate(invalid="ignore"):
            cond = cb.view(np.float32) >= 0
    else:
        raise ValueError(f"slct operand c type {ctype!r}: expected s32 or f32")
    return np.where(cond, a, b)


T.quiet_functions(globals())
