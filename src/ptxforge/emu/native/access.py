"""A segment's shared-memory accesses grouped by their base register: one bounds check and one shape test each.

Accesses `[%r+c]` of a segment (0 <= c < 2**31, c a multiple of the access's size) whose base register keeps
its value between them form a group: the group's lanes are checked once, at its first access, against the
whole byte range its offsets cover (and the alignment its widest access needs). Where that holds every
access of the group is in bounds and aligned; where it does not, each access runs its own exact check as
before (so a fault still names the first bad access and lane, after the accesses before it took effect).
The addresses' shape (consecutive, per half-warp) is the base register's too, so it is tested once per
group and access width.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from ptxforge.emu.native.dataflow import written
from ptxforge.ptx import ir

if TYPE_CHECKING:
    from ptxforge.emu.program import Layout

GROUPED = ("ld", "st")


@dataclass
class AccessGroup:
    """Shared-memory accesses at offsets lo..end (bytes, end exclusive) from one value of a base register."""

    base: str  # the register's name
    lo: int
    end: int
    align: int  # the widest access's size: a base aligned to it aligns every access of the group
    pcs: list[int] = field(default_factory=list)
    values: dict[Any, Any] = field(default_factory=dict)  # what the generated code computed once (by key)


def _shared_access(ins: ir.Instruction) -> tuple[ir.Address, int] | None:
    """(address operand, bytes) of a plain shared-memory ld/st (None for any other instruction)."""
    if ins.opcode not in GROUPED or "shared" not in ins.suffixes or not ins.types:
        return None
    if any(m[1:] in ("volatile", "relaxed", "acquire", "release") for m in ins.modifiers):
        return None
    addr = ins.operands[1] if ins.opcode == "ld" else ins.operands[0]
    data = ins.operands[0] if ins.opcode == "ld" else ins.operands[1]
    if not isinstance(addr, ir.Address) or not isinstance(addr.base, ir.Register):
        return None
    ty = ins.types[-1]
    width = {"8": 1, "16": 2, "32": 4, "64": 8}.get(ty[2:])
    if width is None:
        return None
    size = width * (len(data.elements) if isinstance(data, ir.Vector) else 1)
    if not 0 <= addr.offset < 1 << 31 or addr.offset % size:  # (then a base aligned for it aligns the access)
        return None
    return addr, size


def access_groups(layout: Layout, lo: int, hi: int) -> dict[int, AccessGroup]:
    """pc -> its group, for the segment's shared-memory accesses that share a base value with another."""
    open_: dict[str, AccessGroup] = {}
    every: list[AccessGroup] = []
    for pc in range(lo, hi):
        placed = layout.placed[pc]
        ins = placed.ins
        hit = _shared_access(ins)
        if hit is not None:
            addr, size = hit
            assert isinstance(addr.base, ir.Register)
            name = addr.base.name
            g = open_.get(name)
            if g is None:
                g = open_[name] = AccessGroup(name, addr.offset, addr.offset + size, size)
                every.append(g)
            g.lo, g.end, g.align = min(g.lo, addr.offset), max(g.end, addr.offset + size), max(g.align, size)
            g.pcs.append(pc)
        bits = written(layout, pc)
        if bits is None:
            open_.clear()
            continue
        for name in list(open_):
            slot = _slot(layout, placed, name)
            if slot is None or bits >> slot & 1:
                del open_[name]
    return {pc: g for g in every if len(g.pcs) > 1 and g.align & (g.align - 1) == 0 for pc in g.pcs}


def _slot(layout: Layout, placed: Any, name: str) -> int | None:
    hit = layout.lookup(placed, name)
    return hit[1] if isinstance(hit, tuple) else None
