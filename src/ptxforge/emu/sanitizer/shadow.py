"""Shadow memory: per-byte initialization and access history for race detection.

Every byte of a tracked region (the global arena, the shared memory of a wave, local memory) has
a flag byte (initialized, last write/read was a synchronizing access, several readers, pending
async copy) and, where races are tracked, the last writer and last reader: global thread id, the
barrier interval it ran in, and the instruction (pc).

Only conflicts involving a plain store are races: atomic and strong (volatile/relaxed/acquire/release)
accesses do not race with each other, and a load beside an atomic update of the same bytes reads either
value whole (the CAS-loop idiom `old = *p; do ... atomicCAS(p, ...)` is not reported).

Intervals (`ep`) are int64: the high bits are a block interval id, unique across the launch and
renewed whenever the block passes a barrier; the low 16 bits count the warp's `bar.warp.sync`s
inside it. Two accesses by different threads are unordered (may race) when they are in the same
block interval and either come from different warps or from the same warp interval. Accesses of
different blocks are unordered. Either kind of pair is ordered after all when a release/acquire chain
orders it (order.py): for that each access also keeps its time stamp (`w_t`, `r_t`), and `hb`, the
launch's happens-before oracle, says which candidate pairs are ordered (`hb.ordered(mask, who, ep, when)`)
and, for the global arena, which pairs come from different blocks (`hb.other(who_before, who)`).
"""

from __future__ import annotations

import numpy as np

INIT, W_SYNC, R_SYNC, R_MULTI, PENDING = 1, 2, 4, 8, 16
POISON = 32  # local memory: an undefined register value was stored here (a -G spill)
EP_SHIFT = 16


def same_interval(pe, pw, ep, who, exact: bool = False):
    """Elementwise: the earlier access (pe, pw) and this one (ep, who) share a barrier interval.

    `exact`: no warp has passed a bar.warp.sync yet, so intervals are equal exactly when ep is.
    """
    if exact:
        return pe == ep
    blk = (pe >> EP_SHIFT) == (ep >> EP_SHIFT)
    return blk & (((pw >> 5) != (who >> 5)) | (pe == ep))


