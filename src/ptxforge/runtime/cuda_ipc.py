"""CUDA IPC on a `CudaDevice`: the same three calls, names and shapes as `ptxforge.emu.ipc`'s.

    h = ipc_get_mem_handle(buf)                 # on the owner: a picklable CudaIpcHandle (cuIpcGetMemHandle)
    dist.all_gather_object(handles, h)          # any channel between the processes
    ptr = ipc_open_mem_handle(handles[peer], device=dev)   # an int device address (cuIpcOpenMemHandle)
    kernel.launch(..., [ptr, ...], device=dev)  # accepted as a pointer argument on `dev`
    ipc_close_mem_handle(ptr, device=dev)       # before the owner frees the buffer (cuIpcCloseMemHandle)

Processes on one GPU (the same ordinal) may open each other's handles: CUDA IPC only refuses opening a
handle in the process that made it. Peers on other GPUs are mapped with CU_IPC_MEM_LAZY_ENABLE_PEER_ACCESS.
The opened ranges are recorded on the device (`CudaDevice.ipc_opened`), so `owns_address` accepts them.
"""

from __future__ import annotations

import ctypes
import os
from dataclasses import dataclass
from typing import Any

from ptxforge.errors import LaunchError
from ptxforge.runtime.cuda_driver import check, driver
from ptxforge.runtime.device import Device

HANDLE_BYTES = 64  # CU_IPC_HANDLE_SIZE


class CudaIpcError(LaunchError):
    """A CUDA IPC handle used where it cannot be (its own process, a wrong device, a closed address)."""


@dataclass(frozen=True)
class CudaIpcHandle:
    """One cuMemAlloc allocation of process `pid` on GPU `ordinal`: picklable (the driver's 64 bytes)."""

    raw: bytes  # the CUipcMemHandle's bytes
    nbytes: int
    pid: int  # the owner's process
    ordinal: int  # the owner's GPU, as that process numbers it
    address: int  # the allocation's address in the owner's process (opened pointers may differ)
    name: str = ""

    def __post_init__(self) -> None:
        if len(self.raw) != HANDLE_BYTES:
            raise CudaIpcError(f"a CUDA IPC handle has {HANDLE_BYTES} bytes, not {len(self.raw)}")

    def __repr__(self) -> str:
        return (f"CudaIpcHandle({self.name or 'allocation'} of process {self.pid} on GPU {self.ordinal}, "
                f"{self.nbytes} bytes)")


def handle_bytes(h: Any) -> bytes:
    """The 64 bytes of a cuda-bindings CUipcMemHandle."""
    return ctypes.string_at(int(h.getPtr()), HANDLE_BYTES)


def handle_from_bytes(raw: bytes) -> Any:
    """A cuda-bindings CUipcMemHandle holding `raw` (the inverse of `handle_bytes`)."""
    from cuda.bindings import driver as d  # optional dependency: the `cuda` extra

    if len(raw) != HANDLE_BYTES:
        raise CudaIpcError(f"a CUDA IPC handle has {HANDLE_BYTES} bytes, not {len(raw)}")
    h = d.CUipcMemHandle()
    ctypes.memmove(int(h.getPtr()), raw, HANDLE_BYTES)
    return h


def _cuda(device: Any, what: str) -> Any:
    if not isinstance(device, Device) or device.kind != "cuda":  # any object may come: check it is a GPU
        raise CudaIpcError(f"{what} needs a CUDA device (ptxforge.runtime.cuda_device.cuda_device()), "
                           f"not {device!r}")
    return device


def ipc_get_mem_handle(buf: Any, device: Any = None) -> CudaIpcHandle:
    """A handle to the allocation `buf` (a DeviceBuffer on a CUDA device, or its base address on `device`)."""
    address = int(getattr(buf, "address", buf))
    dev = _cuda(getattr(buf, "device", device), "ipc_get_mem_handle")
    alloc = getattr(buf, "allocation", None)
    nbytes = int(getattr(alloc, "size", getattr(buf, "nbytes", 0)))
    dev.make_current()
    h = check(driver().cuIpcGetMemHandle(getattr(alloc, "handle", address)), "cuIpcGetMemHandle",
              f"({getattr(buf, 'name', '') or f'{address:#x}'} on {dev.description})")
    return CudaIpcHandle(handle_bytes(h), nbytes, os.getpid(), int(dev.ordinal), address,
                         str(getattr(buf, "name", "") or ""))


def ipc_open_mem_handle(handle: CudaIpcHandle, device: Any) -> int:
    """Map the peer allocation `handle` names into `device`'s context; its device address here. Opening a
    handle twice returns the same address (the driver counts the opens; close each)."""
    if not isinstance(handle, CudaIpcHandle):
        raise CudaIpcError(f"ipc_open_mem_handle takes a CudaIpcHandle, not {type(handle).__name__}")
    if handle.pid == os.getpid():
        raise CudaIpcError(f"ipc_open_mem_handle: {handle!r} was made in this process; use the buffer's "
                           f"address ({handle.address:#x}) directly")
    dev = _cuda(device, "ipc_open_mem_handle")
    d = driver()
    dev.make_current()
    ptr = check(d.cuIpcOpenMemHandle(handle_from_bytes(handle.raw),
                                     int(d.CUipcMem_flags.CU_IPC_MEM_LAZY_ENABLE_PEER_ACCESS)),
                "cuIpcOpenMemHandle", f"({handle!r} on {dev.description})")
    address = int(ptr)
    nbytes, count = dev.ipc_opened.get(address, (handle.nbytes, 0))
    dev.ipc_opened[address] = (nbytes, count + 1)
    return address


def ipc_close_mem_handle(handle: Any, device: Any) -> None:
    """Close one open of a peer allocation, by the address `ipc_open_mem_handle` returned."""
    dev = _cuda(device, "ipc_close_mem_handle")
    address = int(handle)
    hit = dev.ipc_opened.get(address)
    if hit is None:
        raise CudaIpcError(f"ipc_close_mem_handle: no CUDA IPC handle is open at {address:#x} on {dev.description}")
    dev.make_current()
    check(driver().cuIpcCloseMemHandle(address), "cuIpcCloseMemHandle", f"({address:#x} on {dev.description})")
    if hit[1] > 1:
        dev.ipc_opened[address] = (hit[0], hit[1] - 1)
    else:
        del dev.ipc_opened[address]


__all__ = ["CudaIpcError", "CudaIpcHandle", "handle_bytes", "handle_from_bytes", "ipc_close_mem_handle",
           "ipc_get_mem_handle", "ipc_open_mem_handle"]
