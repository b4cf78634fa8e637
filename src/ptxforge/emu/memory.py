"""The emulated device address space: global allocations, per-block shared, per-thread local, params.

Every load, store and atomic goes through `LaneMemory.resolve`, the single choke point that turns
addresses into (byte buffer, byte index) pairs after checking bounds and alignment. A bad pointer raises
`MemoryFault` naming the PTX line, the thread and the block; nothing ever touches host memory outside
the buffers. Checks (hooks.py: the sanitizer, the watchdogs' load watch) see every access through
`LaneMemory.hooks`.

Address layout (64-bit generic space):
  0x7c00_0000_0000 + off   kernel parameters (cvta.param)
  0x7d00_0000_0000 + off   shared window (cvta.shared); shared-space addresses are `off` itself
  0x7e00_0000_0000 + off   local window (cvta.local); local-space addresses are `off` itself
  0x7f00_0000_0000 ...     global allocations (global addresses are generic addresses)

Distributed shared memory (clusters of CTAs), laid out as Hopper does: the 32-bit shared address of
byte `off` of the CTA with %cluster_ctarank `rank` is `(rank << CLUSTER_RANK_SHIFT) | off`, in every
state space that names it. A CTA's own shared variables therefore carry its rank (a shared symbol, `cvta`
and `mapa` agree), plain offsets are rank 0's, and the generic address of that byte is SHARED_WINDOW plus
the 32-bit address, so a 2-CTA cluster reaches its peer with `generic ^ (1 << 24)`. Without a cluster every
CTA is rank 0 and its addresses are plain offsets.
"""

from __future__ import annotations

import bisect
import threading
from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np

from ptxforge.emu import ramps as R
from ptxforge.emu.device_heap import DeviceHeap
from ptxforge.emu.errors import MemoryFault
from ptxforge.emu.npcalls import any_true, highest, lowest

if TYPE_CHECKING:
    from collections.abc import Callable, Sequence
    from contextlib import AbstractContextManager
    from typing import Any

    import numpy.typing as npt

    from ptxforge.emu.hooks import Hooks
    from ptxforge.emu.ipc.memory import ProgressBoard

    Lanes = npt.NDArray[np.intp] | None  # the active lanes' ids (None: every lane)
    # LaneMemory.resolve's answer: (byte buffer, byte index), or per group of lanes (mask, buffer, index)
    Resolved = tuple[np.ndarray, np.ndarray] | list[tuple[np.ndarray, np.ndarray, np.ndarray]]

PARAM_WINDOW = 0x7C00_0000_0000
SHARED_WINDOW = 0x7D00_0000_0000
LOCAL_WINDOW = 0x7E00_0000_0000
GLOBAL_BASE = 0x7F00_0000_0000
_GLOBAL_BASE_U64 = np.uint64(GLOBAL_BASE)
WINDOW_BITS = 40
CLUSTER_RANK_SHIFT = 24  # shared addresses carry the CTA's %cluster_ctarank from this bit up
CLUSTER_OFF_MASK = (1 << CLUSTER_RANK_SHIFT) - 1
PAD = 64  # every buffer is a multiple of this, so typed views of any access width work


def _round_up(n: int, a: int) -> int:
    return (n + a - 1) // a * a


@dataclass
class Allocation:
    """A live range [base, base+size) of the global address space."""

    base: int
    size: int
    offset: int  # byte offset in the arena
    name: str = ""
    readonly: bool = False
    gpu: int | None = None  # the owning GPU of a `ptxforge.emu.Node` (None on a lone device)

    def __contains__(self, addr: int) -> bool:
        return self.base <= addr < self.base + self.size


# Unmapped bytes after every allocation, so an access just past the end of one array is out of bounds
# instead of landing in the next one (compute-sanitizer's allocator pads the same way).
REDZONE = 256


_ALLOC_LOCK = threading.Lock()  # (allocation and freeing in every DeviceMemory: not a hot path)


