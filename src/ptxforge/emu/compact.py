"""Divergent stretches of lane-local code, run on the lanes standing in them only.

In a diverged wave the machine runs, each step, the instruction at the lowest pc for the lanes standing
there, as a mask over every lane of the wave: a data-dependent loop that keeps a tenth of the lanes busy
still pays for all of them. A *session* gathers the lanes standing in a loop of lane-local instructions
(integer, float and video arithmetic, conversions, moves, selects, predicates, branches: ops that read and
write only their own lane's registers and static special registers, see `Plan`) into short arrays and
takes the machine's own steps, in the machine's order (the lowest pc first, the periodic rotation, call
contexts kept apart: the one `WaveSchedule` of wave_schedule.py), on them: without masks while they all
stand at one pc, with masks over the gathered lanes only when they do not. Lanes that cannot run again
before the loop ends (past its last backward branch) go back to the machine after a branch, and the rest
are compacted. A parked (not gathered) lane whose turn comes joins the session at a lane-local instruction;
at an ordinary op or an exit it runs on the machine's own state, which holds everything about it.

shfl runs in a session too, when the gathered lanes are whole warps in lane order and the lanes at the shfl are
whole warps with nobody waiting (the machine's step would run exactly them; `Session._warps_ready`).
A session stops, before changing anything, where its own lanes reach an instruction that is not lane-local
(memory, other warp-synchronous ops, or a shfl not run by whole warps standing together, barriers, calls),
where the wave reconverges, and at the watchdog's ticks and a Node's yields (they read the machine's arrays;
while the watchdog probes, the steps at which it could find the probe's state again). It then writes back
its pcs, instruction counts and the registers some lane can still read (liveness.py; a value no lane reads
again stays stale in the machine's arrays, which the watchdog's fingerprint does not look at). So every
lane executes the same instructions in the same steps with the same companions as before: shfl, vote,
bar.warp.sync, barriers, reconvergence, %clock and the watchdog see exactly the schedule they always saw
(tests/emu/test_emu_compaction.py compares memory, counts and steps with sessions off). Only the cost
changes. Not used when a check instruments the ops (the sanitizer: its wrappers keep per-lane state of the
whole wave; hooks.py).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np

from ptxforge.emu import op as C
from ptxforge.emu.errors import InternalEmulatorError, MemoryFault
from ptxforge.emu.liveness import Liveness, liveness_for
from ptxforge.emu.npcalls import count_nonzero, highest, lowest
from ptxforge.emu.operands import DYNAMIC_SREGS
from ptxforge.emu.progress import PROBE_STEPS, TICK_MASK
from ptxforge.emu.wave_schedule import one_context
from ptxforge.ptx import ir
from ptxforge.ptx.isa.effects import lane_local

if TYPE_CHECKING:
    from collections.abc import Iterable

    from ptxforge.emu.machine import LaneState, Machine
    from ptxforge.emu.operands import Value
    from ptxforge.emu.program import Layout
    from ptxforge.emu.wave_schedule import WaveSchedule

ENABLED = True  # off: no sessions, the rest fast (benchmarks/divergence_speed.py measures sessions alone);
# a launch's own switch is reference mode (`Machine.reference`), which turns off every fast path
ENTER_FRACTION = 1.0  # a session starts when the lanes it would gather are at most this share of the wave (any)
MIN_LANES = 32  # below this many lanes a session compacts only when the rest then stand together
SHORT_SESSION = 8  # sessions of a region that end sooner than this many steps, on average, are not worth it
# ... in a wave of LARGE_WAVE lanes or more, where a machine step costs about the whole wave's lanes, the
# score is the steps times the share of the wave's lanes a session leaves out, and this is its bar (a session
# costs about four passes over the wave: gathering, parking, writing back)
LARGE_WAVE, SHORT_SESSION_LARGE = 1 << 14, 4


_STEPS_RUN = 0
_SKIPPED = 0


def steps_run() -> int:
    """Machine steps taken by sessions in this process so far (for tests and benchmarks)."""
    return _STEPS_RUN


def writebacks_skipped() -> int:
    """Register write-backs sessions left out in this process so far, the values being dead (for tests)."""
    return _SKIPPED


class Plan:
    """Per kernel layout: which pcs are lane-local, their regions, loops and registers."""

    def __init__(self, layout: Layout, ops: list[C.Op]):
        n = len(ops)
        lanewise, edges = _lanewise(layout, ops)
        # a yielding back edge (machine._yield_warps) is the machine's own to take: sessions stop before it
        ok = np.array([x is not None for x in lanewise], bool) & ~edges
        slots_at = [x if x is not None else () for x in lanewise]
        self.slots_at = [tuple(x) for x in slots_at]  # register slots each lane-local instruction uses
        self._span_slots: dict = {}
        self.region = np.full(n, -1, np.int64)  # region id of each lane-local pc (-1: not lane-local)
        self.hi = np.zeros(n, np.int64)  # the last pc a session started here gathers lanes up to
        self.slots: list = []  # register slots each region's ops use
        self.score: list = []  # running mean of each region's session lengths (weighted: see LARGE_WAVE)
        self.steps_taken = 0  # steps run by sessions, all launches (for tests and benchmarks)
        pc = 0
        while pc < n:
            if not ok[pc]:
                pc += 1
                continue
            a = pc
            while pc < n and ok[pc]:
                pc += 1
            b = pc - 1
            rid = len(self.slots)
            self.region[a:b + 1] = rid
            self.slots.append(sorted(set().union(*slots_at[a:b + 1])))
            self.score.append(float(4 * SHORT_SESSION))
            hi = np.full(b - a + 1, -1, np.int64)
            for t in range(a, b + 1):  # a backward branch at t: its loop's lanes stay within [target, t]
                op = ops[t]
                if op.kind == C.BRA and a <= op.target <= t:
                    hi[op.target - a: t - a + 1] = np.maximum(hi[op.target - a: t - a + 1], t)
            self.hi[a:b + 1] = np.where(hi >= 0, hi, b)


    def span_slots(self, lo: int) -> frozenset:
        """The registers the instructions from `lo` to the end of its loop use."""
        hit = self._span_slots.get(lo)
        if hit is None:
            hit = self._span_slots[lo] = frozenset().union(*self.slots_at[lo:int(self.hi[lo]) + 1])
        return hit


def plan_for(machine: Machine) -> Plan | None:
    """The kernel's plan (kept with its layout), or None where sessions must not run."""
    if not ENABLED or machine.reference or machine.hooks.instruments:
        return None
    lay = machine.layout
    plan = lay.__dict__.get("_compact_plan")
    if plan is None or len(plan.region) != len(machine.ops):
        plan = lay.__dict__["_compact_plan"] = Plan(lay, machine.ops)
    return plan


