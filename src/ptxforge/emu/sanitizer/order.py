"""Happens-before through release/acquire: the causality order of the PTX memory model, for the race check.

Barrier intervals (shadow.py) order the threads of a block; this module orders accesses that barriers do
not: those of different blocks, and those of one block inside a barrier interval, through

- release patterns: `st/atom/red` with `.release`/`.acq_rel`, or a fence (`fence.sc/acq_rel`, `membar`)
  followed in the same thread by a strong write (`.relaxed`, `.volatile`, an atomic);
- acquire patterns: `ld/atom` with `.acquire`/`.acq_rel`, or a strong read followed by a fence in the same
  thread; a relaxed atomic read-modify-write also acquires (the last-block idiom `__threadfence();
  atomicAdd(ticket)` of CUDA's programming guide, which has no fence after the ticket).

Each release *publishes* the releasing block's history: every access of that block stamped before the
release (its cover time) becomes visible to a thread that acquires, at a sufficient scope, after the
publication became visible (the time of the releasing write). A thread's acquisitions reach the rest of
its block at the block's next barrier (or mbarrier phase). Publications are not tied to the location
they were written to: an acquire observes every publication made before it in the emulator's order
(which is sequentially consistent, so the value an acquire read was written before it).

Scopes: a release/acquire pair synchronizes two threads only when both scopes include both threads.
`level(a, b)` is the narrowest scope that holds two blocks (0 .cta, 1 .cluster, 2 .gpu, 3 .sys); a block's
identity is its linear id plus its cluster and its GPU, so a "different GPU" boundary is one more column.
A race whose accesses a pair of too narrow a scope would have ordered is reported as a scope error.

Known leniency: a release covers every earlier access of the releasing block, also those of other threads
of its current barrier interval (the hardware's SIMT order makes them earlier, the model does not).
"""

from __future__ import annotations

import numpy as np

CTA, CLUSTER, GPU, SYS = range(4)
SCOPE_NAMES = (".cta", ".cluster", ".gpu", ".sys")
SCOPES = {"cta": CTA, "cluster": CLUSTER, "gpu": GPU, "sys": SYS, "gl": GPU}
_SHIFT = 40  # publication keys: block << 40 | time
_MASK = (1 << _SHIFT) - 1


class Publications:
    """The releases made at one scope level or wider: (block, cover time, visible time)."""

    def __init__(self):
        self.blocks: list = []
        self.covers: list = []
        self.visibles: list = []
        self._keys = None
        self._sufmin = None

    def add(self, blocks, cover, visible) -> None:
        self.blocks.append(np.asarray(blocks, np.int64))
        self.covers.append(np.broadcast_to(np.asarray(cover, np.int64), np.shape(blocks)).copy())
        self.visibles.append(np.broadcast_to(np.asarray(visible, np.int64), np.shape(blocks)).copy())
        self._keys = None

    def _build(self) -> None:
        b = np.concatenate(self.blocks)
        c = np.concatenate(self.covers)
        v = np.concatenate(self.visibles)
        keys = (b << _SHIFT) | c
        order = np.argsort(keys, kind="stable")
        keys, b, v = keys[order], b[order], v[order]
        # per block segment: the earliest visible time among this and every later-covering release
        self._sufmin = np.minimum.accumulate(((b << _SHIFT) | v)[::-1])[::-1]
        self._keys = keys
        self.blocks, self.covers, self.visibles = [b], [keys & _MASK], [v]

    def first_visible(self, blocks, after):
        """Per element: the earliest time a release of `blocks` covering time `after` became visible
        (a huge number where none did)."""
        if not self.blocks:
            return np.full(np.shape(blocks), np.iinfo(np.int64).max, np.int64)
        if self._keys is None:
            self._build()
        blocks = np.asarray(blocks, np.int64)
        i = np.searchsorted(self._keys, (blocks << _SHIFT) | after, side="right")
        ok = i < self._keys.size
        s = self._sufmin[np.minimum(i, self._keys.size - 1)]
        ok &= (s >> _SHIFT) == blocks
        return np.where(ok, s & _MASK, np.iinfo(np.int64).max)


