"""The SIMT machine: all threads of the resident blocks run as numpy lanes in lockstep.

Two modes. Converged: one scalar pc, every live lane executes it (the fast path, no per-lane work).
Diverged: a pc per lane; each step runs the instruction at the lowest pc for the lanes standing there
(min-pc scheduling reconverges at the immediate post-dominator for the code layouts nvcc and Triton
emit), with a periodic rotation so lanes spinning on a flag cannot starve the lanes that set it.
Lanes waiting at a barrier or for their warp carry a flag bit in their pc; exited lanes hold EXITED.
Diverged steps of lane-local code run on the lanes standing there only (compact.py: the same steps).
Which lanes step next, the rotation, the watchdog's ticks and a Node's yields are `WaveSchedule`'s
(wave_schedule.py), shared with compact.py's sessions.
The machine's other parts: lane_state.py (what ops see), static_lanes.py (per-shape lane arrays),
barriers.py (exits, barriers, warp waits), calls.py (call stacks).

Blocks are placed on `num_sms` SMs up to the occupancy limit; resident blocks form one wave of lanes.
Thread-block clusters: the CTAs of a cluster take consecutive slots of one wave (co-scheduled), in rank
order; barrier.cluster counts the threads of all of them; memory.py resolves shared::cluster addresses.
"""

from __future__ import annotations

import time
import weakref
from collections.abc import Callable, Generator, Iterable, Sequence
from typing import TYPE_CHECKING, Any

import numpy as np

from ptxforge.emu import compact
from ptxforge.emu import op as C
from ptxforge.emu.barriers import NBARRIERS, Barriers
from ptxforge.emu.block_order import ClusterOrder
from ptxforge.emu.calls import MAX_CALL_DEPTH, Calls
from ptxforge.emu.compact import (
    ENTER_FRACTION,
    LARGE_WAVE,
    SHORT_SESSION,
    SHORT_SESSION_LARGE,
    Session,
    yield_edges,
)
from ptxforge.emu.device_printf import PRINTF_FIFO_SIZE, PrintfBuffer
from ptxforge.emu.errors import EmulatorError, InternalEmulatorError, KernelTrap, MemoryFault, WatchdogTimeout
from ptxforge.emu.hooks import NO_HOOKS, Check, Hooks
from ptxforge.emu.lane_state import LaneState, LazyLanes
from ptxforge.emu.memory import LaneMemory
from ptxforge.emu.npcalls import count_nonzero, highest, lowest
from ptxforge.emu.op import EXITED, PC_MASK, WAIT_BAR, WAIT_WARP
from ptxforge.emu.progress import Watch
from ptxforge.emu.static_lanes import RESERVED_SMEM, STATIC_CACHE_BYTES, StaticLanes, _uses_reserved_smem
from ptxforge.emu.variable_limits import check_local
from ptxforge.emu.waits import LoadWatch, where
from ptxforge.emu.wave_schedule import WaveSchedule, one_context
from ptxforge.ptx import ir

if TYPE_CHECKING:
    from ptxforge.emu.node import NodeClock

# (importable from here as before the split: LaneState, LazyLanes, NBARRIERS, MAX_CALL_DEPTH, ...)
__all__ = ["MAX_CALL_DEPTH", "MAX_WAVE_LOG", "NBARRIERS", "QUANTUM", "RESERVED_SMEM", "STATIC_CACHE_BYTES",
           "LaneState", "LazyLanes", "Machine"]

QUANTUM = 128  # steps a launch runs before yielding to the others under a Node's scheduler
MAX_WAVE_LOG = 1024  # waves `Machine.wave_log` records one by one (the rest are summed up in its last entry)


