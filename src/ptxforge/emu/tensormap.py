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
  8   u8       out-of-bounds fill: 0 zero, 1 NaN (floating-point types only)
  9   u8       element type (ELEMENT_TYPES; 0 = not recorded): what cp.reduce.async.bulk.tensor computes in
  10  u8       mode: 0 tiled, 1 im2col
  11  u8       interleave layout: 0 none, 1 16B, 2 32B (only 0 is modelled; the PTX .interleave_layout codes)
  12  u8       swizzle atomicity: 0 16B, 1 32B, 2 32B + 8B flip, 3 64B (only 0 is modelled; the PTX codes)
  13  u8[3]    reserved
  16  u64      global address of element (0, ..., 0)
  24  u32[5]   global dims, innermost (dimension 0) first
  48  u64[5]   global strides in bytes; stride[0] is the element size
  88  u16[5]   box dims, each 1..256 (tiled mode; zero in im2col mode)
  98  u8[5]    element strides (traversal strides), each 1..8
  104 u16      im2col: channels per pixel, 1..256
  106 u16      im2col: pixels per column, 1..1024
  108 i16[3]   im2col: the bounding box's lower corner in W, H, D (rank - 2 entries)
  114 i16[3]   im2col: the bounding box's upper corner in W, H, D

A map edited on the device (tensormap.replace, `replace` below) is checked by the host builder's rules when
it is read (`decode`), so a bad combination fails at its use with the message `encode` would give.
"""

from __future__ import annotations

import functools
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
FILLS = {"zero": 0, "nan": 1}
# The element type, as a PTX type name; the code is the CU_TENSOR_MAP_DATA_TYPE_* value plus one.
ELEMENT_TYPES = {".u8": 1, ".u16": 2, ".u32": 3, ".s32": 4, ".u64": 5, ".s64": 6, ".f16": 7, ".f32": 8,
                 ".f64": 9, ".bf16": 10, ".f32.ftz": 11, ".tf32": 12, ".tf32.ftz": 13}
ELEMENT_SIZES = {".u8": 1, ".u16": 2, ".u32": 4, ".s32": 4, ".u64": 8, ".s64": 8, ".f16": 2, ".f32": 4,
                 ".f64": 8, ".bf16": 2, ".f32.ftz": 4, ".tf32": 4, ".tf32.ftz": 4}
FLOAT_TYPES = frozenset((".f16", ".f32", ".f64", ".bf16", ".f32.ftz", ".tf32", ".tf32.ftz"))
_TYPE_NAMES = {v: k for k, v in ELEMENT_TYPES.items()}
_SWIZZLE_NAMES = {v: k for k, v in SWIZZLES.items()}
_FILL_NAMES = {v: k for k, v in FILLS.items()}
_BY_DTYPE = {"float16": ".f16", "bfloat16": ".bf16", "float32": ".f32", "float64": ".f64", "int32": ".s32",
             "uint32": ".u32", "int64": ".s64", "uint64": ".u64"}

_LAYOUT = np.dtype({
    "names": ["magic", "version", "rank", "esize", "swizzle", "fill", "etype", "mode", "interleave", "atomicity",
              "gaddr", "dims", "strides", "box", "estrides", "cpp", "ppc", "lower", "upper"],
    "formats": ["<u4", "u1", "u1", "u1", "u1", "u1", "u1", "u1", "u1", "u1", "<u8", ("<u4", 5), ("<u8", 5),
                ("<u2", 5), ("u1", 5), "<u2", "<u2", ("<i2", 3), ("<i2", 3)],
    "offsets": [0, 4, 5, 6, 7, 8, 9, 10, 11, 12, 16, 24, 48, 88, 98, 104, 106, 108, 114],
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
    fill: str = "zero"  # elements outside the tensor read as zero, or "nan" (a floating-point NaN)

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
    if etype is not None and ELEMENT_SIZES.get(etype) != esize:
        raise ValueError(f"element type {etype!r} does not fit {esize}-byte elements (types: "
                         f"{', '.join(ELEMENT_TYPES)})")
    if oob_fill == "nan" and etype not in FLOAT_TYPES:
        raise ValueError(f"oob_fill 'nan' needs a floating-point element type, not {etype or 'an unrecorded type'}"
                         f" (as cuTensorMapEncodeTiled's CU_TENSOR_MAP_FLOAT_OOB_FILL_NAN_REQUEST_ZERO_FMA)")
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
    """The map in 128 bytes; ValueError when they are not a ptxforge map, or one `encode` (or `encode_im2col`)
    would refuse: a map edited on the device is held to the host builder's rules when it is used."""
    raw = np.ascontiguousarray(raw, np.uint8).reshape(-1)
    if raw.size != SIZE:
        raise ValueError(f"a tensor map is {SIZE} bytes, got {raw.size}")
    return _decode(raw.tobytes())


