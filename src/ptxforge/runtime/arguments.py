"""Pointer arguments: what a kernel's pointer parameter accepts, and how each kind reaches the device.

A pointer argument is one of
- None (a null pointer) or a `DeviceBuffer`;
- a host array: a numpy array, a CPU torch tensor (bf16/fp8 included, as ml_dtypes views of the same
  memory), an object with `__array_interface__`/`__array__` or a CPU `__dlpack__`: copied to the device
  before the launch and back after it when writable;
- device memory: a CUDA torch tensor, an object with `__cuda_array_interface__` or a CUDA `__dlpack__`:
  passed by address (zero copy) on the GPU that holds it; a CUDA torch tensor on the emulator is copied
  there and back;
- an integer address, only when it points into a live allocation of the launch's device.
Anything else is an error naming the parameter. `is_live_address` is the one test for "this address is
memory of that device"; a device answers it with its `owns_address` method.
"""

from __future__ import annotations

import ctypes
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import ml_dtypes
import numpy as np

from ptxforge import _optional
from ptxforge.emu.errors import LaunchError

if TYPE_CHECKING:
    from ptxforge.runtime.device import Device

_NARROW_TORCH = {"bfloat16": ("int16", "bfloat16"), "float8_e4m3fn": ("uint8", "float8_e4m3fn"),
                 "float8_e5m2": ("uint8", "float8_e5m2"), "float8_e4m3fnuz": ("uint8", "float8_e4m3fnuz"),
                 "float8_e5m2fnuz": ("uint8", "float8_e5m2fnuz")}


@dataclass
class HostArray:
    """Host memory to copy in (and back when `writeback`); `after` runs once the copy back is done."""

    array: np.ndarray
    writeback: bool
    kind: str  # what it was, for messages: "numpy array", "torch tensor", ...
    after: object = None

    @property
    def dtype_name(self) -> str:
        return self.array.dtype.name


@dataclass
class DevicePointer:
    """Memory already on a GPU: its address, the GPU ordinal when known, its element type."""

    address: int
    ordinal: int | None
    dtype_name: str | None
    kind: str
    owner: object = None  # kept alive until the launch returns


def is_live_address(device: Device, address: int) -> bool:
    """Whether `address` lies inside a live allocation of `device` or of a GPU of its node (a peer whose
    access is disabled included: the kernel's access to it is then a fault naming both GPUs); see
    `Device.owns_address`."""
    return device.owns_address(int(address))


def is_array_like(a: Any) -> bool:
    """Whether `a` is something `pointer_argument` takes as memory (not an integer address)."""
    if isinstance(a, np.generic | int | float | complex | str | bytes | bytearray | memoryview):
        return False  # numpy scalars have __array_interface__ too; they are scalar arguments
    return isinstance(a, np.ndarray) or _is_torch_tensor(a) or any(
        hasattr(a, n) for n in ("__cuda_array_interface__", "__dlpack__", "__array_interface__", "__array__"))


def pointer_argument(a: Any, where: str) -> HostArray | DevicePointer:
    """A HostArray or DevicePointer for an array-like argument; LaunchError naming `where` otherwise."""
    if isinstance(a, np.ndarray):
        if a.dtype == object:
            raise LaunchError(f"{where}: object arrays cannot be copied to the device")
        return HostArray(a, bool(a.flags.writeable), "numpy array")
    if _is_torch_tensor(a):
        return _torch_argument(a, where)
    cai = getattr(a, "__cuda_array_interface__", None)
    if cai is not None:
        ptr = int(cai["data"][0])
        return DevicePointer(ptr, None, np.dtype(cai["typestr"]).name, type(a).__name__, a)
    if hasattr(a, "__dlpack__") and hasattr(a, "__dlpack_device__"):
        dev_type, dev_id = a.__dlpack_device__()
        if int(dev_type) == 1:  # kDLCPU
            arr = np.from_dlpack(a)
            return HostArray(arr, bool(arr.flags.writeable), f"{type(a).__name__} (DLPack)")
        if int(dev_type) in (2, 13):  # kDLCUDA, kDLCUDAManaged
            address, name = dlpack_address(a)
            return DevicePointer(address, int(dev_id), name, f"{type(a).__name__} (DLPack)", a)
        raise LaunchError(f"{where}: a DLPack tensor on device type {int(dev_type)} cannot be used; pass host "
                          f"or CUDA memory")
    if hasattr(a, "__array_interface__") or hasattr(a, "__array__"):
        try:
            arr = np.asarray(a)
        except Exception as e:  # a user's __array__ that raises
            raise LaunchError(f"{where}: {type(a).__name__}.__array__ failed: {e}") from None
        if arr.dtype == object:
            raise LaunchError(f"{where}: {type(a).__name__} converts to an object array, which cannot be copied")
        # __array_interface__ shares the object's memory, so results can be written back; a bare __array__
        # may return a copy, so such an object is an input only
        shares = hasattr(a, "__array_interface__")
        return HostArray(arr, bool(arr.flags.writeable) and shares, type(a).__name__)
    raise LaunchError(f"{where}: expected an array, tensor, DeviceBuffer, None or a device address, "
                      f"got {type(a).__name__}")