class Machine(StaticLanes, Barriers, Calls):
    """Run one launch of a compiled kernel. Use `ptxforge.emu.launch.emulate`, not this directly."""

    lane_bar = LazyLanes(np.int8, lanes=lambda m: m.st.N)  # the barrier each waiting lane waits at
    _uniform_steps = 0  # converged steps run by every lane of the wave, not yet added to the icount array
    _icount: np.ndarray | None

    @property
    def icount(self) -> np.ndarray:
        """Instructions each lane of the wave ran. Steps that every lane ran (a converged wave with no exited or
        padding lanes) are counted once in `_uniform_steps` and folded in here, at the first look."""
        a = self.__dict__.get("_icount")
        if a is None:
            a = self._icount = np.zeros(self.st.N, np.int64)
        if self._uniform_steps:
            a += self._uniform_steps
            self._uniform_steps = 0
        return a

    @icount.setter
    def icount(self, value: np.ndarray | None) -> None:
        self._icount = value
        self._uniform_steps = 0
    depth = LazyLanes(np.int32, lanes=lambda m: m.st.N)  # call depth
    top_ret = LazyLanes(np.int32, -1, lanes=lambda m: m.st.N)  # return address on top of each lane's stack

    pcs: Any  # each lane's pc while the wave is diverged, None while converged
    retstack: Any  # [call depth, lane] return addresses (None: the kernel makes no calls)
    watch: Any  # the launch's progress.Watch, made when it starts running
    st: LaneState  # the running wave's lanes

    def __init__(self, layout: Any, ops: list[Any], *, grid: Sequence[int], block: Sequence[int],
                 params: np.ndarray, device: Any, dynamic_shared: int, num_sms: int = 132,
                 watchdog_s: float = 60.0, time_limit_s: float | None = None,
                 printf: Callable[[str], Any] | None = None, max_threads_per_sm: int = 2048,
                 max_blocks_per_sm: int = 32, shared_per_sm: int = 228 * 1024, checks: Iterable[Check] = (),
                 cluster: Sequence[int] | None = None, sm_ids: Any = None, gpu: int | None = None,
                 envregs: dict[int, int] | None = None, printf_fifo_size: int = PRINTF_FIFO_SIZE,
                 reference: bool = False):
        self.layout = layout
        self.reference = reference  # no fast path: no compaction, ramps, whole-wave memory shortcuts (see docs)
        checks = tuple(checks)
        self.hooks = Hooks(checks) if checks else NO_HOOKS  # what watches the launch (the sanitizer, other checks)
        for check in self.hooks.checks:
            ops = check.instrument(layout, ops)
        self.ops = ops
        self.grid = tuple(grid)
        self.block = tuple(block)
        self.params = params
        self.device = device
        self.dynamic_shared = dynamic_shared
        self.num_sms = num_sms  # the device's SMs (%nsmid)
        # the SMs this launch may use (a stream's partition); slot i of a wave runs on sm_ids[i % len]
        self.sm_ids = np.arange(num_sms, dtype=np.int64) if sm_ids is None else np.asarray(sm_ids, np.int64)
        self.all_sms = sm_ids is None  # (sm_ids is then 0, 1, ... num_sms - 1)
        self.gpu = gpu  # the GPU's index in a Node, named in errors (None on a lone device)
        self.envregs = dict(envregs or {})  # %envregN values the driver sets (a cooperative launch's workspace)
        self.concurrent = False  # set by the Node's scheduler: yield every few steps (see `steps_iter`)
        self.quantum = QUANTUM  # steps between yields (a power of two; the scheduler may change it)
        self.stores = 0  # global stores and atomics seen by `watch_loads` (the scheduler's spin test)
        self.last_load: tuple[int, int] | None = None  # the last global load (address, bytes) `watch_loads` saw
        self.pc = None  # the converged pc when the machine last yielded (for the node's watchdog)
        # (first block, slots, clock at start, clock at end, SMs) per wave; past MAX_WAVE_LOG entries the
        # last one sums up the rest (a grid of millions of waves must not grow the log without bound)
        self.wave_log: list = []
        self.sm_room = None  # a Node's SM occupancy shared by concurrent launches (None: all SMs ours)
        self.wave_sms = None  # the SM of each slot of the running wave, when the room chose them
        self.waiting_for_sms = False
        self.sm_limits = (max_threads_per_sm, max_blocks_per_sm, shared_per_sm)
        self.watchdog_s = watchdog_s  # seconds without progress before stopping (see progress.py)
        self.time_limit_s = time_limit_s  # a plain wall-clock limit on the launch, or None
        self.watch = None
        self.printf = printf or (lambda s: print(s, end=""))
        self.printf_out = PrintfBuffer(printf_fifo_size, self.printf)  # bounded like CUDA's printf FIFO
        self.threads = block[0] * block[1] * block[2]
        self.lanes_per_block = (self.threads + 31) // 32 * 32
        self.nblocks = grid[0] * grid[1] * grid[2]
        self.cluster = tuple(cluster) if cluster is not None else (1, 1, 1)  # validated by launch
        self.explicit_cluster = cluster is not None
        self.csize = self.cluster[0] * self.cluster[1] * self.cluster[2]
        self.block_order = self.hooks.block_order(self.nblocks)
        if self.csize > 1:
            self.block_order = self._cluster_order()
        self.lane_tid = np.arange((self.threads + 31) // 32 * 32, dtype=np.int64)  # thread index of each lane
        wp = self.hooks.warp_order(len(self.lane_tid) // 32)
        self.shuffled_warps = wp is not None
        if wp is not None:  # warps of a block placed on lanes in a shuffled order (a check's choice)
            self.lane_tid = (np.asarray(wp, np.int64)[:, None] * 32 + np.arange(32)).ravel()
        self.reserved_smem = RESERVED_SMEM if _uses_reserved_smem(layout) else 0
        self.shared_size = layout.shared_bytes + dynamic_shared + self.reserved_smem
        per_sm = min(max_blocks_per_sm, max(1, max_threads_per_sm // self.lanes_per_block))
        if self.shared_size:
            per_sm = min(per_sm, max(1, shared_per_sm // max(self.shared_size + 1024, 1)))
        self.blocks_per_sm = per_sm
        self.resident = len(self.sm_ids) * per_sm
        if self.csize > 1:  # whole clusters per wave
            self.resident = max(self.csize, self.resident // self.csize * self.csize)
        self.steps = 0
        self.clock_base = 1000
        self.time_base_ns = 1_700_000_000_000_000_000
        self.t0_ns = time.perf_counter_ns()
        self.total = 0
        self.per_sm = np.zeros(num_sms, np.int64)
        self.node_clock: NodeClock | None = None  # a Node's shared step clock (%clock64 monotonic across its GPUs)
        self.wave_steps = lambda: 0  # steps of the running wave (a closure over the loop's counter)
        self.kernel = layout.functions[layout.kernel_func.name]
        self.frame_of_pc = None

    def _trap_hint(self) -> str:
        """Why a kernel that reads the grid workspace (%envreg1/2) may have trapped."""
        if self.envregs:
            return ""
        uses = any(isinstance(o, ir.SpecialRegister) and o.name in ("%envreg1", "%envreg2")
                   for p in self.layout.placed for o in p.ins.operands)
        return ("; the kernel reads the grid workspace (%envreg1/%envreg2), which only a cooperative launch "
                "provides: cooperative groups' grid.sync() traps without one (launch with cooperative=True, "
                "or `ptxforge run --cooperative`)") if uses else ""

    # ------------------------------------------------------------------ public
    def run(self) -> dict:
        """Run the whole launch; returns its stats."""
        clock = self.node_clock
        if clock is not None:
            clock.resume(self)
        try:
            with np.errstate(all="ignore"):
                it = self.steps_iter()
                while True:
                    try:
                        next(it)
                    except StopIteration as done:
                        return done.value
        finally:
            if clock is not None:
                clock.pause()

    def steps_iter(self) -> Generator[None, None, dict]:
        """The launch as a generator: with `concurrent` set it yields every few hundred steps, between
        instructions (so an atom or a store is never split), and returns the stats at the end."""
        t0 = time.perf_counter()
        self.watch = Watch(self.watchdog_s, self.time_limit_s)
        first = waves = 0
        room = self.sm_room
        while first < self.nblocks:
            n = min(self.resident, self.nblocks - first)
            if room is not None:  # SMs shared with the node's other launches: wait for room on ours
                sms = room.admit(self, n)
                while sms.size == 0:
                    self.waiting_for_sms = True
                    yield
                    sms = room.admit(self, n)
                self.waiting_for_sms = False
                n, self.wave_sms = sms.size, sms
            start = self.clock_now()
            try:
                yield from self._run_wave(first, n)
            finally:
                if room is not None:
                    room.release(self, self.wave_sms)
            self._log_wave(first, n, start)
            if getattr(self.st, "tmem", None) is not None:
                self._tmem_leaks(self.st.tmem)
            first += n
            waves += 1
            if first < self.nblocks:
                self.watch.between_waves(self, first)
        self.printf_out.warn(self.kernel.name)
        return {"thread_instructions": int(self.total), "per_sm": self.per_sm.copy(),
                "wall_s": time.perf_counter() - t0, "waves": waves,
                "resident_blocks": self.resident, "steps": self.steps,
                "printf_truncated": self.printf_out.truncated, "mode": "reference" if self.reference else "fast"}

    def _log_wave(self, first: int, n: int, start: int) -> None:
        """Record a wave in `wave_log`; past MAX_WAVE_LOG waves, fold it into the last entry."""
        sms = tuple(self._slot_sms(n).tolist())
        if len(self.wave_log) < MAX_WAVE_LOG:
            self.wave_log.append((first, n, start, self.clock_now(), sms))
            return
        b, slots, t0, _, seen = self.wave_log[-1]
        self.wave_log[-1] = (b, slots + n, t0, self.clock_now(), tuple(sorted(set(seen) | set(sms))))

    def clock_now(self) -> int:
        """Steps run so far: this launch's own, or the whole node's under a Node's scheduler."""
        if self.node_clock is not None:
            return self.node_clock.now()
        return self.steps + self.wave_steps()

    def describe_lane(self, lane: int) -> str:
        slot, t = divmod(int(lane), self.lanes_per_block)
        t = int(self.lane_tid[t])
        bx, by, _ = self.block
        tid = (t % bx, (t // bx) % by, t // (bx * by))
        b = int(self.block_ids[slot])
        gx, gy, _ = self.grid
        cta = (b % gx, (b // gx) % gy, b // (gx * gy))
        gpu = "" if self.gpu is None else f" on GPU {self.gpu}"
        return f"thread ({tid[0]},{tid[1]},{tid[2]}) block ({cta[0]},{cta[1]},{cta[2]}){gpu}"

    def lane_coords(self, lane: int) -> tuple[tuple[int, int, int], tuple[int, int, int]]:
        slot, t = divmod(int(lane), self.lanes_per_block)
        t = int(self.lane_tid[t])
        bx, by, _ = self.block
        b = int(self.block_ids[slot])
        gx, gy, _ = self.grid
        return (t % bx, (t // bx) % by, t // (bx * by)), (b % gx, (b // gx) % gy, b // (gx * gy))

    def add_check(self, check: Check) -> None:
        """Let `check` watch the launch too (after the checks it has). Its `instrument` applies to the waves that
        start from now on; its memory events at once."""
        self.hooks = self.hooks.added(check)
        self.ops = check.instrument(self.layout, self.ops)
        st = self.__dict__.get("st")
        if st is not None and st.mem is not None:
            st.mem.hooks = self.hooks if self.hooks.memory else None

    def _cluster_order(self) -> ClusterOrder:
        """Linear block ids in cluster order: cluster after cluster, the CTAs of each in rank order (computed per
        wave: block_order.py); clusters in a check's shuffled order, if it has one."""
        return ClusterOrder(self.grid, self.cluster, self.hooks.block_order(self.nblocks // self.csize))

    # ------------------------------------------------------------------ wave setup
    def _setup(self, first: int, nslots: int) -> LaneState:
        self.first_block = first
        lpb = self.lanes_per_block
        N = nslots * lpb
        st = LaneState(self, N)
        self.st = st
        lay = self.layout
        st.regs = list(lay.reg_zeros)
        st.pvars = [None] * len(lay.pvar_sizes)  # a function's .param storage is made at its first call
        self._alloc_pvars(self.kernel)
        funcs = [f for f in lay.functions.values() if f.name in lay.reachable]
        frames = sum(f.frame_size for f in funcs)
        recursive = any(f.recursive for f in funcs)
        local = frames + (64 * max((f.frame_size for f in funcs), default=0) if recursive else 0)
        check_local(funcs, N)  # before the wave's local memory is allocated
        st.mem = LaneMemory(self.device, nlanes=N, lanes_per_slot=lpb, shared_size=self.shared_size,
                            local_size=local, params=self.params, fault=_weakly(self._fault), cluster_size=self.csize)
        st.mem.hooks = self.hooks if self.hooks.memory else None
        st.mem.reference = st.reference = self.reference
        static = self._static(nslots)
        real = static["real_block"]
        blocks = first + np.arange(nslots, dtype=np.int64)
        if self.block_order is not None:  # a shuffled block order (a check's choice)
            blocks = self.block_order[blocks]
        self.block_ids = blocks
        gx, gy, gz = self.grid
        cx, cy, cz = self.cluster
        self.slot = static["slot"]
        st.laneid = static["sregs"]["%laneid"]
        st.warp_base = static["warp_base"]
        u = np.uint32

        def rep(a):
            return lambda: np.repeat(a.astype(u), lpb)
        s = dict(static["sregs"])
        lazy = {
            "%ctaid.x": rep(blocks % gx), "%ctaid.y": rep((blocks // gx) % gy),
            "%ctaid.z": rep(blocks // (gx * gy)),
            "%clusterid.x": rep(blocks % gx // cx), "%clusterid.y": rep((blocks // gx) % gy // cy),
            "%clusterid.z": rep(blocks // (gx * gy) // cz),
        }
        if self.csize > 1:
            bx, by, bz = blocks % gx % cx, (blocks // gx) % gy % cy, blocks // (gx * gy) % cz
            lazy.update({"%cluster_ctaid.x": rep(bx), "%cluster_ctaid.y": rep(by), "%cluster_ctaid.z": rep(bz),
                         "%cluster_ctarank": rep(bx + by * cx + bz * cx * cy)})
            for name in ("%cluster_ctaid.x", "%cluster_ctaid.y", "%cluster_ctaid.z", "%cluster_ctarank"):
                s.pop(name, None)
        if gy == 1 and gz == 1:
            lazy["%ctaid.y"] = lazy["%ctaid.z"] = lambda: u(0)
            lazy["%clusterid.y"] = lazy["%clusterid.z"] = lambda: u(0)
        st.lazy_sregs = lazy
        st.sregs = s
        self.real = static["real"]
        st.live = None if real.all() else self.real.copy()
        self.nlive = int(np.count_nonzero(self.real))
        self.nslots = nslots
        self.arrivals = np.zeros((nslots, NBARRIERS), np.int64)
        self.expected = np.zeros((nslots, NBARRIERS), np.int64)
        self.redtrue = np.zeros((nslots, NBARRIERS), np.int64)
        self.nonexited = np.full(nslots, int(np.count_nonzero(real)), np.int64)
        if self.csize > 1:  # barrier.cluster: arrivals and completed phases per cluster of the wave
            self.c_arrivals = np.zeros(nslots // self.csize, np.int64)
            self.c_phase = np.zeros(nslots // self.csize, np.int64)
            self.lane_cphase = np.full(N, -1, np.int64)  # the phase each lane last arrived in
        self.lane_bar = None  # LazyLanes: made at first use
        self.icount = None  # made at first look (see `icount`)
        self.retstack = np.zeros((8, N), np.int32) if lay.has_calls else None
        self.depth = self.top_ret = None  # LazyLanes: made at first use
        self.one_ctx = True  # every lane not exited has the same return address on top (`calls.same_context`)
        self.saves: dict = {}
        for f in self.hooks.on_wave:
            f(self, st)
        return st

    # ------------------------------------------------------------------ the loop
    def _run_wave(self, first: int, nslots: int) -> Generator[None, None, None]:
        """Run one wave to its end; the schedule (which lanes step next) is `WaveSchedule`'s."""
        st = self._setup(first, nslots)
        ops = self.ops
        regs = st.regs
        pc = self.kernel.entry
        conv = True
        ex = None  # the lanes running the op, while diverged
        icount: Any = None  # self.icount while diverged (nothing folds steps into it then: `_flush` is converged only)
        pend = 0  # converged steps not yet added to icount
        self.pcs = None
        self.pc = pc
        force = False
        plan = compact.plan_for(self)  # compacted stepping of lane-local code (compact.py), or None
        sched = WaveSchedule(self, yield_edges(self.layout, ops))
        # the score a region's sessions need (compact.py), and how fast a region found short earns a new try
        short, retry = (SHORT_SESSION_LARGE, 0.01) if st.N >= LARGE_WAVE else (SHORT_SESSION, 0.05)
        self.watch.new_wave()
        self.wave_steps = lambda: sched.steps  # (for %clock)
        try:
            while True:
                if conv:
                    op = ops[pc]
                    k = op.kind
                    if k == C.NORMAL or k == C.WARPSYNC:
                        op.fn(st, st.live)
                        pc += 1
                        pend += 1
                        sched.steps += 1
                        if sched.steps & sched.dmask == 0:  # (sched.tick_due, inline: the hottest line)
                            yield from sched.tick(pc, sched.steps)
                        continue
                    if k == C.BRA:
                        pend += 1
                        sched.steps += 1
                        if sched.steps & sched.dmask == 0:
                            yield from sched.tick(pc, sched.steps - 1)  # steps run before this branch
                        if op.guard is None:
                            pc = op.target
                            continue
                        g = regs[op.guard[0]]
                        if op.guard[1]:
                            g = ~g
                        if np.ndim(g) == 0:
                            pc = op.target if g else pc + 1
                            continue
                        t = g if st.live is None else (g & st.live)
                        nt = int(np.count_nonzero(t))
                        if nt == 0:
                            pc += 1
                        elif nt == self.nlive:
                            pc = op.target
                        else:
                            self._flush(pend)
                            pend = 0
                            icount = self.icount
                            pcs = np.full(st.N, EXITED, np.int32)
                            pcs[t] = op.target
                            pcs[st.live_mask() & ~t] = pc + 1
                            self.pcs = pcs
                            conv = False
                            sched.diverged()
                        continue
                    if k == C.BAR and op.guard is None and op.extra.mode == "sync" and \
                            op.extra.count is None and not self.arrivals.any():
                        if op.extra.fixed_id is None:  # an id in a register: checked as on the slow path
                            self._check_bar_ids(op)
                        for f in self.hooks.on_barrier_all:
                            f(self)
                        pc += 1
                        pend += 1
                        sched.steps += 1
                        continue
                    if k == C.BAR and self.csize == 1 and op.extra.mode in ("carrive", "cwait"):
                        pc += 1  # one-CTA cluster: barrier.cluster has nothing to wait for
                        pend += 1
                        sched.steps += 1
                        continue
                    if k == C.EXIT and op.guard is None:
                        self._flush(pend + 1)
                        pend = 0
                        return
                    if k == C.NOP:
                        pc += 1
                        continue
                    # anything else: run it through the per-lane path
                    self._flush(pend)
                    pend = 0
                    icount = self.icount
                    pcs = np.full(st.N, EXITED, np.int32)
                    pcs[st.live_mask()] = pc
                    self.pcs = pcs
                    conv = False
                    sched.diverged()
                    force = True
                    continue
                # ---------------------------------------------------------- diverged
                pcs = self.pcs
                lo = sched.lowest(pcs)
                if lo >= WAIT_BAR:
                    if lo == EXITED:
                        return
                    sched.all_waiting()
                    continue
                ex = pcs == lo
                nex = int(count_nonzero(ex))
                if nex == self.nlive and not force and self._one_context():
                    conv = True
                    sched.converged()
                    pc = lo
                    continue
                force = False
                # (a session schedules by the lowest pc of all lanes: none while warps have yielded)
                if plan is not None and sched.yielded is None and nex <= ENTER_FRACTION * st.N and \
                        not sched.rotation_due(sched.div_steps + 1):
                    rid = plan.region[lo]
                    if rid >= 0:
                        if plan.score[rid] < short:
                            plan.score[rid] += retry  # sessions here were short: try again now and then
                        else:
                            session = Session(self, plan, lo, WAIT_BAR, EXITED)
                            if session.start(lo, sched) and session.run(sched):
                                continue
                P = lo
                sched.div_steps += 1
                if sched.rotation_due(sched.div_steps):
                    P = sched.rotate(lo, pcs)
                    if P != lo:
                        ex = pcs == P
                sched.steps += 1
                if sched.steps & sched.dmask == 0:
                    yield from sched.tick(None, sched.steps)
                op = ops[P]
                k = op.kind
                if k == C.WARPSYNC:
                    ex = self._warp_ready(ex | (pcs == (P | WAIT_WARP)), P, op)
                    if ex is None:
                        continue
                elif not self.one_ctx:
                    ex = one_context(ex, self.top_ret)
                np.add(icount, ex, out=icount)  # (a bool mask adds 1 or 0: cheaper than where=ex)
                if k == C.NORMAL or k == C.WARPSYNC:
                    op.fn(st, ex)
                    np.copyto(pcs, P + 1, where=ex)
                    if st.spun:  # a poll in vain: the next step is the rotation's (a try_wait suspends)
                        st.spun = False
                        sched.spun()
                elif k == C.BRA:
                    g = self._guard(op, ex)
                    np.copyto(pcs, P + 1, where=ex)
                    np.copyto(pcs, op.target, where=g)
                    if sched.spin_edges[P]:  # the back edge of a loop that may wait for other warps
                        sched.yield_warps(g)
                elif k == C.EXIT:
                    g = self._guard(op, ex)
                    np.copyto(pcs, P + 1, where=ex)
                    self._exit(g)
                elif k == C.BAR:
                    self._barrier(op, ex, P)
                elif k == C.BRX:
                    self._brx(op, ex, P)
                elif k == C.CALL:
                    self._call(op, ex, P)
                elif k == C.RET:
                    self._ret(op, ex, P)
                elif k == C.TRAP:
                    g = self._guard(op, ex)
                    if g.any():
                        lane = int(np.flatnonzero(g)[0])
                        raise KernelTrap(f"{op.where}: trap executed ({self.describe_lane(lane)}): {op.text}"
                                         f"{self._trap_hint()}")
                    np.copyto(pcs, P + 1, where=ex)
                else:
                    np.copyto(pcs, P + 1, where=ex)
        except MemoryFault as e:
            raise self._locate(e, getattr(e, "_pc", pc if conv else P)) from None
        except (EmulatorError, KernelTrap) as e:
            if not isinstance(e, WatchdogTimeout):
                self._name_thread(e, st.live_mask() if conv or ex is None else ex)
            raise
        except (ValueError, TypeError, IndexError, KeyError, ZeroDivisionError, OverflowError) as e:
            at = pc if conv else P
            op = ops[at]
            raise InternalEmulatorError(f"{op.where}: {op.text}: internal error while emulating: "
                                f"{type(e).__name__}: {e}") from e
        finally:
            self.steps += sched.steps
            self.wave_steps = lambda: 0
            if conv and pend:
                self._flush(pend)
            self._account()

    def _name_thread(self, e: Exception, lanes: np.ndarray) -> None:
        """Add the thread and block that ran into error `e` to its message, unless it names one already."""
        msg = str(e.args[0]) if e.args else ""
        if "thread (" in msg or not np.any(lanes):
            return
        n = int(np.count_nonzero(lanes))
        first = self.describe_lane(int(np.argmax(lanes)))
        e.args = (f"{msg} ({first}{'' if n == 1 else f', the first of {n} threads running it'})", *e.args[1:])

    def _one_context(self) -> bool:
        """True when every live lane is in the same call context (same return address on top)."""
        if self.one_ctx:
            return True
        tr = self.top_ret if self.st.live is None else self.top_ret[self.st.live]
        return tr.size == 0 or lowest(tr) == highest(tr)

    def _flush(self, pend: int) -> None:
        if pend:
            if self.st.live is None:
                self._uniform_steps += pend  # every lane: a count, not a pass over the lanes
            else:
                self.icount[self.st.live] += pend

    def _account(self) -> None:
        counts = self.__dict__.get("_icount")
        per_slot = np.full(self.nslots, self._uniform_steps * self.lanes_per_block, np.int64)
        if counts is not None:
            per_slot += counts.reshape(self.nslots, -1).sum(1)
        self._uniform_steps = 0
        self.total += int(per_slot.sum())
        np.add.at(self.per_sm, self._slot_sms(self.nslots), per_slot)
        if counts is not None:
            counts[:] = 0

    def _slot_sms(self, nslots: int) -> np.ndarray:
        """The SM each slot of a wave runs on: where the node's SM room placed it, else round robin over
        the launch's SMs."""
        if self.wave_sms is not None and self.wave_sms.size == nslots:
            return self.wave_sms
        return self.sm_ids[np.arange(nslots) % self.sm_ids.size]

    def _guard(self, op, ex):
        if op.guard is None:
            return ex
        g = self.st.regs[op.guard[0]]
        if op.guard[1]:
            g = ~g
        return ex & g

    # ------------------------------------------------------------------ diagnostics
    def where(self, limit: int = 8) -> str:
        """Where the wave's warps stand, and what a spinning warp last polled (for the watchdogs)."""
        return where(self, limit)

    def watch_loads(self) -> None:
        """Count stores and remember the last global load (the Node's scheduler turns this on)."""
        self.add_check(LoadWatch(self))

    def _where_summary(self, limit: int = 8) -> str:
        pcs = self.pcs
        if pcs is None:
            return "all lanes converged"
        parts = []
        seen = set()
        for lane in range(0, self.st.N, 32):
            w = pcs[lane: lane + 32]
            live = w[w != EXITED]
            if live.size == 0:
                continue
            p = int(live.min())
            key = (lane // self.lanes_per_block, p)
            if key in seen:
                continue
            seen.add(key)
            raw = p & PC_MASK
            if p & WAIT_BAR and not p & WAIT_WARP and raw > 0:
                raw -= 1  # a lane waiting at a barrier already holds the pc after it
            op = self.ops[raw]
            bar = int(self.lane_bar[lane + int(np.argmin(w))])
            what = ("waits at barrier.cluster" if bar == NBARRIERS else f"waits at barrier {bar}") \
                if p & WAIT_BAR else \
                "waits for its warp" if p & WAIT_WARP else "is at"
            _, cta = self.lane_coords(lane)
            parts.append(f"block {cta} warp {(lane % self.lanes_per_block) // 32} {what} {op.where}: {op.text}")
            if len(parts) >= limit:
                parts.append("...")
                break
        return "; ".join(parts)

    def _deadlock(self) -> None:
        raise WatchdogTimeout("deadlock: every live thread is waiting and none can proceed: "
                              + self._where_summary())

    def _tmem_leaks(self, tmem) -> None:
        """Tensor memory must be deallocated before a CTA exits (PTX ISA, tcgen05.alloc)."""
        leaks = tmem.leaks()
        if not leaks:
            return
        slot, col, n, where = leaks[0]
        _, cta = self.lane_coords(slot * self.lanes_per_block)
        more = f" (and {len(leaks) - 1} more allocation(s))" if len(leaks) > 1 else ""
        block = f"({cta[0]},{cta[1]},{cta[2]})"
        raise MemoryFault(f"{where}: tcgen05.alloc: block {block} exited holding tensor memory columns "
                          f"{col}-{col + n - 1}{more}; tcgen05.dealloc every allocation before the kernel exits",
                          kind="tensor-memory", block=cta)

    def _fault(self, kind, space, addr, nbytes, lane, note):
        msg = f"{kind} {space} access of {nbytes} bytes at {addr:#x}"
        if note:
            msg += f" ({note})"
        e = MemoryFault(msg, kind=kind, address=addr, size=nbytes)
        e._lane = lane
        return e

    def _locate(self, e: MemoryFault, pc: int) -> MemoryFault:
        op = self.ops[pc]
        lane = getattr(e, "_lane", None)
        where = self.describe_lane(lane) if lane is not None else "unknown thread"
        thread, block = self.lane_coords(lane) if lane is not None else (None, None)
        msg = f"{op.where}: {op.text}: {e.args[0]} by {where}"
        return MemoryFault(msg, kind=e.kind, address=e.address, size=e.size, thread=thread, block=block,
                           ptx_line=op.line, instruction=op.text)


def _weakly(method):
    """`method`, bound without keeping its object alive (see `LaneState.machine`)."""
    ref = weakref.WeakMethod(method)
    return lambda *args: ref()(*args)
