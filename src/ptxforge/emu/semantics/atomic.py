"""The value operation of atom / red: new = op(old, b[, c]) on raw bits.

The emulator does the memory part (read old, write new, return old for atom). Ops: and or xor (b32/b64),
exch and cas (b16/b32/b64; b128 as (low, high) uint64 pairs),
add (u32 s32 u64 s64 f16 f16x2 bf16 bf16x2 f32 f64), inc/dec (u32),
min/max (u32 s32 u64 s64 and, under .noftz, f16 bf16 f16x2 bf16x2).

Float add rounds to nearest even. `atom.add.f32` on global memory flushes subnormal inputs and results
to sign-preserving zero (pass space='global'); on shared memory it keeps them. f16/bf16 adds (.noftz)
and f64 keep subnormals.
"""

from __future__ import annotations

import numpy as np

from . import _types as T
from . import float_misc, floating, half
from .formats import BF16, F16

OPS = ("and", "or", "xor", "exch", "cas", "add", "inc", "dec", "min", "max")


def apply(op: str, old: T.Bits, b: T.Bits, ty: str, c: T.Bits | None = None, space: str = "global") -> np.ndarray:
    """new value for atom.op.type / red.op.type given the old memory value and operands b (c for cas)."""
    t = T.norm(ty)
    if t == "b128":  # lanes carry (low, high) uint64 pairs: shape (..., 2)
        if op == "exch":
            return np.asarray(b, np.uint64).copy()
        if op == "cas":
            o = np.asarray(old, np.uint64)
            same = (o == np.asarray(b, np.uint64)).all(axis=-1, keepdims=True)
            return np.where(same, np.asarray(c, np.uint64), o)
        raise ValueError(f"atom.{op}.b128 is not a PTX operation (only exch and cas)")
    w = T.width(t)
    ud = T.udtype(w)
    if op == "exch":
        return T.raw(b, w).astype(ud)
    if op == "cas":
        if c is None:
            raise ValueError("atom.cas needs operand c")
        o = T.raw(old, w)
        return np.where(o == T.raw(b, w), T.raw(c, w), o).astype(ud)
    if op in ("and", "or", "xor"):
        o, v = T.raw(old, w), T.raw(b, w)
        return {"and": o & v, "or": o | v, "xor": o ^ v}[op].astype(ud)
    if op == "add":
        if t in ("f32",):
            return floating.add(old, b, "f32", ftz=(space == "global"))
        if t == "f64":
            return floating.add(old, b, "f64")
        if t in ("f16", "f16x2", "bf16", "bf16x2"):
            return half.add(old, b, t)
        return (T.raw(old, w) + T.raw(b, w)).astype(ud)
    if op == "inc":
        o, v = T.raw(old, w), T.raw(b, w)
        return np.where(o >= v, ud(0), o + ud(1)).astype(ud)
    if op == "dec":
        o, v = T.raw(old, w), T.raw(b, w)
        return np.where((o == 0) | (o > v), v, o - ud(1)).astype(ud)
    if op in ("min", "max"):
        if t in ("f16", "bf16"):
            return float_misc.minmax_bits(old, b, F16 if t == "f16" else BF16, op == "min")
        if t in ("f16x2", "bf16x2"):
            return getattr(half, op)(old, b, t)
        if T.is_signed(t):
            x, y = T.signed_view(old, w), T.signed_view(b, w)
        else:
            x, y = T.raw(old, w), T.raw(b, w)
        r = np.minimum(x, y) if op == "min" else np.maximum(x, y)
        return r.view(ud) if r.dtype != ud else r
    raise ValueError(f"unknown atomic op {op!r}; expected one of {OPS}")


T.quiet_functions(globals())
