"""The symmetric heap of an emulated `Cluster`: objects that exist once on every PE, at the same offset.

`SymmetricHeap.malloc` (what `Cluster.malloc` calls, as nvshmem_malloc) allocates one copy per PE. A kernel
names remote memory by the address of its own copy; `translate` finds the target PE's copy at the same
offset, as NVSHMEM does with its heap base addresses.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import numpy as np

from ptxforge.emu.errors import LaunchError, MemoryFault

if TYPE_CHECKING:
    from ptxforge.emu.memory import Allocation
    from ptxforge.emu.node_memory import GpuMemory


class SymmetricBuffer:
    """One symmetric object: `shape` x `dtype` on every PE. `address(pe)` is what a kernel on `pe` passes;
    `read(pe)` / `write(pe, array)` and `to_host()` (every PE's copy, stacked) are the host's access."""

    def __init__(self, name: str, shape: tuple[int, ...], dtype: np.dtype, allocations: list[Allocation],
                 memories: list[GpuMemory]):
        self.name = name
        self.shape = shape
        self.dtype = dtype
        self.nbytes = int(np.prod(shape, dtype=np.int64)) * dtype.itemsize
        self.allocations = allocations
        self._memories = memories

    def address(self, pe: int) -> int:
        """The address of PE `pe`'s copy (pass it to the kernel launched on that PE)."""
        return self.allocations[self._pe(pe)].base

    def read(self, pe: int) -> np.ndarray:
        a = self.allocations[self._pe(pe)]
        return self._memories[pe].read(a)[: self.nbytes].view(self.dtype).reshape(self.shape).copy()

    def write(self, pe: int, array: Any) -> None:
        a = np.ascontiguousarray(np.broadcast_to(np.asarray(array, self.dtype), self.shape))
        self._memories[self._pe(pe)].write(self.allocations[pe], a)

    def to_host(self) -> np.ndarray:
        return np.stack([self.read(pe) for pe in range(len(self.allocations))])

    def _pe(self, pe: int) -> int:
        if not 0 <= int(pe) < len(self.allocations):
            raise LaunchError(f"{self.name}: PE {pe} does not exist (PEs 0-{len(self.allocations) - 1})")
        return int(pe)

    def __repr__(self) -> str:
        return f"SymmetricBuffer({self.name!r}, shape={self.shape}, dtype={self.dtype}, pes={len(self.allocations)})"


class SymmetricHeap:
    """Every symmetric object of a cluster and the translation of addresses between PEs."""

    def __init__(self, memories: list[GpuMemory]):
        self.memories = memories
        self.objects: list[SymmetricBuffer] = []
        self._by_base: dict[int, tuple[SymmetricBuffer, int]] = {}  # base of a copy -> (object, its PE)

    def malloc(self, shape: Any, dtype: Any, name: str = "") -> SymmetricBuffer:
        shape = tuple(int(s) for s in np.atleast_1d(shape))
        if any(s < 0 for s in shape):
            raise LaunchError(f"symmetric allocation {name or ''}: negative shape {shape}")
        dt = np.dtype(dtype)
        name = name or f"symmetric object {len(self.objects)}"
        nbytes = max(1, int(np.prod(shape, dtype=np.int64)) * dt.itemsize)
        allocs = []
        for mem in self.memories:
            a = mem.alloc(nbytes, name=f"{name} (symmetric)")
            mem.write(a, bytes(nbytes))
            allocs.append(a)
        buf = SymmetricBuffer(name, shape, dt, allocs, self.memories)
        self.objects.append(buf)
        for pe, a in enumerate(allocs):
            self._by_base[a.base] = (buf, pe)
        return buf

    def _find(self, addr: int, pe: int) -> tuple[SymmetricBuffer, Allocation] | None:
        a = self.memories[pe].shared.find(addr)
        if a is None:
            return None
        hit = self._by_base.get(a.base)
        if hit is None or hit[1] != pe:
            return None
        return hit[0], a

    def translate(self, addr: int, pe: int, target: int, what: str, nbytes: int = 0) -> int:
        """The address on PE `target` of the byte at `addr` of PE `pe`'s copy of a symmetric object."""
        hit = self._find(addr, pe)
        if hit is None:
            a = self.memories[pe].shared.find(addr)
            where = ("in no allocation" if a is None else
                     f"in {a.name}, which is not PE {pe}'s copy of a symmetric object")
            raise MemoryFault(f"{what}: address {addr:#x} is {where}: NVSHMEM takes the calling PE's address of "
                              f"a symmetric object (Cluster.malloc, as nvshmem_malloc)", kind="invalid",
                              address=addr, size=nbytes)
        buf, a = hit
        if nbytes and addr + nbytes > a.base + a.size:
            raise MemoryFault(f"{what}: {nbytes} bytes at offset {addr - a.base} run past the end of {buf.name} "
                              f"({buf.nbytes} bytes)", address=addr, size=nbytes)
        return buf.allocations[target].base + (addr - a.base)

    def describe(self, addr: int, pe: int) -> str:
        """`name[offset]` of a symmetric address of PE `pe`, for messages."""
        hit = self._find(addr, pe)
        if hit is None:
            return f"{addr:#x}"
        buf, a = hit
        return f"{buf.name} byte {addr - a.base} ({addr:#x})"
