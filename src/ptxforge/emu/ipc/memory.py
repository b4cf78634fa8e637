"""`IpcMemory`: the global memory of rank r's emulated GPU, in a shared segment other processes map.

Addresses: rank r's memory is [GLOBAL_BASE + r * STRIDE, + capacity), so a pointer names one byte on the
whole job, as on a node (see vm.py for how one arena array spans every rank). Allocations of this rank come
from its own segment; a peer's buffer becomes an allocation of this memory (owned by rank `gpu`) while its
IPC handle is open here (handles.py). Everything else is `DeviceMemory`'s: lookup, views, faults.

Cross-process correctness:
- Atomics. Each process emulates one GPU with one thread, so an atomic is a numpy read-modify-write that
  another process could interleave with. `atomic_lock(addresses)` holds an exclusive flock on every
  segment the instruction touches (in rank order, so two instructions never wait for each other) around the
  whole warp instruction; ops_atomic takes it for atom/red and ops_memory for strong stores (.relaxed,
  .release, .volatile), so such a store never lands between an atomic's read and its write. Cost: two
  flock system calls per segment per such warp instruction (about 1-2 us each), only on IPC devices.
- Release/acquire. A plain emulated load or store is a numpy gather or scatter executed when its
  instruction runs: nothing is cached in registers or elsewhere across instructions (every ld reads the
  shared pages again), and one warp's instructions run in program order. On x86-64 (TSO) a CPU's stores
  become visible to other processes in program order and loads are not reordered with older loads, so the
  payload stores of the instructions before a st.release (or a fence) are visible before the flag, and a
  ld.acquire that sees the flag is followed by loads that see the payload. numpy scatters are aligned
  element stores (no tearing for 1-8 byte elements); glibc's non-temporal memcpy for huge copies ends with
  an sfence. Other host architectures are weaker than TSO: there the IPC device is refused (see device).
- Progress. The board in each segment has one counter per writer rank; a process bumps its slot in every
  segment it maps when it has written memory since its last look (the watchdog's tick, a host write). A
  launch spinning on a flag reads the sum of the other ranks' slots: a change means another process is
  still making progress, so its state repeating is not (yet) a deadlock (progress.py).
"""

from __future__ import annotations

import bisect
import os
from typing import TYPE_CHECKING

import numpy as np

from ptxforge.emu.errors import EmulatorError
from ptxforge.emu.ipc import segment as S
from ptxforge.emu.ipc.vm import Reservation
from ptxforge.emu.memory import GLOBAL_BASE, PAD, REDZONE, WINDOW_BITS, Allocation, DeviceMemory, describe_address
from ptxforge.processes import process_exists

if TYPE_CHECKING:
    from collections.abc import Callable

    import numpy.typing as npt

    from ptxforge.emu.memory import LaneMemory

STRIDE_BITS = 32
STRIDE = 1 << STRIDE_BITS  # address space per rank: 4 GiB, so 256 ranks fill the 1 TiB global window
MAX_WORLD = S.MAX_RANKS
DEFAULT_CAPACITY = 1 << 30  # a sparse file: only pages the rank touches take memory


class IpcError(EmulatorError):
    """A bad use of emulator IPC: a stale or unknown handle, a closed segment, a device mismatch."""


def _round_up(n: int, a: int) -> int:
    return (n + a - 1) // a * a


def rank_base(rank: int) -> int:
    """The lowest address of rank `rank`'s memory (its segment header; allocations start HEADER above)."""
    return GLOBAL_BASE + rank * STRIDE


class Mapping:
    """A segment mapped in this process: rank r's own or a peer's (with the handles open on it)."""

    lock: _Locks  # its flock, made at the first atomic on it (IpcMemory._locks)

    def __init__(self, name: str, rank: int, fd: int, size: int, words: np.ndarray):
        self.name = name
        self.rank = rank
        self.fd = fd
        self.size = size
        self.words = words  # the header as u64 words
        self.opened: dict[int, list] = {}  # export id -> [Allocation, open count]

    @property
    def closed(self) -> bool:
        return bool(self.words[S.W_CLOSED])


