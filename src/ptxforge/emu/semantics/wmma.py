"""wmma.load / wmma.mma / wmma.store on register fragments.

The PTX manual leaves the distribution of matrix elements over a wmma fragment unspecified (only the
number of registers is defined, "Matrix Fragments for WMMA"), so any mapping that load, mma and store
share is conforming. This module uses a documented one: element e (in register order, low half first)
of lane l holds the row-major matrix element (e * 32 + l) mod (rows * cols); fragments with more slots
than elements (the .f16 multiplicands) hold every element twice. Numerics are those of `mma`:
one rounding of the exact a.b + c, integer accumulation exact (wrapping, or clamped with .satfinite).
"""

from __future__ import annotations

import numpy as np
from numpy.typing import ArrayLike

from . import _types as T
from .floating import fma
from .formats import BF16, F16, F32, F64, TF32, decode
from .mma import _dot_rn, _pack_elems, _unpack_elems, dot_tensor_core

_ELEM_BITS = {"f16": 16, "bf16": 16, "tf32": 32, "f32": 32, "f64": 64, "s8": 8, "u8": 8, "s32": 32}

# (shape, type) -> registers of a, b; accumulators: (shape, type) -> registers of c/d
_MUL_REGS = {
    ("m16n16k16", "f16"): (8, 8), ("m8n32k16", "f16"): (8, 8), ("m32n8k16", "f16"): (8, 8),
    ("m16n16k16", "bf16"): (4, 4), ("m8n32k16", "bf16"): (2, 8), ("m32n8k16", "bf16"): (8, 2),
    ("m16n16k16", "s8"): (2, 2), ("m8n32k16", "s8"): (1, 4), ("m32n8k16", "s8"): (4, 1),
    ("m16n16k16", "u8"): (2, 2), ("m8n32k16", "u8"): (1, 4), ("m32n8k16", "u8"): (4, 1),
    ("m16n16k8", "tf32"): (4, 4), ("m8n8k4", "f64"): (1, 1),
}
_ACC_REGS = {"f16": 4, "f32": 8, "s32": 8, "f64": 2}


def _dims(shape):
    m, rest = shape.lstrip(".")[1:].split("n")
    n, k = rest.split("k")
    return int(m), int(n), int(k)


def fragment_shape(shape: str, operand: str, ty: str) -> tuple[int, int]:
    """(registers per lane, elements per register) of a wmma fragment."""
    shape, t = shape.lstrip("."), T.norm(ty)
    if operand in ("a", "b"):
        try:
            regs = _MUL_REGS[(shape, t)][0 if operand == "a" else 1]
        except KeyError:
            raise ValueError(f"wmma .{shape} with .{t} multiplicands is not supported") from None
    else:
        if t not in _ACC_REGS:
            raise ValueError(f"wmma accumulator type .{t}: expected f16, f32, s32 or f64")
        regs = _ACC_REGS[t]
    regbits = 64 if t == "f64" else 32
    return regs, regbits // _ELEM_BITS[t]


def _matrix_dims(shape, operand):
    m, n, k = _dims(shape)
    return {"a": (m, k), "b": (k, n), "c": (m, n), "d": (m, n)}[operand]


def _slots(shape, operand, ty):
    regs, per = fragment_shape(shape, operand, ty)
    rows, cols = _matrix_dims(shape, operand)
    e = np.arange(regs * per)
    return (e[None, :] * 32 + np.arange(32)[:, None]) % (rows * cols), rows, cols


def load(shape: str, operand: str, ty: str, matrix_codes: ArrayLike) -> np.ndarray:
    """wmma.load.{a,b,c}: a matrix of raw element codes [..., rows, cols] (logical order; the caller
    reads memory with the instruction's layout and stride, see `element_offsets`) -> [..., 32, nregs]."""
    t = T.norm(ty)
    idx, rows, cols = _slots(shape, operand, t)
    codes = np.asarray(matrix_codes).astype(np.uint64)
    flat = codes.reshape(codes.shape[:-2] + (rows * cols,))
    return _pack_elems(flat[..., idx], _ELEM_BITS[t], 64 if t == "f64" else 32)


def store(shape: str, ty: str, regs: ArrayLike, operand: str = "d") -> np.ndarray:
    """wmma.store.d: fragment registers [..., 32, nregs] -> matrix of raw codes [..., rows, cols]."""
    t = T.norm(ty)
    idx, rows, cols = _slots(shape, operand, t)
    codes = _unpack_elems(regs, _ELEM_BITS[t])
    out = np.zeros(codes.shape[:-2] + (rows * cols,), np.uint64)
    # write the first copy of each element (later slots of duplicated fragments are written first)
    for e in reversed(range(idx.shape[1])):
        out[..., idx[:, e]] = codes[..., :, e]
    return out.reshape(codes.shape[:-2] + (rows, cols))


def _values(codes, t):
    if t in ("s8", "u8"):
        v = codes.astype(np.int64)
        return np.where(v >= 128, v - 256, v) if t == "s8" else v
    if t == "s32":
        return codes.astype(np.uint32).view(np.int32).astype(np.int64)
    return decode(codes, {"f16": F16, "bf16": BF16, "tf32": TF32, "f32": F32, "f64": F64}[t])


def mma(shape: str, a: T.Bits, b: T.Bits, c: T.Bits, atype: str, ctype: str, dtype: str | None = None,
        satfinite: bool = False, btype: str | None = None) -> np.ndarray:
    """wmma.mma.sync.aligned.alayout.blayout.shape.dtype{.atype.btype}.ctype d, a, b, c (btype defaults
    to atype; the layouts only matter to load/store)."""
    shape = shape.lstrip(".")
    at, ct = T.norm(atype), T.norm(ctype)
    bt = T.norm(btype) if btype else at
    dt = T.norm(dtype) if dtype else ct
    A = _values(store(shape, at, a, "a"), at)
    B = _values(store(shape, bt, b, "b"), bt)
    C = _values(store(shape, ct, c, "c"), ct)
    if at in ("s8", "u8"):
        acc = A @ B + C
        if satfinite:
            acc = np.clip(acc, -(1 << 31), (1 << 31) - 1)
        codes = (acc & 0xFFFFFFFF).astype(np.uint64)
    elif at == "f64":
        acc = np.ascontiguousarray(C, np.float64).view(np.uint64)
        for kk in range(A.shape[-1]):
            av = np.ascontiguousarray(np.broadcast_to(A[..., :, kk, None], C.shape)).view(np.uint64)
            bv = np.ascontiguousarray(np.broadcast_to(B[..., kk, None, :], C.shape)).view(np.uint64)
            acc = fma(av, bv, acc, "f64")
        codes = acc
    elif dt == "f32" and at in ("f16", "bf16", "tf32"):  # the tensor cores' summation, as mma.sync
        codes = dot_tensor_core(A, B, C)
    else:
        codes = _dot_rn(A, B, C, {"f32": F32, "f16": F16}[dt])
    return load(shape, "d", dt, codes)


def element_offsets(rows: int, cols: int, layout: str, stride: int, esize: int) -> np.ndarray:
    """Byte offsets [rows, cols] of each logical element for wmma.load/store with .row or .col layout and
    the stride (in elements) of the instruction (defaults to cols for .row, rows for .col)."""
    r, c = np.meshgrid(np.arange(rows), np.arange(cols), indexing="ij")
    if layout == "row":
        return (r * stride + c) * esize
    if layout == "col":
        return (c * stride + r) * esize
    raise ValueError(f"wmma layout .{layout}: expected row or col")


T.quiet_functions(globals())
