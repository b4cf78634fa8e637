"""Register dataflow of a kernel: which registers a block must zero, which a segment must store.

Zeroing: the registers some path may read before writing them.

The interpreter's registers start at 0; a register every path writes before reading it needs no zeroing, and
zeroing the whole register file of every block costs more than a small kernel's work. A must-write dataflow
over the kernel's pcs (a guarded write does not count) finds the rest; a shuffle's source register counts as
read before written (it reads other lanes', which may have exited early).

Storing: a segment keeps the registers it writes in SSA values and stores to the register file only those
live after it (`live_in` of where it goes), and every register a shfl reads from other lanes.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from ptxforge.emu import op as C
from ptxforge.ptx import ir

if TYPE_CHECKING:
    from ptxforge.emu.program import Layout

_NO_DEST = frozenset({"st", "bar", "barrier", "bra", "ret", "exit", "red", "trap"})
_READS_DEST = frozenset({"wgmma"})  # wgmma.mma_async's D is its accumulator too


def _slots(layout: Layout, pc: int, operands: Any) -> int:
    bits = 0
    for o in operands:
        for s in layout.operand_slots(layout.placed[pc], o) or ():
            bits |= 1 << s
    return bits


def written(layout: Layout, pc: int) -> int | None:
    """Registers (bits) the instruction at `pc` may write, a guarded write too; None where it cannot be told."""
    ins = layout.placed[pc].ins
    ops_ = ins.operands
    if ins.opcode in _NO_DEST or not ops_:
        return 0
    slots = layout.operand_slots(layout.placed[pc], ops_[0])
    if slots is None:
        return None
    bits = 0
    for s in slots:
        bits |= 1 << s
    return bits


def _flow(layout: Layout, ops: list[Any], lo: int, hi: int) -> tuple[dict, dict, dict]:
    """Per pc: registers read (bits), registers surely written (an unguarded destination), successor pcs."""
    reads, writes, succ = {}, {}, {}
    for pc in range(lo, hi):
        ins = layout.placed[pc].ins
        ops_ = ins.operands
        has_dest = ins.opcode not in _NO_DEST and ops_
        dest = _slots(layout, pc, ops_[:1]) if has_dest else 0
        r = _slots(layout, pc, ops_[1:] if has_dest else ops_)
        if ins.opcode in _READS_DEST:
            r |= dest
        if ins.guard is not None:
            r |= _slots(layout, pc, [ir.Register(ins.guard.predicate)])
        reads[pc] = r
        writes[pc] = dest if ins.guard is None else 0
        succ[pc] = next_pcs(layout, ops, pc, hi)
    return reads, writes, succ


def next_pcs(layout: Layout, ops: list[Any], pc: int, hi: int) -> list[int]:
    """The pcs a lane may go on at after the instruction at `pc` (of a function ending before `hi`)."""
    op, guarded = ops[pc], layout.placed[pc].ins.guard is not None
    nxt = [pc + 1] if pc + 1 < hi else []
    if op.kind == C.BRA:
        return [op.target, *nxt] if guarded else [op.target]
    if op.kind in (C.EXIT, C.RET, C.TRAP):
        return nxt if guarded else []
    return nxt


def shuffled(layout: Layout, lo: int, hi: int) -> int:
    """Registers some shfl reads from other lanes (bits): kept in the register file wherever written."""
    bits = 0
    for pc in range(lo, hi):
        ins = layout.placed[pc].ins
        if ins.opcode == "shfl":
            bits |= _slots(layout, pc, ins.operands[1:2])
    return bits


def live_in(layout: Layout, ops: list[Any], lo: int, hi: int) -> dict[int, int]:
    """Per pc: the registers (bits) some path from there reads before writing them."""
    reads, writes, succ = _flow(layout, ops, lo, hi)
    live = {pc: reads[pc] for pc in range(lo, hi)}
    changed = True
    while changed:
        changed = False
        for pc in range(hi - 1, lo - 1, -1):
            out = 0
            for s in succ[pc]:
                if lo <= s < hi:
                    out |= live[s]
            new = reads[pc] | (out & ~writes[pc])
            if new != live[pc]:
                live[pc] = new
                changed = True
    return live


def _must_written(writes: dict, succ: dict, nregs: int, lo: int, hi: int) -> dict[int, int]:
    """Per pc: the registers (bits) every path from the entry `lo` has surely written before it."""
    every = (1 << nregs) - 1
    inn = {pc: every for pc in range(lo, hi)}  # must-analysis: start from "all written", narrow down
    inn[lo] = 0
    changed = True
    while changed:
        changed = False
        for pc in range(lo, hi):
            out = inn[pc] | writes[pc]
            for s in succ[pc]:
                if lo <= s < hi:
                    new = inn[s] & out if s != lo else 0
                    if new != inn[s]:
                        inn[s] = new
                        changed = True
    return inn


def surely_written(layout: Layout, ops: list[Any], lo: int, hi: int) -> dict[int, int]:
    """Per pc: the registers (bits) every path from the kernel's entry has written before it."""
    _, writes, succ = _flow(layout, ops, lo, hi)
    return _must_written(writes, succ, len(layout.reg_types), lo, hi)


