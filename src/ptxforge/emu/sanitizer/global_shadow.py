"""The global memory's shadow: one `WindowShadow` per allocation, made when a launch first touches it and
covering the granules touched so far.

An allocation that existed when the launch started counts as initialized; one made during it (device
malloc) does not. Its granule starts as the size of the first access (at most 16 bytes, and no larger
than the alignment every lane's offset shares) and narrows when a narrower access arrives, so a kernel
that reads and writes 4-byte words keeps one entry per word of the buffers it touches, and a buffer it
does not touch costs nothing.

`split` maps an access (arena byte offsets per lane, bytes per lane) to (shadow, lanes, granule
indices) per allocation, granule indices as a slice where the lanes touch consecutive granules in order
(the common case: coalesced accesses), which the shadow reads and writes as views.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from ptxforge.emu import memory as M
from ptxforge.emu import ramps as R
from ptxforge.emu.sanitizer.shadow import MAX_GRANULE, Shadow, WindowShadow


def _lowbit(x: int) -> int:
    return x & -x if x else MAX_GRANULE


class GlobalShadow:
    """Per-allocation shadows of one launch's global memory."""

    def __init__(self, device: M.DeviceMemory, races: bool):
        self.device = device
        self.races = races
        self.held = {id(a): a for a in device.allocations}  # allocations that existed at launch start
        self.by_offset: dict = {}  # arena offset -> (allocation, Shadow)
        self._exact = True

    @property
    def exact(self) -> bool:
        return self._exact

    @exact.setter
    def exact(self, value: bool) -> None:
        self._exact = value
        for _, sh in self.by_offset.values():
            sh.exact = value

    @property
    def bytes(self) -> int:
        """Bytes of shadow state held now (for measurements)."""
        return sum(sh.flags.nbytes + sum(a.nbytes for a in sh.cols.values()) for _, sh in self.by_offset.values())

    def shadow(self, alloc: M.Allocation, granule: int) -> Shadow:
        """The shadow of `alloc`, made on first use with granules of `granule` bytes, or refined to them."""
        hit = self.by_offset.get(alloc.offset)
        if hit is not None and hit[0] is alloc:
            sh = hit[1]
            if granule < sh.granule:
                sh.refine(granule)
            return sh
        n = -(-max(alloc.size, 1) // granule)
        sh = WindowShadow(n, init=id(alloc) in self.held and self.held[id(alloc)] is alloc, races=self.races,
                          granule=granule)
        sh.exact = self._exact
        self.by_offset[alloc.offset] = (alloc, sh)
        return sh

    def _owner(self, off: int):
        return self.device.owner(M.GLOBAL_BASE + off)  # a node GPU's memory: any GPU's allocation

    def split(self, idx: np.ndarray, nb: int) -> list[tuple]:
        """[(shadow, positions of the lanes or None for all, granule index array or slice, granules per
        lane)] for an access of `nb` bytes per lane at arena offsets `idx` (every lane inside an
        allocation, aligned to nb: the emulator checked)."""
        run = R.run_of(idx)  # an access at a ramp's addresses (memory.py): its ends say where it lies
        lo, hi = (run[0], run[0] + run[1] * (idx.size - 1)) if run else (int(idx.min()), int(idx.max()))
        a = self._owner(lo)
        if a is not None and hi + nb <= a.offset + a.size:
            return [self._part(a, None, idx, nb)]
        allocs = self.device.allocations
        starts = np.asarray([x.offset for x in allocs], np.int64)
        which = np.searchsorted(starts, idx, side="right") - 1
        out = []
        for i in np.unique(which).tolist():
            pos = np.flatnonzero(which == i)
            if i < 0 or int(idx[pos].max()) + nb > allocs[i].offset + allocs[i].size:
                continue  # outside every allocation: the emulator faults such lanes before they get here
            out.append(self._part(allocs[i], pos, idx[pos], nb))
        return out

    def _part(self, alloc, pos, idx, nb: int):
        return granule_part(lambda g: self.shadow(alloc, g), pos, idx, nb, alloc.offset)


def _consecutive(idx, nb: int) -> bool:
    """Do the lanes access consecutive nb-byte elements, in lane order?"""
    k = idx.size
    if k == 1:
        return True
    run = R.run_of(idx)
    if run is not None:
        return run[1] == nb
    if int(idx[-1]) - int(idx[0]) != (k - 1) * nb:
        return False
    return bool((np.diff(idx) == nb).all())


def granule_part(shadow_for: Any, pos: np.ndarray | None, idx: np.ndarray, nb: int, origin: int = 0) -> tuple:
    """(shadow, pos, granule indices, granules per lane) of an access of nb bytes per lane at byte offsets
    `idx - origin` of one region; `shadow_for(granule)` gives the region's shadow at that granule or finer."""
    g = min(MAX_GRANULE, _lowbit(nb))
    run = _consecutive(idx, nb)
    if g > 1:  # every lane's offset must be a multiple of the granule (consecutive lanes: the first one's)
        low = (int(idx[0]) - origin if run else int(np.bitwise_or.reduce(idx - origin))) & (g - 1)
        if low:
            g = _lowbit(low)
    sh = shadow_for(g)
    g = sh.granule
    shift = g.bit_length() - 1
    per = nb >> shift
    if run:
        first = (int(idx[0]) - origin) >> shift
        return sh, pos, slice(first, first + idx.size * per), per
    q = (idx - origin) >> shift
    S = q if per == 1 else (q[:, None] + np.arange(per, dtype=np.int64)).ravel()
    return sh, pos, S, per