class DeviceMemory:
    """Global memory: one growable byte arena holding every allocation, first-fit allocator."""

    # Memory other processes share (ptxforge.emu.ipc) sets these: the lock atomics hold, the progress
    # counters the watchdog reads. A lone device's memory is this process's alone.
    atomic_lock: Callable[[npt.ArrayLike], AbstractContextManager[Any]] | None = None
    progress_board: ProgressBoard | None = None
    network: Any = None  # a Cluster GPU's NICs (emu/nic.py's Fabric, set by cluster.py); None anywhere else

    def __init__(self, capacity: int = 1 << 20):
        self.arena = np.zeros(_round_up(capacity, PAD), np.uint8)
        self._allocs: list[Allocation] = []  # sorted by base
        self._bases: list[int] = []
        # the gaps before allocations [0, _scan_from) are too small for any allocation: first fit starts after
        # them, so allocating without frees is O(log n), not a walk over every allocation (a kernel's mallocs)
        self._scan_from = 0
        self.malloc_heap = DeviceHeap()  # device-side malloc's blocks (device_heap.py)

    # ------------------------------------------------------------------ allocation
    def alloc(self, size: int, name: str = "", align: int = 256, readonly: bool = False) -> Allocation:
        """Reserve `size` bytes (zeroed); the address is aligned to `align` (at least 256)."""
        with _ALLOC_LOCK:  # (threads launching with host arrays allocate at once: one first fit at a time)
            align = max(256, align)
            span = _round_up(max(size, 1), PAD)
            allocs, start = self._allocs, self._scan_from
            end = self._end_of(allocs[start - 1]) if start else 0  # where the gap before allocs[start] begins
            off = _round_up(end, align)
            for j in range(start, len(allocs)):  # first fit between existing allocations, a red zone after each
                a = allocs[j]
                if off + span + REDZONE <= a.offset:
                    break
                if j == self._scan_from and _round_up(end, 256) + PAD + REDZONE > a.offset:
                    self._scan_from = j + 1  # no allocation fits before allocs[j]
                end = self._end_of(a)
                off = _round_up(end, align)
            old = self.arena.size
            if off + span > old:
                grown = np.zeros(_round_up(max(off + span, 2 * old), PAD), np.uint8)
                grown[:old] = self.arena
                self.arena = grown
            # zero what a freed allocation may have left; the grown part is fresh zeros (untouched pages)
            self.arena[off: min(off + span, old)] = 0
            alloc = Allocation(GLOBAL_BASE + off, size, off, name, readonly)
            i = bisect.bisect(self._bases, alloc.base)
            self._allocs.insert(i, alloc)
            self._bases.insert(i, alloc.base)
            return alloc

    @staticmethod
    def _end_of(a: Allocation) -> int:
        """The arena offset where the gap after `a` (past its red zone) begins."""
        return a.offset + _round_up(max(a.size, 1), PAD) + REDZONE

    def free(self, alloc: Allocation) -> None:
        with _ALLOC_LOCK:
            i = bisect.bisect_left(self._bases, alloc.base)
            if i < len(self._bases) and self._allocs[i] is alloc:
                del self._allocs[i]
                del self._bases[i]
                self._scan_from = min(self._scan_from, i)

    def find(self, addr: int) -> Allocation | None:
        """The allocation containing `addr`, or None."""
        i = bisect.bisect(self._bases, addr) - 1
        if i >= 0 and addr < self._allocs[i].base + self._allocs[i].size:
            return self._allocs[i]
        return None

    def owner(self, addr: int) -> Allocation | None:
        """The allocation containing `addr` whoever may access it: here the same as `find` (a node GPU's
        memory also finds the peers' it may not access, `ptxforge.emu.node_memory`)."""
        return self.find(addr)

    def describe(self, address: int, nbytes: int) -> str | None:
        """What a fault's message should say of a bad address beyond the nearest allocations; None here (memory
        other processes share names another rank's memory: ipc/memory.py)."""
        return None

    def peer_blocked(self, indices: npt.ArrayLike) -> tuple[np.ndarray, str] | None:
        """Lanes whose allocation (index into `allocations`) this device may not access, with a note;
        None when all may (always, on a lone device: see `ptxforge.emu.node_memory`)."""
        return None

    def nearest(self, addr: int) -> Allocation | None:
        i = bisect.bisect(self._bases, addr) - 1
        return self._allocs[i] if i >= 0 else (self._allocs[0] if self._allocs else None)

    def view(self, alloc: Allocation) -> np.ndarray:
        """The bytes of an allocation (a view; invalid after the arena grows)."""
        return self.arena[alloc.offset: alloc.offset + alloc.size]

    def write(self, alloc: Allocation, data: bytes | np.ndarray) -> None:
        raw = np.frombuffer(bytes(data), np.uint8) if not isinstance(data, np.ndarray) else \
            np.ascontiguousarray(data).reshape(-1).view(np.uint8)
        if raw.size > alloc.size:
            raise ValueError(f"{raw.size} bytes do not fit allocation {alloc.name!r} of {alloc.size}")
        self.arena[alloc.offset: alloc.offset + raw.size] = raw

    def read(self, alloc: Allocation) -> np.ndarray:
        return self.view(alloc).copy()

    @property
    def allocations(self) -> tuple[Allocation, ...]:
        return tuple(self._allocs)


