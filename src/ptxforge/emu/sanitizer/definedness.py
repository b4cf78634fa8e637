"""Undefined values in registers, reported where they are used (as Valgrind's memcheck does).

A load of bytes no thread initialized does not report by itself: it marks the destination register of
each such lane *undefined*, remembering where the value came from. Every instruction the lane executes
passes the mark from its source registers to its destination registers (mov, arithmetic, cvt, selp, a
store back to the very bytes it came from: none of these reports). The value is reported when it is
*used*: as an address, as st.bulk's byte count, as a guard predicate or the condition of a branch, as an
operand of a warp-collective (shfl, vote, match, redux), or when it is stored to other shared or global memory (st,
atom, red). Stored to local memory (a -G build spills every register to the stack) it poisons the bytes,
and loading them back gives an undefined value again.
`Sanitizer(eager=True)` reports at the load instead (the old behaviour).

Loads that spread data across lanes (ldmatrix, wgmma and mma operands in shared memory, bulk copies)
are reported at the load, as before: their bytes do not map to one register of one lane. Which instruction
writes what, loads into which register and mixes lanes comes from the ISA table's effects.
"""

from __future__ import annotations

import weakref
from dataclasses import dataclass
from typing import Any

import numpy as np

from ptxforge.emu.op import BRA, CALL, EXIT, NORMAL, RET, TRAP, WARPSYNC
from ptxforge.ptx import ir
from ptxforge.ptx.isa import Effects, effects

USES = {"address": "an address", "guard": "a guard predicate", "branch": "a branch condition",
        "collective": "an operand of a warp-collective", "store": "a store to other memory",
        "size": "the byte count of st.bulk"}
_TABLES: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()


@dataclass(frozen=True)
class RegUse:
    """The register slots one instruction reads and writes, by role."""

    dst: tuple = ()  # destination slots (None for `_` sinks), in element order
    src: tuple = ()  # value sources
    addr: tuple = ()  # address base registers
    values: tuple = ()  # store values (st, atom, red): a "store" use
    size: tuple = ()  # st.bulk's byte count: a "size" use (what it stores is the constant 0)
    guard: int | None = None
    collective: bool = False
    cross_lane: bool = False
    tracked_load: bool = False
    opcode: str = ""


def _slot(layout, placed, reg):
    if not isinstance(reg, ir.Register):
        return None
    hit = layout.lookup(placed, reg.name)
    return hit[1] if isinstance(hit, tuple) else None


def _regs(layout, placed, operands, out: list, addr: list) -> None:
    for o in operands:
        if isinstance(o, ir.Register):
            s = _slot(layout, placed, o)
            if s is not None:
                out.append(s)
        elif isinstance(o, ir.Address):
            s = _slot(layout, placed, o.base)
            if s is not None:
                addr.append(s)
        elif isinstance(o, ir.Vector):
            _regs(layout, placed, o.elements, out, addr)
        elif isinstance(o, ir.AddressList | ir.ParenList):
            _regs(layout, placed, o.items, out, addr)
        elif isinstance(o, ir.PredPair):
            _regs(layout, placed, (o.first, o.second), out, addr)


def reg_use(layout: Any, pc: int, warpsync: bool) -> RegUse:
    placed = layout.placed[pc]
    ins = placed.ins
    op = ins.opcode
    ops = ins.operands
    guard = None
    if ins.guard is not None:
        hit = layout.lookup(placed, ins.guard.predicate)
        guard = hit[1] if isinstance(hit, tuple) else None
    dst: list = []
    e = effects(ins)
    if ops and e is not None and _writes_first(e) and not isinstance(ops[0], ir.Address):
        first = ops[0]
        elems = first.elements if isinstance(first, ir.Vector) else \
            (first.first, first.second) if isinstance(first, ir.PredPair) else (first,)
        dst = [_slot(layout, placed, e) for e in elems]
        rest = ops[1:]
    else:
        rest = ops
    src: list = []
    addr: list = []
    _regs(layout, placed, rest, src, addr)
    values = tuple(src) if op in ("st", "atom", "red") else ()
    size: tuple = ()
    if op == "st" and "bulk" in ins.suffixes:
        values, size = (), tuple(src)
    return RegUse(tuple(dst), tuple(src), tuple(addr), values, size, guard, collective=warpsync,
                  cross_lane=e is not None and e.lanes in ("warp", "block"),
                  tracked_load=e is not None and e.lanes == "lane" and e.loaded == (0,), opcode=op)


def _writes_first(e: Effects) -> bool:
    """Operand 0 is written when the instruction runs (an asynchronous one writes it later)."""
    return e.writes[:1] == (0,) and e.memory != "async"