@functools.lru_cache(maxsize=512)
def _decode(raw: bytes) -> TensorMap:
    rec = _header(np.frombuffer(raw, np.uint8))
    r = int(rec["rank"])
    if not 1 <= r <= 5:
        raise ValueError(f"rank {r} is outside 1..5" + (" (tensormap.replace.rank takes rank - 1)" if r > 5 else ""))
    mode = int(rec["mode"])
    if mode not in (0, 1) or (mode == 1 and r < 3):
        raise ValueError(f"corrupt tensor map: mode {mode} with rank {r}")
    interleave, atomicity = int(rec["interleave"]), int(rec["atomicity"])
    if interleave:
        raise ValueError(f"interleave layout {INTERLEAVE_NAMES.get(interleave, interleave)} is not modelled by "
                         f"the emulator (only 'none')")
    if atomicity:
        raise ValueError(f"swizzle atomicity {ATOMICITY_NAMES.get(atomicity, atomicity)} is not modelled by the "
                         f"emulator (only 16B)")
    swz, fill, code = int(rec["swizzle"]), int(rec["fill"]), int(rec["etype"])
    if swz not in _SWIZZLE_NAMES:
        raise ValueError(f"swizzle mode {swz}" + (" (96B, sm_103a) is not modelled by the emulator" if swz == 4
                                                  else " is not one of 0..3"))
    if fill not in _FILL_NAMES:
        raise ValueError(f"out-of-bounds fill {fill} is not 0 (zero) or 1 (NaN)")
    if code and code not in _TYPE_NAMES:
        raise ValueError(f"corrupt tensor map: element type code {code}")
    esize, etype = int(rec["esize"]), _TYPE_NAMES.get(code)
    dims = tuple(int(d) or 2**32 for d in rec["dims"][:r])
    strides = (esize, *(int(s) for s in rec["strides"][1:r]))  # dimension 0 is contiguous
    box = tuple(int(b) for b in rec["box"][:r])
    est = tuple(int(e) for e in rec["estrides"][:r])
    swizzle, oob = _SWIZZLE_NAMES[swz], _FILL_NAMES[fill]
    addr = int(rec["gaddr"])
    i2c = None
    if mode == 0:
        encode(addr, esize, dims, strides[1:], box, est, swizzle, oob, etype)  # the host's checks
    else:
        i2c = Im2col(int(rec["cpp"]), int(rec["ppc"]), tuple(int(c) for c in rec["lower"][:r - 2]),
                     tuple(int(c) for c in rec["upper"][:r - 2]))
        encode_im2col(addr, esize, dims, strides[1:], i2c.lower, i2c.upper, i2c.channels, i2c.pixels, est,
                      swizzle, oob, etype)
    return TensorMap(addr, esize, dims, strides, box, est, SWIZZLE_SPAN[swz], etype, i2c, oob)


def _header(raw: np.ndarray) -> np.void:
    rec = raw.view(_LAYOUT)[0]
    if int(rec["magic"]) != MAGIC or int(rec["version"]) != VERSION:
        raise ValueError("not a ptxforge tensor map (no 'PFTM' v1 header): on the emulator, build it with "
                         "ptxforge.runtime.tensor_map(...)")
    return rec


# tensormap.replace: the PTX ISA's codes of the immediate new_val of .elemtype (its Table "Tensormap new_val
# validity"; they are not the driver's CUtensorMapDataType values). 13..15 are sub-byte packed types (sm_100a on).
REPLACE_ELEMTYPES = (".u8", ".u16", ".u32", ".s32", ".u64", ".s64", ".f16", ".f32", ".f32.ftz", ".f64", ".bf16",
                     ".tf32", ".tf32.ftz")