class LaneMemory:
    """Memory as one wave of lanes sees it: global arena, shared per block slot, local per lane, params.

    `fault` is a callable (kind, message, address, size, lane) -> Exception supplied by the machine so
    that errors name the instruction, thread and block.
    """

    reference = False  # the machine's reference mode: no whole-wave shortcut (`plain`)

    def __init__(self, device: DeviceMemory, *, nlanes: int, lanes_per_slot: int, shared_size: int,
                 local_size: int, params: np.ndarray, fault: Callable[..., Exception], cluster_size: int = 1):
        self.device = device
        self.nlanes = nlanes
        self.lanes_per_slot = lanes_per_slot
        self.shared_size = shared_size
        self.shared_stride = _round_up(max(shared_size, 1), PAD)
        nslots = nlanes // lanes_per_slot
        self.shared = np.zeros(nslots * self.shared_stride, np.uint8)
        self.local_stride = _round_up(max(local_size, 0), PAD)
        self.local = np.zeros(nlanes * self.local_stride, np.uint8)
        self.params = params  # kernel parameter bytes, padded to PAD
        self.fault = fault
        self.hooks: Hooks | None = None  # the launch's checks that watch memory (None: nothing watches it)
        self.writes = 0  # accesses that wrote (stores, atomics, mbarrier arrivals): the watchdog's progress sign
        self.cluster_size = cluster_size  # CTAs per cluster; a cluster fills consecutive slots

    # lane numbers and each lane's shared-memory base: made at first use (a vector add never needs them) and
    # shared, read-only, by the waves of one shape
    @property
    def _lane_ids(self) -> np.ndarray:
        return _lane_arrays(self.nlanes, 1, 1)

    @property
    def _slot_base(self) -> np.ndarray:
        return _lane_arrays(self.nlanes, self.lanes_per_slot, self.shared_stride)

    def reset_shared(self) -> None:
        self.shared[:] = 0

    def grow_local(self, need: int) -> None:
        """Make every lane's local window at least `need` bytes (for deep call stacks)."""
        if need <= self.local_stride:
            return
        new = _round_up(max(need, 2 * self.local_stride), PAD)
        grown = np.zeros(self.nlanes * new, np.uint8)
        if self.local_stride:
            grown.reshape(self.nlanes, new)[:, : self.local_stride] = self.local.reshape(
                self.nlanes, self.local_stride)
        self.local = grown
        self.local_stride = new

    # ------------------------------------------------------------------ the choke point
    def resolve(self, space: str, addr: Any, nbytes: int, lanes: Lanes, write: bool = False) -> Resolved:
        """Check an access of `nbytes` per lane and return (byte buffer, byte index).

        addr: scalar or array of addresses (one per active lane); lanes: global lane ids of the active
        lanes, or None for all lanes. The index is aligned to `nbytes`, so `buf.view(dtype)[idx >> k]`
        reads the values. Watched memory (`hooks`) tells the checks before and after (hooks.Hooks.resolve).
        """
        if write:
            self.writes += 1
        if self.hooks is not None:
            return self.hooks.resolve(self, space, addr, nbytes, lanes, write)
        return self.locate(space, addr, nbytes, lanes, write)

    def locate(self, space: str, addr: Any, nbytes: int, lanes: Any, write: bool = False) -> Any:
        """`resolve` without telling the checks."""
        if space == "generic":
            return self._generic(addr, nbytes, lanes, write)
        if space == "global" or space == "const":
            return self._global(addr, nbytes, lanes, write, space)
        if space == "shared":
            return self._shared(addr, nbytes, lanes)
        if space == "local":
            base = self._lane_ids * self.local_stride
            return self._windowed(addr, nbytes, lanes, self.local_stride, base, self.local, "local")
        if space == "param":
            a = np.asarray(addr, np.int64)
            self._check_range(a, nbytes, 0, self.params.size, "param", lanes, addr)
            return self.params, a
        raise MemoryFault(f"unknown state space {space!r}")

    def _global(self, addr, nbytes, lanes, write, space):
        if type(addr) is R.Ramp:  # consecutive addresses kept as the rule: checked from its ends
            first, step = addr.tag
            alloc = self.device.find(first)
            if alloc is not None and first + step * (addr.n - 1) + nbytes <= alloc.base + alloc.size and \
                    not (write and alloc.readonly) and not (first | step) & (nbytes - 1):
                # (only watched memory gets here: `run_start` takes the rest) the byte indices as the rule too:
                # gather/scatter and the sanitizer's shadow need only its ends
                return self.device.arena, R.Ramp((first - GLOBAL_BASE, step), addr.n, np.int64)
            addr = addr.array()  # anything else: the checks on the addresses, as for any array
        a = np.asarray(addr)
        if a.dtype != np.uint64:
            a = a.astype(np.uint64)
        if a.ndim == 0 or a.size == 0:
            lo = hi = int(a) if a.ndim == 0 else 0
            if a.size == 0:
                return self.device.arena, np.zeros(0, np.int64)
        else:
            run = R.run_of(a)  # addresses made from a ramp (ramps.Ramp): its ends and step say it all
            lo, hi = (run[0], run[0] + run[1] * (a.size - 1)) if run else (int(lowest(a)), int(highest(a)))
        alloc = self.device.find(lo)
        if alloc is not None and hi + nbytes <= alloc.base + alloc.size:
            if write and alloc.readonly:
                self._raise("write to read-only memory", space, a, nbytes, lanes,
                            np.ones(a.shape, bool), f"{alloc.name or 'allocation'} is read-only")
            idx = (a - _GLOBAL_BASE_U64).view(np.int64) if a.ndim else \
                np.int64(int(a) - GLOBAL_BASE)
            if a.ndim and run:
                if nbytes > 1 and (lo | run[1]) & (nbytes - 1):
                    self._check_align(a, nbytes, lanes, space)
                idx.flags.writeable = False
                R.note_run(idx, (lo - GLOBAL_BASE, run[1]))
            elif nbytes > 1 and ((lo | hi) & (nbytes - 1) or
                                 (a.ndim and int(np.bitwise_or.reduce(idx)) & (nbytes - 1))):
                self._check_align(a, nbytes, lanes, space)
            return self.device.arena, idx
        # slow path: lanes in several allocations, or a bad pointer somewhere
        flat = np.atleast_1d(a)
        bases = np.asarray([x.base for x in self.device.allocations], np.uint64)
        ends = np.asarray([x.base + x.size for x in self.device.allocations], np.uint64)
        i = np.searchsorted(bases, flat, side="right") - 1
        ok = i >= 0
        ic = np.clip(i, 0, None)
        if bases.size:  # compared without wrap-around: an address near 2^64 plus nbytes must not pass
            end = ends[ic]
            ok &= (flat < end) & (end - np.minimum(flat, end) >= np.uint64(nbytes))
        else:
            ok[:] = False
        if not ok.all():
            self._raise("out-of-bounds", space, flat, nbytes, lanes, ~ok, None)
        blocked = self.device.peer_blocked(ic)  # a Node's GPU: lanes on a peer it may not access
        if blocked is not None:
            self._raise("peer-access", space, flat, nbytes, lanes, blocked[0], blocked[1])
        if write and any(x.readonly for x in self.device.allocations):
            ro = np.asarray([x.readonly for x in self.device.allocations])[ic]
            if ro.any():
                self._raise("write to read-only memory", space, flat, nbytes, lanes, ro, None)
        if nbytes > 1:
            self._check_align(flat, nbytes, lanes, space)
        idx = (flat - np.uint64(GLOBAL_BASE)).astype(np.int64)
        return self.device.arena, idx.reshape(a.shape)

    def _windowed(self, addr, nbytes, lanes, limit, base_per_lane, buf, space):
        a = np.asarray(addr)
        if a.dtype.kind == "u" and a.dtype.itemsize <= 4 and a.ndim == 1 and a.size:
            # 32-bit offsets (a shared address register): never negative, so one range test
            if int(highest(a)) > limit - nbytes:
                self._check_range(a.astype(np.int64), nbytes, 0, limit, space, lanes, addr)
            if nbytes > 1 and int(np.bitwise_or.reduce(a)) & (nbytes - 1):
                self._check_align(a, nbytes, lanes, space)
            base = base_per_lane if lanes is None else base_per_lane[lanes]
            return buf, base + a  # int64 + unsigned: int64 index
        if a.dtype.kind != "i":
            a = a.astype(np.int64)
        if a.size and ((lowest(a) < 0) or (highest(a) > limit - nbytes)):
            self._check_range(a, nbytes, 0, limit, space, lanes, addr)
        if nbytes > 1 and a.size and any_true(a & (nbytes - 1)):
            self._check_align(a, nbytes, lanes, space)
        base = base_per_lane if lanes is None else base_per_lane[lanes]
        return buf, base + a

    def _shared(self, addr, nbytes, lanes):
        a = np.asarray(addr)
        if self.cluster_size == 1:  # no other CTA to name: an address past the block's window is out of it
            return self._windowed(a, nbytes, lanes, self.shared_size, self._slot_base, self.shared, "shared")
        if a.dtype.kind != "i":
            a = a.astype(np.int64)
        if a.size and (self.cluster_size > 1 or (a >> CLUSTER_RANK_SHIFT).any()) and not (a < 0).any():
            return self._remote(a, nbytes, lanes)
        return self._windowed(a, nbytes, lanes, self.shared_size, self._slot_base, self.shared, "shared")

    def _remote(self, a, nbytes, lanes):
        """Shared addresses of a cluster: the rank in the high bits picks a CTA of this lane's cluster."""
        ids = self._lane_ids if lanes is None else np.asarray(lanes, np.int64)
        a = np.broadcast_to(a, ids.shape) if a.ndim == 0 else a
        slot = ids // self.lanes_per_slot
        first = slot // self.cluster_size * self.cluster_size
        rank = a >> CLUSTER_RANK_SHIFT
        off = a & CLUSTER_OFF_MASK
        bad = rank >= self.cluster_size
        if bad.any():
            r = int(rank[np.flatnonzero(bad)[0]])
            self._raise("out-of-bounds", "shared::cluster", a, nbytes, ids, bad,
                        f"CTA rank {r} is outside this cluster of {self.cluster_size} CTA(s)")
        bad = off + nbytes > self.shared_size
        if bad.any():
            r = int(rank[np.flatnonzero(bad)[0]])
            self._raise("out-of-bounds", "shared::cluster", a, nbytes, ids, bad,
                        f"the shared window of CTA rank {r} of this cluster is {self.shared_size} bytes")
        if nbytes > 1 and (off & (nbytes - 1)).any():
            self._check_align(off, nbytes, ids, "shared::cluster")
        return self.shared, (first + rank) * self.shared_stride + off

    def _generic(self, addr, nbytes, lanes, write):
        if type(addr) is R.Ramp:
            first, step = addr.tag
            k = GLOBAL_BASE >> WINDOW_BITS
            if first >> WINDOW_BITS == k and (first + step * (addr.n - 1)) >> WINDOW_BITS == k:
                return self._global(addr, nbytes, lanes, write, "generic")
            addr = addr.array()
        a = np.asarray(addr, np.uint64)
        win = a >> np.uint64(WINDOW_BITS)
        if a.ndim == 0 or a.size == 0:
            kinds = {int(win)} if a.ndim == 0 else set()
        else:
            lo, hi = int(lowest(win)), int(highest(win))
            kinds = {lo} if lo == hi else set(np.unique(win).tolist())
        if len(kinds) <= 1:
            k = kinds.pop() if kinds else GLOBAL_BASE >> WINDOW_BITS
            return self._generic_one(k, a, nbytes, lanes, write)
        # mixed windows: resolve each group into the same (global-arena-relative) index space is not
        # possible, so the caller handles groups; signal with a list
        groups = []
        for k in sorted(kinds):
            sel = win == np.uint64(k)
            sub_lanes = None if lanes is None else lanes[sel]
            if lanes is None:
                sub_lanes = np.flatnonzero(sel)
            groups.append((sel, *self._generic_one(k, a[sel], nbytes, sub_lanes, write)))
        return groups

    def _generic_one(self, k, a, nbytes, lanes, write):
        if k == GLOBAL_BASE >> WINDOW_BITS:
            return self._global(a, nbytes, lanes, write, "generic")
        off = (a - np.uint64(k << WINDOW_BITS)).astype(np.int64)
        if k == SHARED_WINDOW >> WINDOW_BITS:
            return self._shared(off, nbytes, lanes)
        if k == LOCAL_WINDOW >> WINDOW_BITS:
            base = self._lane_ids * self.local_stride
            return self._windowed(off, nbytes, lanes, self.local_stride, base, self.local, "local")
        if k == PARAM_WINDOW >> WINDOW_BITS:
            if write:
                self._raise("write to kernel parameter", "generic", a, nbytes, lanes,
                            np.ones(a.shape, bool), "kernel parameters are read-only")
            self._check_range(off, nbytes, 0, self.params.size, "param", lanes, a)
            return self.params, off
        self._raise("out-of-bounds", "generic", a, nbytes, lanes, np.ones(np.shape(a), bool), None)

    # ------------------------------------------------------------------ faults
    def _check_range(self, a, nbytes, lo, hi, space, lanes, orig):
        bad = (a < lo) | (a > hi - nbytes)  # not a + nbytes: that wraps for addresses near 2^63
        if np.any(bad):
            self._raise("out-of-bounds", space, np.asarray(orig), nbytes, lanes, np.asarray(bad),
                        f"the {space} window of this {'block' if space == 'shared' else 'thread'} "
                        f"is {hi} bytes")

    def _check_align(self, a, nbytes, lanes, space):
        bad = (np.asarray(a).astype(np.uint64) & np.uint64(nbytes - 1)) != 0
        if np.any(bad):
            self._raise("misaligned", space, a, nbytes, lanes, bad, f"needs {nbytes}-byte alignment")

    def _raise(self, kind, space, a, nbytes, lanes, bad, note):
        bad = np.atleast_1d(np.asarray(bad)).reshape(-1)
        flat = np.atleast_1d(np.asarray(a)).reshape(-1)
        j = int(np.flatnonzero(bad)[0]) if bad.any() else 0
        addr = int(flat[min(j, flat.size - 1)])
        if lanes is not None:
            ls = np.atleast_1d(np.asarray(lanes)).reshape(-1)
            lane = int(ls[min(j, ls.size - 1)]) if ls.size else None
        else:
            lane = j
        if note is None and space in ("global", "generic", "const"):
            note = self.device.describe(addr & (1 << 64) - 1, nbytes)  # an IPC device: another rank's memory
            note = note or describe_address(self.device.allocations, addr & (1 << 64) - 1, nbytes)
        raise self.fault(kind, space, addr, nbytes, lane, note)


