"""Happens-before through release/acquire: the causality order of the PTX memory model, for the race check.

Barrier intervals (shadow.py) order the threads of a block; this module orders accesses that barriers do
not: those of different blocks, and those of one block inside a barrier interval, through

- release patterns: `st/atom/red` with `.release`/`.acq_rel`, or a fence (`fence.sc/acq_rel`, `membar`)
  followed in the same thread by a strong write (`.relaxed`, `.volatile`, an atomic);
- acquire patterns: `ld/atom` with `.acquire`/`.acq_rel`, or a strong read followed by a fence in the same
  thread; a relaxed atomic read-modify-write also acquires (the last-block idiom `__threadfence();
  atomicAdd(ticket)` of CUDA's programming guide, which has no fence after the ticket).

- a completed `barrier.cluster` phase: a release and an acquire at cluster scope by every thread of it.

Each release *publishes* what it covers (below): those accesses, stamped before the release (its cover
time, the fence's time in a fence pattern), become ordered before a thread that acquires, at a
sufficient scope, after the publication became visible (the time of the releasing write). A thread's
acquisitions reach its warp at a `bar.warp.sync` and its block at the block's next barrier (or mbarrier
phase). Publications are not tied to the location
they were written to: an acquire observes every publication made before it in the emulator's order
(which is sequentially consistent, so the value an acquire read was written before it).

Scopes: a release/acquire pair synchronizes two threads only when both scopes include both threads.
`level(a, b)` is the narrowest scope that holds two blocks (0 .cta, 1 .cluster, 2 .gpu, 3 .sys); a block's
identity is its linear id plus its cluster and its GPU, so a "different GPU" boundary is one more column.
A race whose accesses a pair of too narrow a scope would have ordered is reported as a scope error.

A release covers the earlier accesses of the releasing thread's warp and those of its block before a
barrier it passed (cumulativity through the morally strong barrier); an access by another warp of the same
barrier interval is not covered: `__syncthreads()` before the releasing thread's fence is required, as in
the model. Known leniency: the whole warp counts, not only the releasing thread (the emulator runs a warp's
lanes in lockstep, and CUDA's own libraries elect one lane per warp with activemask + match.any.sync and
release for it without a __syncwarp, as cuda::pipeline's teardown does).
"""

from __future__ import annotations

from typing import Any

import numpy as np

from ptxforge.emu.errors import LaunchError
from ptxforge.emu.sanitizer.shadow import EP_SHIFT
from ptxforge.emu.variable_limits import host_memory

# bytes of release/acquire state a launch keeps per block of its grid (SyncOrder), at the peak of making it
SYNC_BYTES_PER_BLOCK = 96

CTA, CLUSTER, GPU, SYS = range(4)
SCOPE_NAMES = (".cta", ".cluster", ".gpu", ".sys")
SCOPES = {"cta": CTA, "cluster": CLUSTER, "gpu": GPU, "sys": SYS, "gl": GPU}
_SHIFT = 40  # publication keys: block << 40 | time
_MASK = (1 << _SHIFT) - 1


class _SegmentIndex:
    """Releases keyed by (segment, position); a query asks, for a segment and a position, the earliest
    visible time among the releases of that segment at a later position."""

    def __init__(self, bits: int):
        self.bits = bits
        self.parts: list = []  # (keys, visible) arrays not yet merged
        self.keys = np.zeros(0, np.int64)
        self.vis = np.zeros(0, np.int64)
        self._sufmin: np.ndarray | None = None

    def add(self, seg, pos, visible) -> None:
        keys = np.unique((np.asarray(seg, np.int64) << self.bits) | np.asarray(pos, np.int64))
        self.parts.append((keys, np.broadcast_to(np.asarray(visible, np.int64), keys.shape)))
        self._sufmin = None

    def _build(self) -> None:
        keys = np.concatenate([self.keys] + [k for k, _ in self.parts])
        vis = np.concatenate([self.vis] + [v for _, v in self.parts])
        self.parts = []
        order = np.argsort(keys, kind="stable")
        self.keys, self.vis = keys[order], vis[order]
        seg = self.keys >> self.bits
        rank = np.cumsum(np.r_[True, seg[1:] != seg[:-1]]) - 1 if seg.size else seg
        # per segment (rank), the minimum visible time from each entry to the segment's end
        self._sufmin = np.minimum.accumulate(((rank << _SHIFT) | self.vis)[::-1])[::-1] & _MASK

    def first_visible(self, seg, pos):
        never = np.iinfo(np.int64).max
        if self._sufmin is None:
            if not self.parts and not self.keys.size:
                return np.full(np.shape(pos), never, np.int64)
            self._build()
        n = self.keys.size
        seg = np.asarray(seg, np.int64)
        i = np.searchsorted(self.keys, (seg << self.bits) | np.asarray(pos, np.int64), side="right")
        j = np.minimum(i, n - 1)
        ok = (i < n) & ((self.keys[j] >> self.bits) == seg)
        return np.where(ok, self._sufmin[j], never)


