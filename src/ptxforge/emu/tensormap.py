"""The emulator's 128-byte tensor map (the value of a CUtensorMap kernel parameter), for TMA copies.

The CUDA driver's CUtensorMap layout is opaque and undocumented; this one is ptxforge's own, read only by
the emulator. A launch on a real GPU must pass a map made by cuTensorMapEncodeTiled (or
cuTensorMapEncodeIm2col) instead.

Layout (little-endian, 128 bytes, unused bytes zero):
  0   u32      magic 0x4D544650 ("PFTM")
  4   u8       version (1)
  5   u8       rank, 1..5
  6   u8       element size in bytes (1, 2, 4 or 8)
  7   u8       swizzle: 0 none, 1 32B, 2 64B, 3 128B
  8   u8       out-of-bounds fill: 0 zero
  9   u8       element type (ELEMENT_TYPES; 0 = not recorded): what cp.reduce.async.bulk.tensor computes in
  10  u8       mode: 0 tiled, 1 im2col
  11  u8[5]    reserved
  16  u64      global address of element (0, ..., 0)
  24  u32[5]   global dims, innermost (dimension 0) first
  48  u64[5]   global strides in bytes; stride[0] is the element size
  88  u16[5]   box dims, each 1..256 (tiled mode; zero in im2col mode)
  98  u8[5]    element strides (traversal strides), each 1..8
  104 u16      im2col: channels per pixel, 1..256
  106 u16      im2col: pixels per column, 1..1024
  108 i16[3]   im2col: the bounding box's lower corner in W, H, D (rank - 2 entries)
  114 i16[3]   im2col: the bounding box's upper corner in W, H, D
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np

if TYPE_CHECKING:
    from collections.abc import Sequence

    import numpy.typing as npt

MAGIC = 0x4D544650
VERSION = 1
SIZE = 128
SWIZZLES = {"none": 0, "32B": 1, "64B": 2, "128B": 3}
SWIZZLE_SPAN = {0: 0, 1: 32, 2: 64, 3: 128}
FILLS = {"zero": 0}
# The element type, as a PTX type name; the code is the CU_TENSOR_MAP_DATA_TYPE_* value plus one.
ELEMENT_TYPES = {".u8": 1, ".u16": 2, ".u32": 3, ".s32": 4, ".u64": 5, ".s64": 6, ".f16": 7, ".f32": 8,
                 ".f64": 9, ".bf16": 10}
_TYPE_NAMES = {v: k for k, v in ELEMENT_TYPES.items()}
_BY_DTYPE = {"float16": ".f16", "bfloat16": ".bf16", "float32": ".f32", "float64": ".f64", "int32": ".s32",
             "uint32": ".u32", "int64": ".s64", "uint64": ".u64"}

_LAYOUT = np.dtype({
    "names": ["magic", "version", "rank", "esize", "swizzle", "fill", "etype", "mode", "gaddr", "dims", "strides",
              "box", "estrides", "cpp", "ppc", "lower", "upper"],
    "formats": ["<u4", "u1", "u1", "u1", "u1", "u1", "u1", "u1", "<u8", ("<u4", 5), ("<u8", 5), ("<u2", 5),
                ("u1", 5), "<u2", "<u2", ("<i2", 3), ("<i2", 3)],
    "offsets": [0, 4, 5, 6, 7, 8, 9, 10, 16, 24, 48, 88, 98, 104, 106, 108, 114],
    "itemsize": SIZE,
})


@dataclass(frozen=True)
class TensorMap:
    """A decoded tensor map; tuples are innermost dimension first and have `rank` entries."""

    address: int
    esize: int
    dims: tuple[int, ...]
    strides: tuple[int, ...]  # bytes, strides[0] == esize
    box: tuple[int, ...]
    estrides: tuple[int, ...]
    swizzle: int = 0  # span in bytes: 0 (none), 32, 64 or 128
    etype: str | None = None  # PTX element type (".f32", ...), None when the map does not record it
    im2col: Im2col | None = None  # the im2col parameters; None for a tiled map

    @property
    def rank(self) -> int:
        return len(self.dims)

    @property
    def box_counts(self) -> tuple[int, ...]:
        """Elements the box holds along each dimension: ceil(box / element stride)."""
        return tuple(-(-b // e) for b, e in zip(self.box, self.estrides, strict=True))

    @property
    def box_bytes(self) -> int:
        if self.im2col is not None:
            return self.im2col.channels * self.im2col.pixels * self.esize
        return int(np.prod(self.box_counts)) * self.esize


@dataclass(frozen=True)
class Im2col:
    """An im2col map's access: `pixels` pixels of `channels` elements each; the filter base moves through the
    bounding box [lower[i], dims[i + 1] - 1 + upper[i]] of each spatial dimension (W, H, D order)."""

    channels: int
    pixels: int
    lower: tuple[int, ...]
    upper: tuple[int, ...]


def element_type(dtype: npt.DTypeLike) -> str:
    """The map's element type for a numpy dtype: its PTX name, or raw bytes (.u8/.u16/...) for the rest."""
    dt = np.dtype(dtype)
    return _BY_DTYPE.get(dt.name) or {1: ".u8", 2: ".u16", 4: ".u32", 8: ".u64"}[dt.itemsize]


