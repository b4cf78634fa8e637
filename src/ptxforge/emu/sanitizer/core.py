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
from collections.abc import Sequence
from dataclasses import replace
from typing import TYPE_CHECKING, Any

import numpy as np

from ptxforge.emu import memory as M
from ptxforge.emu import ramps as R
from ptxforge.emu.block_order import Shuffle
from ptxforge.emu.hooks import Check
from ptxforge.emu.op import NORMAL, WARPSYNC
from ptxforge.emu.sanitizer import bounds, sync, tmem_checks
from ptxforge.emu.sanitizer.definedness import Undefined
from ptxforge.emu.sanitizer.global_shadow import GlobalShadow, granule_part
from ptxforge.emu.sanitizer.order import SCOPE_NAMES, HappensBefore, SyncOrder, check_grid, cluster_of_block
from ptxforge.emu.sanitizer.report import ReportLog, SanitizerError, SanitizerReport
from ptxforge.emu.sanitizer.shadow import EP_SHIFT, INIT, PENDING, POISON, Shadow
from ptxforge.emu.sanitizer.sites import SiteInfo, SourceMap, shared_valid_mask, shared_variables, site_info
from ptxforge.ptx import ir
from ptxforge.ptx.demangle import demangle

if TYPE_CHECKING:
    from ptxforge.emu.machine import LaneState, Machine
    from ptxforge.emu.op import Op
    from ptxforge.emu.tensor_memory import TensorMemory

_INFOS: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()  # layout -> [SiteInfo] (built once)


class _Excluded(Exception):  # noqa: N818 - internal control flow, never escapes an op
    """Bad lanes of an access (already reported); the op is run again without them."""

    def __init__(self, lanes):
        super().__init__("excluded lanes")
        self.lanes = lanes


