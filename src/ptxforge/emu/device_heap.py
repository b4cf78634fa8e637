"""The device `malloc` heap: bounded as a GPU's is, so a kernel cannot allocate the host's memory away.

A GPU serves device-side `malloc` from a heap of `cudaLimitMallocHeapSize` bytes (8 MiB by default) and
returns NULL once it is used up; blocks live until `free`d, across launches. Each device memory (a lone
device's, each GPU of a Node, an IPC rank's) has its own `DeviceHeap`. A block is an allocation of its own
in global memory (so the sanitizer names it "device malloc" and catches overruns); it counts against the
heap rounded up to GRANULE bytes, as CUDA's allocator rounds.
"""

from __future__ import annotations

from typing import Any

from ptxforge.emu.errors import LaunchError
from ptxforge.emu.variable_limits import host_memory

MALLOC_HEAP_SIZE = 8 << 20  # CUDA's default cudaLimitMallocHeapSize
GRANULE = 16  # malloc's alignment on a GPU: a block takes a multiple of it


class DeviceHeap:
    """The malloc heap of one device memory: `size` bytes; `used` of them in live blocks."""

    def __init__(self, size: int = MALLOC_HEAP_SIZE):
        self.size = size
        self.used = 0
        self.blocks: dict[int, tuple[Any, int]] = {}  # address -> (its Allocation, bytes it counts for)

    def malloc(self, memory: Any, nbytes: int) -> int:
        """The address of a new block of `nbytes` in `memory`, or 0 (NULL) when the heap cannot hold it."""
        cost = max(GRANULE, -(-nbytes // GRANULE) * GRANULE)
        if cost > self.size - self.used:
            return 0
        a = memory.alloc(nbytes, name="device malloc")
        self.blocks[a.base] = (a, cost)
        self.used += cost
        return int(a.base)

    def free(self, memory: Any, address: int) -> bool:
        """Return a block to the heap; False for NULL or an address malloc did not give (nothing is done)."""
        hit = self.blocks.pop(address, None)
        if hit is None:
            return False
        memory.free(hit[0])
        self.used -= hit[1]
        return True


def heap_of(memory: Any) -> DeviceHeap:
    """The malloc heap of a device memory (each kind of device memory has one: `malloc_heap`)."""
    heap: DeviceHeap = memory.malloc_heap
    return heap


def set_heap_size(memory: Any, size: Any) -> None:
    """Set the heap limit of a device memory (cudaDeviceSetLimit(cudaLimitMallocHeapSize)); blocks already
    allocated stay."""
    heap_of(memory).size = checked_limit("malloc_heap_size", size)


def checked_limit(name: str, size: Any) -> int:
    """`size` as a byte count from 0 to half of this machine's memory (the emulator holds it there), else a
    LaunchError naming the option."""
    most = host_memory() // 2
    if isinstance(size, bool) or not hasattr(size, "__index__") or not 0 <= int(size) <= most:
        raise LaunchError(f"{name} must be a whole number of bytes from 0 to {most:,} (half of this machine's "
                          f"memory), not {size!r}")
    return int(size)