def encode(address: int, esize: int, dims: Sequence[int], strides_bytes: Sequence[int], box: Sequence[int],
           estrides: Sequence[int], swizzle: str = "none", oob_fill: str = "zero",
           etype: str | None = None) -> np.ndarray:
    """Check the arguments as cuTensorMapEncodeTiled does and return the map as uint8[128].

    `strides_bytes` has rank - 1 entries (dimensions 1 and up), like the driver's globalStrides.
    `etype` (a key of ELEMENT_TYPES, or None) records the element type for tensor reductions.
    """
    dims = _ints("global_dims", dims)
    rank = len(dims)
    if not 1 <= rank <= 5:
        raise ValueError(f"a tensor map has rank 1..5, got {rank} global dims")
    box = _ints("box_dims", box)
    if len(box) != rank:
        raise ValueError(f"box_dims needs {rank} entries (one per global dim), got {len(box)}")
    for i, b in enumerate(box):
        if not 1 <= b <= 256:
            raise ValueError(f"box_dims[{i}] = {b} is outside 1..256")
    if box[0] * esize % 16:
        raise ValueError(f"box_dims[0] * element size = {box[0] * esize} bytes must be a multiple of 16")
    rec = _record(address, esize, dims, strides_bytes, estrides, swizzle, oob_fill, etype, box[0] * esize)
    rec["box"] = list(box) + [0] * (5 - rank)
    return np.frombuffer(rec.tobytes(), np.uint8).copy()


# The ranges of the im2col bounding-box corners (signed) and offsets by tensor rank, from the PTX ISA.
IM2COL_CORNER_BITS = {3: 16, 4: 8, 5: 5}