_LANE_ARRAYS: dict = {}


def _lane_arrays(nlanes: int, per: int, stride: int) -> np.ndarray:
    """(lane // per) * stride for every lane of a wave (read-only, cached for a few shapes)."""
    key = (nlanes, per, stride)
    a = _LANE_ARRAYS.get(key)
    if a is None:
        if len(_LANE_ARRAYS) >= 8:
            del _LANE_ARRAYS[next(iter(_LANE_ARRAYS))]
        a = np.arange(nlanes, dtype=np.int64)
        if per != 1 or stride != 1:
            a = a // per * stride
        a.flags.writeable = False
        a = _LANE_ARRAYS[key] = a
    return a


def describe_address(allocs: Sequence[Allocation], addr: int, nbytes: int) -> str:
    """Where a bad global address lies: null, inside an allocation but running past its end, below the
    first allocation, between two, past the last; addresses from 2^63 up also read as negative numbers."""

    def name(a: Allocation) -> str:
        return f"{a.name or 'allocation'} [{a.base:#x}, {a.base + a.size:#x})"

    if addr >= 1 << 63:
        return f"a negative address ({addr - (1 << 64)} as a signed number), in no allocation"
    if addr < 4096:
        return "a null pointer" + (f" plus {addr} bytes" if addr else "")
    if not allocs:
        return "no allocation exists"
    i = bisect.bisect([a.base for a in allocs], addr) - 1
    if i >= 0 and addr < allocs[i].base + allocs[i].size:
        a = allocs[i]
        return f"{nbytes} bytes at offset {addr - a.base} run past the end of {name(a)}"
    if i < 0:
        return f"{allocs[0].base - addr} bytes below {name(allocs[0])}, the lowest allocation"
    below = allocs[i]
    past = f"{addr - (below.base + below.size)} bytes past the end of {name(below)}"
    if i + 1 < len(allocs):
        return f"between allocations: {past} and {allocs[i + 1].base - addr} bytes below {name(allocs[i + 1])}"
    return past


