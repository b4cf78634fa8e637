"""A sanitizer finding made into a `SanitizerReport`: the thread and block, the address, the allocation
or shared variable it falls in, the other access of a race and the release/acquire pair too narrow to
order it (`Findings`, part of `Sanitizer`)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import numpy as np

from ptxforge.emu import memory as M
from ptxforge.emu.sanitizer import bounds
from ptxforge.emu.sanitizer.order import SCOPE_NAMES
from ptxforge.emu.sanitizer.report import SanitizerReport


class Findings:
    """The sanitizer's reports (a part of `Sanitizer`, kept apart for its size)."""

    pc: int  # the pc of the access being checked

    if TYPE_CHECKING:  # the rest of `Sanitizer`, for the type checker
        def __getattr__(self, name: str) -> Any: ...

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
                           f"include both threads (block {self._cta(blk) if blk is not None else '?'} and block "
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