class Shadow:
    """Per-byte state of one memory region (grows with it; new bytes are uninitialized)."""

    exact = True  # set False by the sanitizer once any warp passes bar.warp.sync

    def __init__(self, size: int, *, init: bool, races: bool):
        self.races = races
        self.flags = np.full(size, INIT if init else 0, np.uint8)
        if races:
            self.w_who = np.full(size, -1, np.int32)
            self.w_ep = np.full(size, -1, np.int64)
            self.w_pc = np.zeros(size, np.int32)
            self.r_who = np.full(size, -1, np.int32)
            self.r_ep = np.full(size, -1, np.int64)
            self.r_pc = np.zeros(size, np.int32)
            self.w_t = np.zeros(size, np.int64)
            self.r_t = np.zeros(size, np.int64)

    @property
    def size(self) -> int:
        return self.flags.size

    def ensure(self, size: int) -> None:
        if size <= self.flags.size:
            return
        size = max(size, 2 * self.flags.size)
        for name, fill in (("flags", 0), ("w_who", -1), ("w_ep", -1), ("w_pc", 0), ("r_who", -1),
                           ("r_ep", -1), ("r_pc", 0), ("w_t", 0), ("r_t", 0)):
            old = getattr(self, name, None)
            if old is None:
                continue
            new = np.full(size, fill, old.dtype)
            new[: old.size] = old
            setattr(self, name, new)

    def reset(self) -> None:
        self.flags[:] = 0
        if self.races:
            self.w_who[:] = -1
            self.w_ep[:] = -1
            self.r_who[:] = -1
            self.r_ep[:] = -1

    # ------------------------------------------------------------------ accesses
    def read(self, B, who, ep, pc: int, sync: bool, check_init: bool, hb=None, t: int | None = None):
        """Record a read of bytes B by threads `who` in intervals `ep`.

        Returns (uninitialized, pending, race, prev_who, prev_pc): bool arrays over B, and for the racing
        elements the conflicting writer and its pc.
        """
        f = self.flags[B]
        uninit = (f & INIT) == 0 if check_init else None
        pending = (f & PENDING) != 0
        if not self.races:
            return uninit, pending, None, None, None
        pw = self.w_who[B]
        pe = self.w_ep[B]
        race = (pw >= 0) & (pw != who) & same_interval(pe, pw, ep, who, self.exact)
        if hb is not None:
            if hb.global_:
                race |= hb.other(pw, who)
            race &= (f & W_SYNC) == 0  # a load next to an atomic/strong store of an aligned word is benign
            if hb.active() and race.any():
                race &= ~hb.ordered(race, pw, pe, self.w_t[B])
        else:
            race &= (f & W_SYNC) == 0
        pr = self.r_who[B]
        pre = self.r_ep[B]
        other = (pr >= 0) & (pr != who) & same_interval(pre, pr, ep, who, self.exact)
        if hb is not None and hb.active() and other.any():  # a reader ordered before this one is subsumed
            other &= ~hb.ordered(other, pr, pre, self.r_t[B])
        multi = other | ((pr >= 0) & ((f & R_MULTI) != 0) & (pre == ep))
        self.r_who[B] = who
        self.r_ep[B] = ep
        self.r_pc[B] = pc
        if t is not None:
            self.r_t[B] = t
        dup = self.r_who[B] != who  # several threads of this instruction read the byte
        if dup.any():
            multi |= dup
        f = (f & ~np.uint8(R_MULTI | R_SYNC)) | np.where(multi, np.uint8(R_MULTI), np.uint8(0))
        if sync:
            f |= np.uint8(R_SYNC)
        self.flags[B] = f
        return uninit, pending, race, pw, self.w_pc[B]

    def write(self, B, who, ep, pc: int, sync: bool, hb=None, check_init: bool = False, t: int | None = None):
        """Record a write (or atomic, `sync`) of bytes B. Returns (uninit, pending, race, prev_who,
        prev_pc, ww, dup): ww marks write-write races, dup those with another thread of this instruction."""
        f = self.flags[B]
        uninit = (f & INIT) == 0 if check_init else None
        pending = (f & PENDING) != 0
        if not self.races:
            self.flags[B] = f | np.uint8(INIT)
            return uninit, pending, None, None, None, None, None
        pw = self.w_who[B]
        pe = self.w_ep[B]
        ww = (pw >= 0) & (pw != who) & same_interval(pe, pw, ep, who, self.exact)
        pr = self.r_who[B]
        pre = self.r_ep[B]
        rw = (pr >= 0) & ((pr != who) | ((f & R_MULTI) != 0)) & same_interval(pre, pr, ep, who, self.exact)
        if hb is not None and hb.global_:
            ww |= hb.other(pw, who)
            rw |= hb.other(pr, who)
        if sync:  # atomics race only with plain stores, not with loads (no torn or lost values)
            ww &= (f & W_SYNC) == 0
            rw[:] = False
        if hb is not None and hb.active():
            if ww.any():
                ww &= ~hb.ordered(ww, pw, pe, self.w_t[B])
            if rw.any():
                rw &= ~hb.ordered(rw, pr, pre, self.r_t[B])
        prev_who = np.where(ww, pw, pr)
        prev_pc = np.where(ww, self.w_pc[B], self.r_pc[B])
        race = ww | rw
        self.w_who[B] = who
        self.w_ep[B] = ep
        self.w_pc[B] = pc
        if t is not None:
            self.w_t[B] = t
        dup = None
        if not sync:
            dup = self.w_who[B] != who  # another thread of this instruction wrote the byte
            if dup.any():
                other = self.w_who[B]
                prev_who = np.where(dup & ~race, other, prev_who)
                prev_pc = np.where(dup & ~race, pc, prev_pc)
                race |= dup
                ww |= dup
        self.r_who[B] = -1
        self.r_ep[B] = -1
        self.flags[B] = np.uint8(INIT | W_SYNC) if sync else np.uint8(INIT)
        return uninit, pending, race, prev_who, prev_pc, ww, dup


class PageMap:
    """Maps byte offsets of a large region (the global arena) to a compact shadow, page by page on
    first touch, so the shadow grows with the memory a kernel uses, not with every allocation."""

    PAGE_BITS = 12

    def __init__(self, shadow: Shadow, initialized):
        self.shadow = shadow
        spans = sorted(initialized)  # (offset, size) of the allocations that existed at launch start
        self.starts = np.asarray([o for o, _ in spans], np.int64)
        self.ends = np.asarray([o + n for o, n in spans], np.int64)
        self.table = np.full(0, -1, np.int64)
        self.used = 0

    def index(self, B):
        pg = B >> self.PAGE_BITS
        top = int(pg.max()) + 1 if pg.size else 0
        if top > self.table.size:
            grown = np.full(max(top, 2 * self.table.size), -1, np.int64)
            grown[: self.table.size] = self.table
            self.table = grown
        base = self.table[pg]
        if (base < 0).any():
            self._map(np.unique(pg[base < 0]))
            base = self.table[pg]
        return base + (B & ((1 << self.PAGE_BITS) - 1))

    def _map(self, pages) -> None:
        size = 1 << self.PAGE_BITS
        first = self.used
        self.used += pages.size * size
        self.shadow.ensure(self.used)
        self.table[pages] = first + np.arange(pages.size, dtype=np.int64) * size
        # flags of the new pages: initialized where an allocation held the byte when the launch started
        offs = (pages[:, None] * size + np.arange(size)).ravel()
        i = np.searchsorted(self.starts, offs, side="right") - 1
        inside = (i >= 0) & (offs < self.ends[np.clip(i, 0, None)]) if self.starts.size else np.zeros(offs.size, bool)
        self.shadow.flags[first: self.used] = np.where(inside, INIT, 0).astype(np.uint8)
