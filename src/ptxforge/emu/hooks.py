"""The one way a check watches a launch: a `Check` overrides the events it wants, the machine dispatches them.

The sanitizer (sanitizer/core.py), the node-wide race check (sanitizer/node_races.py) and the load watch of
a Node's watchdog (waits.py) are all checks; nothing else enters the emulator to watch it. Events:

- launch: `instrument(layout, ops)` may return copies of the ops with wrapped `fn` (to know the pc of each
  access); `block_order` / `warp_order` may shuffle where blocks and warps run (the first check that answers
  decides);
- waves and barriers: `on_wave` (a wave of resident blocks starts), `on_barrier_all` (every block of the
  wave passed a converged bar.sync), `on_release` (blocks released a barrier), `on_cluster_release`,
  `on_warp_wait` (lanes wait at a warp-synchronous op for lanes of their mask that are elsewhere);
- memory, around `LaneMemory.resolve` (every ld, st, atom and async copy): `on_access` before the
  emulator checks the access, `on_resolved` with the bytes it found, `on_fault` when it refused the access
  (the check may raise instead of the fault), `on_store` with the values of each store;
- tensor memory: `on_tmem_load` (a warp's tcgen05.ld), `on_tmem_mma_input` (a tcgen05.mma reading D).

`Hooks` holds, per event, the bound methods of the checks that override it, built once per machine. An
event nobody watches is an empty loop; memory nobody watches costs nothing: `LaneMemory.hooks` is None and
the whole-wave fast paths run (`memory.plain`). A check that overrides `instrument` turns compacted
stepping off (compact.py), since its wrappers see the machine's lanes.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import TYPE_CHECKING, Any

import numpy as np

from ptxforge.emu.errors import MemoryFault

if TYPE_CHECKING:  # the machine and memory import this module
    from ptxforge.emu.machine import LaneState, Machine
    from ptxforge.emu.memory import LaneMemory
    from ptxforge.emu.op import Op
    from ptxforge.emu.tensor_memory import TensorMemory


class Check:
    """Something that watches a launch. Override the events you need (the defaults do nothing) and pass an
    instance in `emulate(..., checks=[...])`, `EmulatorOptions(checks=[...])` or `Machine.add_check`.

    `lanes` are the wave's lane numbers of the active lanes (None: every lane of the wave); a lane's block
    and thread are `machine.block_ids[lane // machine.lanes_per_block]` and
    `machine.lane_tid[lane % machine.lanes_per_block]`."""

    # True: the memory events of a multi-lane cp.async.bulk may come as one access of all its lanes' bytes
    # (the emulator then copies them together) instead of one per lane, in lane order
    whole_bulk_copies = False

    # ------------------------------------------------------------------ launch
    def instrument(self, layout: Any, ops: list[Op]) -> list[Op]:
        """The launch's ops before it runs: return them, or a list with copies whose `fn` is wrapped."""
        return ops

    def block_order(self, nblocks: int) -> Any:
        """The order to run the blocks of the grid in, or None: a permutation of their linear ids, or anything
        indexed as one (`order[positions]`: `ptxforge.emu.block_order.Shuffle` for a grid of millions)."""
        return None

    def warp_order(self, warps_per_block: int) -> np.ndarray | None:
        """Which warp of a block each group of 32 lanes holds (a permutation), or None: in order."""
        return None

    # ------------------------------------------------------------------ waves and barriers
    def on_wave(self, machine: Machine, st: LaneState) -> None:
        """A wave of resident blocks starts (`st.mem` is its memory)."""

    def on_barrier_all(self, machine: Machine) -> None:
        """Every block of the wave passed a converged bar.sync together."""

    def on_release(self, machine: Machine, bid: int, done: np.ndarray, rel: np.ndarray) -> None:
        """The wave's slots `done` (a mask over slots) release barrier `bid`; `rel` masks the lanes leaving it."""

    def on_cluster_release(self, machine: Machine, slots: np.ndarray) -> None:
        """The CTAs in `slots` (whole clusters) completed a barrier.cluster phase together."""

    def on_warp_wait(self, machine: Machine, pc: int, bad: np.ndarray, elsewhere: np.ndarray, mm: Any) -> None:
        """Lanes `bad` wait at the warp-synchronous op `pc` for lanes of their member mask `mm` that are
        `elsewhere` (masks over the wave's lanes)."""

    # ------------------------------------------------------------------ memory
    def on_access(self, mem: LaneMemory, space: str, addr: Any, nbytes: int, lanes: np.ndarray | None,
                  write: bool) -> None:
        """An access of `nbytes` per lane at `addr` (one address per lane in `lanes`, or one for all), before
        the emulator checks it; `write` for stores, atomics and mbarrier updates."""

    def on_resolved(self, mem: LaneMemory, space: str, addr: Any, nbytes: int, lanes: np.ndarray | None,
                    write: bool, found: Any) -> None:
        """The access passed: `found` is what `LaneMemory.resolve` returns ((buffer, byte index), or a list of
        (lane mask, buffer, byte index) for a generic access spanning several windows)."""

    def on_fault(self, mem: LaneMemory, space: str, addr: Any, nbytes: int, lanes: np.ndarray | None,
                 write: bool) -> None:
        """The emulator refused the access (a `MemoryFault` follows); raising here replaces the fault."""

    def on_store(self, mem: LaneMemory, dtype: Any, values: Sequence[Any]) -> None:
        """The values of a store whose access `on_resolved` just saw (one array or scalar per vector element,
        None for an element not stored)."""

    # ------------------------------------------------------------------ tensor memory
    def on_tmem_load(self, st: LaneState, tm: TensorMemory, slot: int, row: int, col: int, ncols: int,
                     lanes: np.ndarray, what: str) -> None:
        """tcgen05.ld: the warp of `lanes` (wave lanes; thread i reads tensor memory lane `row` + i) of block
        slot `slot` reads columns `col` .. `col` + `ncols` - 1."""

    def on_tmem_mma_input(self, st: LaneState, tm: TensorMemory, slot: int, col: int, ncols: int, lane: int,
                          what: str) -> None:
        """tcgen05.mma issued by `lane` accumulates into D (all 128 lanes, `ncols` columns from `col`)."""