class ProgressBoard:
    """This rank's side of the progress counters of every segment it maps (see the module docstring)."""

    def __init__(self, memory: IpcMemory):
        self.memory = memory
        self.rank = memory.rank
        self._last: tuple[int, int] | None = None

    def publish(self, lane_memory: LaneMemory | None = None) -> None:
        """Tell the other ranks this process made progress, if `lane_memory` wrote since the last look
        (None: unconditionally, as after a host write). Runs the memory's `peer_check` first: what it
        raises (a peer found dead) stops the launch."""
        check = self.memory.peer_check
        if check is not None:
            check()
        if lane_memory is not None:
            mark = (id(lane_memory), lane_memory.writes)
            if mark == self._last:
                return
            self._last = mark
        for mp in self.memory.mappings():
            mp.words[S.BOARD + self.rank] += np.uint64(1)

    def others(self) -> int:
        """The sum of the other ranks' counters over the segments this process maps."""
        total = 0
        for mp in self.memory.mappings():
            b = mp.words[S.BOARD: S.BOARD + self.memory.world]
            total += int(b.sum()) - int(b[self.rank])
        return total

    def note(self) -> str:
        peers = sorted(r for r in self.memory.peers)
        seen = f"its own and rank(s) {', '.join(map(str, peers))}'s" if peers else "its own"
        return (f"; no other process of the IPC job wrote to the segments rank {self.rank} maps ({seen}) "
                f"meanwhile")


class _Locks:
    __slots__ = ("fds",)

    def __init__(self, fds):
        self.fds = fds

    def __enter__(self):
        for fd in self.fds:
            S.lock(fd)

    def __exit__(self, *exc):
        for fd in reversed(self.fds):
            S.unlock(fd)


_NO_LOCKS = _Locks(())


