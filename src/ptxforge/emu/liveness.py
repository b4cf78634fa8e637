"""Which registers a lane can still read: backward liveness over a kernel's ops.

A compacted session (compact.py) writes the registers its lanes changed back into the wave's full arrays
when it ends; a register no lane will read again need not be written. Two kinds of reader count:
- the lane itself, later on its own path (classic liveness: a register is live at a pc when some path from
  there reads it before an unguarded instruction overwrites it);
- another lane, through an instruction that may read other lanes' registers (shfl reads its source from
  another lane, which may have left the code long ago; vote, bar.red, mma and anything not known to be
  lane-local count too). Such a register must be written back while any lane of the wave still stands
  where such a read can follow (`cross`).
A register that takes a %clock or %globaltimer value counts on every lane at every pc when such a value can
steer the kernel (a branch, an address, a store): time is no part of the state, so a delay loop whose
registers repeat at the probe's pc while the clock value it compares moves on is not a hang.
The watchdog's fingerprint (progress.py) covers exactly the registers counted here, so a register a
session did not write back looks the same as one it did.

Kernels that call functions are not analysed (every register counts as live): a call's registers belong
to its caller's and callee's paths at once.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np

from ptxforge.emu import op as C
from ptxforge.emu.op import EXITED, PC_MASK
from ptxforge.emu.operands import DYNAMIC_SREGS
from ptxforge.ptx import ir
from ptxforge.ptx.isa.effects import effects, lane_local, reads_own_lane_only

if TYPE_CHECKING:
    from collections.abc import Iterable

    from ptxforge.emu.machine import Machine
    from ptxforge.emu.program import Layout



def _dest_first(ins: ir.Instruction) -> bool:
    """Operand 0 is a destination written, when the instruction runs, for every lane that runs it (not later,
    as an asynchronous one writes it)."""
    e = effects(ins)
    return e is not None and e.writes[:1] == (0,) and e.memory != "async"


_PC_KEEP = PC_MASK | EXITED  # a pc without its waiting flags; an exited lane's stays EXITED


class Liveness:
    """Live registers per pc of one kernel, as Python-int bit sets over register slots.

    `live_in[pc]`: registers a lane standing at pc may read itself. `cross_from[pc]`: registers some
    lane standing at pc or later (by pc, or where a branch back from there leads) may read in another
    lane. `enabled` is False when the kernel could not be analysed; then `needed` answers every register."""

    def __init__(self, layout: Layout, ops: list[C.Op]):
        kf = layout.functions[layout.kernel_func.name]
        self.lo, self.hi = kf.entry, kf.end  # the kernel's pcs
        self.nslots = len(layout.reg_types)
        self.all = (1 << self.nslots) - 1
        self.enabled = False
        facts = _facts(layout, ops, self.lo, self.hi)
        if facts is None:
            return
        gen, kill, xgen, succ, clocked = facts
        n = self.hi - self.lo
        live = [0] * n
        cross = [0] * n
        preds: list[list[int]] = [[] for _ in range(n)]
        for i, ss in enumerate(succ):
            for j in ss:
                preds[j].append(i)
        for sets, g, k in ((live, gen, kill), (cross, xgen, None)):
            work = list(range(n))  # popped from the end: the last pc first
            queued = [True] * n
            while work:
                i = work.pop()
                queued[i] = False
                out = 0
                for j in succ[i]:
                    out |= sets[j]
                new = g[i] | (out & ~k[i] if k is not None else out)
                if new != sets[i]:
                    sets[i] = new
                    for p in preds[i]:
                        if not queued[p]:
                            queued[p] = True
                            work.append(p)
        suffix = [0] * (n + 1)
        for i in range(n - 1, -1, -1):
            suffix[i] = suffix[i + 1] | cross[i]
        # The wave's lowest pc falls when a lane branches back, and the set must not grow then (a value a
        # session left stale would count again): take the suffix from the lowest pc that pcs >= i can reach,
        # `close[i]`, the start of the smallest suffix holding i that no branch leaves downwards.
        close = list(range(n))
        low = n
        for i in range(n - 1, -1, -1):
            low = min([low, i, *succ[i]])  # the lowest successor of any pc >= i
            if low < i:
                close[i] = low
        for i in range(n):  # [low, n) holds [i, n): its closed suffix is i's too (lower pcs are done first)
            if close[i] < i:
                close[i] = close[close[i]]
        self.cross_from = [suffix[close[i]] | clocked for i in range(n)] + [0]
        self.live_in = live
        self.enabled = True

    def needed(self, pcs: Iterable[int], min_pc: int) -> int:
        """The registers that must hold their values for lanes standing at `pcs` (distinct pcs), while the
        wave's lowest pc (of every lane not exited) is `min_pc`."""
        if not self.enabled:
            return self.all
        lo, hi = self.lo, self.hi
        need = self.cross_from[min_pc - lo] if lo <= min_pc < hi else (0 if min_pc >= EXITED else self.all)
        for pc in pcs:
            pc = int(pc)
            if lo <= pc < hi:
                need |= self.live_in[pc - lo]
            elif pc != EXITED:
                return self.all
        return need

    @staticmethod
    def lowest_pc(pcs: np.ndarray) -> int:
        """The lowest pc of the lanes in `pcs` (lanes' pcs, waiting flags and all) that have not exited."""
        return int((pcs & _PC_KEEP).min()) if pcs.size else EXITED

    def masks(self, pcs: np.ndarray | int) -> list[bool | np.ndarray]:
        """Per register slot, the lanes whose value counts for a wave whose lanes stand at `pcs` (every
        lane's pc, or the converged pc): True (every lane), False (none) or a boolean lane array."""
        if not self.enabled:
            return [True] * self.nslots
        if np.ndim(pcs) == 0:
            need = self.needed((int(pcs),), int(pcs))
            return [bool(need >> s & 1) for s in range(self.nslots)]
        keep = np.asarray(pcs) & _PC_KEEP
        u, inv = np.unique(keep, return_inverse=True)
        cross = self.needed((), int(u[0]))
        per = [self.needed((int(p),), EXITED) for p in u]
        out: list[bool | np.ndarray] = []
        for s in range(self.nslots):
            if cross >> s & 1:
                out.append(True)
                continue
            has = np.array([p >> s & 1 for p in per], bool)
            out.append(bool(has[0]) if has.all() or not has.any() else has[inv])
        return out