def _lanewise(layout: Layout, ops: list[C.Op]) -> tuple[list, np.ndarray]:
    """(the register slots of each lane-local pc, or None; the yielding back edges), kept with the layout."""
    hit = layout.__dict__.get("_lanewise")
    if hit is None or len(hit[1]) != len(ops):
        lanewise = [_lanewise_slots(layout, placed, op) for placed, op in zip(layout.placed, ops, strict=True)]
        polls = np.concatenate([[0], np.cumsum([_may_poll(placed.ins) for placed in layout.placed])])  # prefix
        edges = np.zeros(len(ops), bool)
        for pc, op in enumerate(ops):
            if op.kind == C.BRA and op.target is not None and 0 <= op.target <= pc:
                edges[pc] = polls[pc + 1] - polls[op.target] > 0
        hit = layout.__dict__["_lanewise"] = (lanewise, edges)
    return hit


_POLL_LOADS = frozenset({"volatile", "relaxed", "acquire", "mmio"})


def _may_poll(ins: object) -> bool:
    """True for an instruction through which a lane may see what other threads do, or time pass: a
    volatile/relaxed/acquire load, an atomic, an mbarrier test/try_wait, nanosleep, a read of the clock.
    A plain (weak) load may not observe another thread's store in a loop; copies are made of those."""
    if not isinstance(ins, ir.Instruction):
        return False
    op = ins.opcode
    if op in ("ld", "ldu"):
        return not _POLL_LOADS.isdisjoint(ins.suffixes)
    if op == "atom" or op == "nanosleep":
        return True
    if op == "mbarrier":
        return "try_wait" in ins.suffixes or "test_wait" in ins.suffixes
    return any(isinstance(o, ir.SpecialRegister) and o.name in DYNAMIC_SREGS for o in ins.operands)


