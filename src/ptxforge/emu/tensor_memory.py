"""Blackwell tensor memory (TMEM): per CTA 128 lanes x 512 columns of 32-bit cells, allocated by columns.

A TMEM address is 32 bits: lane in bits 31..16, column in bits 15..0 (PTX ISA, "Tensor Memory
Addressing"). tcgen05.alloc hands out a power-of-two number of columns (32..512) for all 128 lanes;
the emulator places each allocation first-fit on 32-column granules. Warp w of a warpgroup may only
access lanes 32*(w%4) .. 32*(w%4)+31 ("Tensor Memory Access restrictions"). Every violation raises
MemoryFault (kind 'tensor-memory') naming the columns or lanes involved; the machine adds the
instruction and the thread.

One `TensorMemory` serves the CTAs of one wave; a CTA's cells are created on its first allocation.
For the sanitizer: `written` marks the cells a tcgen05.st or tcgen05.mma wrote since their allocation;
`inflight` holds the D columns of MMAs that are asynchronous on a GPU until a tcgen05.commit of their
thread and an observed completion of an mbarrier phase (the emulator completes them at issue).
"""

from __future__ import annotations

import numpy as np

from ptxforge.emu.errors import MemoryFault

LANES = 128
COLUMNS = 512
GRANULE = 32  # allocation unit in columns
LANES_PER_WARP = 32


def split(taddr: int) -> tuple[int, int]:
    """(lane, column) of a TMEM address."""
    return (taddr >> 16) & 0xFFFF, taddr & 0xFFFF


def fault(msg: str, lane: int, taddr: int | None = None, size: int | None = None) -> MemoryFault:
    e = MemoryFault(msg, kind="tensor-memory", address=taddr, size=size)
    e._lane = lane  # the machine names this thread and the instruction
    return e


