"""Tensor maps for a GPU: the driver's own CUtensorMap from cuTensorMapEncodeTiled / cuTensorMapEncodeIm2col.

The arguments are checked by the same rules as the emulator's map first, so a bad map gives the same
message on both devices; then the driver encodes it.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from ptxforge.emu import tensormap as TM
from ptxforge.runtime.cuda_driver import check, driver

_BY_NAME = {"float16": "FLOAT16", "bfloat16": "BFLOAT16", "float32": "FLOAT32", "float64": "FLOAT64",
            "int32": "INT32", "uint32": "UINT32", "int64": "INT64", "uint64": "UINT64"}
_BY_SIZE = {1: "UINT8", 2: "UINT16", 4: "UINT32", 8: "UINT64"}


def data_type_name(dtype: Any) -> str:
    """The CU_TENSOR_MAP_DATA_TYPE_* suffix for a numpy dtype (FP8 and other bytes travel as UINT8)."""
    dt = np.dtype(dtype)
    return _BY_NAME.get(dt.name, _BY_SIZE[dt.itemsize])


def driver_arguments(d: Any, address: int, dtype: Any, global_dims: Any, global_strides_bytes: Any, box_dims: Any,
                     element_strides: Any, swizzle: str, oob_fill: str) -> tuple:
    """The argument tuple of cuTensorMapEncodeTiled, after the emulator's checks of the same values."""
    esize = np.dtype(dtype).itemsize
    tm = TM.decode(TM.encode(int(address), esize, global_dims, global_strides_bytes, box_dims, element_strides,
                             swizzle, oob_fill))
    if oob_fill != "zero":
        raise ValueError("only oob_fill='zero' is supported on a GPU")
    swz = {"none": "NONE", "32B": "32B", "64B": "64B", "128B": "128B"}[swizzle]
    return (getattr(d.CUtensorMapDataType, f"CU_TENSOR_MAP_DATA_TYPE_{data_type_name(dtype)}"), tm.rank,
            int(address), [d.cuuint64_t(x) for x in tm.dims], [d.cuuint64_t(x) for x in tm.strides[1:]],
            [d.cuuint32_t(x) for x in tm.box], [d.cuuint32_t(x) for x in tm.estrides],
            d.CUtensorMapInterleave.CU_TENSOR_MAP_INTERLEAVE_NONE,
            getattr(d.CUtensorMapSwizzle, f"CU_TENSOR_MAP_SWIZZLE_{swz}"),
            d.CUtensorMapL2promotion.CU_TENSOR_MAP_L2_PROMOTION_L2_128B,
            d.CUtensorMapFloatOOBfill.CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE)


def encode_tiled(address: int, dtype: Any, global_dims: Any, global_strides_bytes: Any, box_dims: Any,
                 element_strides: Any = None, swizzle: str = "none", oob_fill: str = "zero") -> np.ndarray:
    """The driver-encoded tensor map as numpy uint8[128], to pass as a `.param .b8 [128]` argument."""
    d = driver()
    tmap = check(d.cuTensorMapEncodeTiled(*driver_arguments(d, address, dtype, global_dims, global_strides_bytes,
                                                            box_dims, element_strides, swizzle, oob_fill)),
                 "cuTensorMapEncodeTiled")
    return np.array([int(x) for x in tmap.opaque], np.uint64).view(np.uint8).copy()


def driver_arguments_im2col(d: Any, address: int, dtype: Any, global_dims: Any, global_strides_bytes: Any,
                            lower_corner: Any, upper_corner: Any, channels_per_pixel: int, pixels_per_column: int,
                            element_strides: Any, swizzle: str, oob_fill: str) -> tuple:
    """The argument tuple of cuTensorMapEncodeIm2col, after the emulator's checks of the same values.
    The corners go innermost first (W, H, D), like the dims."""
    esize = np.dtype(dtype).itemsize
    tm = TM.decode(TM.encode_im2col(int(address), esize, global_dims, global_strides_bytes, lower_corner,
                                    upper_corner, channels_per_pixel, pixels_per_column, element_strides, swizzle,
                                    oob_fill))
    if oob_fill != "zero":
        raise ValueError("only oob_fill='zero' is supported on a GPU")
    swz = {"none": "NONE", "32B": "32B", "64B": "64B", "128B": "128B"}[swizzle]
    im = tm.im2col
    assert im is not None  # an im2col map
    return (getattr(d.CUtensorMapDataType, f"CU_TENSOR_MAP_DATA_TYPE_{data_type_name(dtype)}"), tm.rank,
            int(address), [d.cuuint64_t(x) for x in tm.dims], [d.cuuint64_t(x) for x in tm.strides[1:]],
            list(im.lower), list(im.upper), im.channels, im.pixels,
            [d.cuuint32_t(x) for x in tm.estrides], d.CUtensorMapInterleave.CU_TENSOR_MAP_INTERLEAVE_NONE,
            getattr(d.CUtensorMapSwizzle, f"CU_TENSOR_MAP_SWIZZLE_{swz}"),
            d.CUtensorMapL2promotion.CU_TENSOR_MAP_L2_PROMOTION_L2_128B,
            d.CUtensorMapFloatOOBfill.CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE)


def encode_im2col(address: int, dtype: Any, global_dims: Any, global_strides_bytes: Any, lower_corner: Any,
                  upper_corner: Any, channels_per_pixel: int, pixels_per_column: int, element_strides: Any = None,
                  swizzle: str = "none", oob_fill: str = "zero") -> np.ndarray:
    """The driver-encoded im2col tensor map as numpy uint8[128]."""
    d = driver()
    tmap = check(d.cuTensorMapEncodeIm2col(*driver_arguments_im2col(
        d, address, dtype, global_dims, global_strides_bytes, lower_corner, upper_corner, channels_per_pixel,
        pixels_per_column, element_strides, swizzle, oob_fill)), "cuTensorMapEncodeIm2col")
    return np.array([int(x) for x in tmap.opaque], np.uint64).view(np.uint8).copy()
