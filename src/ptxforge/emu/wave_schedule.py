"""The step schedule of one wave: which lanes take the next step. One implementation, used by the
machine's loop (`Machine._run_wave`) and by the compacted sessions (compact.py), so a change lands once.

The rules:
- Converged, the wave steps its one pc. Diverged, each step runs the instruction at the lowest pc for the
  lanes standing there (min-pc scheduling reconverges at the immediate post-dominator).
- Every `ROTATE_EVERY` diverged steps the step goes instead to the lowest pc above the last rotation's
  pick, so lanes spinning on a flag cannot starve the lanes that set it; a poll in vain (`LaneState.spun`)
  makes the next step the rotation's.
- Warps that take the back edge of a loop that may wait for other warps (`yield_edges`) step again only
  once every other runnable warp had its turn (`yield_warps`, `lowest`).
- Lanes inside a function called from different sites step apart (`one_context`).
- Lanes waiting at a barrier or for their warp carry a flag in their pc (op.WAIT_BAR, WAIT_WARP) and are
  never picked; when every lane waits, `all_waiting` wakes warp waiters or reports the deadlock.
- Every `dmask + 1` steps the watchdog looks at the wave (progress.Watch) and, under a Node's scheduler,
  the launch yields to the others (`tick`); a session leaves that step to the machine (`tick_due`).
"""

from __future__ import annotations

import weakref
from collections.abc import Generator
from typing import TYPE_CHECKING

import numpy as np

from ptxforge.emu.npcalls import any_true, highest, lowest
from ptxforge.emu.op import EXITED, WAIT_BAR
from ptxforge.emu.progress import TICK_MASK

if TYPE_CHECKING:
    from ptxforge.emu.machine import Machine

ROTATE_EVERY = 64


class WaveSchedule:
    """The schedule's state for one wave: the step counters, the last rotation's pick, the warps that
    yielded, and the step mask of the next watchdog tick (or Node yield)."""

    __slots__ = ("m", "steps", "div_steps", "rot_last", "yielded", "turn", "dmask", "yielding", "spin_edges")

    def __init__(self, m: Machine, spin_edges: np.ndarray):
        self.m = weakref.proxy(m)  # (the machine keeps `wave_steps`, a closure over this: no cycle)
        self.steps = 0  # steps the wave took (%clock reads them live)
        self.div_steps = 0  # diverged steps since the wave last diverged (the rotation's count)
        self.rot_last = -1  # the pc the last rotation picked (-1: none)
        self.yielded: np.ndarray | None = None  # lanes of warps that took a spinning back edge this round
        self.turn: np.ndarray | None = None  # ~yielded (the lanes whose turn it is), kept with it
        self.yielding = m.concurrent  # under a Node's scheduler: yield at every tick
        self.dmask = m.quantum - 1 if self.yielding else TICK_MASK
        self.spin_edges = spin_edges  # per pc: the back edge of a loop that may wait for other warps

    # ------------------------------------------------------------------ ticks
    def tick_due(self, step: int) -> bool:
        """True when step number `step` is the watchdog's (and a Node's yield)."""
        return step & self.dmask == 0

    def tick(self, pc: int | None, steps: int) -> Generator[None, None, None]:
        """The watchdog's look at the wave after `steps` steps (pc: the converged pc, None while diverged),
        then, under a Node's scheduler, the yield to the other launches."""
        m = self.m
        m.pc = pc
        probing = m.watch.tick(m, pc, steps)
        if self.yielding:
            self.dmask = m.quantum - 1
            yield
            self.dmask = m.quantum - 1  # (the scheduler may have changed the quantum)
        else:
            self.dmask = 0 if probing else TICK_MASK

    # ------------------------------------------------------------------ diverged picks
    def diverged(self) -> None:
        """The wave just diverged: the rotation counts from here."""
        self.div_steps = 0

    def converged(self) -> None:
        """The wave reconverged: the yield round ends."""
        self.yielded = None

    def lowest(self, pcs: np.ndarray) -> int:
        """The lowest pc of the lanes whose turn it is (the warps that yielded wait for a new round)."""
        yl = self.yielded
        if yl is None:
            return int(lowest(pcs))
        lo = int(lowest(pcs, where=self.turn, initial=EXITED))
        if lo >= WAIT_BAR:  # all of them took their turn (or wait): a new round
            self.yielded = None
            lo = int(lowest(pcs))
        return lo

    def rotation_due(self, div_steps: int) -> bool:
        """True when diverged step number `div_steps` is the rotation's."""
        return div_steps % ROTATE_EVERY == 0

    def rotation_pick(self, *pcs: np.ndarray | int | None) -> int | None:
        """The rotation's pc: the lowest pc above the last pick, among `pcs` (arrays of lanes' pcs, or one pc
        for lanes standing together), not waiting; None when there is none (the rotation starts over)."""
        last = self.rot_last
        best = None
        for p in pcs:
            if p is None:
                continue
            if isinstance(p, np.ndarray):
                c = p[(p > last) & (p < WAIT_BAR)]
                if not c.size:
                    continue
                v = int(lowest(c))
            elif last < p < WAIT_BAR:
                v = int(p)
            else:
                continue
            best = v if best is None else min(best, v)
        return best

    def rotate(self, lo: int, pcs: np.ndarray) -> int:
        """The pc of a rotation step over the lanes' `pcs` (`lo` when none stands above the last pick)."""
        p = self.rotation_pick(pcs)
        self.rot_last = -1 if p is None else p
        return lo if p is None else p

    def spun(self) -> None:
        """A poll in vain: the next diverged step is the rotation's."""
        self.div_steps = ROTATE_EVERY - 1

    def yield_warps(self, lanes: np.ndarray) -> None:
        """The warps of `lanes` took a back edge: they step again only once every runnable lane of the
        other warps has taken one too (or waits), so a warp spinning at a low pc (a queue-head updater
        waiting for the other warps to retire) no longer takes the steps of the warps it waits for."""
        w = any_true(lanes.reshape(-1, 32), axis=1)
        if not any_true(w):
            return
        yl = self.yielded
        if yl is None:
            yl = self.yielded = np.zeros(lanes.size, bool)
        yl.reshape(-1, 32)[w] = True
        self.turn = ~yl

    def all_waiting(self) -> None:
        """Every lane that has not exited waits: wake lanes waiting for their warp if that lets them run
        (`Machine._wake_warp_waiters`), else the wave is deadlocked."""
        if not self.m._wake_warp_waiters():
            self.m._deadlock()


def one_context(ex: np.ndarray, top: np.ndarray) -> np.ndarray:
    """The lanes of `ex` in one call context (the lowest return address on top of their stacks, `top`):
    lanes inside a function called from different sites stay separate paths."""
    keys = top[ex]
    kmin = lowest(keys)
    if highest(keys) != kmin:
        return ex & (top == kmin)
    return ex
