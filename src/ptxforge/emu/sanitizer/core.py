"""`Sanitizer`: checks every access, barrier and warp-synchronous op of one emulated launch.

It is a `Check` (ptxforge.emu.hooks), like any other; its events (no change to what a kernel computes):
- `instrument` wraps the ops of memory and warp instructions, so each knows its pc when it runs; a
  memory op whose access has bad lanes is re-run for the good lanes only (bad loads leave their
  destination unchanged, bad stores are dropped), so in-bounds work still reaches the user's arrays.
- `on_resolved` feeds every access `LaneMemory.resolve` lets through (the single choke point every
  ld/st/atom goes through) to the shadow memory; `on_fault` reports the bad lanes of one it refuses;
  `on_store` sees the stored values (a write-write race of equal values is no race).
- `on_wave`, `on_barrier_all`, `on_release`, `on_cluster_release`, `on_warp_wait`: blocks start, pass
  barriers, warps wait; `on_tmem_load` / `on_tmem_mma_input`: tensor memory reads (tmem_checks.py).
"""

from __future__ import annotations

import copy
import weakref
from typing import TYPE_CHECKING, Any

import numpy as np

from ptxforge.emu.block_order import Shuffle
from ptxforge.emu.hooks import Check
from ptxforge.emu.op import NORMAL, WARPSYNC
from ptxforge.emu.sanitizer import sync, tmem_checks
from ptxforge.emu.sanitizer.access_check import AccessCheck, _Excluded
from ptxforge.emu.sanitizer.definedness import Undefined
from ptxforge.emu.sanitizer.findings import Findings
from ptxforge.emu.sanitizer.global_shadow import GlobalShadow
from ptxforge.emu.sanitizer.order import HappensBefore, SyncOrder, check_grid, cluster_of_block
from ptxforge.emu.sanitizer.report import ReportLog, SanitizerError, SanitizerReport
from ptxforge.emu.sanitizer.shadow import EP_SHIFT
from ptxforge.emu.sanitizer.sites import SiteInfo, SourceMap, shared_valid_mask, shared_variables, site_info
from ptxforge.ptx import ir
from ptxforge.ptx.demangle import demangle

if TYPE_CHECKING:
    from ptxforge.emu.machine import LaneState, Machine
    from ptxforge.emu.op import Op
    from ptxforge.emu.tensor_memory import TensorMemory

_INFOS: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()  # layout -> [SiteInfo] (built once)