def tables(layout: Any, ops: list[Any]) -> tuple[list, dict]:
    """Per pc its `RegUse`, and the slots that guard a branch (slot -> first such branch pc)."""
    hit = _TABLES.get(layout)
    if hit is not None and len(hit[0]) == len(ops):
        return hit
    uses: list[RegUse | None] = []
    branch: dict[int, list[int]] = {}
    for pc, op in enumerate(ops):
        if op.kind in (NORMAL, WARPSYNC):
            uses.append(reg_use(layout, pc, op.kind == WARPSYNC))
        else:
            uses.append(None)
            if op.kind in (BRA, EXIT, CALL, RET, TRAP) and op.guard is not None:
                branch.setdefault(op.guard[0], []).append(pc)
    _TABLES[layout] = (uses, branch)
    return uses, branch


class Undefined:
    """Per register slot, the lanes holding an undefined value and where each came from."""

    def __init__(self, san: Any, layout: Any, ops: list[Any], nlanes: int):
        self.san = san
        self.uses, self.branch_slots = tables(layout, ops)
        self.N = nlanes
        self.marks: dict = {}  # slot -> (lanes mask, origin pc per lane, origin byte per lane, region id)
        self.store_vals: tuple | None = None  # value slots of the store now running
        self.loaded: list = []  # (lanes, per-lane-element undefined mask, bytes, nb, region) of this op
        self.regions = ("shared", "global", "local")
        self.sizes: dict = {}  # origin pc -> bytes per loaded register

    @property
    def active(self) -> bool:
        return bool(self.marks)

    # ------------------------------------------------------------------ loads
    def on_load(self, L: np.ndarray, uninit: np.ndarray, B: np.ndarray, nb: int, region: str) -> bool:
        """Undefined bytes were read by the current op; False: not a tracked load (report it now)."""
        use = self.uses[self.san.pc]
        if use is None or not use.tracked_load or not use.dst:
            return False
        self.loaded.append((np.asarray(L, np.int64), uninit.reshape(-1, nb), B.reshape(-1, nb), nb, region))
        return True

    # ------------------------------------------------------------------ around each op
    def before(self, st: Any, m: np.ndarray | None, info: Any) -> None:
        """Report the uses of undefined values by the op about to run (mask `m`, site `info`)."""
        pc = info.pc
        use = self.uses[pc]
        marks = self.marks
        if use is None or not marks:
            return
        hot = (use.guard is not None and use.guard in marks) or any(s in marks for s in use.addr) or \
            ((use.collective or use.values or use.size) and any(s in marks for s in use.src))
        if not hot:
            return
        act = self.san._executing(st, m, info)
        if use.guard is not None and use.guard in marks:
            self._use("guard", (use.guard,), act, pc)
        if use.addr:
            self._use("address", use.addr, act, pc)
        if use.size:
            self._use("size", use.size, act, pc)
        if use.collective and use.src:
            self._use("collective", use.src, act, pc)
        if use.values:
            self.store_vals = use.values  # checked per byte in `on_store_bytes` (a store back is no use)
            if use.opcode != "st":
                self._use("store", use.values, act, pc)
                self.store_vals = None

    def after(self, st: Any, m: np.ndarray | None, info: Any) -> None:
        """Pass the marks of the op's sources to its destinations (loads: from the bytes they read)."""
        pc = info.pc
        use = self.uses[pc]
        self.store_vals = None
        loaded, self.loaded = self.loaded, []
        if use is None or not use.dst:
            return
        marks = self.marks
        if not loaded and not any(s in marks for s in use.src) and not any(d in marks for d in use.dst):
            return  # nothing undefined flows in, and nothing undefined is overwritten
        act = self.san._executing(st, m, info)
        if use.tracked_load:
            new = self._from_memory(use, loaded)
        elif use.collective:
            new = None  # reported at the use; the results count as defined
        else:
            srcs = [marks[s] for s in use.src if s in marks]
            new = None
            if srcs and use.opcode == "selp" and len(use.src) == 3:
                srcs = self._selected(st, use, srcs)
            if srcs:
                mask = np.zeros(self.N, bool)
                opc = np.full(self.N, -1, np.int32)
                ob = np.zeros(self.N, np.int64)
                reg = np.zeros(self.N, np.int8)
                for m, p, b, r in srcs:
                    first = m & ~mask
                    opc[first], ob[first], reg[first] = p[first], b[first], r[first]
                    mask |= m
                if use.cross_lane:  # one lane's undefined input reaches every lane of its warp
                    w = mask.reshape(-1, 32).any(1)
                    lead = np.where(w, mask.reshape(-1, 32).argmax(1), 0) + np.arange(w.size) * 32
                    mask = np.repeat(w, 32)
                    src_lane = np.repeat(lead, 32)
                    opc, ob, reg = opc[src_lane], ob[src_lane], reg[src_lane]
                new = (mask & act, opc, ob, reg)
        for i, d in enumerate(use.dst):
            if d is None:
                continue
            cur = marks.get(d)
            n = new[i] if use.tracked_load and new is not None else new
            if n is None or not n[0].any():
                if cur is not None:
                    keep = cur[0] & ~act
                    if keep.any():
                        marks[d] = (keep,) + cur[1:]
                    else:
                        del marks[d]
                continue
            if cur is None:
                marks[d] = n
            else:
                m = (cur[0] & ~act) | n[0]
                marks[d] = (m, np.where(n[0], n[1], cur[1]), np.where(n[0], n[2], cur[2]),
                            np.where(n[0], n[3], cur[3]))
            if d in self.branch_slots:
                self._branch(d, n, pc)

    def _selected(self, st, use, srcs):
        """selp d, a, b, c: d is as defined as the operand c chose (and c itself)."""
        a, b, c = use.src
        cond = np.broadcast_to(np.asarray(st.regs[c], bool), (self.N,))
        out = []
        for s, keep in ((a, cond), (b, ~cond), (c, None)):
            mk = self.marks.get(s)
            if mk is not None:
                out.append(mk if keep is None else (mk[0] & keep,) + mk[1:])
        return out

    def _from_memory(self, use, loaded):
        if not loaded:
            return None
        ne = len(use.dst)
        nb0 = loaded[0][3]
        self.sizes[self.san.pc] = nb0 // ne if nb0 % ne == 0 else nb0
        out = []
        for j in range(ne):
            mask = np.zeros(self.N, bool)
            opc = np.full(self.N, self.san.pc, np.int32)
            ob = np.zeros(self.N, np.int64)
            reg = np.zeros(self.N, np.int8)
            for L, U, B, nb, region in loaded:
                if nb % ne:
                    e = U.any(1)
                    first = B[:, 0]
                else:
                    esz = nb // ne
                    e = U[:, j * esz:(j + 1) * esz].any(1)
                    first = B[:, j * esz]
                mask[L[e]] = True
                ob[L[e]] = first[e]
                reg[L[e]] = self.regions.index(region)
            out.append((mask, opc, ob, reg))
        return out

    # ------------------------------------------------------------------ reports
    def on_store_bytes(self, L: np.ndarray, B: np.ndarray, nb: int, region: str) -> np.ndarray | None:
        """A plain store of the current op writes bytes B for lanes L: undefined values stored anywhere
        but back where they came from are a use; to local memory (the stack) they are no use but poison
        the bytes: the per-byte mask of undefined bytes is returned for the local shadow."""
        vals = self.store_vals
        if not vals:
            return None
        L = np.asarray(L, np.int64)
        Bl = B.reshape(-1, nb)
        ne = len(vals)
        esz = nb // ne if nb % ne == 0 else nb
        rid = self.regions.index(region)
        bad = np.zeros(self.N, bool)
        poison = np.zeros(Bl.shape, bool) if region == "local" else None
        for j, s in enumerate(vals):
            mk = self.marks.get(s)
            if mk is None:
                continue
            m, _, ob, reg = mk
            hit = m[L]
            if not hit.any():
                continue
            if poison is not None:
                poison[hit, j * esz:(j + 1) * esz] = True
                continue
            back = (reg[L] == rid) & (ob[L] == Bl[:, min(j * esz, nb - 1)])
            bad[L[hit & ~back]] = True
        if bad.any():
            self._use("store", vals, bad, self.san.pc)
        return None if poison is None else poison.reshape(-1)

    def _use(self, how: str, slots, act, pc: int) -> None:
        for s in slots:
            mk = self.marks.get(s)
            if mk is None:
                continue
            hit = mk[0] & act
            if hit.any():
                self._report(how, mk, hit, pc)
                return

    def _branch(self, slot, mark, pc: int) -> None:
        later = [p for p in self.branch_slots[slot] if p > pc]
        at = later[0] if later else self.branch_slots[slot][0]
        self._report("branch", mark, mark[0], at)

    def _report(self, how: str, mark, hit, pc: int) -> None:
        san = self.san
        lanes = np.flatnonzero(hit)
        m, opc, ob, reg = mark
        lane = int(lanes[0])
        origin = int(opc[lane])
        region = self.regions[int(reg[lane])]
        site = ("uninitialized", how, region, pc, origin)
        if san.log.bump(site, int(lanes.size)):
            return
        saved = san.pc
        san.pc = pc
        try:
            addr = san._address(region, int(ob[lane]), lane)
            rep = san._report("uninitialized", lane, access="read", space=region, size=self.sizes.get(origin),
                              address=addr,
                              count=int(lanes.size))
        finally:
            san.pc = saved
        san._place(rep, region, addr, lane)
        ops = san.machine.ops
        o = ops[origin] if 0 <= origin < len(ops) else None
        rep.other = {"use": how, "ptx_line": o.line if o else None, "instruction": o.text if o else "",
                     "source": san.sources.source(origin) if san.sources else None}
        where = f"{o.file}:{o.line}: {o.text}" if o else "an earlier load"
        rep.message = (f"the value is used as {USES[how]}; it was loaded from uninitialized __{region}__ "
                       f"memory at {where}")
        san.log.add(rep, site)