def gather(buf: np.ndarray, idx: np.ndarray, dtype: npt.DTypeLike, count: int) -> list[np.ndarray]:
    """Values at byte indices `idx` (aligned to dtype.itemsize * count): a list of `count` arrays."""
    dtype = np.dtype(dtype)
    nb = dtype.itemsize * count
    if count == 1:
        k = _run_start(idx, nb)
        if k is not None:  # consecutive elements (a ramp's addresses): one slice
            return [buf.view(dtype)[k: k + idx.size].copy()]
        return [buf.view(dtype).take(idx >> (nb.bit_length() - 1))]  # take: faster than [] on 1-D indices
    arr = buf.view(dtype).reshape(-1, count)[idx // nb]
    return [arr[..., i] for i in range(count)]


def scatter(buf: np.ndarray, idx: np.ndarray, dtype: npt.DTypeLike, values: Sequence[Any]) -> None:
    """Store `values` (a list, one array or scalar per vector element) at byte indices `idx`."""
    dtype = np.dtype(dtype)
    count = len(values)
    nb = dtype.itemsize * count
    if count == 1:
        k = _run_start(idx, nb)
        if k is not None:  # consecutive elements (a ramp's addresses): one slice
            buf.view(dtype)[k: k + idx.size] = values[0]
            return
        buf.view(dtype)[idx >> (nb.bit_length() - 1)] = values[0]
        return
    view = buf.view(dtype).reshape(-1, count)
    ei = idx // nb
    for i, v in enumerate(values):
        if v is not None:
            view[ei, i] = v


def _run_start(idx: Any, nb: int) -> int | None:
    """The element index where byte indices `idx` start, when they are a known run (ramps.note_run) of
    consecutive nb-byte elements; else None."""
    run = R.run_of(idx)
    if run is None or run[1] != nb or run[0] % nb:
        return None
    return run[0] // nb


def plain(mem: LaneMemory) -> bool:
    """No check watches `mem`: the whole-wave fast paths below may skip `resolve` when they find exactly what
    it would. Never in reference mode (`mem.reference`): every access resolves."""
    return mem.hooks is None and not mem.reference


def shared_elements(mem: LaneMemory, addr: Any, nbytes: int, write: bool = False) -> np.ndarray | None:
    """Element indices into `mem.shared.view(<nbytes-wide type>)` of a whole-wave shared access at the 32-bit
    offsets `addr` (one per lane), or None: take the checked path (which also raises the fault, if any).

    Only without a cluster (where every offset below the window's size is the block's own) and when every
    offset lies in the block's window and is aligned: then `resolve` would find these elements and raise
    nothing."""
    a = addr
    if not isinstance(a, np.ndarray) or a.ndim != 1 or a.dtype != np.uint32 or a.shape[0] != mem.nlanes or \
            not plain(mem) or mem.cluster_size > 1:
        return None
    if int(highest(a)) > mem.shared_size - nbytes or (nbytes > 1 and int(np.bitwise_or.reduce(a)) & (nbytes - 1)):
        return None
    if write:
        mem.writes += 1
    base = _lane_arrays(mem.nlanes, mem.lanes_per_slot, mem.shared_stride // nbytes)
    return base + (a >> np.uint32(nbytes.bit_length() - 1))


def run_start(mem: LaneMemory, space: str, base: int, n: int, nbytes: int, write: bool = False) -> int | None:
    """The global arena's element index of `n` consecutive `nbytes`-byte elements from address `base` (a lane
    array of ascending consecutive addresses, see `ptxforge.emu.ramps`), or None: take the checked path.

    Only when the run is aligned and lies in one allocation (writable, for a store) and no sanitizer watches
    the accesses: then `resolve` would find exactly these bytes and raise nothing."""
    if space not in ("global", "const", "generic") or base % nbytes or not plain(mem):
        return None
    alloc = mem.device.find(base)  # a generic address outside the global window finds no allocation
    if alloc is None or base + n * nbytes > alloc.base + alloc.size or (write and alloc.readonly):
        return None
    if write:
        mem.writes += 1
    return (base - GLOBAL_BASE) // nbytes


def load(mem: LaneMemory, space: str, addr: Any, dtype: npt.DTypeLike, count: int, lanes: Lanes) -> list[np.ndarray]:
    """Checked load of `count` consecutive elements per lane; returns a list of arrays (compact lanes)."""
    nb = np.dtype(dtype).itemsize * count
    r = mem.resolve(space, addr, nb, lanes)
    if isinstance(r, list):
        out = [np.zeros(np.shape(addr), dtype) for _ in range(count)]
        for sel, buf, idx in r:
            for o, v in zip(out, gather(buf, idx, dtype, count), strict=False):
                o[sel] = v
        return out
    return gather(r[0], r[1], dtype, count)


def store(mem: LaneMemory, space: str, addr: Any, dtype: npt.DTypeLike, values: Sequence[Any], lanes: Lanes) -> None:
    """Checked store of a vector of values per lane (None elements are skipped)."""
    count = len(values)
    nb = np.dtype(dtype).itemsize * count
    r = mem.resolve(space, addr, nb, lanes, write=True)
    if mem.hooks is not None:
        mem.hooks.stored(mem, dtype, values)
    if isinstance(r, list):
        for sel, buf, idx in r:
            scatter(buf, idx, dtype, [None if v is None else (v[sel] if np.ndim(v) else v) for v in values])
        return
    buf, idx = r
    if np.ndim(idx) == 0 and any(np.ndim(v) for v in values if v is not None):
        # all lanes hit one address: the last lane's value wins
        values = [None if v is None else (np.asarray(v).reshape(-1)[-1] if np.ndim(v) else v) for v in values]
    scatter(buf, idx, dtype, values)