def encode_im2col(address: int, esize: int, dims: Sequence[int], strides_bytes: Sequence[int], lower: Sequence[int],
                  upper: Sequence[int], channels: int, pixels: int, estrides: Sequence[int] | None = None,
                  swizzle: str = "none", oob_fill: str = "zero", etype: str | None = None) -> np.ndarray:
    """Check the arguments as cuTensorMapEncodeIm2col does and return an im2col map as uint8[128].

    dims are innermost first (C, W, H[, D], N); lower/upper are the bounding-box corners in W, H[, D]
    (rank - 2 entries); `channels` elements of each of `pixels` pixels make one load.
    """
    dims = _ints("global_dims", dims)
    rank = len(dims)
    if not 3 <= rank <= 5:
        raise ValueError(f"an im2col tensor map has rank 3..5 (C, W, [H, [D,]] N), got {rank} global dims")
    bits = IM2COL_CORNER_BITS[rank]
    for name, corner in (("lower_corner", lower), ("upper_corner", upper)):
        corner = _ints(name, corner)
        if len(corner) != rank - 2:
            raise ValueError(f"{name} needs rank - 2 = {rank - 2} entries (W, H, D order), got {len(corner)}")
        for i, c in enumerate(corner):
            if not -(1 << (bits - 1)) <= c < 1 << (bits - 1):
                raise ValueError(f"{name}[{i}] = {c} is outside the {bits}-bit signed range of a rank-{rank} map")
    if not 1 <= channels <= 256:
        raise ValueError(f"channels_per_pixel = {channels} is outside 1..256")
    if not 1 <= pixels <= 1024:
        raise ValueError(f"pixels_per_column = {pixels} is outside 1..1024")
    if channels * esize % 16:
        raise ValueError(f"channels_per_pixel * element size = {channels * esize} bytes must be a multiple of 16")
    rec = _record(address, esize, dims, strides_bytes, estrides, swizzle, oob_fill, etype, channels * esize)
    rec["mode"], rec["cpp"], rec["ppc"] = 1, channels, pixels
    pad = [0] * (5 - rank)
    rec["lower"], rec["upper"] = list(_ints("", lower)) + pad, list(_ints("", upper)) + pad
    return np.frombuffer(rec.tobytes(), np.uint8).copy()