def yield_edges(layout: Layout, ops: list[C.Op]) -> np.ndarray:
    """The backward branches whose loop may wait for other warps: it holds a poll (`_may_poll`: a
    volatile/relaxed/acquire load, an atomic, an mbarrier test, the clock). A diverged warp that takes one
    yields its turn to the others (`Machine._yield_warps`); a copy loop of weak loads and stores, or a loop
    of lane-local code, does not (yielding there only breaks up warps that run in step)."""
    return _lanewise(layout, ops)[1]


def _lanewise_slots(layout, placed, op):
    """The register slots an instruction uses if it is lane-local (or a branch), else None."""
    ins = placed.ins
    if op.kind == C.BRA:
        pass
    elif op.kind == C.WARPSYNC and ins.opcode == "shfl":
        pass  # run on gathered whole warps only (`Session._warps_ready`)
    elif op.kind != C.NORMAL or not lane_local(ins):  # the ISA table's effects
        return None
    slots: set = set()
    if ins.guard is not None:
        hit = placed.scope.get(ins.guard.predicate)
        if not isinstance(hit, tuple):
            return None
        slots.add(hit[1])
    if op.kind == C.BRA:
        return slots
    for o in ins.operands:
        if not _operand_slots(layout, placed, o, slots):
            return None
    return slots


def _operand_slots(layout, placed, o, slots: set) -> bool:
    if isinstance(o, ir.Immediate | ir.Sink):
        return True
    if isinstance(o, ir.SpecialRegister):
        return o.name not in DYNAMIC_SREGS
    if isinstance(o, ir.Negated | ir.Minus):
        return _operand_slots(layout, placed, o.operand, slots)
    if isinstance(o, ir.RegisterOffset):
        return _operand_slots(layout, placed, o.register, slots)
    if isinstance(o, ir.Vector):
        return all(_operand_slots(layout, placed, e, slots) for e in o.elements)
    if isinstance(o, ir.PredPair):
        return _operand_slots(layout, placed, o.first, slots) and _operand_slots(layout, placed, o.second, slots)
    if isinstance(o, ir.Register | ir.Symbol):
        hit = layout.lookup(placed, o.name)
        if isinstance(hit, tuple):
            slots.add(hit[1])
            return True
        # addresses and pcs are constants; .local (frame base) and .param variables are per-lane storage
        return hit is not None and getattr(hit, "kind", None) in ("global", "shared", "kparam", "func", "label")
    return False


_WARP_LAYOUT: dict = {}


def _warp_layout(n: int):
    """(%laneid, warp base) of `n` gathered lanes that are whole warps in order (read-only, kept per size so
    shfl's per-shape cache of source lanes hits)."""
    hit = _WARP_LAYOUT.get(n)
    if hit is None:
        if len(_WARP_LAYOUT) >= 8:
            del _WARP_LAYOUT[next(iter(_WARP_LAYOUT))]
        pos = np.arange(n, dtype=np.int64)
        hit = ((pos & 31).astype(np.uint32), pos & ~np.int64(31))
        for a in hit:
            a.flags.writeable = False
        _WARP_LAYOUT[n] = hit
    return hit


class SubLanes:
    """What an op sees of the gathered lanes: their registers and special registers (duck-types LaneState).
    `laneid` and `warp_base` are those of whole warps in order: shfl runs here only when the gathered lanes
    are (see `Session._warps_ready`)."""

    machine = None  # (a LaneState's: these lanes are no whole wave)
    reference = False  # (sessions never run in reference mode: plan_for)

    def __init__(self, st: LaneState, idx: np.ndarray, slots: Iterable[int]):
        self.parent = st
        self.N = idx.size
        self.idx = idx
        self.live = None
        self.regs = [None] * len(st.regs)  # only the region's registers are gathered
        for s in slots:
            r = st.regs[s]
            self.regs[s] = r[idx] if np.ndim(r) else r
        self.sregs: dict = {}

    def sreg(self, name: str) -> Value:
        v = self.sregs.get(name)
        if v is None:
            v = self.parent.sreg(name)
            v = self.sregs[name] = v[self.idx] if np.ndim(v) else v
        return v

    def live_mask(self) -> np.ndarray:
        return np.ones(self.N, bool)

    @property
    def laneid(self) -> np.ndarray:
        return _warp_layout(self.N)[0]

    @property
    def warp_base(self) -> np.ndarray:
        return _warp_layout(self.N)[1]