class Sanitizer(Check):
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

    # a launch's and a wave's state, set by `instrument` and `on_wave` (`release` drops it)
    machine: Any
    global_sh: Any  # GlobalShadow
    shared_sh: Any  # Shadow of the wave's shared memory, made at its first access
    local_sh: Any
    all_lanes: Any
    ep_warp: Any
    _ep_lane: Any
    _shared_maps: Any
    shared_valid_full: Any
    _deferred: list

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

    # ------------------------------------------------------------------ the access check
    def on_fault(self, mem: M.LaneMemory, space: str, addr: Any, nbytes: int, lanes: np.ndarray | None,
                 write: bool) -> None:
        """Report the bad lanes of a refused access and run the op again without them."""
        self._defer_mark = len(self._deferred)
        self._in_write = write
        self._bad_access(space, addr, nbytes, lanes, write)

    def on_resolved(self, mem: M.LaneMemory, space: str, addr: Any, nbytes: int, lanes: np.ndarray | None,
                    write: bool, found: Any) -> None:
        """Check the access against the shadow memory and record it."""
        self._defer_mark = len(self._deferred)
        self._in_write = write
        if isinstance(found, list):
            for sel, buf, idx in found:
                sub = np.flatnonzero(sel) if lanes is None else np.asarray(lanes)[sel]
                self._track(buf, idx, nbytes, sub, write, space)
        else:
            self._track(found[0], found[1], nbytes, lanes, write, space)

    def _bad_access(self, space, addr, nbytes, lanes, write) -> None:
        mem = self.mem
        L = self.all_lanes if lanes is None else np.asarray(lanes, np.int64)
        kind, spaces, a = bounds.classify(mem, space, addr, nbytes, L.size, write)
        bad = kind != bounds.OK
        if not bad.any():
            return  # not a lane problem: let the emulator's error stand
        access = self._access_name(write)
        for code in np.unique(kind[bad]).tolist():
            sel = np.flatnonzero(kind == code)
            j = int(sel[0])
            sp = spaces[j]
            site = (bounds.KIND_NAMES[code], access, sp, self.pc)
            if self._bump(site, sel.size):
                continue
            addr_j = int(a[j])
            rep = self._report(bounds.KIND_NAMES[code], int(L[j]), access=access, space=sp, size=nbytes,
                               address=addr_j, count=int(sel.size))
            self._place(rep, sp, addr_j, int(L[j]), generic=space == "generic")
            if code == bounds.MISALIGNED:
                rep.message = f"the address is not a multiple of the access size ({nbytes} bytes)"
            elif code == bounds.READONLY:
                rep.message = "the memory is read-only"
            self._add(site, rep)
        raise _Excluded(L[bad])

    def _same_warpgroup(self, pw: np.ndarray, L: np.ndarray, nb: int) -> np.ndarray:
        """Per byte: the earlier access `pw` was by a thread of the accessing warpgroup (same block). A
        wgmma.mma_async reads its operands once every warp of the warpgroup issued it (.sync.aligned), so
        what each warp did before it is ordered before those reads (docs/sanitizer-rulings.md)."""
        who = self.who[L].astype(np.int64)
        if nb > 1:
            who = np.repeat(who, nb)
        p = pw.astype(np.int64)
        lpb = self.lpb
        return (p >= 0) & (p // lpb == who // lpb) & ((p % lpb) // 128 == (who % lpb) // 128)

    def _access_name(self, write: bool) -> str:
        if self.site is not None and self.site.atomic:
            return "atomic"
        return "write" if write else "read"

    def _track(self, buf, idx, nb, lanes, write, space) -> None:
        mem = self.mem
        if buf is mem.shared:
            sh, region = self.shared_sh, "shared"
        elif buf is mem.device.arena:
            sh, region = self.global_sh, "global"
        elif buf is mem.local:
            if self.local_sh is None or mem.local is not self._local_buf:
                self._regrow_local()
            sh, region = self.local_sh, "local"
        else:
            return
        L = self.all_lanes if lanes is None else np.asarray(lanes, np.int64)
        k = L.size
        if k == 0:
            return
        if type(idx) is not R.Ramp:  # (a run at a ramp's addresses, memory.py: kept as the rule)
            idx = np.asarray(idx)
            idx = np.full(k, int(idx), np.int64) if idx.ndim == 0 else idx.astype(np.int64, copy=False)
        if region == "shared" and self.shared_valid_full is not None:
            self._check_shared_variables(idx, nb, L)
        site = self.site
        sync_ = bool(site is not None and site.sync)
        if site is not None and site.mbarrier and nb == 8 and not sync_ and site.opcode != "mbarrier":
            site = self._mbar_word_site(site)  # the mbarrier update inside a bulk copy / arrive
            sync_ = True
        pc = self.pc
        t = self.clock if self.order.stamping else None
        init_check = self.check_init  # global: bytes that existed at launch count as initialized
        atomic = site is not None and site.atomic
        if region == "shared" and self.shared_granular and site is not None and site.async_copy:
            sh = self._shared_shadow(1)  # the wave's first async copy: per byte from now on
            sh.pending = True
            self.shared_granular = False
        parts = None
        if region == "global":  # per allocation and granule; byte arrays only where something is found
            parts, hb = self.global_sh.split(idx, nb), self.hb_global
        elif region == "shared" and self.shared_granular:
            parts, hb = self._shared_parts(idx, nb), self.hb_shared
        if parts is not None:
            found = self._granular_access(parts, nb, L, write, atomic, sync_, pc, t, hb)
            if found is None:
                if write and self.undef is not None and self.undef.store_vals:
                    self.undef.on_store_bytes(L, self._bytes(idx, nb), nb, region)
                return
            B = self._bytes(idx, nb)
            uninit, pending, race, pw, ppc, ww, dup = found
        else:
            B = self._bytes(idx, nb)
            if region == "local":
                poison = None
                if write and self.undef is not None and self.undef.store_vals:
                    poison = self.undef.on_store_bytes(L, B, nb, region)
                self._track_init_only(sh, B, nb, L, write, poison)
                return
            S = B  # the shadow index of each byte
            if self.shared_cmap is not None:
                S = self.shared_cmap[B]
            who = self.who[L]
            ep = self.ep_warp[L >> 5]
            if nb > 1:
                who = np.repeat(who, nb)
                ep = np.repeat(ep, nb)
            hb = self.hb_shared
            self._acc_lanes, self._acc_nb, self._narrow = L, nb, None
            ww = dup = None
            if write and not atomic:
                uninit, pending, race, pw, ppc, ww, dup = sh.write(S, who, ep, pc, sync_, hb, t=t)
            elif write:  # atomics read and write
                uninit, pending, race, pw, ppc, ww, dup = sh.write(S, who, ep, pc, True, hb, init_check, t=t)
            else:
                uninit, pending, race, pw, ppc = sh.read(S, who, ep, pc, sync_, init_check, hb, t=t)
        if region == "shared" and site is not None and site.async_copy and write:
            self.async_used = True
            self.pend_lane[S] = np.repeat(L, nb) if nb > 1 else L
            self.pend_group[S] = np.repeat(self.async_committed[L], nb) if nb > 1 else \
                self.async_committed[L]
            sh.flags[S] |= PENDING
            if site.bulk:
                self.mbar_tied[L] = self.async_committed[L] + 1
            return
        if region == "shared" and self.async_used and pending.any():
            self._check_pending(sh, S, B, nb, L, write, pending)
        if uninit is not None and uninit.any():
            self._uninitialized(uninit, B, nb, L, region, write, site)
        if write and self.undef is not None and self.undef.store_vals:
            self.undef.on_store_bytes(L, B, nb, region)
        if race is not None and site is not None and site.warpgroup and pw is not None:
            race = race & ~self._same_warpgroup(pw, L, nb)
        if race is None or not self.check_races or not race.any():
            return
        prev_read = None if ww is None else ~ww
        if ww is not None and site is not None and site.opcode == "st" and ww.any():
            # a write-write race where both store the same value is benign: decide once `store` shows
            # the values (`on_store`), after the op (`_flush_deferred`)
            now = race & ~ww
            if now.any():
                self._report_race(now, B, nb, L, region, write, pw, ppc, prev_read)
            self._deferred.append({"buf": buf, "B": B, "nb": nb, "L": L, "region": region, "ww": ww, "dup": dup,
                                   "old": buf[B], "pw": pw, "ppc": ppc, "values": None,
                                   "narrow": self._narrow})
            return
        self._report_race(race, B, nb, L, region, write, pw, ppc, prev_read)

    def _bytes(self, idx, nb):
        """The byte index of every element (lane-major: nb bytes per lane)."""
        return idx if nb == 1 else (idx[:, None] + self._arange(nb)).ravel()

    def _arange(self, n: int):
        ar = self._ar.get(n)
        if ar is None:
            ar = self._ar[n] = np.arange(n, dtype=np.int64)
        return ar

    def _shared_shadow(self, granule: int) -> Shadow:
        """The wave's shared-memory shadow (over the compact index of the kernel's shared bytes), made on the
        first access with granules of `granule` bytes, or refined to them."""
        sh = self.shared_sh
        if sh is None:
            sh = self.shared_sh = Shadow(-(-self.shared_size // granule), init=False, races=self.check_races,
                                         granule=granule, pending=False)
            sh.exact = self.shared_exact
        elif granule < sh.granule:
            sh.refine(granule)
        return sh

    def _shared_parts(self, idx, nb):
        """The access as one part of the wave's shared shadow (see `_granular_access`)."""
        cmap = self.shared_cmap
        c = idx if cmap is None else cmap[idx]
        if nb > 1 and cmap is not None and not bool((cmap[idx + (nb - 1)] - c == nb - 1).all()):
            # the bytes of an access are not consecutive in the compact index (it spans a gap): per byte
            sh = self._shared_shadow(1)
            return [(sh, None, cmap[self._bytes(idx, nb)], nb)]
        return [granule_part(self._shared_shadow, None, c, nb)]

    def _granular_access(self, parts, nb, L, write, atomic, sync_, pc, t, hb):
        """Check and record an access of nb bytes per lane by lanes L in granular shadows: `parts` are
        (shadow, positions of the lanes or None, granule indices, granules per lane) from
        `GlobalShadow.split` or `_shared_parts`. None when nothing is found (the common case); else the
        per-byte arrays (uninit, pending, race, prev_who, prev_pc, ww, dup) a byte-granular shadow gives."""
        who_l = self.who if L is self.all_lanes else self.who[L]
        ep_l = self.ep_of(L)
        n = L.size * nb
        full = None
        narrow = None
        for sh, pos, S, per in parts:
            Lp, who, ep = (L, who_l, ep_l) if pos is None else (L[pos], who_l[pos], ep_l[pos])
            if per > 1:
                who = np.repeat(who, per)
                ep = np.repeat(ep, per)
            self._acc_lanes, self._acc_nb, self._narrow = Lp, per, None
            distinct = isinstance(S, slice)
            ww = dup = None
            if write and not atomic:
                uninit, _, race, pw, ppc, ww, dup = sh.write(S, who, ep, pc, sync_, hb, t=t, distinct=distinct)
            elif write:  # atomics read and write
                uninit, _, race, pw, ppc, ww, dup = sh.write(S, who, ep, pc, True, hb, self.check_init, t=t,
                                                             distinct=distinct)
            else:
                uninit, _, race, pw, ppc = sh.read(S, who, ep, pc, sync_, self.check_init, hb, t=t,
                                                   distinct=distinct)
            hot_u = uninit is not None and uninit.any()
            hot_r = race is not None and race.any()
            if not (hot_u or hot_r):
                continue
            if full is None:
                full = {"uninit": np.zeros(n, bool), "race": np.zeros(n, bool), "pw": np.full(n, -1, np.int64),
                        "ppc": np.zeros(n, np.int64), "ww": np.zeros(n, bool) if write else None,
                        "dup": None}
            g = sh.granule
            at = slice(None) if pos is None else (pos[:, None] * nb + self._arange(nb)).ravel()
            if hot_u:
                full["uninit"][at] = np.repeat(uninit, g)
            if hot_r:
                full["race"][at] = np.repeat(race, g)
                full["pw"][at] = np.repeat(pw, g)
                full["ppc"][at] = np.repeat(ppc, g)
                if ww is not None:
                    full["ww"][at] = np.repeat(ww, g)
                if dup is not None:
                    if full["dup"] is None:
                        full["dup"] = np.zeros(n, bool)
                    full["dup"][at] = np.repeat(dup, g)
                if self._narrow is not None:
                    if narrow is None:
                        narrow = np.full(n, -1, np.int8)
                    narrow[at] = np.repeat(self._narrow, g)
        self._acc_lanes, self._acc_nb, self._narrow = L, nb, narrow
        if full is None:
            return None
        has_u = full["uninit"].any()
        return (full["uninit"] if has_u else None, None, full["race"], full["pw"], full["ppc"], full["ww"],
                full["dup"])

    def _uninitialized(self, uninit, B, nb, L, region, write, site) -> None:
        """Bytes no thread initialized were read: mark the loaded registers undefined (reported where the
        value is used), or report now: eagerly, for loads whose bytes do not land in one lane's register,
        and for arithmetic atomics (an undefined counter, such as a histogram nobody zeroed). Bitwise and
        exchange atomics read nothing that matters by themselves: bit-level protocols (cooperative groups'
        tile barriers reset their bits with red.and) start from undefined words; atom's old value is
        still marked undefined."""
        if site is not None and site.atomic and site.opcode in ("atom", "red", "cp"):
            sx = set(self.layout.placed[self.pc].ins.suffixes)
            if sx & {"and", "or", "xor", "exch"}:
                if site.opcode == "atom" and self.undef is not None:
                    self.undef.on_load(L, uninit, B, nb, region)
                return
        elif self.undef is not None and self.undef.on_load(L, uninit, B, nb, region):
            return
        self._report_lanes("uninitialized", uninit, B, nb, L, region, write)

    def on_store(self, mem: M.LaneMemory, dtype: Any, values: Sequence[Any]) -> None:
        """`memory.store` shows the values of the store whose resolve just ran."""
        new = self._deferred[self._defer_mark:]
        if len(new) != 1 or any(v is None for v in values):
            return
        d = new[0]
        k = d["L"].size
        cols = [np.broadcast_to(np.asarray(v).astype(dtype, copy=False), (k,)) for v in values]
        V = np.ascontiguousarray(np.stack(cols, axis=1)).view(np.uint8).reshape(-1)
        if V.size == d["B"].size:
            d["values"] = V

    def _flush_deferred(self) -> None:
        """Report the deferred write-write races, leaving out the stores of a value already there."""
        todo, self._deferred = self._deferred, []
        for d in todo:
            ww, dup, V, B = d["ww"], d["dup"], d["values"], d["B"]
            real = ww
            if V is not None:
                cross = ww if dup is None else ww & ~dup
                real = cross & (V != d["old"])
                if dup is not None and dup.any():  # threads of this instruction: do their values differ?
                    order = np.argsort(B, kind="stable")
                    Bs, Vs = B[order], V[order]
                    start = np.ones(Bs.size, bool)
                    start[1:] = Bs[1:] != Bs[:-1]
                    gid = np.cumsum(start) - 1
                    differs = np.bincount(gid, weights=Vs != Vs[start][gid]) > 0
                    dreal = np.empty(B.size, bool)
                    dreal[order] = differs[gid]
                    real = real | (dup & dreal)
            if real.any():
                self._narrow = d["narrow"]
                self._report_race(real, B, d["nb"], d["L"], d["region"], True, d["pw"], d["ppc"], ~ww)

    def _mbar_word_site(self, site: SiteInfo) -> SiteInfo:
        return replace(site, sync=True, atomic=True, async_copy=False)

    def _check_shared_variables(self, idx, nb, L) -> None:
        v = self.shared_valid_full
        bad = ~(v[idx] & v[idx + (nb - 1)])
        if not bad.any():
            return
        write = self._in_write
        self._report_lanes("out-of-bounds", np.repeat(bad, nb), (idx[:, None] + self._ar[nb]).ravel(), nb, L,
                           "shared", write)
        raise _Excluded(L[bad])

    def _track_init_only(self, sh, B, nb, L, write, poison) -> None:
        """Local memory: initialization only. An undefined value stored to the stack (as -G code spills
        every register) poisons its bytes instead of reporting, and a load of them is undefined again."""
        if write:
            sh.flags[B] = INIT if poison is None else np.where(poison, np.uint8(POISON), np.uint8(INIT))
            return
        f = sh.flags[B]
        undefined = (f & INIT) == 0 if self.check_init_local else (f & POISON) != 0
        if not undefined.any():
            return
        if self.undef is not None and self.undef.on_load(L, undefined, B, nb, "local"):
            return
        if self.check_init_local:
            self._report_lanes("uninitialized", undefined, B, nb, L, "local", False)

    def _regrow_local(self) -> None:
        mem = self.mem
        old = None if self.local_sh is None else self.local_sh.flags
        n = mem.nlanes
        new = Shadow(mem.local.size, init=False, races=False)
        if old is not None and old.size:
            os_ = old.size // n
            new.flags.reshape(n, -1)[:, :os_] = old.reshape(n, os_)
        self.local_sh = new
        self._local_buf = mem.local

    def _check_pending(self, sh, S, B, nb, L, write, pending) -> None:
        pb = np.flatnonzero(pending)
        owners = self.pend_lane[S[pb]]
        done = self.async_done[owners] > self.pend_group[S[pb]]
        sh.flags[S[pb[done]]] &= np.uint8(~PENDING & 0xFF)
        if done.all():
            return
        bad = np.zeros(B.size, bool)
        bad[pb[~done]] = True
        self._report_lanes("async-before-wait", bad, B, nb, L, "shared", write)

    # ------------------------------------------------------------------ reports
    def _lane_mask(self, elem_mask, nb):
        return elem_mask if nb == 1 else elem_mask.reshape(-1, nb).any(1)

    def _report_lanes(self, kind, elem_mask, B, nb, L, region, write) -> None:
        lm = self._lane_mask(elem_mask, nb)
        sel = np.flatnonzero(lm)
        access = self._access_name(write)
        site = (kind, access, region, self.pc)
        if self._bump(site, sel.size):
            return
        j = int(sel[0])
        e = int(np.flatnonzero(elem_mask[j * nb:(j + 1) * nb])[0]) + j * nb if nb > 1 else j
        lane = int(L[j])
        addr = self._address(region, int(B[e]), lane)
        rep = self._report(kind, lane, access=access, space=region, size=nb, address=addr, count=int(sel.size))
        self._place(rep, region, addr, lane)
        if kind == "uninitialized":
            rep.message = {"local": "the thread did not write these bytes of its local memory before this read",
                           "global": "these bytes were allocated during the launch (device malloc) and not "
                                     "written before this read"}.get(region, "no thread wrote these bytes "
                                                                               "before this read")
        elif kind == "async-before-wait":
            rep.message = ("the bytes are the destination of an async copy that is not known to be complete: "
                           "its thread did not wait for its group (cp.async.wait_group / wait_all), or no "
                           "thread of the block saw the mbarrier phase it completes on")
        self._add(site, rep)

    def _report_race(self, race, B, nb, L, region, write, pw, ppc, prev_read) -> None:
        lm = self._lane_mask(race, nb)
        sel = np.flatnonzero(lm)
        j = int(sel[0])
        e = int(np.flatnonzero(race[j * nb:(j + 1) * nb])[0]) + j * nb if nb > 1 else j
        other_pc = int(ppc[e])
        other_who = int(pw[e])
        access = self._access_name(write)
        if write:
            other_access = "read" if (prev_read is not None and prev_read[e]) else "write"
        else:
            other_access = "write"
        if self.infos and self.infos[other_pc].atomic:
            other_access = "atomic"
        narrow = self._narrow
        scoped = narrow is not None and narrow[e] >= 0
        site = ("race", access, region, self.pc, other_pc, other_access, scoped)
        if self._bump(site, sel.size):
            return
        lane = int(L[j])
        addr = self._address(region, int(B[e]), lane)
        rep = self._report("race", lane, access=access, space=region, size=nb, address=addr, count=int(sel.size))
        self._place(rep, region, addr, lane)
        race_name = f"{other_access}-{access}"  # earlier access first, as in "write-read"
        blk, t = divmod(other_who, self.lpb) if other_who >= 0 else (None, None)
        op = self.machine.ops[other_pc] if other_pc < len(self.machine.ops) else None
        rep.other = {"race": race_name, "access": other_access,
                     "thread": self._tid(t) if t is not None else None,
                     "block": self._cta(blk) if blk is not None else None,
                     "ptx_line": op.line if op else None, "instruction": op.text if op else "",
                     "source": self.sources.source(other_pc) if self.sources else None,
                     "stack": self.sources.stack(other_pc) if self.sources else []}
        same_block = blk is not None and blk == int(self.block_of_lane[lane])
        rep.message = ("no barrier or release/acquire pair orders the two accesses (same barrier interval)"
                       if same_block else "the accesses come from different blocks and no release/acquire "
                       "pair (or fence + strong access) orders them")
        narrow = self._narrow
        if narrow is not None and narrow[e] >= 0:
            need = SCOPE_NAMES[int(narrow[e])]
            rep.other["scope"] = need
            rep.message = (f"a release/acquire pair orders the two accesses only at a scope that does not "
                           f"include both threads (block {self._cta(blk)} and block "
                           f"{self._cta(int(self.block_of_lane[lane]))}): both sides need {need} scope or wider")
            rel = self.order.rel_pc.get(blk, -1)
            acq = int(self.order.acq_pc[lane])
            acq = acq if acq >= 0 else int(self.order.acq_pc_block[self.block_of_lane[lane]])
            ops = self.machine.ops
            for name, at in (("release", rel), ("acquire", acq)):
                if 0 <= at < len(ops):
                    rep.other[name] = {"ptx_line": ops[at].line, "instruction": ops[at].text}
                    rep.message += f"; the {name} is {ops[at].file}:{ops[at].line}: {ops[at].text.rstrip(';')}"
        self._add(site, rep)

    def _address(self, region: str, byte: int, lane: int) -> int:
        if region == "global":
            return M.GLOBAL_BASE + byte
        if region == "shared":
            return byte - (lane // self.lpb) * self.mem.shared_stride
        return byte - lane * self.mem.local_stride

    def _tid(self, t: int):
        bx, by, _ = self.machine.block
        return (t % bx, (t // bx) % by, t // (bx * by))

    def _cta(self, b: int):
        gx, gy, _ = self.machine.grid
        return (b % gx, (b // gx) % gy, b // (gx * gy))

    def _report(self, kind, lane, *, access, space, size, address, count) -> SanitizerReport:
        m = self.machine
        op = m.ops[self.pc]
        b = int(self.block_of_lane[lane])
        tid = int(self._lane_tid[lane % self.lpb])
        return SanitizerReport(kind=kind, message="", thread=self._tid(tid), block=self._cta(b),
                               ptx_line=op.line, ptx_file=op.file, instruction=op.text,
                               source=self.sources.source(self.pc) if self.sources else None,
                               stack=self.sources.stack(self.pc) if self.sources else [],
                               address=address, size=size, space=space, access=access, count=count)

    def _place(self, rep: SanitizerReport, space: str, addr: int, lane: int, generic: bool = False) -> None:
        """Fill in the nearest allocation (global) or shared variable and the offset into it."""
        if space == "global":
            hit = bounds.nearest_allocation(self.mem.device, addr)
            if hit is not None:
                rep.allocation, base, rep.allocation_size = hit
                rep.offset = addr - base
        elif space == "shared":
            off = _signed(addr - M.SHARED_WINDOW if generic else addr)
            if off >= 0:
                off &= M.CLUSTER_OFF_MASK  # without the CTA's rank (a negative offset stays "before the start")
            hit = bounds.nearest_variable(self.shared_vars, off)
            if hit is not None:
                name, start, size = hit
                rep.allocation, rep.allocation_size, rep.offset = f"__shared__ {name}", size, off - start
        elif space == "local":
            rep.allocation = "the thread's local memory"
            rep.allocation_size = int(self.mem.local_stride)
            rep.offset = _signed(addr - M.LOCAL_WINDOW if generic else addr)

    def _bump(self, site, n: int) -> bool:
        return self.log.bump(site, n)

    def _add(self, site, rep: SanitizerReport) -> None:
        self.log.add(rep, site)

    def report_at(self, kind: str, lane: int, pc: int, *, message: str, count: int = 1) -> SanitizerReport:
        saved = self.pc
        self.pc = pc
        try:
            rep = self._report(kind, lane, access="", space="", size=None, address=None, count=count)
        finally:
            self.pc = saved
        rep.message = message
        return rep


def _signed(offset: int) -> int:
    """A window offset as the 64-bit signed number it is (-4, not 2^64 - 4: "4 bytes before the start")."""
    offset &= (1 << 64) - 1
    return offset - (1 << 64) if offset >> 63 else offset
