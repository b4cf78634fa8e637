"""Global memory of a `Node`'s GPUs: one address space, each allocation owned by one GPU.

All GPUs of a node allocate from one arena (`DeviceMemory`), so an address names one byte on the whole
node (CUDA's unified addressing) and a kernel's access resolves to the same (arena, index) pair whichever
GPU's memory it touches: the single-device fast path of `LaneMemory.resolve` serves peer accesses too.
`GpuMemory` is one GPU's view: its allocations carry `gpu`, it finds its own and its reachable peers'
allocations, and lanes touching a peer it may not access (`Node.disable_peer_access`) fault naming both.
"""

from __future__ import annotations

from collections.abc import Callable
from contextlib import AbstractContextManager
from typing import TYPE_CHECKING, Any

import numpy as np

from ptxforge.emu.device_heap import DeviceHeap
from ptxforge.emu.memory import Allocation, DeviceMemory

if TYPE_CHECKING:
    import numpy.typing as npt

    from ptxforge.emu.ipc.memory import ProgressBoard
    from ptxforge.emu.nic import Fabric


class GpuMemory:
    """The memory of GPU `gpu` of a node: allocates from the node's arena, sees peers it may access."""

    # as on `DeviceMemory`: a node lives in one process, so no lock for atomics and no board for other processes
    atomic_lock: Callable[[npt.ArrayLike], AbstractContextManager[Any]] | None = None
    progress_board: ProgressBoard | None = None
    network: Fabric | None = None  # a Cluster GPU's NICs (set by cluster.py); None on a plain Node

    def __init__(self, shared: DeviceMemory, gpu: int, peers: np.ndarray):
        self.shared = shared
        self.gpu = gpu
        self.peers = peers  # the node's access matrix: peers[a, b] = GPU a may access GPU b's memory
        self.malloc_heap = DeviceHeap()  # this GPU's own device-side malloc heap (device_heap.py)

    @property
    def arena(self) -> np.ndarray:
        return self.shared.arena

    def alloc(self, size: int, name: str = "", align: int = 256, readonly: bool = False) -> Allocation:
        a = self.shared.alloc(size, name=f"{name or 'allocation'} on GPU {self.gpu}", align=align,
                              readonly=readonly)
        a.gpu = self.gpu
        return a

    def free(self, alloc: Allocation) -> None:
        if alloc.gpu != self.gpu:
            raise ValueError(f"{alloc.name} belongs to GPU {alloc.gpu}; free it on that GPU")
        self.shared.free(alloc)

    def find(self, addr: int) -> Allocation | None:
        """The allocation containing `addr` on this GPU or a peer it may access, or None."""
        a = self.shared.find(addr)
        if a is None or a.gpu == self.gpu or self.peers[self.gpu, a.gpu]:
            return a
        return None

    def owner(self, addr: int) -> Allocation | None:
        """The allocation containing `addr` on any GPU of the node (access rights not considered)."""
        return self.shared.find(addr)

    def describe(self, address: int, nbytes: int) -> str | None:
        """Nothing beyond the nearest allocations (as `DeviceMemory.describe`)."""
        return None

    def nearest(self, addr: int) -> Allocation | None:
        return self.shared.nearest(addr)

    def view(self, alloc: Allocation) -> np.ndarray:
        return self.shared.view(alloc)

    def write(self, alloc: Allocation, data: bytes | np.ndarray) -> None:
        self.shared.write(alloc, data)

    def read(self, alloc: Allocation) -> np.ndarray:
        return self.shared.read(alloc)

    @property
    def allocations(self) -> tuple[Allocation, ...]:
        """Every live allocation of the node (a kernel's pointer may reach any of them)."""
        return self.shared.allocations

    @property
    def own_allocations(self) -> tuple[Allocation, ...]:
        return tuple(a for a in self.shared.allocations if a.gpu == self.gpu)

    def peer_blocked(self, indices: npt.ArrayLike) -> tuple[np.ndarray, str] | None:
        """(mask, note) of the lanes whose allocation (index into `allocations`) is on a GPU this one may
        not access; None when every lane may."""
        row = self.peers[self.gpu]
        if row.all():
            return None
        owners = np.asarray([a.gpu for a in self.shared.allocations], np.int64)[np.asarray(indices)]
        bad = ~row[owners]
        if not bad.any():
            return None
        j = int(np.flatnonzero(bad.reshape(-1))[0])
        alloc = self.shared.allocations[int(np.asarray(indices).reshape(-1)[j])]
        note = (f"{alloc.name} [{alloc.base:#x}, {alloc.base + alloc.size:#x}) belongs to GPU {alloc.gpu}, "
                f"and peer access from GPU {self.gpu} to GPU {alloc.gpu} is disabled "
                f"(Node.disable_peer_access({self.gpu}, {alloc.gpu}))")
        return bad, note
