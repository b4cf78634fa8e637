"""One reserved range of host virtual memory with shared-memory files mapped at fixed places in it.

The emulator turns a global address into an index into one numpy byte array (`DeviceMemory.arena`,
index = address - GLOBAL_BASE). An IPC device keeps that: it reserves `world * STRIDE` bytes of address
space (PROT_NONE, no memory behind it) and maps rank r's segment file at offset r * STRIDE, so one array
spans every rank's memory and the single-device fast path of `LaneMemory.resolve` serves peer pointers.
Bytes of the range that no file backs must never be touched (a host fault): the allocation checks of
`LaneMemory.resolve` only let accesses through to allocations, which all lie in mapped segments.
Linux (or another system with the same mmap flag values) only; `python -c` level ctypes, no compiler.
"""

from __future__ import annotations

import ctypes
import os
import platform

import numpy as np

PROT_NONE, PROT_READ, PROT_WRITE = 0, 1, 2
MAP_SHARED, MAP_PRIVATE, MAP_FIXED, MAP_ANONYMOUS, MAP_NORESERVE = 0x01, 0x02, 0x10, 0x20, 0x4000
_FAILED = ctypes.c_void_p(-1).value

_libc = None


def _c():
    global _libc
    if _libc is None:
        if platform.system() != "Linux":
            raise OSError(f"emulator IPC needs Linux (mmap of /dev/shm files at fixed addresses); this is "
                          f"{platform.system()}")
        lib = ctypes.CDLL(None, use_errno=True)
        lib.mmap.restype = ctypes.c_void_p
        lib.mmap.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int, ctypes.c_int, ctypes.c_int,
                             ctypes.c_long]
        lib.munmap.restype = ctypes.c_int
        lib.munmap.argtypes = [ctypes.c_void_p, ctypes.c_size_t]
        _libc = lib
    return _libc


def _mmap(addr, size, prot, flags, fd=-1, off=0) -> int:
    p = _c().mmap(addr, size, prot, flags, fd, off)
    if p is None or p == _FAILED:
        e = ctypes.get_errno()
        raise OSError(e, f"mmap of {size} bytes failed: {os.strerror(e)}")
    return int(p)


class Reservation:
    """`size` bytes of address space; `array` is a uint8 view of all of it (touch only mapped parts)."""

    def __init__(self, size: int):
        self.size = int(size)
        self.address = _mmap(None, self.size, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE)
        self.array = np.frombuffer((ctypes.c_uint8 * self.size).from_address(self.address),  # type: ignore[call-overload]
                                   np.uint8)  # (a ctypes array is a buffer)

    def map_file(self, offset: int, fd: int, size: int) -> None:
        """Map `size` bytes of file `fd` (MAP_SHARED: every process mapping it sees the same bytes) at
        `offset`, replacing the reservation there."""
        want = self.address + offset
        got = _mmap(want, size, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_FIXED, fd, 0)
        if got != want:  # MAP_FIXED places it exactly or fails
            raise OSError(f"mmap placed a segment at {got:#x}, not {want:#x}")

    def unmap(self, offset: int, size: int) -> None:
        """Drop the file mapped at `offset`; the range goes back to reserved (inaccessible) memory."""
        _mmap(self.address + offset, size, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE | MAP_FIXED)

    def release(self) -> None:
        if self.address:
            self.array = np.zeros(0, np.uint8)
            _c().munmap(self.address, self.size)
            self.address = 0