def _record(address, esize, dims, strides_bytes, estrides, swizzle, oob_fill, etype, inner_bytes):
    """The checks common to both modes; the record with everything but the mode's own fields."""
    rank = len(dims)
    if esize not in (1, 2, 4, 8):
        raise ValueError(f"element size must be 1, 2, 4 or 8 bytes, got {esize}")
    for i, d in enumerate(dims):
        if not 1 <= d <= 2**32:
            raise ValueError(f"global_dims[{i}] = {d} is outside 1..2**32")
    strides = _ints("global_strides_bytes", strides_bytes)
    if len(strides) != rank - 1:
        raise ValueError(f"global_strides_bytes needs rank - 1 = {rank - 1} entries (the byte strides of "
                         f"dimensions 1..{rank - 1}; dimension 0 is contiguous), got {len(strides)}")
    for i, s in enumerate(strides, start=1):
        # 0 is a multiple of 16 to the driver: a size-1 dimension, whose stride is never applied, may have it
        if s < 0 or s == 0 and dims[i] != 1 or s % 16 or s >= 2**40:
            raise ValueError(f"global_strides_bytes[{i - 1}] = {s} (dimension {i}) must be a positive "
                             f"multiple of 16 below 2**40" + (" (0 only for a dimension of size 1)" if s == 0 else ""))
    full = (esize, *strides)
    # no two elements may share bytes: taken by increasing stride (the driver lets the strides come in any
    # order: DeepGEMM maps a [b][h][r] tensor as (r, b, h) for its batched GEMMs), each dimension's stride
    # must clear the span of the one below it; a size-1 dimension never applies its stride
    order = sorted((i for i in range(1, rank) if dims[i] != 1), key=lambda i: full[i])
    for below, i in itertools.pairwise([0, *order]):
        if full[i] < dims[below] * full[below]:
            raise ValueError(f"dimension {i} stride {full[i]} bytes is smaller than dimension {below} "
                             f"spans ({dims[below]} x {full[below]} bytes): rows would overlap")
    est = (1,) * rank if estrides is None else _ints("element_strides", estrides)
    if len(est) != rank:
        raise ValueError(f"element_strides needs {rank} entries, got {len(est)}")
    for i, e in enumerate(est):
        if not 1 <= e <= 8:
            raise ValueError(f"element_strides[{i}] = {e} is outside 1..8")
    if swizzle not in SWIZZLES:
        raise ValueError(f"swizzle must be one of {sorted(SWIZZLES)}, got {swizzle!r}")
    span = SWIZZLE_SPAN[SWIZZLES[swizzle]]
    if span and inner_bytes > span:
        raise ValueError(f"with swizzle {swizzle!r} the inner box (box_dims[0] or channels_per_pixel times the "
                         f"element size = {inner_bytes} bytes) must be at most {span} bytes")
    if oob_fill not in FILLS:
        raise ValueError(f"oob_fill must be one of {sorted(FILLS)}, got {oob_fill!r}")
    if etype is not None and (etype not in ELEMENT_TYPES or int(etype.strip(".fbsu") or 0) // 8 != esize):
        raise ValueError(f"element type {etype!r} does not fit {esize}-byte elements (types: "
                         f"{', '.join(ELEMENT_TYPES)})")
    if not isinstance(address, int | np.integer) or address < 0 or address % 16:
        raise ValueError(f"the global address must be a 16-byte aligned integer, got {address!r}")
    rec = np.zeros((), _LAYOUT)
    rec["magic"], rec["version"], rec["rank"], rec["esize"] = MAGIC, VERSION, rank, esize
    rec["swizzle"], rec["fill"], rec["gaddr"] = SWIZZLES[swizzle], FILLS[oob_fill], int(address)
    rec["etype"] = 0 if etype is None else ELEMENT_TYPES[etype]
    pad = (0,) * (5 - rank)
    rec["dims"] = [d & 0xFFFFFFFF if d < 2**32 else 0 for d in dims] + list(pad)  # 2**32 stored as 0
    rec["strides"] = list(full) + list(pad)
    rec["estrides"] = list(est) + list(pad)
    return rec


def decode(raw: npt.ArrayLike) -> TensorMap:
    """The map in 128 bytes; ValueError when they are not a map made by `encode`."""
    raw = np.ascontiguousarray(raw, np.uint8).reshape(-1)
    if raw.size != SIZE:
        raise ValueError(f"a tensor map is {SIZE} bytes, got {raw.size}")
    rec = raw.view(_LAYOUT)[0]
    if int(rec["magic"]) != MAGIC or int(rec["version"]) != VERSION:
        raise ValueError("not a ptxforge tensor map (no 'PFTM' v1 header): on the emulator, build it with "
                         "ptxforge.runtime.tensor_map(...)")
    r = int(rec["rank"])
    if not 1 <= r <= 5:
        raise ValueError(f"corrupt tensor map: rank {r}")
    dims = tuple(int(d) or 2**32 for d in rec["dims"][:r])
    mode = int(rec["mode"])
    if mode not in (0, 1) or (mode == 1 and r < 3):
        raise ValueError(f"corrupt tensor map: mode {mode} with rank {r}")
    i2c = None if mode == 0 else Im2col(int(rec["cpp"]), int(rec["ppc"]), tuple(int(c) for c in rec["lower"][:r - 2]),
                                        tuple(int(c) for c in rec["upper"][:r - 2]))
    return TensorMap(int(rec["gaddr"]), int(rec["esize"]), dims, tuple(int(s) for s in rec["strides"][:r]),
                     tuple(int(b) for b in rec["box"][:r]), tuple(int(e) for e in rec["estrides"][:r]),
                     SWIZZLE_SPAN.get(int(rec["swizzle"]), 0), _TYPE_NAMES.get(int(rec["etype"])), i2c)


def swizzle_offsets(addr: np.ndarray, span: int) -> np.ndarray:
    """Shared-memory byte addresses after the TMA swizzle of `span` bytes (0 = none): the 16-byte chunk
    index (address bits 4..) is XORed with the 128-byte row index mod span/16 (bits 7..)."""
    if not span:
        return addr
    mask = np.int64(span // 16 - 1)
    return addr ^ (((addr >> 7) & mask) << 4)


def _ints(name: str, seq) -> tuple[int, ...]:
    try:
        vals = tuple(seq)
    except TypeError:
        raise ValueError(f"{name} must be a sequence of integers, got {seq!r}") from None
    for v in vals:
        if isinstance(v, bool) or not isinstance(v, int | np.integer):
            raise ValueError(f"{name} must hold integers, got {v!r}")
    return tuple(int(v) for v in vals)
