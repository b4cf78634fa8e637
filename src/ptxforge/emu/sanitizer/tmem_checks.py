"""The sanitizer's tensor-memory checks: its `on_tmem_load` and `on_tmem_mma_input` events (hooks.py).

Reads of cells nothing wrote since tcgen05.alloc ('uninitialized'), and tcgen05.ld of a tcgen05.mma's
result before any thread of the block saw the mbarrier phase of the issuing thread's tcgen05.commit
('async-before-wait'): the emulator completes MMAs at issue, a GPU does not. State lives in
ptxforge.emu.tensor_memory (`written`, `inflight`); each finding is reported once per site.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import numpy as np

from ptxforge.emu import tensor_memory as TM

if TYPE_CHECKING:
    from ptxforge.emu.sanitizer.core import Sanitizer


def load(san: Sanitizer, st: Any, tm: TM.TensorMemory, slot: int, row: int, col: int, ncols: int,
         lanes: np.ndarray, what: str) -> None:
    """tcgen05.ld by the warp of `lanes` (thread i of the warp reads tensor memory lane `row` + i)."""
    inflight_read(san, st, tm, slot, col, ncols, int(lanes[0]), what)
    t = lanes & 31
    unwritten_read(san, TM.unwritten(tm, slot, row, 32, col, ncols)[t], lanes, row + t, col, what)


def mma_input(san: Sanitizer, tm: TM.TensorMemory, slot: int, col: int, ncols: int, lane: int, what: str) -> None:
    """tcgen05.mma issued by `lane` accumulating into D: every one of its 128 lanes is read."""
    unwritten_read(san, TM.unwritten(tm, slot, 0, 128, col, ncols), [lane], np.arange(128), col, what)


def unwritten_read(san: Sanitizer, bad: np.ndarray, lanes: Any, tmem_lanes: np.ndarray, col0: int,
                   what: str) -> None:
    """A read of tensor memory cells nothing wrote since their tcgen05.alloc.
    bad: [rows, columns] of unwritten cells read; row r is tensor memory lane tmem_lanes[r], read by
    thread lanes[r] (or by lanes[0] for all rows)."""
    if not san.check_init or not bad.any():
        return
    rows = np.flatnonzero(bad.any(1))
    site = ("uninitialized", "read", "tensor", san.pc)
    if san.log.bump(site, int(rows.size)):
        return
    r = int(rows[0])
    lane = int(lanes[min(r, len(lanes) - 1)])
    c = col0 + int(np.flatnonzero(bad[r])[0])
    n = int(bad.sum()) - 1
    more = f" (and {n} more cells)" if n else ""
    msg = (f"{what} reads tensor memory lane {int(tmem_lanes[r])}, column {c}{more} "
           "that no tcgen05.st or tcgen05.mma wrote since their tcgen05.alloc")
    san.log.add(san.report_at("uninitialized", lane, san.pc, message=msg, count=int(rows.size)), site)


def inflight_read(san: Sanitizer, st: Any, tm: TM.TensorMemory, slot: int, col0: int, ncols: int, lane: int,
                  what: str) -> None:
    """Reading an MMA's D before the block saw its commit's mbarrier phase."""
    if not san.check_races:
        return
    hit = tm.inflight_overlap(slot, col0, ncols)
    if hit is None:
        return
    site = ("async-before-wait", "read", "tensor", san.pc)
    if san.log.bump(site, 1):
        return
    issuer, c, n, committed = hit
    who = st.machine.describe_lane(issuer).split(" block")[0]
    why = ("no thread of the block has seen the mbarrier phase its tcgen05.commit completes on" if committed else
           "its thread has not issued a tcgen05.commit for it")
    msg = (f"{what} reads tensor memory columns {col0}-{col0 + ncols - 1} while a tcgen05.mma by {who} into "
           f"columns {c}-{c + n - 1} may still be running: {why}")
    san.log.add(san.report_at("async-before-wait", lane, san.pc, message=msg), site)
