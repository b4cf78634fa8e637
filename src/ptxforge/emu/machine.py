"""The SIMT machine: all threads of the resident blocks run as numpy lanes in lockstep.

Two modes. Converged: one scalar pc, every live lane executes it (the fast path, no per-lane work).
Diverged: a pc per lane; each step runs the instruction at the lowest pc for the lanes standing there
(min-pc scheduling reconverges at the immediate post-dominator for the code layouts nvcc and Triton
emit), with a periodic rotation so lanes spinning on a flag cannot starve the lanes that set it.
Lanes waiting at a barrier or for their warp carry a flag bit in their pc; exited lanes hold EXITED.
Diverged steps of lane-local code run on the lanes standing there only (compact.py: the same steps).
Which lanes step next, the rotation, the watchdog's ticks and a Node's yields are `WaveSchedule`'s
(wave_schedule.py), shared with compact.py's sessions.

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
from ptxforge.emu.block_order import ClusterOrder
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
from ptxforge.emu.hooks import Check, Hooks
from ptxforge.emu.memory import LaneMemory
from ptxforge.emu.op import EXITED, PC_MASK, WAIT_BAR, WAIT_WARP
from ptxforge.emu.operands import FUNC_BASE
from ptxforge.emu.ops_warp import warp_bits
from ptxforge.emu.program import storage_dtype
from ptxforge.emu.progress import Watch
from ptxforge.emu.variable_limits import check_local
from ptxforge.emu.waits import LoadWatch, where
from ptxforge.emu.wave_schedule import WaveSchedule, one_context
from ptxforge.ptx import ir

if TYPE_CHECKING:
    from ptxforge.emu.node import NodeClock

NBARRIERS = 16
STATIC_CACHE_BYTES = 64 << 20  # static lane arrays a kernel's layout keeps, oldest launch shape dropped first
QUANTUM = 128  # steps a launch runs before yielding to the others under a Node's scheduler


RESERVED_SMEM = 1024  # the system-reserved shared memory of a block (cooperative groups use it)


def _uses_reserved_smem(layout) -> bool:
    hit = getattr(layout, "_uses_reserved_smem", None)
    if hit is None:
        hit = any(isinstance(o, ir.SpecialRegister) and o.name.startswith("%reserved_smem")
                  for p in layout.placed for o in p.ins.operands)
        layout._uses_reserved_smem = hit
    return hit


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


# Calls nested deeper than this stop the launch with an error naming the call (CUDA's default 1 KiB stack
# holds far fewer frames; the emulator keeps a return address and saved registers per frame and lane).
MAX_CALL_DEPTH = 1024
MAX_WAVE_LOG = 1024  # waves `Machine.wave_log` records one by one (the rest are summed up in its last entry)


class Machine:
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
        self.hooks = Hooks(checks)  # what watches the launch (hooks.py: the sanitizer and the other checks)
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
        self.saves: dict = {}
        for f in self.hooks.on_wave:
            f(self, st)
        return st

    def _static(self, nslots: int) -> dict:
        """Lane arrays that depend only on the launch's shape and the number of slots: cached per launch, and
        with the kernel's layout (which lives with the module image) for the launches that share the shape.
        The cached arrays are read-only: ops read them, and register writes make new arrays."""
        hit = getattr(self, "_static_cache", None)
        if hit is not None and hit["nslots"] == nslots and hit["sms"] is self.wave_sms:
            return hit
        shared = self.wave_sms is None and not self.shuffled_warps
        key = (nslots, self.block, self.grid, self.num_sms, self.sm_ids.tobytes(), self.dynamic_shared,
               self.shared_size, self.reserved_smem, self.cluster, self.explicit_cluster,
               tuple(sorted(self.envregs.items()))) if shared else None
        cache = self.layout.__dict__.setdefault("_static_waves", {})
        hit = cache.get(key) if shared else None
        if hit is None:
            hit = self._make_static(nslots)
            arrays = [a for a in (*hit["sregs"].values(), hit["real_block"], hit["real"], hit["slot"],
                                  hit["warp_base"]) if isinstance(a, np.ndarray)]
            for a in arrays:
                a.flags.writeable = False
            hit["nbytes"] = sum(a.nbytes for a in arrays)
            if shared:
                while cache and sum(h["nbytes"] for h in cache.values()) + hit["nbytes"] > STATIC_CACHE_BYTES:
                    del cache[next(iter(cache))]  # the oldest shape first
                cache[key] = hit
        self._static_cache = hit
        return hit

    def _make_static(self, nslots: int) -> dict:
        lpb = self.lanes_per_block
        N = nslots * lpb
        t = self.lane_tid
        real = t < self.threads
        bx, by, bz = self.block
        gx, gy, gz = self.grid
        u = np.uint32

        def tile(a):
            return np.tile(np.where(real, a, 0).astype(u), nslots)
        lane = (np.arange(N, dtype=np.int64) & 31).astype(u)
        one = u(1) << lane
        lt = one - u(1)
        s = {
            "%tid.x": tile(t % bx), "%tid.y": tile((t // bx) % by), "%tid.z": tile(t // (bx * by)),
            "%ntid.x": u(bx), "%ntid.y": u(by), "%ntid.z": u(bz),
            "%nctaid.x": u(gx), "%nctaid.y": u(gy), "%nctaid.z": u(gz),
            "%laneid": lane, "%warpid": tile(t // 32), "%nwarpid": u(64),
            "%smid": np.repeat(self._slot_sms(nslots).astype(u), lpb), "%nsmid": u(self.num_sms),
            "%gridid": np.uint64(1),
            "%lanemask_eq": one, "%lanemask_lt": lt, "%lanemask_le": lt | one, "%lanemask_gt": ~(lt | one),
            "%lanemask_ge": ~lt,
            "%dynamic_smem_size": u(self.dynamic_shared), "%total_smem_size": u(self.shared_size),
            "%aggr_smem_size": u(self.shared_size),
            "%reserved_smem_offset_begin": u(self.shared_size - self.reserved_smem),
            "%reserved_smem_offset_end": u(self.shared_size), "%reserved_smem_offset_cap": u(self.reserved_smem),
            "%reserved_smem_offset_0": u(self.shared_size - self.reserved_smem),
            "%reserved_smem_offset_1": u(self.shared_size - self.reserved_smem + 16),
            "%cluster_ctarank": u(0), "%cluster_nctarank": u(self.csize),
            "%is_explicit_cluster": u(int(self.explicit_cluster)),
            "%nclusterid.x": u(gx // self.cluster[0]), "%nclusterid.y": u(gy // self.cluster[1]),
            "%nclusterid.z": u(gz // self.cluster[2]),
            "%current_graph_exec": np.uint64(0),
        }
        for i, d in enumerate("xyz"):
            s[f"%cluster_ctaid.{d}"] = u(0)
            s[f"%cluster_nctaid.{d}"] = u(self.cluster[i])
        for i in range(32):
            s[f"%envreg{i}"] = u(self.envregs.get(i, 0))
        for i in range(8):  # performance monitoring counters: not modelled, they read 0
            s[f"%pm{i}"] = u(0)
            s[f"%pm{i}_64"] = np.uint64(0)
        return {"nslots": nslots, "sms": self.wave_sms, "sregs": s, "real_block": real,
                "real": np.tile(real, nslots), "slot": np.repeat(np.arange(nslots, dtype=np.int64), lpb),
                "warp_base": np.arange(N, dtype=np.int64) & ~np.int64(31)}

    # ------------------------------------------------------------------ the loop
    def _run_wave(self, first: int, nslots: int) -> Generator[None, None, None]:
        """Run one wave to its end; the schedule (which lanes step next) is `WaveSchedule`'s."""
        st = self._setup(first, nslots)
        ops = self.ops
        regs = st.regs
        pc = self.kernel.entry
        conv = True
        ex = None  # the lanes running the op, while diverged
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
                        if sched.steps & sched.dmask == 0:
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
                nex = int(np.count_nonzero(ex))
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
                elif self.retstack is not None:
                    ex = one_context(ex, self.top_ret)
                # (where=: the masks here are mostly runs of lanes, which it skips fast; compact.py's data-
                # dependent ones take op.advance)
                np.add(self.icount, 1, out=self.icount, where=ex)
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
        if self.retstack is None:
            return True
        tr = self.top_ret if self.st.live is None else self.top_ret[self.st.live]
        return tr.size == 0 or tr.min() == tr.max()

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

    # ------------------------------------------------------------------ exits and barriers
    def _exit(self, sel) -> None:
        n = int(np.count_nonzero(sel))
        if not n:
            return
        self.pcs[sel] = EXITED
        st = self.st
        live = st.live_mask().copy()
        live[sel] = False
        st.live = live
        self.nlive -= n
        self.nonexited -= np.bincount(self.slot[sel], minlength=self.nslots)
        if self.csize > 1:
            self._cluster_release()
        for bid in np.flatnonzero(self.arrivals.any(0)):
            self._try_release(int(bid))

    def _check_bar_ids(self, op) -> None:
        live = self.st.live_mask()
        ids = np.broadcast_to(np.asarray(op.extra.bar_id(self.st)).astype(np.int64), live.shape)
        bad = live & ((ids < 0) | (ids >= NBARRIERS))
        if bad.any():
            lane = int(np.argmax(bad))
            raise EmulatorError(f"{op.where}: barrier id {int(ids[lane])} is out of range 0..15 "
                                f"({self.describe_lane(lane)})")

    def _barrier(self, op, ex, P) -> None:
        info = op.extra
        st = self.st
        pcs = self.pcs
        sel = self._guard(op, ex)
        np.copyto(pcs, P + 1, where=ex & ~sel)
        if info.mode in ("carrive", "cwait"):
            self._cluster_barrier(info.mode, sel, P)
            return
        ids = info.bar_id(st)
        ids = np.broadcast_to(np.asarray(ids).astype(np.int64), (st.N,))
        uniq = np.unique(ids[sel]) if np.ndim(info.bar_id(st)) else [int(ids[0])]
        cnt_v = None if info.count is None else np.broadcast_to(np.asarray(info.count(st), np.int64), (st.N,))
        for bid in uniq:
            bid = int(bid)
            if not 0 <= bid < NBARRIERS:
                lane = int(np.argmax(sel & (ids == bid)))
                raise EmulatorError(f"{op.where}: barrier id {bid} is out of range 0..15 ({self.describe_lane(lane)})")
            lanes = sel & (ids == bid) if np.ndim(info.bar_id(st)) else sel
            slots = self.slot[lanes]
            cnt = np.bincount(slots, minlength=self.nslots)
            self.arrivals[:, bid] += cnt
            if cnt_v is not None:
                first = np.full(self.nslots, -1, np.int64)
                idx = np.flatnonzero(lanes)
                first[self.slot[idx[::-1]]] = cnt_v[idx[::-1]]
                has = first >= 0
                self.expected[has, bid] = first[has]
            if info.mode == "red":
                pv = np.broadcast_to(np.asarray(info.red_src(st), bool), (st.N,))
                self.redtrue[:, bid] += np.bincount(slots, weights=pv[lanes], minlength=self.nslots).astype(
                    np.int64)
            if info.mode == "arrive":
                np.copyto(pcs, P + 1, where=lanes)
            else:
                np.copyto(pcs, (P + 1) | WAIT_BAR, where=lanes)
                self.lane_bar[lanes] = bid
                self._pending_red = getattr(self, "_pending_red", {})
                if info.mode == "red":
                    self._pending_red[bid] = info
            self._try_release(bid)

    def _cluster_barrier(self, mode: str, sel, P) -> None:
        """barrier.cluster.arrive counts the lanes toward their cluster's phase; .wait blocks lanes
        until the phase they arrived in has completed (every non-exited thread of the cluster arrived)."""
        pcs = self.pcs
        if self.csize == 1:
            np.copyto(pcs, P + 1, where=sel)
            return
        ccl = self.slot // self.csize
        if mode == "carrive":
            np.copyto(pcs, P + 1, where=sel)
            self.c_arrivals += np.bincount(ccl[sel], minlength=self.c_arrivals.size)
            self.lane_cphase[sel] = self.c_phase[ccl[sel]]
            self._cluster_release()
            return
        done = self.c_phase[ccl] > self.lane_cphase
        np.copyto(pcs, P + 1, where=sel & done)
        wait = sel & ~done
        np.copyto(pcs, (P + 1) | WAIT_BAR, where=wait)
        self.lane_bar[wait] = NBARRIERS

    def _cluster_release(self) -> None:
        exp = self.nonexited.reshape(-1, self.csize).sum(1)
        done = (self.c_arrivals > 0) & (self.c_arrivals >= exp)
        if not done.any():
            return
        self.c_phase[done] += 1
        self.c_arrivals[done] = 0
        pcs = self.pcs
        rel = (pcs >= WAIT_BAR) & (pcs < WAIT_WARP) & (self.lane_bar == NBARRIERS) & \
            done[self.slot // self.csize]
        pcs[rel] -= WAIT_BAR
        for f in self.hooks.on_cluster_release:
            f(self, np.flatnonzero(np.repeat(done, self.csize)))

    def _try_release(self, bid: int) -> None:
        arr = self.arrivals[:, bid]
        exp = np.where(self.expected[:, bid] > 0, self.expected[:, bid], self.nonexited)
        done = (arr > 0) & (arr >= exp)
        if not done.any():
            return
        pcs = self.pcs
        rel = (pcs >= WAIT_BAR) & (pcs < WAIT_WARP) & done[self.slot] & (self.lane_bar == bid)
        red = getattr(self, "_pending_red", {}).pop(bid, None)
        if red is not None:
            rt, ar = self.redtrue[:, bid], arr
            val = {"popc": rt.astype(np.uint32), "and": rt == ar, "or": rt > 0}[red.red_op]
            red.red_dst(self.st, val[self.slot], rel)
        for f in self.hooks.on_release:
            f(self, bid, done, rel)
        pcs[rel] -= WAIT_BAR
        self.arrivals[done, bid] = 0
        self.expected[done, bid] = 0
        self.redtrue[done, bid] = 0

    def _warp_ready(self, ex, P, op):
        """Lanes of `ex` whose warp (member mask) has fully arrived; the rest wait at P."""
        pcs = self.pcs
        elsewhere = ~ex & (pcs != EXITED)
        if not elsewhere.any():
            np.copyto(pcs, P, where=ex)
            return ex
        eb = np.repeat(warp_bits(elsewhere), 32)
        mm = np.uint32(0xFFFFFFFF) if op.membermask is None else np.asarray(op.membermask(self.st), np.uint32)
        bad = ex & ((mm & eb) != 0)
        if self.hooks.on_warp_wait and bad.any():
            for f in self.hooks.on_warp_wait:
                f(self, P, bad, elsewhere, mm)
        ready = ex & ~bad
        np.copyto(pcs, P | WAIT_WARP, where=bad)
        np.copyto(pcs, P, where=ready)
        return ready if ready.any() else None

    def _wake_warp_waiters(self) -> bool:
        """All lanes wait: let lanes waiting at one warp-synchronous op run it when the rest of their
        warp has exited (exited lanes named in a member mask need not take part)."""
        pcs = self.pcs
        wait = ((pcs & WAIT_WARP) != 0) & (pcs != EXITED)
        blocked = (pcs != EXITED) & ~wait
        w = wait.reshape(-1, 32)
        p = pcs.reshape(-1, 32)
        hi = np.where(w, p, -1).max(1)
        lo = np.where(w, p, np.iinfo(np.int32).max).min(1)
        ok = w.any(1) & ~blocked.reshape(-1, 32).any(1) & (hi == lo)
        if not ok.any():
            return False
        wake = wait & np.repeat(ok, 32)
        pcs[wake] &= ~np.int32(WAIT_WARP)
        return True

    def _brx(self, op, ex, P) -> None:
        read, table = op.extra
        sel = self._guard(op, ex)
        np.copyto(self.pcs, P + 1, where=ex & ~sel)
        idx = np.broadcast_to(np.asarray(read(self.st), np.int64), (self.st.N,))[sel]
        if idx.size and (idx.min() < 0 or idx.max() >= table.size):
            lane = int(np.flatnonzero(sel)[int(np.argmax((idx < 0) | (idx >= table.size)))])
            raise EmulatorError(f"{op.where}: brx.idx index {int(idx.max())} outside its {table.size} targets "
                                f"({self.describe_lane(lane)})")
        self.pcs[sel] = table[idx]

    # ------------------------------------------------------------------ calls
    def _call(self, op, ex, P) -> None:
        info = op.extra
        st = self.st
        sel = self._guard(op, ex)
        np.copyto(self.pcs, P + 1, where=ex & ~sel)
        lanes_all = np.flatnonzero(sel)
        if lanes_all.size == 0:
            return
        if info.callee is None:  # indirect: group lanes by target
            addr = np.broadcast_to(np.asarray(info.indirect(st), np.uint64), (st.N,))[lanes_all]
            names = [f.name for f in self.layout.module.functions]
            for a in np.unique(addr):
                i = int(a) - FUNC_BASE
                by = self.describe_lane(int(lanes_all[int(np.argmax(addr == a))]))
                if 0 <= i < len(names) and names[i] in self.layout.other_kernels:
                    raise EmulatorError(f"{op.where}: indirect call to {int(a):#x}, kernel {names[i]} (.entry): "
                                        f"only a .func can be called ({by})")
                if not 0 <= i < len(names) or names[i] not in self.layout.functions:
                    raise EmulatorError(f"{op.where}: indirect call to {int(a):#x}, not a function ({by})")
                callee = self.layout.functions[names[i]]
                if callee.func.body is None:
                    raise EmulatorError(f"{op.where}: indirect call to extern {callee.name} is not supported ({by})")
                self._enter(callee, info, lanes_all[addr == a], P)
            return
        self._enter(info.callee, info, lanes_all, P)

    def _alloc_pvars(self, fl) -> None:
        """The wave's .param storage of function `fl` (zeroed), unless it has it already."""
        pvars, sizes, N = self.st.pvars, self.layout.pvar_sizes, self.st.N
        for i in (*fl.pvars, *fl.return_pvars):
            if pvars[i] is None:
                pvars[i] = np.zeros((N, sizes[i]), np.uint8)

    def _enter(self, callee, info, lanes, P) -> None:
        st = self.st
        self._alloc_pvars(callee)
        d = self.depth[lanes]
        if int(d.max()) + 1 >= self.retstack.shape[0]:
            self.retstack = np.concatenate([self.retstack, np.zeros_like(self.retstack)])
            for saves in self.saves.values():
                for key, arr in list(saves.items()):
                    saves[key] = np.concatenate([arr, np.zeros_like(arr)])
        if int(d.max()) + 1 >= MAX_CALL_DEPTH:
            lane = int(lanes[int(np.argmax(d))])
            raise EmulatorError(f"{self.ops[P].where}: call to {callee.name}: the call stack of "
                                f"{self.describe_lane(lane)} is {MAX_CALL_DEPTH} frames deep (unbounded recursion?)")
        if callee.recursive:
            saves = self.saves.setdefault(callee.name, {})
            D = self.retstack.shape[0]
            for s in callee.reg_slots:
                arr = saves.get(("r", s))
                if arr is None or arr.shape[0] < D:
                    arr = saves[("r", s)] = np.zeros((D, st.N), storage_dtype(self.layout.reg_types[s]))
                arr[d, lanes] = np.broadcast_to(st.regs[s], (st.N,))[lanes]
            for pv in callee.pvars:
                arr = saves.get(("p", pv))
                if arr is None or arr.shape[0] < D:
                    arr = saves[("p", pv)] = np.zeros((D, st.N, self.layout.pvar_sizes[pv]), np.uint8)
                arr[d, lanes] = st.pvars[pv][lanes]
        # arguments are read before any of the callee's registers change (a .reg formal may be the caller's
        # own register in a recursive call)
        values = [None if r is None else _arg_lanes(st, r, lanes) for r in (info.arg_readers or ())]
        for i, (src, dst) in enumerate(zip(info.arg_pvars, callee.param_pvars, strict=False)):
            slot = callee.param_regs[i] if i < len(callee.param_regs) else None
            if slot is not None and i < len(values) and values[i] is not None:
                _store_lanes(st, slot, lanes, values[i])
            elif src is not None:
                n = min(st.pvars[src].shape[1], st.pvars[dst].shape[1])
                st.pvars[dst][lanes, :n] = st.pvars[src][lanes, :n]
        self.retstack[d, lanes] = P + 1
        self.top_ret[lanes] = P + 1
        self.depth[lanes] = d + 1
        st.fb[lanes] += info.caller.frame_size
        need = int(st.fb[lanes].max()) + callee.frame_size
        if need > st.mem.local_stride:
            st.mem.grow_local(need)
        self.pcs[lanes] = callee.entry

    def _ret(self, op, ex, P) -> None:
        st = self.st
        callee = op.extra
        sel = self._guard(op, ex)
        np.copyto(self.pcs, P + 1, where=ex & ~sel)
        lanes = np.flatnonzero(sel)
        if lanes.size == 0:
            return
        d = self.depth[lanes] - 1
        self.depth[lanes] = d
        rp = self.retstack[d, lanes]
        self.top_ret[lanes] = np.where(d > 0, self.retstack[np.maximum(d - 1, 0), lanes], -1)
        results = [None if r is None else tuple(np.broadcast_to(st.regs[e], (st.N,)).copy() for e in r)
                   if isinstance(r, tuple) else np.broadcast_to(st.regs[r], (st.N,)).copy() for r in callee.return_regs]
        if callee.recursive:
            saves = self.saves.get(callee.name, {})
            for (kind, s), arr in saves.items():
                if kind == "r":
                    full = np.broadcast_to(st.regs[s], (st.N,)).copy()
                    full[lanes] = arr[d, lanes]
                    st.regs[s] = full
                else:
                    st.pvars[s][lanes] = arr[d, lanes]
        for u in np.unique(rp):  # after the restore: results must survive it
            sub = lanes[rp == u]
            call = self.ops[int(u) - 1].extra
            writers = call.ret_writers or ()
            for i, (src, dst) in enumerate(zip(callee.return_pvars, call.ret_pvars, strict=False)):
                if results[i] is not None and i < len(writers) and writers[i] is not None:
                    mask = np.zeros(st.N, bool)
                    mask[sub] = True
                    wr, res = writers[i], results[i]
                    if isinstance(wr, tuple) and isinstance(res, tuple):  # a vector result, element by element
                        for w, v in zip(wr, res, strict=True):
                            w(st, v, mask)
                    elif callable(wr):
                        wr(st, res, mask)
                    continue
                if results[i] is not None:  # a .reg result into the caller's .param variable
                    raw = np.ascontiguousarray(results[i]).view(np.uint8).reshape(st.N, -1)
                    n = min(raw.shape[1], st.pvars[dst].shape[1])
                    st.pvars[dst][sub, :n] = raw[sub, :n]
                    continue
                n = min(st.pvars[src].shape[1], st.pvars[dst].shape[1])
                st.pvars[dst][sub, :n] = st.pvars[src][sub, :n]
            st.fb[sub] -= call.caller.frame_size
        self.pcs[lanes] = rp

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


def _arg_lanes(st, reader, lanes):
    """A call argument's values on `lanes` (a tuple of them for a vector `.reg` formal)."""
    if isinstance(reader, tuple):
        return tuple(_arg_lanes(st, r, lanes) for r in reader)
    return np.broadcast_to(np.asarray(reader(st)), (st.N,))[lanes]


def _store_lanes(st, slot, lanes, values) -> None:
    """Set register `slot` to `values` on `lanes` (registers may be held as one uniform scalar); a tuple of
    slots (a vector register) takes a tuple of values."""
    if isinstance(slot, tuple):
        for s, v in zip(slot, values, strict=True):
            _store_lanes(st, s, lanes, v)
        return
    full = np.broadcast_to(st.regs[slot], (st.N,)).copy()
    full[lanes] = np.asarray(values).astype(full.dtype, copy=False)
    st.regs[slot] = full