class SyncOrder:
    """Release/acquire state of one launch: publications per scope level, acquisitions per lane and block."""

    def __init__(self, nblocks: int, cluster_of_block, gpu_of_block=None):
        self.cluster_of_block = np.asarray(cluster_of_block, np.int64)
        self.gpu_of_block = None if gpu_of_block is None else np.asarray(gpu_of_block, np.int64)
        self.pubs = [Publications() for _ in range(4)]
        self.t_block = np.full((nblocks, 4), -1, np.int64)  # latest acquire seen by the block, per level
        self.any_acquire = False
        self.any_release = False
        # accesses need time stamps only once a fence or release happened: until then every access
        # precedes every release (unstamped bytes keep time 0), which keeps fence-free kernels fast
        self.stamping = False

    def level(self, a, b):
        """The narrowest scope level that contains both blocks (elementwise)."""
        lv = np.where(a == b, CTA, np.where(self.cluster_of_block[a] == self.cluster_of_block[b], CLUSTER, GPU))
        if self.gpu_of_block is not None:
            lv = np.where(self.gpu_of_block[a] == self.gpu_of_block[b], lv, SYS)
        return lv

    # ------------------------------------------------------------------ per wave
    def new_wave(self, nlanes: int, block_of_lane) -> None:
        self.block_of_lane = block_of_lane
        self.t_lane = np.full((nlanes, 4), -1, np.int64)
        self.fence_t = np.full(nlanes, -1, np.int64)  # time of the lane's last fence (arms a release)
        self.fence_s = np.full(nlanes, -1, np.int8)
        self.read_s = np.full(nlanes, -1, np.int8)  # widest scope of strong reads since the last fence

    def barrier(self, lanes) -> None:
        """Lanes passed a barrier of their block: the block inherits what they acquired."""
        if not self.any_acquire or lanes.size == 0:
            return
        np.maximum.at(self.t_block, self.block_of_lane[lanes], self.t_lane[lanes])

    def warp_sync(self, act) -> None:
        """bar.warp.sync: the lanes that took part share what each of them acquired."""
        if not self.any_acquire:
            return
        W = act.size // 32
        A = act.reshape(W, 32)[:, :, None]
        T = self.t_lane.reshape(W, 32, 4)
        best = np.where(A, T, -1).max(1)[:, None, :]
        self.t_lane = np.where(A, np.maximum(T, best), T).reshape(-1, 4)

    # ------------------------------------------------------------------ events
    def publish(self, lanes, cover, visible: int, scope) -> None:
        """Lanes release: what their blocks did before `cover` becomes visible from time `visible`."""
        blocks = self.block_of_lane[lanes]
        cover = np.broadcast_to(np.asarray(cover, np.int64), lanes.shape)
        scope = np.broadcast_to(np.asarray(scope, np.int64), lanes.shape)
        for lv in range(4):
            sel = scope >= lv
            if sel.any():
                keys = np.unique((blocks[sel] << _SHIFT) | cover[sel])
                self.pubs[lv].add(keys >> _SHIFT, keys & _MASK, visible)
        self.any_release = True

    def acquire(self, lanes, scope, now: int) -> None:
        scope = np.broadcast_to(np.asarray(scope, np.int64), lanes.shape)
        for lv in range(4):
            sel = lanes[scope >= lv]
            if sel.size:
                self.t_lane[sel, lv] = now
        self.any_acquire = True

    def on_op(self, lanes, info, clock: int) -> int:
        """Apply one executed sync instruction to `lanes`; returns the advanced clock."""
        s = info.scope
        if info.fence or info.release:
            self.stamping = True
        if info.fence:
            clock += 1
            pend = lanes[self.read_s[lanes] >= 0]
            if pend.size:  # strong read; fence -> acquire
                self.acquire(pend, np.minimum(self.read_s[pend], s), clock)
                self.read_s[pend] = -1
            self.fence_t[lanes] = clock
            self.fence_s[lanes] = s
            return clock
        if info.release:
            clock += 1
            self.publish(lanes, clock, clock, s)
        elif info.strong_write:  # fence; strong write -> release at the narrower scope
            armed = lanes[self.fence_t[lanes] >= 0]
            if armed.size:
                clock += 1
                self.publish(armed, self.fence_t[armed], clock, np.minimum(self.fence_s[armed], s))
        if info.acquire:
            clock += 1
            self.acquire(lanes, s, clock)
        elif info.strong_read:
            self.read_s[lanes] = np.maximum(self.read_s[lanes], s)
        return clock

    # ------------------------------------------------------------------ the check
    def ordered(self, writer_block, when, acc_lane, wide: bool = False):
        """Elementwise: is an access of `writer_block` stamped `when` ordered before the current access of
        lane `acc_lane`? `wide`: ignore scopes (every pair counts as if its scope were sufficient)."""
        if not self.any_release or not self.any_acquire:
            return np.zeros(np.shape(when), bool)
        acc_block = self.block_of_lane[acc_lane]
        lv = np.zeros(np.shape(when), np.int64) if wide else self.level(writer_block, acc_block)
        t_acq = np.maximum(self.t_lane[acc_lane, lv], self.t_block[acc_block, lv])
        out = np.zeros(np.shape(when), bool)
        for level in np.unique(lv).tolist():
            sel = lv == level
            vis = self.pubs[level].first_visible(writer_block[sel], when[sel])
            out[sel] = vis < t_acq[sel]
        return out
