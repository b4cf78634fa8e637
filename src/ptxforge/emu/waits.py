"""What a launch is waiting on: the watchdogs' description of where its warps stand.

`where` says where the warps of the running wave are (converged at one instruction, or per warp with
barrier and warp waits), and, when the launch's global loads are watched (`LoadWatch`, a check that
`Machine.watch_loads` adds; a Node's scheduler turns it on), the address, allocation and current value of the
last one: the flag a spinning receiver polls.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import numpy as np

from ptxforge.emu.hooks import Check
from ptxforge.emu.memory import GLOBAL_BASE, WINDOW_BITS, LaneMemory

if TYPE_CHECKING:
    from ptxforge.emu.machine import Machine


def where(m: Machine, limit: int = 8) -> str:
    """Where machine `m`'s warps stand, plus what its last global load read (if watched)."""
    st = getattr(m, "st", None)
    if m.waiting_for_sms:
        lo, hi = int(m.sm_ids.min()), int(m.sm_ids.max())
        return (f"waits for room on SMs {lo}-{hi}: other launches' resident blocks fill them"
                + (" (its earlier waves ran)" if st is not None else " (no block has started)"))
    if st is None:
        return "no block has started"
    if m.pc is not None:  # converged: every live lane is at one instruction
        op = m.ops[m.pc]
        b0, b1 = m.lane_coords(0)[1], m.lane_coords((m.nslots - 1) * m.lanes_per_block)[1]
        blocks = f"block {b0}" if m.nslots == 1 else f"blocks {b0}..{b1}"
        live = st.live_mask().reshape(-1, 32).any(1)
        text = f"{int(live.sum())} live warp(s) of {blocks}, converged, last at {op.where}: {op.text.rstrip(';')}"
    else:
        text = m._where_summary(limit)
    return text + polled(m)


def polled(m: Machine) -> str:
    """What the last global load of the launch read: the flag a spinning warp waits on."""
    last = getattr(m, "last_load", None)
    if last is None:
        return ""
    addr, nbytes = last
    alloc = m.device.find(addr) or m.device.owner(addr)
    if alloc is None or nbytes not in (1, 2, 4, 8):
        return f"; its last global load read {nbytes} bytes at {addr:#x}"
    off = addr - alloc.base
    raw = m.device.arena[alloc.offset + off: alloc.offset + off + nbytes]
    value = int.from_bytes(raw.tobytes(), "little")
    return (f"; its last global load read {nbytes} bytes at {addr:#x} (offset {off} of "
            f"{alloc.name or 'an allocation'}), which hold {value}")


class LoadWatch(Check):
    """Counts machine `m`'s global stores and atomics (`m.stores`) and remembers its last global load
    (`m.last_load`). Shared and local stores are no progress: a receiver that copies a flag it polls into
    shared memory every round (DeepEP's combine) would otherwise keep a deadlocked node from its watchdog.
    Whether a quantum stored is all the scheduler asks, so a bulk copy may come as one access."""

    whole_bulk_copies = True

    def __init__(self, m: Machine):
        self.m = m

    def on_access(self, mem: LaneMemory, space: str, addr: Any, nbytes: int, lanes: np.ndarray | None,
                  write: bool) -> None:
        if space not in ("global", "generic"):
            return
        a = np.asarray(addr).reshape(-1)
        if not a.size or int(a[0]) >> WINDOW_BITS != GLOBAL_BASE >> WINDOW_BITS:
            return
        if write:
            self.m.stores += 1
        else:
            self.m.last_load = (int(a[0]), nbytes)
