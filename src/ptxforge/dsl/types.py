"""PTX value types for the DSL and the pointer/scalar parameter annotations kernels are written with.

A `DType` is what a value *is* (`f32`, `bf16`, `e4m3x2`); its `storage` is the register type the
DSL declares for it. PTX keeps half, bfloat16 and fp8 values in bit-size registers (`.b16`, `.b32`),
so `bf16` values live in `.b16` registers while instructions still say `.bf16`.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from typing import TypeAlias

    import numpy.typing as npt

    DTypeLike: TypeAlias = "DType | str | npt.DTypeLike"  # a DType, its PTX name ('f32', '.f32') or a numpy dtype

import numpy as np


@dataclass(frozen=True, slots=True)
class DType:
    """A PTX value type: `name` is the PTX spelling ('.u32'), `kind` one of b/u/s/f/pred."""

    name: str
    bits: int
    kind: str
    storage: str  # the .reg type holding it

    @property
    def ptx(self) -> str:
        return self.name

    @property
    def nbytes(self) -> int:
        return max(1, self.bits // 8)

    @property
    def is_float(self) -> bool:
        return self.kind == "f"

    @property
    def is_int(self) -> bool:
        return self.kind in ("u", "s")

    @property
    def is_signed(self) -> bool:
        return self.kind == "s"

    def __repr__(self) -> str:
        return self.name[1:]

    def __str__(self) -> str:
        return self.name


def _t(name: str, bits: int, kind: str, storage: str | None = None) -> DType:
    return DType(name, bits, kind, storage or name)


pred = _t(".pred", 1, "pred")
b8 = _t(".b8", 8, "b", ".b16")
u8 = _t(".u8", 8, "u", ".u16")
s8 = _t(".s8", 8, "s", ".s16")
b16 = _t(".b16", 16, "b")
u16 = _t(".u16", 16, "u")
s16 = _t(".s16", 16, "s")
b32 = _t(".b32", 32, "b")
u32 = _t(".u32", 32, "u")
s32 = _t(".s32", 32, "s")
b64 = _t(".b64", 64, "b")
u64 = _t(".u64", 64, "u")
s64 = _t(".s64", 64, "s")
b128 = _t(".b128", 128, "b")
f16 = _t(".f16", 16, "f", ".b16")
bf16 = _t(".bf16", 16, "f", ".b16")
f16x2 = _t(".f16x2", 32, "f", ".b32")
bf16x2 = _t(".bf16x2", 32, "f", ".b32")
tf32 = _t(".tf32", 32, "f", ".b32")
f32 = _t(".f32", 32, "f")
f64 = _t(".f64", 64, "f")
e4m3 = _t(".e4m3", 8, "f", ".b16")
e5m2 = _t(".e5m2", 8, "f", ".b16")
e4m3x2 = _t(".e4m3x2", 16, "f", ".b16")
e5m2x2 = _t(".e5m2x2", 16, "f", ".b16")

ALL = {t.name: t for t in (pred, b8, u8, s8, b16, u16, s16, b32, u32, s32, b64, u64, s64, b128, f16, bf16,
                           f16x2, bf16x2, tf32, f32, f64, e4m3, e5m2, e4m3x2, e5m2x2)}


def dtype(t: DTypeLike) -> DType:
    """A DType from a DType, a PTX name ('.f32' or 'f32') or a numpy dtype."""
    if isinstance(t, DType):
        return t
    if isinstance(t, str):
        key = t if t.startswith(".") else "." + t
        if key in ALL:
            return ALL[key]
        raise TypeError(f"unknown PTX type {t!r}; known: {', '.join(sorted(k[1:] for k in ALL))}")
    try:
        name = np.dtype(t).name
    except TypeError:
        raise TypeError(f"not a PTX type: {t!r}") from None
    table = {"float32": f32, "float64": f64, "float16": f16, "int32": s32, "uint32": u32, "int64": s64,
             "uint64": u64, "int16": s16, "uint16": u16, "int8": s8, "uint8": u8, "bfloat16": bf16,
             "float8_e4m3fn": e4m3, "float8_e5m2": e5m2, "bool": pred}
    if name in table:
        return table[name]
    raise TypeError(f"numpy dtype {name} has no PTX type")


def same_size_int(t: DType, signed: bool = False) -> DType:
    """The integer type of t's width (u32 for f32)."""
    return ALL[f".{'s' if signed else 'u'}{t.bits}"]


# --------------------------------------------------------------------------- parameter annotations


@dataclass(frozen=True, slots=True)
class Ptr:
    """A pointer parameter: `ptr(f32)`, `ptr(bf16, align=16)`; passed as a .u64 kernel parameter."""

    elem: DType
    space: str = "global"
    align: int | None = None
    typed: bool = True  # launches check array arguments' dtypes against elem

    def __repr__(self) -> str:
        return f"ptr({self.elem!r}, space={self.space!r}{'' if self.typed else ', typed=False'})"


# The numpy / ml_dtypes element type a typed pointer takes (bit types take any element of their width).
HOST_DTYPE = {".f32": "float32", ".f64": "float64", ".f16": "float16", ".bf16": "bfloat16", ".tf32": "float32",
              ".s8": "int8", ".u8": "uint8", ".s16": "int16", ".u16": "uint16", ".s32": "int32", ".u32": "uint32",
              ".s64": "int64", ".u64": "uint64", ".e4m3": "float8_e4m3fn", ".e5m2": "float8_e5m2",
              ".f16x2": "float16", ".bf16x2": "bfloat16", ".e4m3x2": "float8_e4m3fn", ".e5m2x2": "float8_e5m2"}


def ptr(elem: DTypeLike, space: str = "global", align: int | None = None, typed: bool = True) -> Ptr:
    """Annotation for a pointer parameter to `elem` values in `space` (global by default).

    A launch refuses an array whose dtype is not `elem`'s (float64 data for `ptr(f32)`); `typed=False`
    takes any array."""
    if space not in ("global", "shared", "const", "local", "generic"):
        raise ValueError(f"ptr: unknown state space {space!r}")
    if align is not None and (align <= 0 or align & (align - 1)):
        raise ValueError(f"ptr: align must be a power of two, got {align}")
    return Ptr(dtype(elem), space, align, bool(typed))
