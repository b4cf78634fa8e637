"""Shadow memory: initialization and access history for race detection, per granule of a region.

Every granule of a tracked region (one global allocation, the shared memory of a wave, local memory) has
a flag byte (initialized, last write/read was a synchronizing access, several readers, pending
async copy) and, where races are tracked, the last writer and last reader: global thread id, the
barrier interval it ran in, and the instruction (pc). A granule is one byte in shared and local memory;
a global allocation starts with the size of its first access (at most 16 bytes) and splits its granules
(`refine`) when a narrower access arrives, so every byte of a granule always has the same state and the
checks stay byte-accurate. The writer and reader columns (and the time stamps) are made on first use:
an allocation that is only read has no writer columns.

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

from typing import Any

import numpy as np

INIT, W_SYNC, R_SYNC, R_MULTI, PENDING = 1, 2, 4, 8, 16
POISON = 32  # local memory: an undefined register value was stored here (a -G spill)
EP_SHIFT = 16
MAX_GRANULE = 16

# the columns made on first use: (dtype, value of a granule nobody accessed)
COLUMNS = {"w_who": (np.int32, -1), "w_ep": (np.int64, -1), "w_pc": (np.int32, 0), "w_t": (np.int64, 0),
           "r_who": (np.int32, -1), "r_ep": (np.int64, -1), "r_pc": (np.int32, 0), "r_t": (np.int64, 0)}


def same_interval(pe: Any, pw: Any, ep: Any, who: Any, exact: bool = False) -> Any:
    """Elementwise: the earlier access (pe, pw) and this one (ep, who) share a barrier interval.

    `exact`: no warp has passed a bar.warp.sync yet, so intervals are equal exactly when ep is.
    """
    if exact:
        return pe == ep
    blk = (pe >> EP_SHIFT) == (ep >> EP_SHIFT)
    return blk & (((pw >> 5) != (who >> 5)) | (pe == ep))


def _column(name: str, n: int) -> np.ndarray:
    """A new column of n granules nobody accessed. Only the who columns (and the time stamps, 0 for accesses
    before the first release) are read where nobody accessed a granule: every use of an interval or a pc
    is masked by a who >= 0, so those columns need no fill."""
    dtype, fill = COLUMNS[name]
    if name.endswith(("_ep", "_pc")):
        return np.empty(n, dtype)
    return np.full(n, fill, dtype)


def _touched(who) -> bool:
    """Did any thread access these granules (a who column holds -1 where none did)?"""
    return who.size > 0 and int(who.max()) >= 0


class Shadow:
    """The state of one memory region, per granule of `granule` bytes (new granules are uninitialized
    unless `init`). `pending`: the region can hold async-copy destinations (shared memory).

    Accesses pass `B`, the granule indices (an int array, or a slice when they are consecutive), and
    `who`/`ep` per element; `distinct` says no two elements name the same granule (no duplicate checks)."""

    exact = True  # set False by the sanitizer once any warp passes bar.warp.sync

    def __init__(self, size: int, *, init: bool, races: bool, granule: int = 1, pending: bool = True):
        self.races = races
        self.granule = granule
        self.pending = pending
        self.init_all = init  # every granule was initialized from the start (global memory held at launch)
        self.flags = np.full(size, INIT if init else 0, np.uint8)
        self.cols: dict = {}
        self.r_bits = False  # some granule has R_MULTI or R_SYNC set

    @property
    def size(self) -> int:
        return self.flags.size

    def col(self, name: str) -> np.ndarray:
        """Column `name`, made (every granule unaccessed) if it does not exist yet."""
        a = self.cols.get(name)
        if a is None:
            a = self.cols[name] = _column(name, self.flags.size)
        return a

    def refine(self, granule: int) -> None:
        """Split every granule into granules of `granule` bytes (each inherits its granule's state)."""
        k = self.granule // granule
        if k <= 1:
            return
        self.flags = np.repeat(self.flags, k)
        self.cols = {name: np.repeat(a, k) for name, a in self.cols.items()}
        self.granule = granule

    # ------------------------------------------------------------------ accesses
    def read(self, B: Any, who: Any, ep: Any, pc: int, sync: bool, check_init: bool, hb: Any = None,
             t: int | None = None, distinct: bool = False) -> tuple:
        """Record a read of granules B by threads `who` in intervals `ep`.

        Returns (uninitialized, pending, race, prev_who, prev_pc): bool arrays over B (None: none can be
        set), and for the racing elements the conflicting writer and its pc.
        """
        f = self.flags[B]
        uninit = (f & INIT) == 0 if check_init and not self.init_all else None
        pending = (f & PENDING) != 0 if self.pending else None
        if not self.races:
            return uninit, pending, None, None, None
        race = pw = ppc = None
        w_who = self.cols.get("w_who")
        if w_who is not None:
            pw = w_who[B]
        if pw is not None and not _touched(pw):
            pw = None
        if pw is not None:  # else nobody wrote these granules yet: no write-read race
            pe = self.cols["w_ep"][B]
            race = (pw >= 0) & (pw != who) & same_interval(pe, pw, ep, who, self.exact)
            if hb is not None:
                if hb.global_:
                    race |= hb.other(pw, who)
                race &= (f & W_SYNC) == 0  # a load next to an atomic/strong store of an aligned word is benign
                if hb.active() and race.any():
                    race &= ~hb.ordered(race, pw, pe, self.col("w_t")[B])
            else:
                race &= (f & W_SYNC) == 0
            if race.any():
                pw = pw.copy()
                ppc = self.cols["w_pc"][B].copy()
            else:
                race = pw = None
        r_who, r_ep = self.col("r_who"), self.col("r_ep")
        pr = r_who[B]
        pre = r_ep[B]
        if _touched(pr):
            other = (pr >= 0) & (pr != who) & same_interval(pre, pr, ep, who, self.exact)
            if hb is not None and hb.active() and other.any():  # a reader ordered before this one is subsumed
                other &= ~hb.ordered(other, pr, pre, self.col("r_t")[B])
            multi = other | ((pr >= 0) & ((f & R_MULTI) != 0) & (pre == ep))
        else:  # the first read of these granules since they were written (or ever)
            multi = None
        r_who[B] = who
        r_ep[B] = ep
        self.col("r_pc")[B] = pc
        if t is not None:
            self.col("r_t")[B] = t
        if not distinct:
            dup = r_who[B] != who  # several threads of this instruction read the granule
            if dup.any():
                multi = dup if multi is None else multi | dup
        if multi is not None or sync or self.r_bits:  # else no reader bit to set or clear
            f = f & ~np.uint8(R_MULTI | R_SYNC)
            if multi is not None:
                f |= multi.view(np.uint8) * np.uint8(R_MULTI)
            if sync:
                f |= np.uint8(R_SYNC)
            self.flags[B] = f
            self.r_bits = True
        return uninit, pending, race, pw, ppc

    def write(self, B: Any, who: Any, ep: Any, pc: int, sync: bool, hb: Any = None, check_init: bool = False,
              t: int | None = None, distinct: bool = False) -> tuple:
        """Record a write (or atomic, `sync`) of granules B. Returns (uninit, pending, race, prev_who,
        prev_pc, ww, dup): ww marks write-write races, dup those with another thread of this instruction
        (race and ww None: no race; dup None: no such thread)."""
        f = self.flags[B]
        uninit = (f & INIT) == 0 if check_init and not self.init_all else None
        pending = (f & PENDING) != 0 if self.pending else None
        if not self.races:
            self.flags[B] = f | np.uint8(INIT)
            return uninit, pending, None, None, None, None, None
        w_who, w_ep, w_pc = self.col("w_who"), self.col("w_ep"), self.col("w_pc")
        pw = w_who[B]
        pe = w_ep[B]
        ww: Any = None  # None: no write-write race
        if _touched(pw):  # else nobody wrote these granules yet
            ww = (pw >= 0) & (pw != who) & same_interval(pe, pw, ep, who, self.exact)
            if hb is not None and hb.global_:
                ww |= hb.other(pw, who)
        r_who = self.cols.get("r_who")
        rw: Any = None
        pr: Any = None
        pre: Any = None
        if r_who is not None and not sync:  # atomics race only with plain stores, not with loads
            pr = r_who[B]
            if _touched(pr):  # else nobody read these granules since they were last written
                pre = self.cols["r_ep"][B]
                rw = (pr >= 0) & ((pr != who) | ((f & R_MULTI) != 0)) & same_interval(pre, pr, ep, who, self.exact)
                if hb is not None and hb.global_:
                    rw |= hb.other(pr, who)
        if sync and ww is not None:  # no torn or lost values
            ww &= (f & W_SYNC) == 0
        if hb is not None and hb.active():
            if ww is not None and ww.any():
                ww &= ~hb.ordered(ww, pw, pe, self.col("w_t")[B])
            if rw is not None and rw.any():
                rw &= ~hb.ordered(rw, pr, pre, self.col("r_t")[B])
        if ww is None and rw is not None:
            ww = np.zeros(rw.shape, bool)
        race = None if ww is None else ww.copy() if rw is None else ww | rw
        prev_who: Any = None
        prev_pc: Any = None
        if race is not None and race.any():  # the other side of each race, read before this write overwrites it
            if rw is None:
                prev_who = np.where(ww, pw, -1)
                prev_pc = np.where(ww, w_pc[B], 0)
            else:
                prev_who = np.where(ww, pw, pr)
                prev_pc = np.where(ww, w_pc[B], self.cols["r_pc"][B])
        w_who[B] = who
        w_ep[B] = ep
        w_pc[B] = pc
        if t is not None:
            self.col("w_t")[B] = t
        dup = None
        if not sync and not distinct:
            dup = w_who[B] != who  # another thread of this instruction wrote the granule
            if dup.any():
                other = w_who[B]
                if race is None:
                    race, ww = np.zeros(dup.shape, bool), np.zeros(dup.shape, bool)
                prev_who = np.where(dup & ~race, other, -1 if prev_who is None else prev_who)
                prev_pc = np.where(dup & ~race, pc, 0 if prev_pc is None else prev_pc)
                race |= dup
                ww |= dup
        if r_who is not None:
            if pr is None:
                pr = r_who[B]
            if _touched(pr):
                r_who[B] = -1
                self.cols["r_ep"][B] = -1
        self.flags[B] = np.uint8(INIT | W_SYNC) if sync else np.uint8(INIT)
        return uninit, pending, race, prev_who, prev_pc, ww, dup


class WindowShadow(Shadow):
    """A `Shadow` of a region of `total` granules that keeps state only for a window [base, base + size) of
    them: the granules accessed so far, grown (at least doubling, to the whole region once the window would
    be an eighth of it) when an access falls outside. So a launch that touches a small part of a large
    buffer costs that part. Accesses name granules of the whole region; `read`/`write` translate them."""

    MIN_WINDOW = 1024

    def __init__(self, total: int, *, init: bool, races: bool, granule: int):
        super().__init__(0, init=init, races=races, granule=granule, pending=False)
        self.total = total
        self.base = 0

    def refine(self, granule: int) -> None:
        k = self.granule // granule
        if k > 1:
            super().refine(granule)
            self.base *= k
            self.total *= k

    def _cover(self, lo: int, hi: int) -> None:
        base, n = self.base, self.flags.size
        if base <= lo and hi <= base + n:
            return
        new_lo, new_hi = (lo, hi) if n == 0 else (min(lo, base), max(hi, base + n))
        want = max(new_hi - new_lo, 2 * n, self.MIN_WINDOW)
        if 8 * want >= self.total:  # a wave covers much of the region: later waves will cover the rest
            new_lo, new_hi = 0, self.total
        else:
            new_hi = min(self.total, new_lo + want)
            new_lo = max(0, new_hi - want)
        at = slice(base - new_lo, base - new_lo + n)
        flags = np.full(new_hi - new_lo, INIT if self.init_all else 0, np.uint8)
        flags[at] = self.flags
        self.flags = flags
        for name, old in self.cols.items():
            new = _column(name, new_hi - new_lo)
            new[at] = old
            self.cols[name] = new
        self.base = new_lo

    def _local(self, B):
        if isinstance(B, slice):
            self._cover(B.start, B.stop)
            return slice(B.start - self.base, B.stop - self.base)
        self._cover(int(B.min()), int(B.max()) + 1)
        return B - self.base if self.base else B

    def read(self, B: Any, *args: Any, **kw: Any) -> tuple:
        return super().read(self._local(B), *args, **kw)

    def write(self, B: Any, *args: Any, **kw: Any) -> tuple:
        return super().write(self._local(B), *args, **kw)