class Sanitizer(AccessCheck, Findings, Check):
    """Collects `SanitizerReport`s of a launch (or of several, when passed to each); `finish()` raises
    `SanitizerError` if any.

    Options: `races`, `init` and `sync` turn check families off; `init_local` also checks reads of
    uninitialized local memory (off by default: -G code copies partly initialized structs and updates
    bit-fields of fresh objects on the stack, which are not bugs); `eager` reports uninitialized bytes at
    the load rather than where the value is used; `max_reports` caps distinct sites;
    `shuffle_seed` runs the blocks of the grid, and the warps of each block, in a shuffled order (the
    machine asks `block_order` and `warp_order`), to shake out results that depend on the emulator's
    schedule: which block runs in which wave, which lane's store wins, the order atomics apply in.
    """

    # (a launch's and a wave's state, set by `instrument` and `on_wave`, is declared in AccessCheck)

    def __init__(self, *, races: bool = True, init: bool = True, sync: bool = True, init_local: bool = False,
                 max_reports: int = 100, shuffle_seed: int | None = None, eager: bool = False):
        self.check_races = races
        self.check_init = init
        self.eager = eager  # report uninitialized bytes at the load, not where the value is used
        self.undef: Undefined | None = None
        self.check_init_local = init and init_local
        self.check_sync = sync
        self.shuffle_seed = shuffle_seed
        self.log = ReportLog(max_reports)
        self.kernel = ""
        self.machine = None
        self.global_sh = None
        self.clock = 0
        self.pc = 0
        self.site: SiteInfo | None = None
        self.infos: list[SiteInfo] = []
        self.sources: SourceMap | None = None
        self._narrow = None  # per element of the current access: scope level a too narrow pair lacked
        self._ar = {n: np.arange(n, dtype=np.int64) for n in (1, 2, 4, 8, 16, 32, 64, 128)}

    def __getattr__(self, name):  # the per-wave arrays made on first use (on_wave lists them)
        spec = self.__dict__.get("_wave_arrays", {}).get(name)
        if spec is None:
            raise AttributeError(name)
        size, dtype, fill = spec
        a = np.full(size, fill, dtype)
        setattr(self, name, a)
        return a

    def ep_of(self, L: np.ndarray) -> np.ndarray:
        """The barrier interval (shadow.py's encoding) of each lane in L."""
        if L is self.all_lanes:
            if self._ep_lane is None:
                self._ep_lane = np.repeat(self.ep_warp, 32)
            return self._ep_lane
        return self.ep_warp[L >> 5]

    # ------------------------------------------------------------------ results
    @property
    def reports(self) -> list[SanitizerReport]:
        return self.log.reports

    def error(self, stopped: str = "") -> SanitizerError | None:
        if not self.log.reports and not self.log.suppressed:
            return None
        return SanitizerError(self.log.reports, kernel=self.kernel, suppressed=self.log.suppressed,
                              stopped=stopped)

    def finish(self, stopped: BaseException | None = None) -> None:
        """Raise `SanitizerError` if anything was found; `stopped` is the error that ended the launch early
        (a watchdog, a trap), kept with the reports found before it."""
        self.release()
        err = self.error(str(stopped) if stopped is not None else "")
        if err is not None:
            raise err from stopped

    _LAUNCH_STATE = ("global_sh", "shared_sh", "local_sh", "_local_buf", "order", "undef", "hb_global",
                     "hb_shared", "mem", "machine", "all_lanes", "block_of_lane", "_lane_tid", "who", "ep_warp",
                     "_ep_lane", "shared_valid_full", "shared_cmap", "_shared_maps", "_acc_lanes", "_narrow", "awaited")

    def release(self) -> None:
        """Drop the launch's shadow state (the reports stay). The emulator's objects and the sanitizer refer
        to each other, so without this the state of a finished launch would wait for the cyclic garbage
        collector, and back-to-back launches would hold several launches' shadow memory at once."""
        for name in self._LAUNCH_STATE:
            if name in self.__dict__:
                setattr(self, name, None)
        for name in self.__dict__.pop("_wave_arrays", {}):
            self.__dict__.pop(name, None)
        self._deferred = []

    def block_order(self, nblocks: int) -> Shuffle | None:
        """The order the machine should run blocks in (None: natural order)."""
        if self.shuffle_seed is None:
            return None
        return Shuffle(nblocks, self.shuffle_seed)

    def warp_order(self, warps_per_block: int) -> np.ndarray | None:
        """Which warp of a block each group of 32 lanes holds (None: in order)."""
        if self.shuffle_seed is None:
            return None
        return np.random.default_rng(self.shuffle_seed + 1).permutation(warps_per_block)

    # ------------------------------------------------------------------ instrumentation
    def instrument(self, layout: Any, ops: list[Op]) -> list[Op]:
        """A copy of `ops` whose memory and warp ops report their pc and exclude bad lanes."""
        self.layout = layout
        self.sources = SourceMap(layout)
        self.global_sh = None  # a new launch: fresh shadow state (reports accumulate across launches)
        self._shared_maps = None
        self.clock = 0
        out = []
        infos = _INFOS.get(layout)
        if infos is None or len(infos) != len(ops):
            infos = _INFOS[layout] = [self._site_info(layout, pc) for pc in range(len(ops))]
        self.infos = infos
        for pc, op in enumerate(ops):
            info = infos[pc]
            if op.kind == WARPSYNC:
                new = copy.copy(op)
                new.fn = self._wrap_warp(op, info)
                out.append(new)
            elif op.kind == NORMAL and op.fn is not None:  # any op may reach memory (builtins too)
                new = copy.copy(op)
                new.fn = self._wrap_memory(op.fn, info)
                out.append(new)
            else:
                out.append(op)
        return out

    @staticmethod
    def _site_info(layout, pc: int) -> SiteInfo:
        placed = layout.placed[pc]
        ins = placed.ins
        guard = None
        if ins.guard is not None:
            hit = layout.lookup(placed, ins.guard.predicate)
            if isinstance(hit, tuple):
                guard = (hit[1], ins.guard.negated)
        wait_slot = None
        if ins.opcode == "mbarrier" and ins.operands and isinstance(ins.operands[0], ir.Register):
            hit = layout.lookup(placed, ins.operands[0].name)
            wait_slot = hit[1] if isinstance(hit, tuple) else None
        return site_info(pc, ins, guard, wait_slot)

    def _wrap_memory(self, fn, info: SiteInfo):
        def run(st, m):
            self.pc = info.pc
            self.site = info
            und = self.undef
            if und is not None and und.marks:
                und.before(st, m, info)
            while True:
                try:
                    fn(st, m)
                    break
                except _Excluded as e:
                    base = st.live_mask() if m is None else m
                    m = base.copy()
                    m[e.lanes] = False
                    if not m.any():
                        break
            if self._deferred:
                self._flush_deferred()
            if und is not None and (und.marks or und.loaded):
                und.after(st, m, info)
            if info.release or info.acquire or info.fence or info.strong_read or info.strong_write or \
                    info.async_wait or info.async_commit or info.mbar_wait is not None or info.async_via_mbarrier:
                self._after_sync_op(st, m, info)
        return run

    def _wrap_warp(self, op, info: SiteInfo):
        fn = op.fn
        mm_reader = op.membermask

        def run(st, m):
            self.pc = info.pc
            self.site = info
            if self.check_sync:
                sync.check_member_mask(self, st, m, mm_reader, info)
            und = self.undef
            if und is not None and und.marks:
                und.before(st, m, info)
            fn(st, m)
            if und is not None and und.marks:
                und.after(st, m, info)
            if info.warp_sync:
                act = self._executing(st, m, info)
                warps = np.unique(np.flatnonzero(act) >> 5)
                self.ep_warp[warps] += 1
                self._ep_lane = None
                self.order.warp_sync(act)
                self.global_sh.exact = self.shared_exact = False
                if self.shared_sh is not None:
                    self.shared_sh.exact = False
        return run

    def _executing(self, st, m, info: SiteInfo) -> np.ndarray:
        act = st.live_mask() if m is None else m
        if info.guard is not None:
            g = np.broadcast_to(np.asarray(st.regs[info.guard[0]], bool), act.shape)
            act = act & (~g if info.guard[1] else g)
        return act

    def _after_sync_op(self, st, m, info: SiteInfo) -> None:
        act = self._executing(st, m, info)
        lanes = np.flatnonzero(act)
        if lanes.size == 0:
            return
        if info.async_commit:
            self.async_committed[lanes] += 1
            return
        if info.async_via_mbarrier:  # every earlier copy of the lane completes with an mbarrier phase
            self.mbar_tied[lanes] = self.async_committed[lanes] + 1
            return
        if info.mbar_wait is not None:  # an observed phase completion orders the block like a barrier
            done = np.broadcast_to(np.asarray(st.regs[info.mbar_wait], bool), act.shape)[lanes]
            if done.any():
                slots = np.unique(lanes[done] // self.lpb)
                self._new_intervals(slots)
                block = (np.arange(st.N) // self.lpb)[:, None] == slots[None, :]
                mine = block.any(1)
                self.async_done[mine] = np.maximum(self.async_done[mine], self.mbar_tied[mine])
                tmem = getattr(st, "tmem", None)  # tcgen05.mma results committed to a phase are ready
                if tmem is not None:
                    for s in slots.tolist():
                        tmem.phase_observed(s)
            return
        if info.async_wait:
            n = 0
            if info.async_wait == "group":
                n = int(getattr(self.layout.placed[info.pc].ins.operands[0], "value", 0))
            if info.async_wait == "all":
                self.async_committed[lanes] += 1  # wait_all also completes the uncommitted copies
            self.async_done[lanes] = np.maximum(self.async_done[lanes], self.async_committed[lanes] - n)
            return
        self.clock = self.order.on_op(lanes, info, self.clock, self.ep_warp[lanes >> 5], self.who[lanes])

    # ------------------------------------------------------------------ machine hooks
    def on_wave(self, machine: Machine, st: LaneState) -> None:
        """A new wave of blocks starts: fresh shadow state for its memory, a fresh interval for each block."""
        self.machine = machine
        self.kernel = demangle(machine.kernel.name)
        mem = st.mem
        self.mem = mem
        self.lpb = machine.lanes_per_block
        N = st.N
        nslots = machine.nslots
        if self.global_sh is None:
            self.global_sh = GlobalShadow(mem.device, self.check_races)
            # a block's identity for scopes: its cluster, and its GPU where a machine spans several
            check_grid(machine.nblocks, self.kernel)
            self.order = SyncOrder(machine.nblocks, self.lpb, cluster_of_block(machine),
                                   getattr(machine, "gpu_of_block", None))
            self.hb_global = HappensBefore(self, True)
            self.hb_shared = HappensBefore(self, False)
            self.shared_vars = shared_variables(machine.layout, machine.dynamic_shared)
            self.shared_valid = shared_valid_mask(self.shared_vars, machine.layout.dynamic_shared_offset,
                                                  machine.dynamic_shared, mem.shared_size)
        self.shared_valid_full = self.shared_cmap = None
        shadow_size = mem.shared.size
        maps = self.__dict__.get("_shared_maps")
        if maps is not None and maps[0] == (nslots, mem.shared_stride):  # the launch's earlier waves
            _, self.shared_valid_full, self.shared_cmap, shadow_size = maps
        elif not self.shared_valid.all():  # other kernels' shared variables are not this kernel's memory
            row = np.zeros(mem.shared_stride, bool)
            row[: self.shared_valid.size] = self.shared_valid[: mem.shared_stride]
            self.shared_valid_full = np.tile(row, nslots)
            # shadow only the bytes of the kernel's own variables: a compact index per shared byte
            nvalid = int(row.sum())
            rank = np.cumsum(row) - 1
            self.shared_cmap = (np.arange(nslots, dtype=np.int64)[:, None] * nvalid
                                + np.where(row, rank, 0)[None, :]).ravel()
            shadow_size = nslots * nvalid
        self._shared_maps = ((nslots, mem.shared_stride), self.shared_valid_full, self.shared_cmap, shadow_size)
        # shared memory is shadowed per granule too, until an async copy (whose pending state is per byte)
        self.shared_granular = True
        self.shared_size = shadow_size
        self.shared_exact = True
        self.shared_sh = None
        self.local_sh = None  # made on the first local access
        self._local_buf = mem.local
        if getattr(self, "all_lanes", None) is None or self.all_lanes.size != N:
            self.all_lanes = np.arange(N, dtype=np.int64)
            self.all_lanes.flags.writeable = False
        order = getattr(machine, "block_ids", None)
        first = np.arange(nslots, dtype=np.int64)
        first = np.asarray(order, np.int64)[first] if order is not None else machine.first_block + first
        blk = np.repeat(first, self.lpb)
        self.block_of_lane = blk
        lane_tid = getattr(machine, "lane_tid", None)
        self._lane_tid = np.arange(self.lpb, dtype=np.int64) if lane_tid is None else \
            np.asarray(lane_tid, np.int64)
        self.who = np.add.outer((first * self.lpb).astype(np.int32), self._lane_tid.astype(np.int32)).ravel()
        self.ep_warp = np.zeros(N // 32, np.int64)
        self._ep_lane = None
        self.order.new_wave(N, blk)
        self.undef = Undefined(self, machine.layout, machine.ops, N) if self.check_init and not self.eager \
            else None
        self._new_intervals(np.arange(nslots))
        self.awaited: dict = {}  # warp-sync pc -> per-warp bits of named lanes it waited for
        self.async_used = False
        # per lane: async-copy groups committed, completed, and tied to an mbarrier phase; per shadow byte of
        # shared memory: the lane and group of a pending copy. Made on first use (most kernels have none).
        self._wave_arrays = {"async_committed": (N, np.int64, 0), "async_done": (N, np.int64, 0),
                             "mbar_tied": (N, np.int64, 0), "pend_lane": (shadow_size, np.int32, -1),
                             "pend_group": (shadow_size, np.int64, 0)}
        for name in self._wave_arrays:
            self.__dict__.pop(name, None)
        self._deferred = []
        self._defer_mark = 0

    def _new_intervals(self, slots) -> None:
        slots = np.asarray(slots, np.int64)
        if slots.size == 0:
            return
        if self.order.any_acquire:  # a barrier passes on what its threads acquired to the whole block
            lpb = self.lpb
            self.order.barrier((slots[:, None] * lpb + np.arange(lpb)).ravel())
        wps = self.lpb // 32
        ids = self.clock + 1 + np.arange(slots.size, dtype=np.int64)
        self.clock += slots.size
        warps = (slots[:, None] * wps + np.arange(wps)).ravel()
        self.ep_warp[warps] = np.repeat(ids << EP_SHIFT, wps)
        self._ep_lane = None

    def on_barrier_all(self, machine: Machine) -> None:
        """Every block of the wave passed a converged bar.sync together."""
        self._new_intervals(np.arange(machine.nslots))

    def on_warp_wait(self, machine: Machine, P: int, bad: np.ndarray, elsewhere: np.ndarray, mm: Any) -> None:
        """Lanes `bad` wait at warp-synchronous op P for the lanes of their mask that are elsewhere."""
        if self.check_sync:
            sync.check_warp_wait(self, machine, P, bad, elsewhere, mm)

    def on_release(self, machine: Machine, bid: int, done: np.ndarray, rel: np.ndarray) -> None:
        """Blocks `done` release barrier `bid`; `rel` are the lanes leaving it (pcs still flagged)."""
        if self.check_sync:
            sync.check_barrier_release(self, machine, bid, done, rel)
        self._new_intervals(np.flatnonzero(done))

    def on_cluster_release(self, machine: Machine, slots: np.ndarray) -> None:
        """The CTAs in `slots` (whole clusters) completed a barrier.cluster phase together."""
        slots = np.asarray(slots, np.int64)
        lanes = (slots[:, None] * self.lpb + np.arange(self.lpb)).ravel()
        self.clock = self.order.cluster_barrier(lanes, self.clock, self.ep_warp[lanes >> 5], self.who[lanes])
        self._new_intervals(slots)

    def on_tmem_load(self, st: LaneState, tm: TensorMemory, slot: int, row: int, col: int, ncols: int,
                     lanes: np.ndarray, what: str) -> None:
        tmem_checks.load(self, st, tm, slot, row, col, ncols, lanes, what)

    def on_tmem_mma_input(self, st: LaneState, tm: TensorMemory, slot: int, col: int, ncols: int, lane: int,
                          what: str) -> None:
        tmem_checks.mma_input(self, tm, slot, col, ncols, lane, what)
