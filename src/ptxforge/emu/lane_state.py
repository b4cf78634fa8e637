"""What ops see of a wave: `LaneState` (registers, parameters, memory and special registers of its lanes)
and `LazyLanes`, the per-lane arrays made at their first use."""

from __future__ import annotations

import time
import weakref
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import numpy as np

from ptxforge.emu.errors import EmulatorError

if TYPE_CHECKING:
    from ptxforge.emu.machine import Machine


class LazyLanes:
    """A per-lane array attribute made (filled with `fill`) at its first read: most launches never touch the
    frame bases, carry flags, call depths or barrier ids, and zeroing them cost a quarter of a large vector
    add. Assigning None drops the array (the next read makes a fresh one)."""

    def __init__(self, dtype: Any, fill: Any = 0, lanes: Callable[[Any], int] = lambda obj: obj.N):
        self.dtype, self.fill, self.lanes = dtype, fill, lanes

    def __set_name__(self, owner: type, name: str) -> None:
        self.key = "_lazy_" + name

    def __get__(self, obj: Any, owner: type | None = None) -> Any:
        if obj is None:
            return self
        v = obj.__dict__.get(self.key)
        if v is None:
            v = obj.__dict__[self.key] = np.full(self.lanes(obj), self.fill, self.dtype)
        return v

    def __set__(self, obj: Any, value: np.ndarray | None) -> None:
        obj.__dict__[self.key] = value


class LaneState:
    """What ops see: registers, param storage, memory and special registers of one wave of lanes."""

    reference = False  # the machine's reference mode (no ramps; see ramps.py)
    fb = LazyLanes(np.int64)  # frame base of each lane's local memory
    cc = LazyLanes(bool)  # carry flag
    tmem: Any  # the wave's tensor memory (ops_tcgen05), set at the first tcgen05.alloc

    def __init__(self, machine: Machine, nlanes: int):
        # weak: a machine and its lane state must not form a cycle, or every launch's lane arrays would
        # wait for the cyclic GC (and each launch fault in fresh pages) instead of being freed at its end
        self.machine = weakref.proxy(machine)
        self.N = nlanes
        self.regs: list = []
        self.pvars: list = []
        self.live: np.ndarray | None = None
        self.mem: Any = None  # the wave's LaneMemory (set by the machine's `_setup`)
        self.sregs: dict = {}
        self.lazy_sregs: dict = {}
        self.laneid = None  # set by the machine from its per-launch cache
        self.warp_base = None
        # set by an mbarrier.try_wait/test_wait that found the phase incomplete for every lane it ran:
        # the diverged loop then rotates at once, so pollers cannot starve the lanes that would complete it
        self.spun = False
        self.call_site: tuple[str, int, str] = ("<ir>", 0, "call")  # the builtin call running (builtins.bind)

    def sreg(self, name: str) -> Any:
        try:
            return self.sregs[name]
        except KeyError:
            make = self.lazy_sregs.get(name)
            if make is None:
                raise EmulatorError(f"special register {name} is not supported") from None
            v = self.sregs[name] = make()
            return v

    def special_dynamic(self, name: str) -> np.uint64:
        m = self.machine
        if name in ("%clock", "%clock64"):
            v = np.uint64(m.clock_base + m.clock_now() * 4)
            return v if name == "%clock64" else np.uint64(int(v) & 0xFFFFFFFF)
        if name == "%clock_hi":  # the upper half of %clock64
            return np.uint64((m.clock_base + m.clock_now() * 4) >> 32)
        ns = time.perf_counter_ns() - m.t0_ns + m.time_base_ns
        if name == "%globaltimer_lo":
            return np.uint64(ns & 0xFFFFFFFF)
        if name == "%globaltimer_hi":
            return np.uint64(ns >> 32)
        return np.uint64(ns)

    def live_mask(self) -> np.ndarray:
        return np.ones(self.N, bool) if self.live is None else self.live

    def emit_printf(self, text: str) -> None:
        self.machine.printf_out.write(text)

    def printf_room(self) -> int:
        """Bytes the launch's printf buffer still takes."""
        return self.machine.printf_out.room

    def describe_lane(self, lane: int) -> str:
        return self.machine.describe_lane(lane)