class IpcMemory(DeviceMemory):
    """Rank `rank` of `world`: its heap in a new segment of `capacity` bytes, peers mapped on demand."""

    progress_board: ProgressBoard
    # called at every watchdog tick of a launch on this memory (every few hundred steps): a job's own check
    # that its peers live (ptxforge.ep's kernels backend watches its process group); may raise to stop it
    peer_check: Callable[[], None] | None = None
    # what to say of an address in rank r's memory when none of it is mapped here, if the job knows better than
    # "open its handle" (a ClusterRank: another node's memory, reached through the NIC); None: the default
    unmapped_note: Callable[[int], str | None] | None = None

    def __init__(self, rank: int, world: int, capacity: int = DEFAULT_CAPACITY):
        super().__init__(PAD)
        self.rank, self.world, self.capacity = rank, world, capacity
        self.pid = os.getpid()
        S.sweep()
        self.vm = Reservation(world * STRIDE)
        self.name = S.new_name(rank)
        fd = S.create(self.name, capacity)
        try:
            self.vm.map_file(rank * STRIDE, fd, capacity)
        except OSError:
            os.close(fd)
            os.unlink(S.path_of(self.name))
            self.vm.release()
            raise
        self.arena = self.vm.array
        words = self.arena[rank * STRIDE: rank * STRIDE + S.HEADER].view(np.uint64)
        S.init_header(words, rank, world, capacity)
        self.own = Mapping(self.name, rank, fd, capacity, words)
        self.peers: dict[int, Mapping] = {}
        self.high = S.HEADER  # heap bytes ever handed out (above it the file is still zero)
        self.exported: dict[int, int] = {}  # allocation base -> export id
        self.next_export = 1
        self.progress_board = ProgressBoard(self)
        self.closed = False

    # ------------------------------------------------------------------ the device's own heap
    def alloc(self, size: int, name: str = "", align: int = 256, readonly: bool = False) -> Allocation:
        self._check_open()
        align = max(256, align)
        span = _round_up(max(size, 1), PAD)
        lo = self.rank * STRIDE
        off = _round_up(lo + S.HEADER, align)
        for a in self._own_sorted():
            if off + span + REDZONE <= a.offset:
                break
            off = _round_up(a.offset + _round_up(max(a.size, 1), PAD) + REDZONE, align)
        if off + span > lo + self.capacity:
            raise IpcError(f"rank {self.rank}'s emulated GPU memory is full: {size} bytes do not fit its "
                           f"{self.capacity}-byte IPC segment; create the device with a larger capacity "
                           f"(ipc_device(rank, world, capacity=...))")
        used = self.high + lo
        if off < used:  # fresh pages of the file are zero already
            self.arena[off: min(off + span, used)] = 0
        self.high = max(self.high, off + span - lo)
        alloc = Allocation(GLOBAL_BASE + off, size, off, name or "allocation", readonly, gpu=self.rank)
        self._insert(alloc)
        return alloc

    def free(self, alloc: Allocation) -> None:
        if alloc.gpu != self.rank:
            raise IpcError(f"{alloc.name} belongs to rank {alloc.gpu}: close its IPC handle "
                           f"(ipc_close_mem_handle) instead of freeing it")
        export = self.exported.pop(alloc.base, None)
        if export is not None and not self.closed:
            table = S.exports(self.own.words)
            table[table[:, 0] == export] = 0
        super().free(alloc)

    def _own_sorted(self):
        return [a for a in self._allocs if a.gpu == self.rank]

    @property
    def own_allocations(self) -> tuple[Allocation, ...]:
        return tuple(self._own_sorted())

    def _insert(self, alloc: Allocation) -> None:
        i = bisect.bisect(self._bases, alloc.base)
        self._allocs.insert(i, alloc)
        self._bases.insert(i, alloc.base)

    # ------------------------------------------------------------------ host access
    def view(self, alloc: Allocation) -> np.ndarray:
        self._check_open()
        return super().view(alloc)

    def write(self, alloc: Allocation, data: bytes | np.ndarray) -> None:
        self._check_open()
        super().write(alloc, data)
        self.progress_board.publish()

    def read(self, alloc: Allocation) -> np.ndarray:
        self._check_open()
        return super().read(alloc)

    def _check_open(self) -> None:
        if self.closed:
            raise IpcError(f"rank {self.rank}'s IPC device is closed: its memory is gone")

    # ------------------------------------------------------------------ the emulator's hooks
    def mappings(self) -> list[Mapping]:
        return [self.own, *self.peers.values()] if not self.closed else []

    def rank_of(self, address: int) -> int | None:
        """The rank whose address range holds `address` (None outside every rank's)."""
        if address >> WINDOW_BITS != GLOBAL_BASE >> WINDOW_BITS:
            return None
        r = (address - GLOBAL_BASE) >> STRIDE_BITS
        return r if r < self.world else None

    def atomic_lock(self, addresses: npt.ArrayLike) -> _Locks:
        """The locks an atomic (or strong store) on `addresses` holds around its read-modify-write."""
        a = np.asarray(addresses)
        if a.size == 0:
            return _NO_LOCKS
        lo, hi = (int(a), int(a)) if a.ndim == 0 else (int(a.min()), int(a.max()))
        r = self.rank_of(lo)
        if r is not None and r == self.rank_of(hi):  # the usual case: one rank's memory
            return self._locks(r)
        a = a.reshape(-1).astype(np.uint64)  # lanes in several ranks' memory, or outside global memory
        g = a[(a >> np.uint64(WINDOW_BITS)) == np.uint64(GLOBAL_BASE >> WINDOW_BITS)]
        ranks = np.unique((g - np.uint64(GLOBAL_BASE)) >> np.uint64(STRIDE_BITS)).tolist()
        fds = [mp.fd for mp in (self._mapping(r) for r in ranks) if mp is not None]  # ascending rank order
        return _Locks(fds)

    def _mapping(self, r: int) -> Mapping | None:
        return self.own if r == self.rank else self.peers.get(r)

    def _locks(self, r: int) -> _Locks:
        mp = self._mapping(r)
        if mp is None:
            return _NO_LOCKS  # nothing of that rank is mapped: the access itself faults
        hit = mp.__dict__.get("lock")
        if hit is None:
            hit = mp.lock = _Locks([mp.fd])
        return hit

    def describe(self, address: int, nbytes: int) -> str | None:
        """Where a bad address lies, when it is another rank's memory this rank has not opened."""
        r = self.rank_of(address)
        if r is None or r == self.rank:
            return None
        mp = self.peers.get(r)
        if mp is None:
            why = self.unmapped_note(r) if self.unmapped_note is not None else None
            return why or (f"an address in rank {r}'s memory, none of which is open on rank {self.rank} "
                           f"(open its buffer's handle with ipc_open_mem_handle)")
        opened = sorted((a for a, _ in mp.opened.values()), key=lambda a: a.base)
        return describe_address(opened, address, nbytes) + f" (the buffers of rank {r} open on rank {self.rank})"

    # ------------------------------------------------------------------ teardown
    def close(self) -> None:
        """Unmap every peer, mark the own segment closed and unlink it (owner process only)."""
        if self.closed:
            return
        for mp in list(self.peers.values()):
            self.unmap_peer(mp)
        owner = os.getpid() == self.pid  # a forked child's copy must not remove its parent's segment
        if owner:
            self.own.words[S.W_CLOSED] = 1
            try:
                os.unlink(S.path_of(self.name))
            except FileNotFoundError:
                pass
        os.close(self.own.fd)
        S.sweep()  # and what dead peers left behind (a rank killed mid-job cannot remove its own)
        self.closed = True
        self._allocs.clear()
        self._bases.clear()
        self.vm.release()
        self.arena = self.vm.array

    def reclaim_dead_peers(self) -> list[str]:
        """Unmap the segments of peers whose process no longer runs and remove every such segment on the
        machine (`segment.sweep`); returns the names removed. Their memory is gone: pointers into it fault."""
        for mp in list(self.peers.values()):
            pid = S.owner_pid(mp.name)
            if pid is not None and not process_exists(pid):
                self.unmap_peer(mp)
        return S.sweep()

    def unmap_peer(self, mp: Mapping) -> None:
        for alloc, _ in mp.opened.values():
            super().free(alloc)
        mp.opened.clear()
        self.vm.unmap(mp.rank * STRIDE, mp.size)
        os.close(mp.fd)
        self.peers.pop(mp.rank, None)