def liveness_for(machine: Machine) -> Liveness:
    """The kernel's liveness (kept with its layout)."""
    lay = machine.layout
    hit = lay.__dict__.get("_liveness")
    if hit is None or hit[0] != len(machine.ops):
        hit = lay.__dict__["_liveness"] = (len(machine.ops), Liveness(lay, machine.ops))
    return hit[1]


def _facts(layout, ops, lo: int, hi: int):
    """(gen, kill, cross gen, successors) per kernel pc, pcs counted from `lo`, and the registers holding
    clock values that count everywhere (`_clocked`); None where the kernel cannot be analysed (a call, an
    operand of a kind not known here)."""
    gen, kill, xgen, succ = [], [], [], []
    flow = []  # per pc: (guard, sources, destinations when lane-local, reads a clock)
    for pc in range(lo, hi):
        op, placed = ops[pc], layout.placed[pc]
        ins = placed.ins
        if op.kind == C.CALL:
            return None
        g = k = x = d = 0
        if ins.guard is not None:
            hit = placed.scope.get(ins.guard.predicate)
            if not isinstance(hit, tuple):
                return None
            g |= 1 << hit[1]
        guard = g
        operands = ins.operands
        local = lane_local(ins)  # the ISA table's effects: own lane, no memory, no carry flag
        private = reads_own_lane_only(ins)
        dest_first = op.kind in (C.NORMAL, C.WARPSYNC) and bool(operands) and _dest_first(ins)
        for i, o in enumerate(operands):
            slots = layout.operand_slots(placed, o)
            if slots is None:
                return None
            bits = 0
            for s in slots:
                bits |= 1 << s
            if i == 0 and dest_first:
                d = bits
                if ins.guard is None and not _has_selector(o):
                    k |= bits
                continue
            g |= bits
            if not private:
                x |= bits
        if not private and op.kind not in (C.BRA, C.EXIT, C.NOP):
            x |= g  # (the guard too)
        nxt = pc + 1 - lo
        if op.kind == C.BRA:
            ss = [op.target - lo] + ([nxt] if op.guard is not None else [])
        elif op.kind == C.BRX:
            ss = [int(t) - lo for t in op.extra[1]] + [nxt]
        elif op.kind in (C.EXIT, C.RET):
            ss = [nxt] if op.guard is not None else []
        else:
            ss = [nxt]
        if any(not 0 <= j < hi - lo for j in ss if j != hi - lo):
            return None  # a branch out of the kernel's code
        gen.append(g)
        kill.append(k)
        xgen.append(x)
        succ.append([j for j in ss if j < hi - lo])
        clock = any(isinstance(e, ir.SpecialRegister) and e.name in DYNAMIC_SREGS
                    for o in operands for e in (o.elements if isinstance(o, ir.Vector) else (o,)))
        flow.append((guard, g & ~guard, d if dest_first and local else None, clock))
    return gen, kill, xgen, succ, _clocked(flow)


def _clocked(flow) -> int:
    """The registers a clock value is read into, when some value worked out from one (through lane-local
    instructions, anywhere in the kernel) reaches a guard or an instruction that is not lane-local; else 0."""
    first = 0
    for guard, src, dst, clock in flow:
        if clock:
            first |= dst if dst is not None else guard | src  # (not lane-local: every register it names)
    taint, grown = first, bool(first)
    while grown:
        grown = False
        for _guard, src, dst, _clock in flow:
            if dst is not None and src & taint and dst & ~taint:
                taint |= dst
                grown = True
    steers = any(guard & taint or (dst is None and src & taint) for guard, src, dst, _clock in flow)
    return first if steers else 0


def _has_selector(o) -> bool:
    return isinstance(o, ir.Register) and ir.split_selector(o.name)[1] is not None

