"""Device buffers: memory that lives on a device (the emulator or a GPU) between launches.

A device is named as in `Kernel.launch`: "auto" (a GPU when one can be used, else the emulator), "emu",
"cuda", "cuda:N", or a device object. None means the `PTXFORGE_DEVICE` environment variable, else "auto".
"""

from __future__ import annotations

from typing import Any

import numpy as np

from ptxforge import environment
from ptxforge.emu.launch import emu_device
from ptxforge.errors import LaunchError
from ptxforge.runtime.cuda_device import cuda_device
from ptxforge.runtime.cuda_driver import unavailable_reason
from ptxforge.runtime.device import Device


def default_device() -> str:
    """The device a launch or buffer gets when none is named: $PTXFORGE_DEVICE, else "auto"."""
    return environment.device() or "auto"


def resolve_device(device: Any = None) -> Device:
    """The device object for a device name or object; LaunchError for an unknown name, CudaUnavailable
    (a LaunchError saying why) for "cuda" on a machine without a usable GPU."""
    if device is None:
        device = default_device()
    if not isinstance(device, str):
        return device
    if device == "auto":
        device = "emu" if unavailable_reason() is not None else "cuda"
    if device == "emu":
        return emu_device()
    if device == "cuda" or device.startswith("cuda:"):
        ordinal = device.partition(":")[2] or "0"
        if not ordinal.isdigit():
            raise LaunchError(f"unknown device {device!r}; GPUs are named 'cuda' or 'cuda:N'")
        return cuda_device(int(ordinal))
    raise LaunchError(f"unknown device {device!r}; use 'auto', 'emu', 'cuda' or 'cuda:N'")


class DeviceBuffer:
    """A typed array in device memory. Pass it as a pointer argument; read it back with `to_host()`."""

    def __init__(self, shape: Any, dtype: Any, *, device: Any = None, name: str = "buffer") -> None:
        self.device = resolve_device(device)
        self.shape = tuple(np.atleast_1d(np.asarray(shape, dtype=np.int64)).tolist()) \
            if not isinstance(shape, tuple) else shape
        self.dtype = np.dtype(dtype)
        self.nbytes = int(np.prod(self.shape, dtype=np.int64)) * self.dtype.itemsize
        self.allocation = self.device.memory.alloc(self.nbytes, name=name)
        self._freed = False

    @classmethod
    def from_array(cls, array: np.ndarray, *, device: Any = None, name: str = "buffer") -> DeviceBuffer:
        a = np.ascontiguousarray(array)
        buf = cls(a.shape, a.dtype, device=device, name=name)
        buf.device.memory.write(buf.allocation, a)
        return buf

    @property
    def address(self) -> int:
        self._check()
        return self.allocation.base

    def to_host(self) -> np.ndarray:
        self._check()
        raw = self.device.memory.read(self.allocation)
        return raw[: self.nbytes].view(self.dtype).reshape(self.shape)

    def copy_from(self, array: np.ndarray) -> None:
        self._check()
        a = np.ascontiguousarray(array, dtype=self.dtype)
        if a.nbytes != self.nbytes:
            raise ValueError(f"array of {a.nbytes} bytes does not match buffer of {self.nbytes}")
        self.device.memory.write(self.allocation, a)

    def free(self) -> None:
        if not self._freed:
            self.device.memory.free(self.allocation)
            self._freed = True

    def _check(self) -> None:
        if self._freed:
            raise ValueError("use of a freed DeviceBuffer")

    def __repr__(self) -> str:
        return f"DeviceBuffer(shape={self.shape}, dtype={self.dtype}, address={self.allocation.base:#x})"


def to_device(array: np.ndarray, *, device: Any = None) -> DeviceBuffer:
    """Copy a numpy array into a new device buffer."""
    return DeviceBuffer.from_array(array, device=device)


def empty(shape: Any, dtype: Any, *, device: Any = None) -> DeviceBuffer:
    """A zero-filled device buffer."""
    return DeviceBuffer(shape if isinstance(shape, tuple) else (shape,), dtype, device=device)