def _is_torch_tensor(a) -> bool:
    t = type(a)
    return t.__module__.startswith("torch") and any(c.__name__ == "Tensor" for c in t.__mro__)


def torch_dtype_name(dtype: Any) -> str:
    """'torch.bfloat16' -> 'bfloat16' (the numpy / ml_dtypes name)."""
    name = str(dtype).removeprefix("torch.")
    return {"float": "float32", "double": "float64", "half": "float16", "long": "int64", "int": "int32",
            "short": "int16"}.get(name, name)


def _torch_host_view(t) -> np.ndarray:
    """A numpy array sharing `t`'s (CPU) memory; bf16/fp8 through an integer view of the same bytes."""
    t = t.detach()
    name = torch_dtype_name(t.dtype)
    if name in _NARROW_TORCH:
        torch = _optional.torch()  # `t` is a tensor: torch is loaded already
        as_int, ml = _NARROW_TORCH[name]
        return t.view(getattr(torch, as_int)).numpy().view(getattr(ml_dtypes, ml))
    return t.numpy()


def _torch_argument(t, where: str):
    name = torch_dtype_name(t.dtype)
    try:
        if t.device.type == "cpu":
            return HostArray(_torch_host_view(t), True, "torch tensor")
        if t.device.type == "cuda":
            return DevicePointer(int(t.data_ptr()), t.device.index, name, "torch tensor", t)
    except (TypeError, RuntimeError) as e:  # dtypes numpy cannot view (complex32, quantized, ...)
        raise LaunchError(f"{where}: a torch tensor of dtype {t.dtype} cannot be passed: {e}") from None
    raise LaunchError(f"{where}: a torch tensor on {t.device} cannot be used; pass a CPU or CUDA tensor")


def torch_copy_to_host(p: DevicePointer) -> HostArray:
    """A CUDA torch tensor as a host copy that is written back into the tensor after the launch."""
    t: Any = p.owner  # the torch tensor
    host = t.detach().cpu()

    def back():
        t.data.copy_(host)
    return HostArray(_torch_host_view(host), True, "torch tensor (copied from the GPU)", back)


# --------------------------------------------------------------------------- DLPack without a framework

class _DLDevice(ctypes.Structure):
    _fields_ = [("device_type", ctypes.c_int32), ("device_id", ctypes.c_int32)]


class _DLDataType(ctypes.Structure):
    _fields_ = [("code", ctypes.c_uint8), ("bits", ctypes.c_uint8), ("lanes", ctypes.c_uint16)]


class _DLTensor(ctypes.Structure):
    _fields_ = [("data", ctypes.c_void_p), ("device", _DLDevice), ("ndim", ctypes.c_int32),
                ("dtype", _DLDataType), ("shape", ctypes.POINTER(ctypes.c_int64)),
                ("strides", ctypes.POINTER(ctypes.c_int64)), ("byte_offset", ctypes.c_uint64)]


_DL_CODES = {0: "int", 1: "uint", 2: "float", 4: "bfloat", 6: "bool"}


def dlpack_address(obj: Any) -> tuple[int, str | None]:
    """(device address of the first element, element type name) of a DLPack producer, read from the
    capsule's DLTensor (the legacy `dltensor` capsule: DLManagedTensor starts with its DLTensor)."""
    capsule = obj.__dlpack__()
    get = ctypes.pythonapi.PyCapsule_GetPointer
    get.restype, get.argtypes = ctypes.c_void_p, [ctypes.py_object, ctypes.c_char_p]
    ptr = get(capsule, b"dltensor")
    tensor = _DLTensor.from_address(ptr)
    code, bits = tensor.dtype.code, tensor.dtype.bits
    name = {"bfloat": "bfloat16", "bool": "bool"}.get(_DL_CODES.get(code, ""), f"{_DL_CODES.get(code, '?')}{bits}")
    address = int(tensor.data or 0) + int(tensor.byte_offset)
    # the capsule is unconsumed: its destructor (the producer's deleter) frees the DLManagedTensor
    return address, name