class TensorMemory:
    """The tensor memory of the CTAs (slots) of one wave."""

    def __init__(self) -> None:
        self.cells: dict[int, np.ndarray] = {}  # slot -> uint32 [LANES, COLUMNS]
        self.written: dict[int, np.ndarray] = {}  # slot -> bool [LANES, COLUMNS]
        self.allocs: dict[int, dict[int, tuple[int, str]]] = {}  # slot -> {first column: (ncols, where)}
        self.relinquished: set[int] = set()
        self.inflight: dict[int, dict[tuple[int, int, int], bool]] = {}  # slot -> {(lane, col, n): committed}

    # ------------------------------------------------------------------ allocation
    def alloc(self, slot: int, ncols: int, lane: int, where: str) -> int:
        """Allocate `ncols` columns for CTA `slot`; returns the TMEM address (lane 0, first column)."""
        if ncols < GRANULE or ncols > COLUMNS or ncols & (ncols - 1):
            raise fault(f"tcgen05.alloc of {ncols} columns: the count must be a power of two from 32 to 512",
                        lane)
        if slot in self.relinquished:
            raise fault("tcgen05.alloc after tcgen05.relinquish_alloc_permit: this CTA gave up its right to "
                        "allocate tensor memory", lane)
        used = self._used(slot)
        need = ncols // GRANULE
        for g in range(0, COLUMNS // GRANULE - need + 1):
            if not used[g: g + need].any():
                first = g * GRANULE
                self.allocs.setdefault(slot, {})[first] = (ncols, where)
                if slot not in self.cells:
                    self.cells[slot] = np.zeros((LANES, COLUMNS), np.uint32)
                    self.written[slot] = np.zeros((LANES, COLUMNS), bool)
                self.written[slot][:, first: first + ncols] = False
                return first
        free = int((~used).sum()) * GRANULE
        raise fault(f"tcgen05.alloc of {ncols} columns: only {free} of {COLUMNS} columns are free "
                    f"(allocated: {self.describe(slot)}); on a GPU the warp would wait for a dealloc, the "
                    "emulator stops here", lane)

    def dealloc(self, slot: int, taddr: int, ncols: int, lane: int) -> None:
        row, col = split(taddr)
        mine = self.allocs.get(slot, {})
        if row != 0 or col not in mine:
            raise fault(f"tcgen05.dealloc of {ncols} columns at {taddr:#010x} (lane {row}, column {col}): "
                        f"no allocation starts there (allocated: {self.describe(slot)}); "
                        "deallocated twice, or an address tcgen05.alloc did not return", lane, taddr)
        have = mine[col][0]
        if have != ncols:
            raise fault(f"tcgen05.dealloc of {ncols} columns at column {col}: that allocation has {have} "
                        "columns", lane, taddr)
        del mine[col]

    def relinquish(self, slot: int) -> None:
        self.relinquished.add(slot)

    def _used(self, slot: int) -> np.ndarray:
        used = np.zeros(COLUMNS // GRANULE, bool)
        for first, (n, _) in self.allocs.get(slot, {}).items():
            used[first // GRANULE: (first + n) // GRANULE] = True
        return used

    def describe(self, slot: int) -> str:
        a = self.allocs.get(slot, {})
        return ", ".join(f"columns {c}-{c + n - 1}" for c, (n, _) in sorted(a.items())) or "nothing"

    def leaks(self) -> list[tuple[int, int, int, str]]:
        """(slot, first column, ncols, where allocated) of every allocation still held."""
        return [(s, c, n, w) for s, a in sorted(self.allocs.items()) for c, (n, w) in sorted(a.items())]

    # ------------------------------------------------------------------ asynchronous MMAs (sanitizer)
    def mma_issued(self, slot: int, lane: int, col0: int, ncols: int) -> None:
        self.inflight.setdefault(slot, {})[(lane, col0, ncols)] = False

    def commit(self, slot: int, lane: int) -> None:
        """tcgen05.commit by `lane`: its MMAs complete with the mbarrier phase it arrives on."""
        mine = self.inflight.get(slot, {})
        for key in mine:
            if key[0] == lane:
                mine[key] = True

    def phase_observed(self, slot: int) -> None:
        """A thread of the CTA saw an mbarrier phase complete: committed MMAs are done."""
        mine = self.inflight.get(slot)
        if mine:
            for key in [k for k, done in mine.items() if done]:
                del mine[key]

    def inflight_overlap(self, slot: int, col0: int, ncols: int) -> tuple[int, int, int, bool] | None:
        """(issuing lane, first column, ncols, committed) of an MMA still in flight over these columns."""
        for (lane, c, n), done in self.inflight.get(slot, {}).items():
            if c < col0 + ncols and col0 < c + n:
                return lane, c, n, done
        return None

    # ------------------------------------------------------------------ access
    def check(self, slot: int, lane0: int, nlanes: int, col0: int, ncols: int, lane: int, taddr: int,
              what: str) -> np.ndarray:
        """The cells [nlanes, ncols] at (lane0, col0) of CTA `slot`, after checking they are allocated."""
        if lane0 + nlanes > LANES or col0 + ncols > COLUMNS:
            raise fault(f"{what} lanes {lane0}-{lane0 + nlanes - 1}, columns {col0}-{col0 + ncols - 1} at "
                        f"{taddr:#010x}: tensor memory has {LANES} lanes and {COLUMNS} columns", lane, taddr)
        used = np.repeat(self._used(slot), GRANULE)[col0: col0 + ncols]
        if not used.all():
            bad = col0 + int(np.flatnonzero(~used)[0])
            raise fault(f"{what} columns {col0}-{col0 + ncols - 1} at {taddr:#010x}: column {bad} is not "
                        f"allocated (allocated: {self.describe(slot)}); tcgen05.alloc first", lane, taddr)
        return self.cells[slot][lane0: lane0 + nlanes, col0: col0 + ncols]


def check_warp_lanes(warp: int, lane0: int, nlanes: int, lane: int, taddr: int, what: str) -> None:
    """Warp `warp` of the CTA may access only the 32 lanes of its rank in the warpgroup."""
    rank = warp % 4
    lo = LANES_PER_WARP * rank
    if lane0 < lo or lane0 + nlanes > lo + LANES_PER_WARP:
        raise fault(f"{what} lanes {lane0}-{lane0 + nlanes - 1} at {taddr:#010x} from warp {warp} (rank {rank} "
                    f"in its warpgroup), which may access only tensor memory lanes {lo}-{lo + 31}",
                    lane, taddr)


def unwritten(tm: TensorMemory, slot: int, lane0: int, nlanes: int, col0: int, ncols: int) -> np.ndarray:
    """[nlanes, ncols] True where no tcgen05.st / tcgen05.mma wrote the cell since its allocation."""
    return ~tm.written[slot][lane0: lane0 + nlanes, col0: col0 + ncols]


def mark_written(tm: TensorMemory, slot: int, lane0: int, nlanes: int, col0: int, ncols: int) -> None:
    tm.written[slot][lane0: lane0 + nlanes, col0: col0 + ncols] = True