class Session:
    """One stretch of compacted stepping, started at the wave's lowest pc `lo` (see `start`, `run`).

    The gathered lanes' registers live in `sub` (the region's slots only), their pcs in `sp` and their
    instruction counts since the start in `dic`; every other lane is parked, its state in the machine."""

    def __init__(self, m: Machine, plan: Plan, lo: int, wait_bar: int, exited: int):
        self.m = m
        self.plan = plan
        self.rid = int(plan.region[lo])
        self.wait_bar, self.exited = wait_bar, exited  # the machine's pc flags (machine.py imports this module)

    def start(self, lo: int, sched: WaveSchedule) -> bool:
        """Gather the lanes standing between `lo` (the wave's lowest pc) and the end of its loop; False
        (nothing done) when they are too many for gathering to pay, or the next step is the watchdog's."""
        m = self.m
        s1 = sched.steps + 1
        if sched.tick_due(s1):
            probe = m.watch.probe
            if probe is None or s1 & TICK_MASK == 0 or s1 - probe.steps > PROBE_STEPS:
                return False
        pcs = m.pcs
        inside = pcs <= self.plan.hi[lo]  # every pc is >= lo, the lowest
        n = int(count_nonzero(inside))
        if n > ENTER_FRACTION * pcs.size:
            return False
        self.n0 = n
        self.idx = inside.nonzero()[0]  # (np.flatnonzero: inside is 1-d)
        self.parked = ~inside  # lanes the session leaves where they stand
        self.slots = self.plan.slots[self.rid]
        live = self.plan.span_slots(lo)  # the others are gathered when an instruction needs them
        self.dormant = set(self.slots) - live
        self.sub = SubLanes(m.st, self.idx, live)
        self.gathered = list(self.sub.regs)
        self.written: set = set()
        self.owned: dict = {}
        self.sp = pcs[self.idx]
        self.dic = np.zeros(self.idx.size, np.int64)
        self.top = m.top_ret[self.idx] if m.retstack is not None else None
        self.upc: int | None = None  # the pc of every gathered lane, while they all stand at one
        self.upend = 0  # steps they all ran in that mode, not yet in `dic`
        # the `idx` that `_ww` (gathered lanes are whole warps in order) was worked out for
        self._ww_for: np.ndarray | None = None
        self._ww = False
        probe = m.watch.probe
        self.ppc = probe.pcs[self.idx] if probe is not None and probe.pcs is not None else None
        self._parked_changed()
        return True

    def _parked_changed(self) -> None:
        m = self.m
        pk = m.pcs[self.parked]
        self.parked_min = int(lowest(pk)) if pk.size else self.exited
        self.parked_low = Liveness.lowest_pc(pk)  # with the lanes that wait (liveness.py's view of them)
        probe = m.watch.probe
        self.parked_same = probe is not None and probe.pcs is not None and \
            bool(np.array_equal(pk, probe.pcs[self.parked]))

    def _tick_free(self, s1: int) -> bool:
        """True when the machine's watchdog tick at step `s1` would only find that it is still probing (its
        state is not where the probe's snapshot was), so the session may take the step itself."""
        probe = self.m.watch.probe
        if probe is None or s1 & TICK_MASK == 0 or s1 - probe.steps > PROBE_STEPS:
            return False
        if probe.pcs is None or not self.parked_same:
            return True
        # (the ignores: self.ppc, None when the probe has no pcs, is an array here)
        if self.upc is not None:
            return not bool((self.ppc == self.upc).all())  # type: ignore[union-attr]
        return not np.array_equal(self.sp, self.ppc)  # type: ignore[arg-type]

    def run(self, sched: WaveSchedule) -> int:
        """Take the machine's steps, by the wave's schedule `sched`, until the machine must take over;
        returns the number of steps taken.

        While every gathered lane stands at one pc (`upc`; a loop all of them still run) the steps are the
        machine's converged ones on the gathered arrays: no masks, one count for all."""
        m, plan, ops = self.m, self.plan, self.m.ops
        region, rid = plan.region, self.rid
        wait_bar = self.wait_bar
        taken = 0
        check_at = 16
        P = -1
        sub = self.sub
        try:
            while True:
                s1 = sched.steps + 1
                if sched.tick_due(s1) and not self._tick_free(s1):
                    break  # the watchdog's tick (and a Node's yield) look at the machine's own state
                upc = self.upc
                if upc is not None:
                    lo_s = upc
                else:
                    sp = self.sp
                    lo_s = int(lowest(sp))
                lo = min(lo_s, self.parked_min)
                if lo >= wait_bar or (region[lo] != rid and lo_s == lo):
                    break
                if lo_s == lo and (upc is not None or int(count_nonzero(sp == lo)) == sp.size):
                    others = m.nlive - self.idx.size  # live parked lanes
                    if others == 0 or (self.parked_min == lo and
                                       others == count_nonzero(self.parked & (m.pcs == lo))):
                        break  # every live lane stands at lo: the machine reconverges the wave
                nd = sched.div_steps + 1
                P, rot, parked_at_P = lo, sched.rot_last, self.parked_min == lo
                if sched.rotation_due(nd):  # the machine's rotation, over our lanes and the parked ones
                    cs = sched.rotation_pick(upc if upc is not None else sp)
                    cp = sched.rotation_pick(m.pcs[self.parked])
                    if cs is None and cp is None:
                        rot = -1
                    else:
                        P = rot = min(x for x in (cs, cp) if x is not None)
                        parked_at_P = cp == P
                        if region[P] != rid and cs == P:
                            break
                outside = region[P] != rid  # then only parked lanes stand at P
                if outside and ops[P].kind not in (C.NORMAL, C.EXIT):
                    break
                if not outside and ops[P].kind == C.WARPSYNC and not self._warps_ready(P, parked_at_P):
                    break
                # commit: this is the machine's step
                sched.div_steps, sched.rot_last = nd, rot
                sched.steps = s1
                taken += 1
                if outside:
                    self._parked_step(ops[P], P)
                    continue
                if parked_at_P:
                    self._absorb(P)  # (leaves the uniform mode)
                    upc = None
                op = ops[P]
                if self.dormant:
                    self._wake(P)
                if upc is not None:  # every gathered lane is at P
                    self.upend += 1
                    if op.kind != C.BRA:
                        op.fn(sub, None)
                        self.upc = P + 1
                    elif self._branch_uniform(op, P):
                        self._compact(eager=True)  # lanes that left the loop go back to the machine
                    continue
                sp = self.sp
                ex = sp == P
                if self.top is not None:
                    ex = one_context(ex, self.top)
                nex = int(count_nonzero(ex))
                if nex == sp.size and (self.top is None or lowest(self.top) == highest(self.top)):
                    self._to_uniform(P)  # every gathered lane is here: run on without masks
                    self.upend += 1
                    if op.kind != C.BRA:
                        op.fn(sub, None)
                        self.upc = P + 1
                    elif self._branch_uniform(op, P):
                        self._compact(eager=True)
                    continue
                np.add(self.dic, ex, out=self.dic)
                if op.kind == C.BRA:
                    g = ex
                    if op.guard is not None:
                        p = sub.regs[op.guard[0]]
                        g = ex & (~p if op.guard[1] else p)
                    C.advance(sp, ex, P, op.target, g)
                    self._compact(eager=True)
                else:
                    op.fn(sub, None if nex == sp.size else ex)
                    C.advance(sp, ex, P)
                if taken >= check_at:
                    check_at = taken + 16
                    self._compact()
        except BaseException as e:
            self._scatter_all()
            if isinstance(e, MemoryFault):
                e._pc = P  # (a parked lane's op): the machine names the instruction
                raise
            if isinstance(e, ValueError | TypeError | IndexError | KeyError | ZeroDivisionError | OverflowError):
                op = ops[P]
                raise InternalEmulatorError(f"{op.where}: {op.text}: internal error while emulating: "
                                            f"{type(e).__name__}: {e}") from e
            raise
        self._scatter_all()
        sc = plan.score
        N = m.st.N
        # in a large wave what a session saves is the steps it took over the lanes it left out
        sc[rid] = 0.5 * sc[rid] + 0.5 * (taken * (1 - self.n0 / N) if N >= LARGE_WAVE else taken)
        plan.steps_taken += taken
        global _STEPS_RUN
        _STEPS_RUN += taken
        return taken

    def _warps_ready(self, P: int, parked_at_P: bool) -> bool:
        """True when the machine's step at the warp-synchronous op at P would run exactly the gathered lanes
        standing there, with nobody waiting: they are whole warps (every lane of each of their warps is
        gathered and at P, so no member lane is elsewhere), no parked lane is at P or waits for its warp at P,
        and the gathered lanes are whole warps in lane order (what the op sees of them as `SubLanes`)."""
        if parked_at_P or self.top is not None:
            return False  # (the machine does not split call contexts at warp-synchronous ops)
        if self._ww_for is not self.idx:
            idx = self.idx
            self._ww_for = idx
            self._ww = idx.size % 32 == 0 and idx.size > 0 and \
                bool((idx.reshape(-1, 32) == (idx[::32] & ~np.int64(31))[:, None] + np.arange(32)).all())
        if not self._ww or bool(np.any(self.m.pcs == (P | C.WAIT_WARP))):
            return False
        if self.upc is not None:
            return True  # every gathered lane stands at P
        ex = (self.sp == P).reshape(-1, 32)
        return bool((ex.all(1) | ~ex.any(1)).all())

    def _parked_step(self, op, P: int) -> None:
        """The machine's step at P for parked lanes only (an ordinary op or an exit, which reads and writes
        nothing of the gathered lanes), on the machine's own state."""
        m = self.m
        pcs = m.pcs
        ex = self.parked & (pcs == P)
        # the op may keep a register array (a cached ramp, an alias): scatters make new ones from here on
        self.owned.clear()
        if not m.one_ctx:
            ex = one_context(ex, m.top_ret)
        np.add(m.icount, ex, out=m.icount)
        if op.kind == C.NORMAL:
            op.fn(m.st, ex)
            C.advance(pcs, ex, P)
        else:
            g = m._guard(op, ex)
            np.copyto(pcs, P + 1, where=ex)
            m._exit(g)  # (may release parked lanes waiting at barriers)
        self._parked_changed()

    def _wake(self, P: int) -> None:
        """Gather the registers the instruction at P uses that the session has not gathered (or dropped)."""
        sub, st = self.sub, self.m.st
        for s in self.plan.slots_at[P]:
            if s in self.dormant:
                r = st.regs[s]
                sub.regs[s] = self.gathered[s] = r[self.idx] if np.ndim(r) else r
                self.dormant.discard(s)

    def _to_uniform(self, P: int) -> None:
        self.upc = P
        self.upend = 0

    def _from_uniform(self) -> None:
        """Per-lane pcs and counts again (a branch split the gathered lanes, or lanes join them)."""
        if self.upc is None:
            return
        self.sp = np.full(self.idx.size, self.upc, np.int32)
        self.dic += self.upend
        self.upc = None
        self.upend = 0

    def _branch_uniform(self, op, P: int) -> bool:
        """A branch taken by every gathered lane at P; True when it split them."""
        if op.guard is None:
            self.upc = op.target
            return False
        p = self.sub.regs[op.guard[0]]
        if op.guard[1]:
            p = ~p
        if np.ndim(p) == 0:
            self.upc = op.target if p else P + 1
            return False
        nt = int(count_nonzero(p))
        if nt == 0 or nt == p.size:
            self.upc = op.target if nt else P + 1
            return False
        self._from_uniform()
        self.sp = np.where(p, np.int32(op.target), np.int32(P + 1)).astype(np.int32)
        return True

    def _scatter_all(self) -> None:
        self._from_uniform()
        self._scatter(np.arange(self.sp.size))

    def _absorb(self, P: int) -> None:
        """Gather the parked lanes standing at P (the step runs them with ours)."""
        m, sub = self.m, self.sub
        st = m.st
        add = np.flatnonzero(self.parked & (m.pcs == P))
        self._from_uniform()
        self._note_writes()
        n = self.idx.size
        for s in self.slots:
            if s in self.dormant:
                continue
            v, p = sub.regs[s], st.regs[s]
            if not np.ndim(v) and not np.ndim(p) and v == p and np.result_type(v) == np.result_type(p):
                continue  # uniform on both sides, and the same
            sub.regs[s] = np.concatenate([np.broadcast_to(v, (n,)), np.broadcast_to(p, (st.N,))[add]])
            self.gathered[s] = sub.regs[s]
        sub.sregs.clear()
        self.idx = np.concatenate([self.idx, add])
        self.sp = np.concatenate([self.sp, m.pcs[add]])
        self.dic = np.concatenate([self.dic, np.zeros(add.size, np.int64)])
        if self.top is not None:
            self.top = np.concatenate([self.top, m.top_ret[add]])
        if self.ppc is not None:
            self.ppc = np.concatenate([self.ppc, m.watch.probe.pcs[add]])
        sub.idx, sub.N = self.idx, self.idx.size
        self.parked[add] = False
        self._parked_changed()

    def _compact(self, eager: bool = False) -> None:
        """Scatter back the lanes that stand past the loop being run, and keep the rest: when they are half
        of the gathered lanes, or (`eager`, after a branch) when the rest then stand at one pc."""
        if self.upc is not None:
            return
        sp = self.sp
        lo = int(lowest(sp))
        if self.plan.region[lo] != self.rid:
            return
        idle = sp > self.plan.hi[lo]
        k = int(count_nonzero(idle))
        if k == 0:
            return
        if 2 * k < sp.size or sp.size <= MIN_LANES:
            if not eager or k == sp.size or int(count_nonzero(sp == lo)) != sp.size - k:
                return
        out = np.flatnonzero(idle)
        self._scatter(out)
        self.parked[self.idx[out]] = True
        self.parked_min = min(self.parked_min, int(lowest(sp[out])))
        self.parked_low = min(self.parked_low, self.parked_min)
        keep = ~idle
        if self.ppc is not None:
            self.parked_same = self.parked_same and bool(np.array_equal(sp[out], self.ppc[out]))
            self.ppc = self.ppc[keep]
        self.idx = self.idx[keep]
        self.sp = sp[keep]
        self.dic = self.dic[keep]
        if self.top is not None:
            self.top = self.top[keep]
        sub = self.sub
        self._note_writes()
        need = self.plan.span_slots(lo)
        if not self.written <= need:  # written registers the loop does not use and no lane left reads again
            alive = self._needed(None)
            for s in [s for s in self.written if s not in need and not alive >> s & 1]:
                self.written.discard(s)
        for s in self.slots:
            if s in self.dormant:
                continue
            if s not in need and s not in self.written:  # unchanged (or dead): the machine's copy will do
                sub.regs[s] = self.gathered[s] = None
                self.dormant.add(s)
                continue
            v = sub.regs[s]
            if np.ndim(v):
                sub.regs[s] = v[keep]
            self.gathered[s] = sub.regs[s]
        for name, v in sub.sregs.items():
            if np.ndim(v):
                sub.sregs[name] = v[keep]
        sub.idx, sub.N = self.idx, self.idx.size
        if int(highest(self.sp)) == lo and (self.top is None or lowest(self.top) == highest(self.top)):
            self._to_uniform(lo)

    def _note_writes(self) -> None:
        sub = self.sub
        for s in self.slots:
            if sub.regs[s] is not self.gathered[s]:
                self.written.add(s)

    def _scatter(self, pos: np.ndarray) -> None:
        """Write the registers, pcs and instruction counts of gathered lanes `pos` back to the machine."""
        m, sub = self.m, self.sub
        st = m.st
        lanes = self.idx[pos]
        self._note_writes()
        need = self._needed(pos) if self.written else 0
        global _SKIPPED
        for s in self.written:
            if not need >> s & 1:
                _SKIPPED += 1
                continue  # no lane reads it again (liveness.py): the machine's stale copy is never seen
            v = sub.regs[s]
            a = st.regs[s]
            if self.owned.get(s) is not a:  # a private full copy: register arrays may be shared (mov, caches);
                # in place only while nothing but this session has seen it
                rt = np.result_type(a, v)
                a = st.regs[s] = np.array(a, dtype=rt) if type(a) is np.ndarray and a.shape == (st.N,) else \
                    np.array(np.broadcast_to(a, (st.N,)), dtype=rt)
                self.owned[s] = a
            a[lanes] = v[pos] if np.ndim(v) else v
        m.pcs[lanes] = self.sp[pos]
        m.icount[lanes] += self.dic[pos]

    def _needed(self, pos: np.ndarray | None) -> int:
        """The registers gathered lanes `pos` (None: all) must have written back (a bit set over slots,
        liveness.py)."""
        lv = liveness_for(self.m)
        if not lv.enabled:
            return lv.all
        q = self.sp if pos is None else self.sp[pos]
        a, b = int(lowest(q)), int(highest(q))
        pcs = (a,) if a == b else (np.flatnonzero(np.bincount(q - a)) + a).tolist()
        low = min(self.parked_low, int(lowest(self.sp)))  # the wave's lowest pc
        return lv.needed(pcs, low)