PACKED_ELEMTYPES = {13: ".b4x16", 14: ".b4x16_p64", 15: ".b6x16_p32"}
INTERLEAVE_NAMES = {0: "none", 1: "16B", 2: "32B"}  # .interleave_layout codes
ATOMICITY_NAMES = {0: "16B", 1: "32B", 2: "32B + 8B flip", 3: "64B"}  # .swizzle_atomicity codes
SWIZZLE_MODES = {0: "none", 1: "32B", 2: "64B", 3: "128B", 4: "96B"}  # .swizzle_mode codes
FILL_MODES = {0: "zero", 1: "nan"}  # .fill_mode codes
ORDINAL_FIELDS = ("box_dim", "global_dim", "global_stride", "element_stride")


def replace(raw: npt.ArrayLike, field: str, ordinal: int, value: int) -> np.ndarray:
    """tensormap.replace.tile.<field> on the 128 bytes of a ptxforge map: the edited bytes (uint8[128]).

    `value` is new_val as PTX gives it (.rank: rank - 1; .elemtype, .swizzle_mode, ...: the PTX ISA's codes).
    Only the value itself is checked here (its range, the ordinal); how it combines with the other fields is
    checked when the map is used (`decode`), since a kernel edits one field at a time. ValueError when the
    bytes are no tiled ptxforge map or the value can never be valid."""
    out = np.array(np.ascontiguousarray(raw, np.uint8).reshape(-1))
    if out.size != SIZE:
        raise ValueError(f"a tensor map is {SIZE} bytes, got {out.size}")
    rec = _header(out).copy()
    if int(rec["mode"]) != 0:
        raise ValueError("the map is an im2col map; tensormap.replace edits .tile maps")
    limit = 4 if field == "global_stride" else 5  # global_stride ord i: dimension i + 1's stride
    if field in ORDINAL_FIELDS and not 0 <= ordinal < limit:
        what = " (the byte stride of dimension ord + 1, as cuTensorMapEncodeTiled's globalStrides[ord])" \
            if field == "global_stride" else ""
        raise ValueError(f"ord {ordinal} is outside 0..{limit - 1}{what}")

    def bad(rule: str) -> ValueError:
        return ValueError(f"new_val {value} {rule}")

    if field == "global_address":
        if value % 16:
            raise bad("is not 16-byte aligned")
        rec["gaddr"] = value
    elif field == "rank":
        if not 0 <= value <= 4:
            raise bad("is outside 0..4 (the field holds rank - 1, for ranks 1..5)")
        rec["rank"] = value + 1
    elif field == "box_dim":
        if not 1 <= value <= 256:
            raise bad("is outside 1..256")
        rec["box"][ordinal] = value
    elif field == "global_dim":
        if not 1 <= value < 2**32:
            raise bad("is outside 1..2**32 - 1")
        rec["dims"][ordinal] = value
    elif field == "global_stride":
        if value % 16 or value >= 2**40:
            raise bad("is not a multiple of 16 below 2**40")
        rec["strides"][ordinal + 1] = value
    elif field == "element_stride":
        if not 1 <= value <= 8:
            raise bad("is outside 1..8")
        rec["estrides"][ordinal] = value
    elif field == "elemtype":
        if value in PACKED_ELEMTYPES:
            raise bad(f"({PACKED_ELEMTYPES[value]}, a packed sub-byte type) is not modelled by the emulator")
        if not 0 <= value < len(REPLACE_ELEMTYPES):
            raise bad(f"is no element type code (0..{len(REPLACE_ELEMTYPES) - 1}: "
                      f"{', '.join(REPLACE_ELEMTYPES)})")
        etype = REPLACE_ELEMTYPES[value]
        rec["etype"], rec["esize"] = ELEMENT_TYPES[etype], ELEMENT_SIZES[etype]
        rec["strides"][0] = ELEMENT_SIZES[etype]
    else:
        codes, key = {"interleave_layout": (INTERLEAVE_NAMES, "interleave"),
                      "swizzle_mode": (SWIZZLE_MODES, "swizzle"), "swizzle_atomicity": (ATOMICITY_NAMES, "atomicity"),
                      "fill_mode": (FILL_MODES, "fill")}[field]
        if value not in codes:
            raise bad(f"is not one of {', '.join(f'{k} ({v})' for k, v in codes.items())}")
        rec[key] = value
    return np.frombuffer(rec.tobytes(), np.uint8).copy()


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