def registers_to_zero(layout: Layout, ops: list[Any], lo: int, hi: int) -> list[int]:
    """Register slots a lane of the kernel (pcs lo..hi-1) may read before it has written them."""
    reads, writes, succ = _flow(layout, ops, lo, hi)
    inn = _must_written(writes, succ, len(layout.reg_types), lo, hi)
    need = shuffled(layout, lo, hi)
    for pc in range(lo, hi):
        need |= reads[pc] & ~inn[pc]
    return [s for s in range(len(layout.reg_types)) if need >> s & 1]


CONSTANT_MOVS = (".u32", ".b32", ".s32", ".u64", ".b64", ".s64")
_WIDTH = {"8": 8, "16": 16, "32": 32, "64": 64}


def write_counts(layout: Layout, lo: int, hi: int) -> dict[int, int] | None:
    """slot -> how many instructions of the kernel may write it (None: some write cannot be told)."""
    writes: dict[int, int] = {}
    for pc in range(lo, hi):
        bits = written(layout, pc)
        if bits is None:
            return None
        while bits:  # (each set bit: a register's slot numbers run to the hundreds)
            low = bits & -bits
            slot = low.bit_length() - 1
            writes[slot] = writes.get(slot, 0) + 1
            bits ^= low
    return writes


def _only_write(layout: Layout, pc: int, opcode: str) -> tuple[int, Any, str] | None:
    """(slot, source operand, type) of an unguarded two-operand `opcode` at `pc` into a plain register of its
    type's width; else None."""
    ins = layout.placed[pc].ins
    ty = ins.types[-1] if ins.types else ""
    if ins.opcode != opcode or ins.guard is not None or len(ins.operands) != 2 or ty[2:] not in _WIDTH:
        return None
    dst, src = ins.operands
    hit = layout.lookup(layout.placed[pc], dst.name) if isinstance(dst, ir.Register) else None
    if not isinstance(hit, tuple) or layout.reg_types[hit[1]][2:] != ty[2:]:
        return None
    return hit[1], src, ty


def constant_registers(layout: Layout, lo: int, hi: int) -> dict[int, int]:
    """Registers (slot -> bits) whose only write in the kernel is one unguarded `mov` of an integer immediate
    of the register's width (nvcc's way of passing a shfl its lane offset): wherever surely written
    (`surely_written`) such a register holds that value, in every lane."""
    writes = write_counts(layout, lo, hi)
    if writes is None:
        return {}
    value: dict[int, int] = {}
    for pc in range(lo, hi):
        hit = _only_write(layout, pc, "mov")
        if hit is None or hit[2] not in CONSTANT_MOVS or not isinstance(hit[1], ir.Immediate) \
                or not isinstance(hit[1].value, int):
            continue
        value[hit[0]] = hit[1].value & ((1 << _WIDTH[hit[2][2:]]) - 1)
    return {s: v for s, v in value.items() if writes.get(s) == 1}


def param_registers(layout: Layout, lo: int, hi: int) -> dict[int, tuple[int, int]]:
    """Registers (slot -> (byte offset in the kernel's parameters, bits)) whose only write in the kernel is one
    unguarded `ld.param` of the register's width: wherever surely written such a register holds that
    parameter, in every lane (a pointer or a size, re-read where used rather than kept per lane)."""
    writes = write_counts(layout, lo, hi)
    if writes is None:
        return {}
    found: dict[int, tuple[int, int]] = {}
    for pc in range(lo, hi):
        hit = _only_write(layout, pc, "ld")
        ins = layout.placed[pc].ins
        if hit is None or "param" not in ins.suffixes or len(ins.modifiers) != 1:
            continue
        addr = hit[1]
        if not isinstance(addr, ir.Address) or not isinstance(addr.base, ir.Symbol | ir.Register):
            continue
        kp = layout.kparams.get(addr.base.name)
        width = _WIDTH[hit[2][2:]]
        if kp is None or addr.offset < 0 or addr.offset + width // 8 > kp[1]:
            continue
        found[hit[0]] = (kp[0] + addr.offset, width)
    return {s: v for s, v in found.items() if writes.get(s) == 1}


def read_where_written(layout: Layout, ops: list[Any], lo: int, hi: int, slots: int) -> int:
    """The registers of `slots` (bits) that every instruction reading them reads where surely written."""
    reads, writes, succ = _flow(layout, ops, lo, hi)
    inn = _must_written(writes, succ, len(layout.reg_types), lo, hi)
    for pc in range(lo, hi):
        slots &= ~(reads[pc] & ~inn[pc])
    return slots


def read_before_written(layout: Layout, ops: list[Any], lo: int, hi: int) -> int:
    """Registers (bits) the straight run of pcs lo..hi-1 (a segment) reads before it surely writes them."""
    reads, writes, _ = _flow(layout, ops, lo, hi)
    r = w = 0
    for pc in range(lo, hi):
        r |= reads[pc] & ~w
        w |= writes[pc]
    return r
