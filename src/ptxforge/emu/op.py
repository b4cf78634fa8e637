"""One executable instruction (`Op`) and the kinds the machine tells apart.

Ops of kind NORMAL run as `op.fn(st, mask)`; control flow (branches, calls, returns, barriers, exits)
is carried as data the machine interprets, so divergence stays in one place (`machine.py`). Builders
(ops_*.py), the machine and its watchers (progress.py, the sanitizer) import this module; builders
and the machine never import each other.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np

if TYPE_CHECKING:
    from collections.abc import Callable

    import numpy.typing as npt

    from ptxforge.emu.machine import LaneState

    Mask = npt.NDArray[np.bool_] | None  # the lanes an op runs for; None: every lane of the state
    OpFn = Callable[[LaneState, Mask], None]  # a NORMAL / WARPSYNC op's body

NORMAL, BRA, EXIT, RET, CALL, BAR, WARPSYNC, TRAP, NOP, BRX = range(10)

# a lane's pc: the op index, with a flag bit while it waits at a barrier or for its warp; exited lanes hold EXITED
WAIT_BAR = 1 << 28
WAIT_WARP = 1 << 29
EXITED = 1 << 30
PC_MASK = WAIT_BAR - 1


@dataclass(eq=False)
class Op:
    """One executable instruction."""

    kind: int
    fn: OpFn | None = None  # fn(st, mask) for NORMAL / WARPSYNC
    target: int = 0  # branch target pc
    guard: tuple[int, bool] | None = None  # (pred slot, negated)
    text: str = ""  # the instruction as written, for messages
    line: int = 0
    file: str = ""
    extra: Any = None  # kind-specific data (barrier, call)
    # reader of the warp member mask for WARPSYNC ops (None = all lanes)
    membermask: Callable[[LaneState], Any] | None = None

    @property
    def where(self) -> str:
        return f"{self.file}:{self.line}" if self.line else self.file or "<ir>"


def advance(pcs: np.ndarray, ex: np.ndarray, P: int, target: int | None = None,
            taken: np.ndarray | None = None) -> None:
    """Move the lanes `ex` (all standing at pc P, no flag set) on: to P + 1, or to `target` where `taken`.

    Adding the masks is the same as `copyto(pcs, P + 1, where=ex)` on such lanes, at a quarter of its cost."""
    np.add(pcs, ex, out=pcs)
    if taken is not None and target is not None and target != P + 1:
        np.add(pcs, np.multiply(taken, pcs.dtype.type(target - P - 1)), out=pcs)