class Publications:
    """The releases made at one scope level or wider, indexed two ways for what each one covers: the
    releasing block's accesses of earlier barrier intervals, and the releasing warp's earlier accesses."""

    def __init__(self):
        self.by_interval = _SegmentIndex(40)  # (block, interval of the release)
        self.by_warp = _SegmentIndex(38)  # (warp, cover time)

    def add(self, block: Any, interval: Any, warp: Any, cover: Any, visible: Any) -> None:
        self.by_interval.add(block, interval, visible)
        self.by_warp.add(warp, cover, visible)

    def first_visible(self, block: Any, interval: Any, warp: Any, when: Any) -> Any:
        """Per access (its block, barrier interval, warp and time): the earliest time a release covering
        it became visible."""
        a = self.by_interval.first_visible(block, interval)
        return np.minimum(a, self.by_warp.first_visible(warp, when))


class SyncOrder:
    """Release/acquire state of one launch: publications per scope level, acquisitions per lane and block."""

    def __init__(self, nblocks: int, lanes_per_block: int, cluster_of_block: np.ndarray,
                 gpu_of_block: np.ndarray | None = None):
        self.lpb = lanes_per_block
        self.cluster_of_block = np.asarray(cluster_of_block, np.int64)
        self.gpu_of_block = None if gpu_of_block is None else np.asarray(gpu_of_block, np.int64)
        self.pubs = [Publications() for _ in range(4)]
        self.t_block = np.full((nblocks, 4), -1, np.int64)  # latest acquire seen by the block, per level
        self.rel_pc: dict = {}  # block -> pc of its latest release (to name the pair in a scope error)
        self.acq_pc_block = np.full(nblocks, -1, np.int64)
        self.any_acquire = False
        self.any_release = False
        # accesses need time stamps only once a fence or release happened: until then every access
        # precedes every release (unstamped bytes keep time 0), which keeps fence-free kernels fast
        self.stamping = False

    def level(self, a: Any, b: Any) -> Any:
        """The narrowest scope level that contains both blocks (elementwise)."""
        lv = np.where(a == b, CTA, np.where(self.cluster_of_block[a] == self.cluster_of_block[b], CLUSTER, GPU))
        if self.gpu_of_block is not None:
            lv = np.where(self.gpu_of_block[a] == self.gpu_of_block[b], lv, SYS)
        return lv

    # ------------------------------------------------------------------ per wave
    # per lane of a wave, made (all -1) on first use: the latest acquire per level; the time and scope of the
    # lane's last fence (arms a release); the widest scope of strong reads since it; the latest acquire's pc
    t_lane: np.ndarray  # (and the others: made by __getattr__)
    _LANE_STATE = {"t_lane": ((4,), np.int64), "fence_t": ((), np.int64), "fence_s": ((), np.int8),
                   "read_s": ((), np.int8), "acq_pc": ((), np.int64)}

    def new_wave(self, nlanes: int, block_of_lane: np.ndarray) -> None:
        self.block_of_lane = block_of_lane
        self.nlanes = nlanes
        for name in self._LANE_STATE:
            self.__dict__.pop(name, None)

    def __getattr__(self, name):
        spec = self._LANE_STATE.get(name)
        if spec is None or "nlanes" not in self.__dict__:
            raise AttributeError(name)
        a = np.full((self.nlanes, *spec[0]), -1, spec[1])
        setattr(self, name, a)
        return a

    def barrier(self, lanes: np.ndarray) -> None:
        """Lanes passed a barrier of their block: the block inherits what they acquired."""
        if not self.any_acquire or lanes.size == 0:
            return
        np.maximum.at(self.t_block, self.block_of_lane[lanes], self.t_lane[lanes])
        got = lanes[self.acq_pc[lanes] >= 0]
        self.acq_pc_block[self.block_of_lane[got]] = self.acq_pc[got]

    def cluster_barrier(self, lanes: np.ndarray, clock: int, ep: np.ndarray, who: np.ndarray) -> int:
        """A barrier.cluster phase completed for `lanes` (whole clusters): its arrive releases and its wait
        acquires at cluster scope (the defaults; a .relaxed arrive is treated the same). Returns the clock."""
        self.stamping = True
        self.publish(lanes, clock + 1, clock + 1, CLUSTER, ep, who)
        self.acquire(lanes, CLUSTER, clock + 2)
        return clock + 2

    def warp_sync(self, act: np.ndarray) -> None:
        """bar.warp.sync: the lanes that took part share what each of them acquired."""
        if not self.any_acquire:
            return
        W = act.size // 32
        A = act.reshape(W, 32)[:, :, None]
        T = self.t_lane.reshape(W, 32, 4)
        best = np.where(A, T, -1).max(1)[:, None, :]
        self.t_lane = np.where(A, np.maximum(T, best), T).reshape(-1, 4)

    # ------------------------------------------------------------------ events
    def publish(self, lanes: np.ndarray, cover: Any, visible: int, scope: Any, ep: Any, who: Any,
                pc: int = -1) -> None:
        """Lanes release: what each did (and what its block and warp did before it, by barrier and warp
        sync) before `cover` becomes visible from time `visible`. `ep`/`who`: the lanes' intervals and
        thread ids (shadow.py's encoding)."""
        blocks = self.block_of_lane[lanes]
        cover = np.broadcast_to(np.asarray(cover, np.int64), lanes.shape)
        scope = np.broadcast_to(np.asarray(scope, np.int64), lanes.shape)
        ep = np.asarray(ep, np.int64)
        who = np.asarray(who, np.int64)
        for lv in range(4):
            sel = scope >= lv
            if sel.any():
                e = ep[sel]
                self.pubs[lv].add(blocks[sel], e >> EP_SHIFT, who[sel] >> 5, cover[sel], visible)
        self.any_release = True
        for b in np.unique(blocks).tolist():
            self.rel_pc[b] = pc

    def acquire(self, lanes: np.ndarray, scope: Any, now: int, pc: int = -1) -> None:
        scope = np.broadcast_to(np.asarray(scope, np.int64), lanes.shape)
        for lv in range(4):
            sel = lanes[scope >= lv]
            if sel.size:
                self.t_lane[sel, lv] = now
        self.acq_pc[lanes] = pc
        self.any_acquire = True

    def on_op(self, lanes: np.ndarray, info: Any, clock: int, ep: np.ndarray, who: np.ndarray) -> int:
        """Apply one executed sync instruction to `lanes` (their intervals `ep`, thread ids `who`);
        returns the advanced clock."""
        s = info.scope
        if info.fence or info.release:
            self.stamping = True
        if info.fence:
            clock += 1
            pend = lanes[self.read_s[lanes] >= 0]
            if pend.size:  # strong read; fence -> acquire
                self.acquire(pend, np.minimum(self.read_s[pend], s), clock, info.pc)
                self.read_s[pend] = -1
            self.fence_t[lanes] = clock
            self.fence_s[lanes] = s
            return clock
        if info.release:
            clock += 1
            self.publish(lanes, clock, clock, s, ep, who, info.pc)
        elif info.strong_write:  # fence; strong write -> release at the narrower scope
            sel = self.fence_t[lanes] >= 0
            if sel.any():
                armed = lanes[sel]
                clock += 1
                self.publish(armed, self.fence_t[armed], clock, np.minimum(self.fence_s[armed], s),
                             np.asarray(ep)[sel], np.asarray(who)[sel], info.pc)
        if info.acquire:
            clock += 1
            self.acquire(lanes, s, clock, info.pc)
        elif info.strong_read:
            self.read_s[lanes] = np.maximum(self.read_s[lanes], s)
        return clock

    # ------------------------------------------------------------------ the check
    def ordered(self, writer: Any, wep: Any, when: Any, acc_lane: Any, wide: bool = False) -> Any:
        """Elementwise: is an access by thread `writer` (global id, shadow.py's encoding) in interval `wep`
        at time `when` ordered before the current access of lane `acc_lane`? `wide`: ignore scopes (every
        pair counts as if its scope were sufficient)."""
        if not self.any_release or not self.any_acquire:
            return np.zeros(np.shape(when), bool)
        writer = np.asarray(writer, np.int64)
        wep = np.asarray(wep, np.int64)
        wb = writer // self.lpb
        acc_block = self.block_of_lane[acc_lane]
        lv = np.zeros(np.shape(when), np.int64) if wide else self.level(wb, acc_block)
        t_acq = np.maximum(self.t_lane[acc_lane, lv], self.t_block[acc_block, lv])
        out = np.zeros(np.shape(when), bool)
        for level in np.unique(lv).tolist():
            sel = lv == level
            e = wep[sel]
            vis = self.pubs[level].first_visible(wb[sel], e >> EP_SHIFT, writer[sel] >> 5, when[sel])
            out[sel] = vis < t_acq[sel]
        return out


