"""`tensor_map(...)` and `tensor_map_im2col(...)`: the 128-byte CUtensorMap argument of a TMA kernel, for
either device.

For a buffer on a GPU the driver encodes the map (cuTensorMapEncodeTiled / cuTensorMapEncodeIm2col). For
the emulator the bytes follow ptxforge's own documented layout (`ptxforge.emu.tensormap`), which only the
emulator reads: the driver's layout is opaque. Both are checked by the same rules first. Pass the result as the kernel
argument of a `.param .align 64 .b8 name[128]` parameter (a `const __grid_constant__ CUtensorMap`).
"""

from __future__ import annotations

from typing import Any

import numpy as np

from ptxforge.emu import tensormap as TM
from ptxforge.runtime.buffers import DeviceBuffer
from ptxforge.runtime.cuda_tensor_map import encode_im2col, encode_tiled
from ptxforge.runtime.device import is_emulated


def tensor_map(buffer_or_array_address: Any, dtype: Any, global_dims: Any, global_strides_bytes: Any, box_dims: Any,
               element_strides: Any = None, swizzle: str = "none", oob_fill: str = "zero") -> np.ndarray:
    """A tiled tensor map over device memory, as numpy uint8[128].

    buffer_or_array_address: a `DeviceBuffer` (the tensor must lie inside it; a buffer on a GPU gets the
    driver's encoding) or an emulator device address (int).
    dtype: the element type (1, 2, 4 or 8 bytes); the map records it (float16/bfloat16/float32/float64,
    int32/uint32/int64/uint64; other dtypes as raw bytes) for cp.reduce.async.bulk.tensor.
    All sequences are innermost dimension first, as in
    cuTensorMapEncodeTiled: global_dims (rank 1..5), global_strides_bytes (rank - 1 byte strides of
    dimensions 1 and up, multiples of 16), box_dims (each 1..256, box_dims[0] * itemsize a multiple of
    16), element_strides (each 1..8, default all 1). swizzle: "none", "32B", "64B" or "128B".
    oob_fill: "zero" (elements outside the tensor read as zero), or on the emulator "nan" (floating-point
    types: they read as NaN). Bad arguments raise ValueError.
    """
    buf, address = _memory(buffer_or_array_address, "tensor_map")
    raw = TM.encode(address, np.dtype(dtype).itemsize, global_dims, global_strides_bytes, box_dims,
                    element_strides, swizzle, oob_fill, TM.element_type(dtype))
    if buf is not None and _on_gpu(buf, raw):
        return encode_tiled(address, dtype, global_dims, global_strides_bytes, box_dims, element_strides,
                            swizzle, oob_fill)
    return raw


def tensor_map_im2col(buffer_or_array_address: Any, dtype: Any, global_dims: Any, global_strides_bytes: Any,
                      lower_corner: Any, upper_corner: Any, channels_per_pixel: int, pixels_per_column: int,
                      element_strides: Any = None, swizzle: str = "none", oob_fill: str = "zero") -> np.ndarray:
    """An im2col tensor map (for cp.async.bulk.tensor ... .im2col) over an NWC / NHWC / NDHWC tensor.

    global_dims and global_strides_bytes are innermost first, (C, W[, H[, D]], N), as in
    cuTensorMapEncodeIm2col. lower_corner / upper_corner (rank - 2 entries, W first) bound the filter base:
    along each spatial dimension it runs over [lower, dim - 1 + upper] (for a 3x3 convolution with padding
    1: lower -1, upper -1). One load reads pixels_per_column (1..1024) pixels of channels_per_pixel (1..256)
    elements. element_strides are the traversal strides along W, H, D (the C and N entries are ignored).
    Bad arguments raise ValueError.
    """
    buf, address = _memory(buffer_or_array_address, "tensor_map_im2col")
    raw = TM.encode_im2col(address, np.dtype(dtype).itemsize, global_dims, global_strides_bytes, lower_corner,
                           upper_corner, channels_per_pixel, pixels_per_column, element_strides, swizzle, oob_fill,
                           TM.element_type(dtype))
    if buf is not None and _on_gpu(buf, raw):
        return encode_im2col(address, dtype, global_dims, global_strides_bytes, lower_corner, upper_corner,
                             channels_per_pixel, pixels_per_column, element_strides, swizzle, oob_fill)
    return raw


def _memory(buffer_or_array_address, what: str) -> tuple[DeviceBuffer | None, int]:
    if isinstance(buffer_or_array_address, np.ndarray):
        raise ValueError(f"{what} needs device memory: pass a DeviceBuffer (ptxforge.runtime.to_device(a)) "
                         "or a device address, not a host numpy array")
    buf = buffer_or_array_address if isinstance(buffer_or_array_address, DeviceBuffer) else None
    address = buf.address if buf is not None else buffer_or_array_address
    if isinstance(address, bool) or not isinstance(address, int | np.integer):
        raise ValueError(f"expected a DeviceBuffer or an integer address, got {type(buffer_or_array_address).__name__}")
    return buf, int(address)


def _on_gpu(buf: DeviceBuffer, raw: np.ndarray) -> bool:
    """Check that the tensor of map `raw` lies inside `buf`; whether `buf` is GPU memory."""
    tm = TM.decode(raw)
    span = sum((d - 1) * s for d, s in zip(tm.dims, tm.strides, strict=True)) + tm.esize
    if span > buf.nbytes:
        raise ValueError(f"the tensor spans {span} bytes but the buffer holds {buf.nbytes}: check "
                         f"global_dims {tuple(tm.dims)} and strides {tuple(tm.strides)} (bytes)")
    return not is_emulated(buf.device)
