"""PTX type names to numpy dtypes and raw-bit helpers shared by the semantics modules."""

from __future__ import annotations

import functools
import inspect
from collections.abc import Callable
from typing import Any, TypeAlias

import numpy as np
from numpy.typing import ArrayLike

# Raw bits as the semantics take them: an unsigned array of the type's width, or anything numpy makes one of
# (a number, a list, a wider or signed array; see `raw`). Results are numpy arrays.
Bits: TypeAlias = ArrayLike

_UINT: dict[int, type[np.unsignedinteger]] = {8: np.uint8, 16: np.uint16, 32: np.uint32, 64: np.uint64}
_SINT: dict[int, type[np.signedinteger]] = {8: np.int8, 16: np.int16, 32: np.int32, 64: np.int64}

_WIDTH = {
    "u8": 8, "s8": 8, "b8": 8, "u16": 16, "s16": 16, "b16": 16, "u32": 32, "s32": 32, "b32": 32,
    "u64": 64, "s64": 64, "b64": 64, "f16": 16, "bf16": 16, "f32": 32, "f64": 64, "tf32": 32,
    "f16x2": 32, "bf16x2": 32, "u16x2": 32, "s16x2": 32, "e4m3": 8, "e5m2": 8, "e2m3": 8,
    "e3m2": 8, "e2m1": 8, "ue8m0": 8, "e4m3x2": 16, "e5m2x2": 16, "e2m3x2": 16, "e3m2x2": 16,
    "e2m1x2": 8, "ue8m0x2": 16, "f32x2": 64,
}


def norm(ty: str) -> str:
    """'.s32' or 's32' -> 's32'."""
    return ty[1:] if ty.startswith(".") else ty


def width(ty: str) -> int:
    """Width in bits of a PTX type name."""
    try:
        return _WIDTH[norm(ty)]
    except KeyError:
        raise ValueError(f"unknown PTX type {ty!r}") from None


def is_signed(ty: str) -> bool:
    return norm(ty)[0] == "s"


def udtype(bits: int) -> type[np.unsignedinteger]:
    """The unsigned numpy dtype holding `bits` raw bits."""
    return _UINT[bits]


def sdtype(bits: int) -> type[np.signedinteger]:
    return _SINT[bits]


def raw(a: Bits, bits: int) -> np.ndarray:
    """`a` as an unsigned array of exactly `bits` width (scalars and wider arrays accepted)."""
    arr = np.asarray(a)
    dt = _UINT[bits]
    if arr.dtype == dt:
        return arr
    if arr.dtype == np.bool_:
        return arr.astype(dt)
    if arr.dtype.kind == "f":
        raise TypeError(f"expected raw bits (unsigned integers), got a {arr.dtype} array")
    if arr.dtype.kind in "iu" and arr.dtype.itemsize * 8 == bits:
        return arr.view(dt)
    if arr.dtype.kind == "O":
        arr = np.asarray([int(v) & ((1 << 64) - 1) for v in arr.ravel()], np.uint64).reshape(arr.shape)
    return arr.astype(dt)


def signed_view(a: Bits, bits: int) -> np.ndarray:
    return raw(a, bits).view(_SINT[bits])


def mask(bits: int) -> int:
    return (1 << bits) - 1


def f32(bits: Bits) -> np.ndarray:
    return raw(bits, 32).view(np.float32)


def f64(bits: Bits) -> np.ndarray:
    return raw(bits, 64).view(np.float64)


def bits_of(x: np.ndarray) -> np.ndarray:
    """Raw unsigned bits of a float array."""
    x = np.asarray(x)
    return x.view(_UINT[x.dtype.itemsize * 8])


def split16(a: Bits) -> tuple[np.ndarray, np.ndarray]:
    """(low half, high half) of packed 32-bit lanes as uint16 arrays."""
    a = raw(a, 32)
    return (a & 0xFFFF).astype(np.uint16), (a >> 16).astype(np.uint16)


def pack16(lo: Bits, hi: Bits) -> np.ndarray:
    return (np.asarray(lo).astype(np.uint32) | (np.asarray(hi).astype(np.uint32) << 16)).astype(np.uint32)


def quiet_functions(namespace: dict[str, Any]) -> None:
    """Wrap the public functions of a semantics module so numpy floating-point warnings stay silent:
    NaN, infinity, overflow and signalling-NaN casts are ordinary inputs to an emulator."""
    module = namespace.get("__name__")
    for name, fn in list(namespace.items()):
        if name.startswith("_") or not inspect.isfunction(fn) or fn.__module__ != module:
            continue

        def make(f: Callable[..., Any]) -> Callable[..., Any]:
            @functools.wraps(f)
            def wrapper(*args: Any, **kwargs: Any) -> Any:
                with np.errstate(all="ignore"):
                    return f(*args, **kwargs)
            return wrapper

        namespace[name] = make(fn)