class HappensBefore:
    """What the shadow asks the sanitizer `san` about candidate races: from different blocks? ordered by a
    release/acquire pair? (It also notes, for the report, pairs that only too narrow a scope ordered.)"""

    def __init__(self, san: Any, global_: bool):
        self.san = san
        self.global_ = global_  # the global arena: pairs of different blocks are candidates too

    def active(self) -> bool:
        """Has any release and any acquire happened (else nothing is ordered beyond barriers)?"""
        order = self.san.order
        return order.any_release and order.any_acquire

    def other(self, pw: Any, who: Any) -> Any:
        lpb = self.san.lpb
        return (pw >= 0) & (pw // lpb != who // lpb)

    def ordered(self, mask: Any, pw: Any, pe: Any, when: Any) -> Any:
        san = self.san
        out = np.zeros(mask.shape, bool)
        order = san.order
        if not (order.any_release and order.any_acquire):
            return out
        idx = np.flatnonzero(mask)
        acc = san._acc_lanes[idx // san._acc_nb] if san._acc_nb > 1 else san._acc_lanes[idx]
        w = pw[idx].astype(np.int64)
        ok = order.ordered(w, pe[idx], when[idx], acc)
        out[idx] = ok
        rest = ~ok
        if rest.any():  # would a pair of too narrow a scope have ordered them? (named as a scope error)
            r = idx[rest]
            wide = order.ordered(w[rest], pe[r], when[r], acc[rest], wide=True)
            if wide.any():
                if san._narrow is None or san._narrow.size != mask.size:
                    san._narrow = np.full(mask.size, -1, np.int8)
                san._narrow[r[wide]] = order.level(w[rest][wide] // san.lpb,
                                                   san.block_of_lane[acc[rest][wide]])
        return out


def check_grid(nblocks: int, kernel: str) -> None:
    """Refuse a grid whose per-block synchronization state would take more than a quarter of this machine's
    memory (LaunchError): the sanitizer keeps it for every block of the grid, finished or not."""
    need = nblocks * SYNC_BYTES_PER_BLOCK
    budget = host_memory() // 4
    if need > budget:
        raise LaunchError(f"{kernel}: the sanitizer keeps {SYNC_BYTES_PER_BLOCK} bytes of synchronization state per "
                          f"block, {need:,} bytes for a grid of {nblocks:,} blocks: more than a quarter of this "
                          f"machine's memory ({budget:,} bytes); sanitize a grid of at most "
                          f"{budget // SYNC_BYTES_PER_BLOCK:,} blocks")


def cluster_of_block(machine: Any) -> np.ndarray:
    """The cluster index of every block (linear id) of the grid."""
    b = np.arange(machine.nblocks, dtype=np.int64)
    gx, gy, _ = machine.grid
    cx, cy, cz = getattr(machine, "cluster", (1, 1, 1))
    x, y, z = b % gx, (b // gx) % gy, b // (gx * gy)
    ncx, ncy = -(-gx // cx), -(-gy // cy)
    return x // cx + ncx * (y // cy + ncy * (z // cz))