EVENTS = ("on_wave", "on_barrier_all", "on_release", "on_cluster_release", "on_warp_wait", "on_access",
          "on_resolved", "on_fault", "on_store", "on_tmem_load", "on_tmem_mma_input")
MEMORY_EVENTS = ("on_access", "on_resolved", "on_fault", "on_store")


def _overrides(check: Check, name: str) -> bool:
    return getattr(type(check), name) is not getattr(Check, name)


class Hooks:
    """The checks of one launch, by event: each event's tuple holds the bound methods of the checks that
    override it, in the order the checks were added."""

    on_wave: tuple
    on_barrier_all: tuple
    on_release: tuple
    on_cluster_release: tuple
    on_warp_wait: tuple
    on_access: tuple
    on_resolved: tuple
    on_fault: tuple
    on_store: tuple
    on_tmem_load: tuple
    on_tmem_mma_input: tuple

    def __init__(self, checks: Iterable[Check] = ()):
        self.checks = tuple(checks)
        for c in self.checks:
            if not isinstance(c, Check):
                raise TypeError(f"a check must be a ptxforge.emu.hooks.Check, got {c!r}")
        for name in EVENTS:
            setattr(self, name, tuple(getattr(c, name) for c in self.checks if _overrides(c, name)))
        self.memory = any(getattr(self, name) for name in MEMORY_EVENTS)  # else `LaneMemory.hooks` is None
        self.instruments = any(_overrides(c, "instrument") for c in self.checks)
        self.whole_bulk_copies = all(c.whole_bulk_copies for c in self.checks)

    def added(self, check: Check) -> Hooks:
        """These hooks and `check` after them."""
        return Hooks((*self.checks, check))

    def block_order(self, nblocks: int) -> Any:
        for c in self.checks:
            order = c.block_order(nblocks)
            if order is not None:
                return order
        return None

    def warp_order(self, warps_per_block: int) -> np.ndarray | None:
        for c in self.checks:
            order = c.warp_order(warps_per_block)
            if order is not None:
                return order
        return None

    def resolve(self, mem: LaneMemory, space: str, addr: Any, nbytes: int, lanes: np.ndarray | None,
                write: bool) -> Any:
        """`LaneMemory.resolve` of a watched memory: the access events around `mem.locate`."""
        for f in self.on_access:
            f(mem, space, addr, nbytes, lanes, write)
        try:
            found = mem.locate(space, addr, nbytes, lanes, write)
        except MemoryFault:
            for f in self.on_fault:
                f(mem, space, addr, nbytes, lanes, write)
            raise
        for f in self.on_resolved:
            f(mem, space, addr, nbytes, lanes, write, found)
        return found

    def stored(self, mem: LaneMemory, dtype: Any, values: Sequence[Any]) -> None:
        for f in self.on_store:
            f(mem, dtype, values)


NO_HOOKS = Hooks()  # a launch nothing watches (Hooks are never changed in place: `added` makes new ones)
