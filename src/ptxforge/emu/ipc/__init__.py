"""Emulator IPC: emulated GPUs in separate processes sharing global memory, as CUDA IPC shares a GPU's.

    dev = ipc_device(rank, world)                     # in each rank's process (e.g. a gloo job)
    buf = ptxforge.runtime.empty(n, np.uint32, device=dev)
    handles = [None] * world
    dist.all_gather_object(handles, ipc_get_mem_handle(buf))
    peer = ipc_open_mem_handle(handles[(rank + 1) % world], device=dev)
    kernel.launch(grid, block, [peer, buf, ...], device=dev)   # the real kernel, peer stores included
    dev.close()                                      # or `with ipc_device(...) as dev:`

Each rank's device keeps its global memory in a /dev/shm segment (segment.py) mapped at a rank-derived
address range (memory.py, vm.py), so a pointer means the same on every rank; handles (handles.py) map a
peer's segment. Atomics and strong stores on IPC memory hold a per-segment flock, loads and stores need no
more than x86-TSO for release/acquire, and the watchdog counts other processes' writes as progress (the
reasons are in memory.py). A single-process `ptxforge.emu.Node` remains the tool for sanitizing such
kernels: `sanitize=True` on an IPC device checks that rank's launch alone.
"""

from __future__ import annotations

import platform
import weakref
from collections.abc import Callable

from ptxforge.emu.ipc.handles import EmuIpcHandle, ipc_close_mem_handle, ipc_get_mem_handle, ipc_open_mem_handle
from ptxforge.emu.ipc.memory import DEFAULT_CAPACITY, MAX_WORLD, STRIDE, IpcError, IpcMemory, rank_base
from ptxforge.emu.ipc.segment import HEADER, live_segments, sweep
from ptxforge.emu.launch import EmuDevice

_FINALIZERS: list[weakref.finalize] = []  # one per device: closes its memory once (close, GC, exit)


class IpcDevice(EmuDevice):
    """Rank `rank`'s emulated GPU in a job of `world` processes; its memory is an `IpcMemory`."""

    memory: IpcMemory

    def __init__(self, rank: int, world: int, num_sms: int = 132, capacity: int = DEFAULT_CAPACITY):
        _check(rank, world, capacity)
        super().__init__(num_sms, memory=IpcMemory(int(rank), int(world), int(capacity)))
        self.rank, self.world = int(rank), int(world)
        self.gpu = self.rank  # errors name "GPU r": rank r's emulated GPU
        self._finalizer = weakref.finalize(self, self.memory.close)  # a dropped device removes its segment too
        _FINALIZERS[:] = [f for f in _FINALIZERS if f.alive] + [self._finalizer]

    @property
    def name(self) -> str:
        return f"rank {self.rank}'s emulated GPU (IPC, {self.world} ranks)"

    @property
    def closed(self) -> bool:
        return self.memory.closed

    @property
    def segment(self) -> str:
        """The /dev/shm file holding this rank's memory."""
        return self.memory.name

    def owns_address(self, address: int) -> bool:
        """Whether `address` is in a live allocation here: this rank's, or a peer's opened through its handle
        whose owner has not closed its device."""
        mem = self.memory
        if mem.closed:
            return False
        alloc = mem.find(address)
        if alloc is not None and alloc.gpu != self.rank:
            mp = mem.peers.get(alloc.gpu)  # type: ignore[arg-type]  # None: no peer's
            return mp is not None and not mp.closed
        return alloc is not None

    def address_note(self, address: int) -> str:
        """Why `address` is not live here, when IPC explains it (for the launch's error message); or ""."""
        mem = self.memory
        if mem.closed:
            return f" (rank {self.rank}'s IPC device is closed)"
        owner = mem.rank_of(address)
        if owner is None or owner == self.rank:
            return ""
        alloc, mp = mem.find(address), mem.peers.get(owner)
        if alloc is not None and mp is not None and mp.closed:
            return (f" ({alloc.name}: rank {owner} closed its device, segment {mp.name}: the memory behind the "
                    f"pointer is gone)")
        why = mem.unmapped_note(owner) if mem.unmapped_note is not None and alloc is None else None
        if why:
            return f" ({why})"
        return f" (it is rank {owner}'s memory, not open on rank {self.rank}: open the buffer's handle first)"

    def close(self) -> None:
        """Unmap the peers, unlink this rank's segment; the device's buffers are unusable afterwards."""
        self._finalizer()
        self.images.clear()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    def __repr__(self) -> str:
        state = "closed" if self.closed else f"segment {self.segment}"
        return f"IpcDevice(rank {self.rank} of {self.world}, {state})"


def _check(rank, world, capacity) -> None:
    if platform.machine().lower() not in ("x86_64", "amd64"):
        raise IpcError(f"emulator IPC relies on x86-64's store order (TSO) for release/acquire between "
                       f"processes; this host is {platform.machine()}")
    for name, v in (("rank", rank), ("world", world), ("capacity", capacity)):
        if isinstance(v, bool) or not isinstance(v, int):
            raise IpcError(f"{name} must be an integer, not {v!r}")
    if not 1 <= world <= MAX_WORLD:
        raise IpcError(f"world must be 1 to {MAX_WORLD} ranks, not {world}")
    if not 0 <= rank < world:
        raise IpcError(f"rank {rank} is not in a world of {world} ranks (0-{world - 1})")
    if not HEADER < capacity <= STRIDE:
        raise IpcError(f"capacity must be more than {HEADER} bytes and at most {STRIDE} (4 GiB), not {capacity}")


def ipc_device(rank: int, world: int, *, num_sms: int = 132, capacity: int = DEFAULT_CAPACITY) -> IpcDevice:
    """Rank `rank`'s emulated GPU for a job of `world` processes (create it in that rank's process)."""
    return IpcDevice(rank, world, num_sms=num_sms, capacity=capacity)


def close_all() -> None:
    """Close every IPC device of this process (`ptxforge.ep.spawn` calls it before its ranks' hard exit,
    which skips the interpreter's exit handlers; a normal exit closes them by itself)."""
    for f in list(_FINALIZERS):
        try:
            f()
        except Exception:  # noqa: BLE001 - exiting: nothing left to report to
            pass


def set_peer_check(check: Callable[[], None] | None) -> None:
    """Have launches on every IPC device of this process call `check` at every watchdog tick, so what it raises
    (a job's own finding that a peer died) stops a kernel spinning on that peer; None: no check."""
    for f in list(_FINALIZERS):
        held = f.peek()
        if held is not None:
            held[0].memory.peer_check = check


def reclaim_dead_peers() -> list[str]:
    """Unmap, on every IPC device of this process, the peers whose process no longer runs, and remove the
    segments of every such process on the machine (a SIGKILLed rank leaves its segment behind); returns the
    segment names removed."""
    removed: list[str] = []
    for f in list(_FINALIZERS):
        held = f.peek()
        if held is not None and not held[0].memory.closed:
            removed += held[0].memory.reclaim_dead_peers()
    return removed + sweep()


__all__ = ["EmuIpcHandle", "IpcDevice", "IpcError", "close_all", "ipc_close_mem_handle", "ipc_device",
           "ipc_get_mem_handle", "ipc_open_mem_handle", "live_segments", "rank_base", "reclaim_dead_peers",
           "set_peer_check"]
