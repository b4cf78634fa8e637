"""The block function: a kernel's PTX as one LLVM function that runs a range of blocks.

Execution model (the interpreter's, per block): each thread has a pc; a warp is 32 lanes of the block's
threads in order (the last one padded with exited lanes). A warp steps the segment at the lowest pc of its
runnable lanes for exactly the lanes standing there, so diverged paths reconverge where their pcs meet. A
segment is a run of lane-local instructions ending at a branch, an exit or before a label; the warp-wide
ones (shfl, bar.sync) are segments of their own. The block's warps take turns: in its turn a warp runs a
segment and goes straight on to the next one its lanes jump forward to (a backward jump, a barrier or other
lanes at a lower pc end its turn, so a warp spinning on a flag lets the others run); when no warp can run,
the barrier releases. Per-lane results do not depend on which warp runs first for a race-free kernel, so
they equal the interpreter's, and so do the counts (each lane counts every instruction it steps, a
guarded-off one too).

A segment runs as LLVM vector code over the warp's 32 lanes with the mask of the lanes standing at it
(warp.py): a converged warp is one pass of vector instructions, a diverged one runs each path under its
mask. Registers live in a register file on the stack, per warp one 32-lane slot per register at its
declared width; pcs in an i32 per thread. Out-of-bounds and misaligned accesses stop the launch with a
status the launcher turns into the interpreter's kind of fault.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np
from llvmlite import ir as L

from ptxforge.emu import op as C
from ptxforge.emu.memory import GLOBAL_BASE
from ptxforge.emu.native import access_calls, affine, probe_code
from ptxforge.emu.native.access import access_groups
from ptxforge.emu.native.dataflow import (
    constant_registers,
    live_in,
    next_pcs,
    param_registers,
    read_before_written,
    read_where_written,
    registers_to_zero,
    shuffled,
    surely_written,
)
from ptxforge.emu.native.lower import I1, I8, I32, I64, WARP, NotNative, V, counted_loop, read, write
from ptxforge.emu.native.lower_warp import WARP_OPS, member_operand
from ptxforge.emu.native.lowering import lower
from ptxforge.emu.native.prune import drop_dead
from ptxforge.emu.native.warp import IOTA, SegmentRegs, WarpEnv, splat, storage, thread_index
from ptxforge.emu.ops_warp import shfl_lanes
from ptxforge.ptx import ir

if TYPE_CHECKING:
    from ptxforge.emu.program import Layout

WAIT_BAR, EXITED = C.WAIT_BAR, C.EXITED
LOOP_CHAINS = 64  # backward chains (loop iterations) a warp runs in one turn before the others get theirs
MAX_REGFILE = 4 << 20  # bytes of register file a block may keep on a worker's stack

# the context array the launcher passes (i64 each)
CTX_PARAMS, CTX_ARENA, CTX_ARENA_SIZE, CTX_GMAP, CTX_SHARED, CTX_STATUS, CTX_COUNTS = range(7)
CTX_GRID = 7  # 7, 8, 9: nctaid.x/y/z
CTX_SHARED_SIZE = 10
CTX_PROBE = 11  # this worker's probe slot (the no-progress watchdog's; see probe_code.py)
CTX_ALLOCS = 12  # the allocation table (launcher._allocation_table; access_calls.alloc_window)
CTX_LEN = 13
PROBE_REQ, PROBE_HASH, PROBE_BLOCK, PROBE_WRITES, PROBE_WARP, PROBE_PC, PROBE_LEN = (  # (the launcher's)
    probe_code.PROBE_REQ, probe_code.PROBE_HASH, probe_code.PROBE_BLOCK, probe_code.PROBE_WRITES,
    probe_code.PROBE_WARP, probe_code.PROBE_PC, probe_code.PROBE_LEN)
# status[0] codes (status: [code, pc, thread, block, address, nbytes, write])
ST_OK, ST_FAULT, ST_MISALIGNED, ST_READONLY, ST_NOT_CONVERGED, ST_STOP, ST_NO_PROGRESS = 0, 1, 2, 3, 4, 5, 6
GRANULE, GMAP_READONLY = access_calls.GRANULE, access_calls.GMAP_READONLY  # (the launcher's)
TABLE_READONLY_BIT = access_calls.TABLE_READONLY_BIT  # (the launcher's)

BARRIER_OPCODES = ("bar", "barrier")


@dataclass
class Segment:
    start: int
    end: int  # one past its last pc
    kind: str  # "lanes", "warp" (shfl, vote, match, redux, bar.warp.sync), "bar"


def segments(layout: Layout, ops: list[Any]) -> list[Segment]:
    """Cut the kernel's pcs into segments (see the module docstring); NotNative for what cannot run here."""
    fl = layout.functions[layout.kernel_func.name]
    if getattr(layout, "has_calls", False):
        raise NotNative("calls are not in the native tier yet")
    lo, hi = fl.entry, fl.end
    leaders = {lo}
    for pc in range(lo, hi):
        op = ops[pc]
        k = op.kind
        if k == C.BRA:
            if not lo <= op.target < hi:
                raise NotNative("a branch out of the kernel", pc)
            leaders.add(op.target)
            leaders.add(pc + 1)
        elif k in (C.EXIT, C.RET, C.TRAP):
            leaders.add(pc + 1)
        elif k == C.BAR or (k == C.WARPSYNC and not inline_warp_op(layout.placed[pc].ins)):
            leaders.add(pc)
            leaders.add(pc + 1)
        elif k not in (C.NORMAL, C.WARPSYNC):
            raise NotNative("not in the native tier yet", pc)
    cuts = sorted(x for x in leaders if lo <= x < hi) + [hi]
    out = []
    for a, z in zip(cuts, cuts[1:], strict=False):
        k = ops[a].kind
        kind = "bar" if k == C.BAR else "warp" if k == C.WARPSYNC and z == a + 1 and \
            not inline_warp_op(layout.placed[a].ins) else "lanes"
        out.append(Segment(a, z, kind))
    return out


INLINE_WARP_OPS = ("shfl", "vote", "match", "redux", "activemask")


def inline_warp_op(ins: ir.Instruction) -> bool:
    """A warp-wide instruction that runs inside a segment of lane-local ones: the lanes standing at it are
    the segment's (its pc is reached from the segment's start only), which must be every running member lane
    (mma and wgmma stay segments of their own)."""
    return ins.guard is None and (ins.opcode in INLINE_WARP_OPS or (ins.opcode == "bar" and "warp" in ins.suffixes))


class BlockGen:
    """Builds `run_blocks(ctx, first, last)` for one kernel at one block shape."""

    def __init__(self, layout: Layout, ops: list[Any], block: tuple[int, int, int]):
        self.layout, self.ops, self.block = layout, ops, block
        self.current_pc: int | None = None
        self.seg_regs: SegmentRegs | None = None  # the registers of the segment emitted last (its "lanes")
        self.pending: tuple[SegmentRegs, L.Value, int] | None = None  # its flush (`_flush_pending`)
        self.threads = block[0] * block[1] * block[2]
        # a warp spans rows of the block (x narrower than a warp): loads and checks by half-warp are worth having
        self.rows_in_warp = block[0] < WARP and self.threads > block[0]
        self.nwarps = (self.threads + 31) // 32
        self.nregs = max(1, len(layout.reg_types))
        types = [storage(t) for t in layout.reg_types] or [I8]
        self.slot_type = types
        self.slot_off, off = [], 0
        for t in types:  # a slot: 32 lanes of one register, side by side (a vector load)
            self.slot_off.append(off)
            off += WARP * t.width // 8
        self.warp_bytes = off
        if self.nwarps * self.warp_bytes > MAX_REGFILE:
            raise NotNative(f"{self.threads} threads x {self.nregs} registers exceed the native register file")
        self.segs = segments(layout, ops)
        self.seg_at = {seg.start: seg for seg in self.segs}
        fl = layout.functions[layout.kernel_func.name]
        self.live = live_in(layout, ops, fl.entry, fl.end)
        self.shuffled = shuffled(layout, fl.entry, fl.end)
        # registers the same in every lane, known at compile time or a kernel parameter, where surely written
        # (a register another lane's shfl reads is that lane's: it may have exited before writing it)
        self.constants = {s: v for s, v in constant_registers(layout, fl.entry, fl.end).items()
                          if not self.shuffled >> s & 1}
        self.param_regs = {s: v for s, v in param_registers(layout, fl.entry, fl.end).items()
                           if not self.shuffled >> s & 1 and s not in self.constants}
        uniform = sum(1 << s for s in (*self.constants, *self.param_regs))
        self.surely = surely_written(layout, ops, fl.entry, fl.end)
        # registers whose lanes in a warp are lane 0's + stride * lane (affine.py)
        self.strides = {s: v for s, v in affine.lane_strides(layout, fl.entry, fl.end, block, self.surely, {
            *self.constants, *self.param_regs}).items() if not self.shuffled >> s & 1}
        # those read only where surely written are made where read, never kept in the register file
        self.remade = read_where_written(layout, ops, fl.entry, fl.end, uniform) if uniform else 0
        self.spans = 0  # span accesses made (warp.py): their straight path's unused address vectors are dropped
        self.windows: dict[int, tuple[L.Value, L.Value]] = {}  # pc -> its access's window of good offsets (warp.py)
        self.module = L.Module(name="ptxforge_native")
        self.module.triple = ""
        self._intrinsics: dict[str, L.Function] = {}

    def constant(self, slot: int, pc: int) -> int | None:
        """The value register `slot` holds in every lane at `pc` where known when compiling
        (`dataflow.constant_registers`), else None."""
        v = self.constants.get(slot)
        return v if v is not None and self.surely.get(pc, 0) >> slot & 1 else None

    def param_register(self, slot: int, pc: int) -> tuple[int, int] | None:
        """(parameter byte offset, bits) of the kernel parameter register `slot` holds in every lane at `pc`
        (`dataflow.param_registers`), else None."""
        v = self.param_regs.get(slot)
        return v if v is not None and self.surely.get(pc, 0) >> slot & 1 else None

    def lane_stride(self, slot: int, pc: int) -> affine.Strides | None:
        """(stride, wraps, checked) of register `slot` at `pc` in a warp all of whose lanes wrote it
        (`affine.lane_strides`), else None."""
        v = self.strides.get(slot)
        return v if v is not None and self.surely.get(pc, 0) >> slot & 1 else None

    def intrinsic(self, name: str, ret: L.Type, args: list[L.Type]) -> L.Function:
        f = self._intrinsics.get(name)
        if f is None:
            f = self._intrinsics[name] = L.Function(self.module, L.FunctionType(ret, args), name)
        return f

    def all_of(self, b: L.IRBuilder, v: L.Value) -> L.Value:
        """i1: every element of the <32 x i1> `v` is set."""
        return b.icmp_unsigned("==", b.bitcast(v, I32), L.Constant(I32, 0xFFFFFFFF))

    # ------------------------------------------------------------------ the function
    def build(self) -> L.Module:
        fn = L.Function(self.module, L.FunctionType(L.VoidType(), [I64.as_pointer(), I64, I64]), "run_blocks")
        ctxp, first, last = fn.args
        self.fn = fn
        entry = fn.append_basic_block("entry")
        b = L.IRBuilder(entry)
        self.ret_block = fn.append_basic_block("ret")
        L.IRBuilder(self.ret_block).ret_void()

        def ctx(i: int) -> L.Value:
            return b.load(b.gep(ctxp, [L.Constant(I64, i)]))
        i8p = I8.as_pointer()
        self.params = b.inttoptr(ctx(CTX_PARAMS), i8p)
        self.arena_base = ctx(CTX_ARENA)
        self.arena_size = ctx(CTX_ARENA_SIZE)
        self.gmap = b.inttoptr(ctx(CTX_GMAP), i8p)
        self.allocs = b.inttoptr(ctx(CTX_ALLOCS), I64.as_pointer())
        self.shared = b.inttoptr(ctx(CTX_SHARED), i8p)
        self.shared_base = ctx(CTX_SHARED)
        self.status = b.inttoptr(ctx(CTX_STATUS), I64.as_pointer())
        self.probe = b.inttoptr(ctx(CTX_PROBE), I64.as_pointer())
        self.counts = b.inttoptr(ctx(CTX_COUNTS), I64.as_pointer())
        self.grid = [b.trunc(ctx(CTX_GRID + i), I32) for i in range(3)]
        self.shared_size = ctx(CTX_SHARED_SIZE)
        self.limits: dict[int, L.Value] = {}  # nbytes -> `_shared_limit`
        self.regfile = b.alloca(I8, self.nwarps * self.warp_bytes, name="regs")
        self.regfile.align = 64
        self.pcs = b.alloca(I32, self.nwarps * WARP, name="pcs")
        self.pcs.align = 64
        self.tmp = b.alloca(V(I32), name="shfl_tmp")
        self.icount = b.alloca(I64, name="icount")
        self.ctaid = [b.alloca(I32, name=f"ctaid{d}") for d in "xyz"]
        self.bid = b.alloca(I64, name="bid")
        self.warp = b.alloca(I64, name="warp")
        self.ran = b.alloca(I1, name="ran")  # a warp ended its turn in this sweep with a lane that can run
        self.fuel = b.alloca(I32, name="fuel")  # backward chains left in this warp's turn (LOOP_CHAINS)
        self.writes = b.alloca(I64, name="writes")  # memory-writing warp instructions (the watchdog's progress)
        # (loops over the block's warps, not unrolled: a compile's cost does not grow with the block's size)
        self.acc32 = b.alloca(I32, name="acc32")  # the barrier release's flags
        self.acc64 = b.alloca(I64, 2, name="acc64")  # the probe's first runnable warp and its pc
        b.store(L.Constant(I64, 0), self.writes)
        memset = self.intrinsic("llvm.memset.p0i8.i64", L.VoidType(), [i8p, I8, I64, I1])
        # (once per call: the watchdog's probe hashes the whole file, and LLVM takes unwritten bytes as undefined)
        b.call(memset, [self.regfile, L.Constant(I8, 0), L.Constant(I64, self.nwarps * self.warp_bytes),
                        L.Constant(I1, 0)])
        b.store(first, self.bid)

        blk_top = fn.append_basic_block("block_top")
        blk_body = fn.append_basic_block("block_body")
        b.branch(blk_top)
        b.position_at_end(blk_top)
        bid = b.load(self.bid)
        stop = b.load(self.status)
        go = b.and_(b.icmp_signed("<", bid, last), b.icmp_signed("==", stop, L.Constant(I64, 0)))
        b.cbranch(go, blk_body, self.ret_block)

        b.position_at_end(blk_body)
        gx, gy = b.zext(self.grid[0], I64), b.zext(self.grid[1], I64)
        b.store(b.trunc(b.urem(bid, gx), I32), self.ctaid[0])
        b.store(b.trunc(b.urem(b.udiv(bid, gx), gy), I32), self.ctaid[1])
        b.store(b.trunc(b.udiv(bid, b.mul(gx, gy)), I32), self.ctaid[2])
        self._zero_registers(b)
        # (a kernel without shared memory: no call to the C library's memset for nothing, block by block)
        zero_shared, shared_done = fn.append_basic_block("zero_shared"), fn.append_basic_block("shared_zeroed")
        b.cbranch(b.icmp_unsigned("!=", self.shared_size, L.Constant(I64, 0)), zero_shared, shared_done)
        b.position_at_end(zero_shared)
        b.call(memset, [self.shared, L.Constant(I8, 0), self.shared_size, L.Constant(I1, 0)])
        b.branch(shared_done)
        b.position_at_end(shared_done)
        b.store(L.Constant(I64, 0), self.icount)
        entry_pc = self.segs[0].start
        full, rest = divmod(self.threads, WARP)
        counted_loop(b, fn, full, lambda w: b.store(L.Constant(V(I32), entry_pc), self.pc_ptr(b, w), align=64),
                     "init_pcs")
        if rest:  # (the last warp's lanes past the block's threads: exited)
            vals = [entry_pc if i < rest else EXITED for i in range(WARP)]
            b.store(L.Constant(V(I32), vals), self.pc_ptr(b, L.Constant(I64, full)), align=64)

        sched = fn.append_basic_block("sched")
        warp_top = fn.append_basic_block("warp_top")
        next_warp = fn.append_basic_block("next_warp")
        release = fn.append_basic_block("release")
        block_done = fn.append_basic_block("block_done")
        b.branch(sched)
        # sched: a sweep over the block's warps, each running one segment in turn (a warp spinning on a flag
        # another warp sets lets that warp run), until none can run: then a barrier releases or the block ends
        b.position_at_end(sched)
        b.store(L.Constant(I64, 0), self.warp)
        b.store(L.Constant(I1, 0), self.ran)
        probe_code.emit_probe(self, b)
        b.branch(warp_top)

        # warp_top: the lowest pc of the warp's runnable lanes, dispatched to its segment
        b.position_at_end(warp_top)
        stopped = b.load_atomic(self.status, "monotonic", 8)  # the launcher's stop (its watchdog), or a fault
        warp_go = fn.append_basic_block("warp_go")
        b.cbranch(b.icmp_signed("!=", stopped, L.Constant(I64, 0)), self.ret_block, warp_go)
        b.position_at_end(warp_go)
        w = b.load(self.warp)
        b.store(L.Constant(I32, LOOP_CHAINS), self.fuel)
        vec = b.load(self.pc_ptr(b, w), align=64)
        umin = self.intrinsic("llvm.vector.reduce.umin.v32i32", I32, [V(I32)])
        lowest = b.call(umin, [vec])
        runnable = b.icmp_unsigned("<", lowest, L.Constant(I32, WAIT_BAR))
        dispatch = fn.append_basic_block("dispatch")
        b.cbranch(runnable, dispatch, next_warp)
        b.position_at_end(dispatch)
        bad = fn.append_basic_block("bad_pc")
        sw = b.switch(lowest, bad)
        blocks = {seg.start: fn.append_basic_block(f"seg{seg.start}") for seg in self.segs}
        self.entry_pcs: dict[int, L.Value] = {}
        self.entry_regs: dict[int, dict[int, L.Value]] = {}
        for seg in self.segs:  # (a segment's pcs: the dispatcher's, or those of the segment chained to it)
            b.position_at_end(blocks[seg.start])
            self.entry_pcs[seg.start] = b.phi(V(I32))
            self.entry_regs[seg.start] = {s: b.phi(self.reg_vector(s)) for s in self._carried(seg)}
        for seg in self.segs:
            edge = fn.append_basic_block(f"seg{seg.start}_enter")
            sw.add_case(L.Constant(I32, seg.start), edge)
            b.position_at_end(edge)
            self._enter(b, blocks, seg.start, vec, w, None)
        for seg in self.segs:
            b.position_at_end(blocks[seg.start])
            here = self.entry_pcs[seg.start]
            mask = b.icmp_unsigned("==", here, L.Constant(V(I32), seg.start))
            self.seg_regs, self.pending = None, None
            new, dests = self.emit_segment(b, seg, w, here, mask)
            seg_regs, pending = self.seg_regs, self.pending
            # chaining: the warp goes on to the next segment at once where its lowest pc is one this segment
            # jumps to (what the dispatcher would pick for it); a barrier or a lower pc of other lanes waits for
            # the warp's turn. A backward jump (a loop) chains LOOP_CHAINS times in a turn, then waits for the
            # next one (so a warp spinning in a loop still lets the others run).
            # (every lane there, the usual case, is told by one compare; the lowest pc only where not. Where
            # this segment ran for every lane, the registers it holds go on in SSA: their values in the
            # register file for every lane, without a reload from the stores just made)
            ahead = sorted({d for d in dests if d in blocks})
            for d in ahead:
                nxt, edge = fn.append_basic_block(f"seg{seg.start}_not_all{d}"), fn.append_basic_block(
                    f"seg{seg.start}_all{d}")
                every = self.all_of(b, b.icmp_unsigned("==", new, L.Constant(V(I32), d)))
                b.cbranch(self._fueled(b, every) if d <= seg.start else every, edge, nxt)
                b.position_at_end(edge)
                if self.entry_regs[d] and seg_regs is not None and d > seg.start:  # (a loop reloads them)
                    kept, reload = fn.append_basic_block(f"seg{seg.start}_kept{d}"), fn.append_basic_block(
                        f"seg{seg.start}_reload{d}")
                    b.cbranch(self.all_of(b, mask), kept, reload)
                    b.position_at_end(kept)
                    self._flush_pending(b, w, pending, d)
                    self._enter(b, blocks, d, new, w, seg_regs.values)
                    b.position_at_end(reload)
                self._flush_pending(b, w, pending)
                self._enter(b, blocks, d, new, w, None)
                b.position_at_end(nxt)
            self._flush_pending(b, w, pending)
            if ahead:
                low = b.call(umin, [new])
                for d in ahead:
                    nxt, edge = fn.append_basic_block(f"seg{seg.start}_not{d}"), fn.append_basic_block(
                        f"seg{seg.start}_low{d}")
                    at = b.icmp_unsigned("==", low, L.Constant(I32, d))
                    b.cbranch(self._fueled(b, at) if d <= seg.start else at, edge, nxt)
                    b.position_at_end(edge)
                    self._enter(b, blocks, d, new, w, None)
                    b.position_at_end(nxt)
            # (a sweep in which no warp ends its turn able to run is followed by the barrier's release at once:
            # only a release makes a waiting lane run again)
            b.store(new, self.pc_ptr(b, w), align=64)
            can_run = b.icmp_unsigned("!=", b.bitcast(b.icmp_unsigned("<", new, L.Constant(V(I32), WAIT_BAR)), I32),
                                      L.Constant(I32, 0))
            b.store(b.or_(b.load(self.ran), can_run), self.ran)
            b.branch(next_warp)
        b.position_at_end(bad)
        b.branch(next_warp)  # (no segment starts there: cannot happen for pcs this code writes)

        b.position_at_end(next_warp)
        w2 = b.add(b.load(self.warp), L.Constant(I64, 1))
        b.store(w2, self.warp)
        sweep_end = fn.append_basic_block("sweep_end")
        b.cbranch(b.icmp_signed("<", w2, L.Constant(I64, self.nwarps)), warp_top, sweep_end)
        b.position_at_end(sweep_end)
        has_bar = any(seg.kind == "bar" for seg in self.segs)  # (without a barrier no lane ever waits)
        b.cbranch(b.load(self.ran), sched, release if has_bar else block_done)

        # every warp waits or has exited: a barrier releases its lanes, or the block is done
        b.position_at_end(release)
        vt = V(I32)
        orr = self.intrinsic("llvm.vector.reduce.or.v32i32", I32, [vt])
        b.store(L.Constant(I32, 0), self.acc32)

        def release_warp(wi: L.Value) -> None:
            vp = self.pc_ptr(b, wi)
            v = b.load(vp, align=64)
            waiting = b.icmp_unsigned("<", v, L.Constant(vt, EXITED))
            flag = b.and_(v, L.Constant(vt, WAIT_BAR))
            b.store(b.or_(b.load(self.acc32), b.call(orr, [flag])), self.acc32)
            cleared = b.and_(v, L.Constant(vt, ~WAIT_BAR & 0xFFFFFFFF))
            b.store(b.select(waiting, cleared, v), vp, align=64)
        counted_loop(b, fn, self.nwarps, release_warp, "release")
        any_wait = b.load(self.acc32)
        b.cbranch(b.icmp_unsigned("!=", any_wait, L.Constant(I32, 0)), sched, block_done)

        b.position_at_end(block_done)
        bid = b.load(self.bid)
        b.store(b.load(self.icount), b.gep(self.counts, [bid]))
        b.store(b.add(bid, L.Constant(I64, 1)), self.bid)
        b.branch(blk_top)
        if self.spans:
            drop_dead(fn)
        return self.module

    def _fueled(self, b: L.IRBuilder, go: L.Value) -> L.Value:
        """`go` and fuel left for a backward chain in this turn (then one less of it)."""
        fuel = b.load(self.fuel)
        ok = b.and_(go, b.icmp_unsigned("!=", fuel, L.Constant(I32, 0)))
        b.store(b.select(ok, b.sub(fuel, L.Constant(I32, 1)), fuel), self.fuel)
        return ok

    def _carried(self, seg: Segment) -> list[int]:
        """The registers segment `seg` reads before writing them, taken in at its start (`entry_regs`): none
        known when compiling (a constant, a parameter), none made where read, none another lane's shfl reads."""
        if seg.kind != "lanes":
            return []
        bits = read_before_written(self.layout, self.ops, seg.start, seg.end) & ~self.remade & ~self.shuffled
        return [s for s in range(self.nregs) if bits >> s & 1 and self.constant(s, seg.start) is None
                and self.param_register(s, seg.start) is None]

    def _enter(self, b: L.IRBuilder, blocks: dict[int, L.Block], d: int, pcs: L.Value, w: L.Value,
               values: dict[int, L.Value] | None) -> None:
        """Branch to segment `d` with the warp's pcs `pcs` and its carried registers: from `values` (the
        segment before it held them for every lane) where there, else from the register file."""
        for s, phi in self.entry_regs[d].items():
            v = values.get(s) if values is not None else None
            if v is None or str(v.type) != str(phi.type):
                v = self.load_slot(b, w, s)
            phi.add_incoming(v, b.block)
        self.entry_pcs[d].add_incoming(pcs, b.block)
        b.branch(blocks[d])

    def reg_vector(self, slot: int) -> L.Type:
        """The type of register `slot`'s warp vector (`load_slot`'s)."""
        return V(I1) if self.layout.reg_types[slot] == ".pred" else V(self.slot_type[slot])

    def pc_ptr(self, b: L.IRBuilder, w: L.Value) -> L.Value:
        return b.bitcast(b.gep(self.pcs, [b.mul(w, L.Constant(I64, WARP))], inbounds=True), V(I32).as_pointer())

    def slot_ptr(self, b: L.IRBuilder, w: L.Value, slot: int) -> L.Value:
        off = b.add(b.mul(w, L.Constant(I64, self.warp_bytes)), L.Constant(I64, self.slot_off[slot]))
        return b.bitcast(b.gep(self.regfile, [off], inbounds=True), V(self.slot_type[slot]).as_pointer())

    def load_slot(self, b: L.IRBuilder, w: L.Value, slot: int) -> L.Value:
        v = b.load(self.slot_ptr(b, w, slot), align=32)
        return b.trunc(v, V(I1)) if self.layout.reg_types[slot] == ".pred" else v

    def store_slot(self, b: L.IRBuilder, w: L.Value, slot: int, v: L.Value, mask: L.Value | None) -> None:
        """Store `v` into the slot's lanes that `mask` selects (None: all)."""
        if v.type.element.width == 1:
            v = b.zext(v, V(I8))
        p = self.slot_ptr(b, w, slot)
        if mask is not None:
            v = b.select(mask, v, b.load(p, align=32))
        b.store(v, p, align=32)

    def count_write(self, b: L.IRBuilder) -> None:
        """A warp instruction wrote memory (progress, for the watchdog)."""
        b.store(b.add(b.load(self.writes), L.Constant(I64, 1)), self.writes)

    def _zero_registers(self, b: L.IRBuilder) -> None:
        """Zero the registers some path may read before writing (zeroing.py), in every warp of the block."""
        fl = self.layout.functions[self.layout.kernel_func.name]
        need = registers_to_zero(self.layout, self.ops, fl.entry, fl.end)
        if not need:
            return
        if 2 * len(need) >= self.nregs:
            memset = self.intrinsic("llvm.memset.p0i8.i64", L.VoidType(), [I8.as_pointer(), I8, I64, I1])
            b.call(memset, [self.regfile, L.Constant(I8, 0), L.Constant(I64, self.nwarps * self.warp_bytes),
                            L.Constant(I1, 0)])
            return
        def zero(w: L.Value) -> None:
            for slot in need:
                b.store(L.Constant(V(self.slot_type[slot]), 0), self.slot_ptr(b, w, slot), align=32)
        counted_loop(b, self.fn, self.nwarps, zero, "zero_regs")

    # ------------------------------------------------------------------ segments
    def _count(self, b: L.IRBuilder, mask: L.Value, n: int) -> None:
        """Each lane of `mask` steps `n` instructions."""
        pop = self.intrinsic("llvm.ctpop.i32", I32, [I32])
        lanes = b.zext(b.call(pop, [b.bitcast(mask, I32)]), I64)
        b.store(b.add(b.load(self.icount), b.mul(lanes, L.Constant(I64, n))), self.icount)

    def _set_pcs(self, b: L.IRBuilder, w: L.Value, old: L.Value, mask: L.Value, dest: L.Value) -> L.Value:
        """The warp's pcs with the lanes of `mask` at `dest` (stored where the warp's turn ends: a segment chained
        to takes them in SSA)."""
        return b.select(mask, dest, old)

    def emit_segment(self, b: L.IRBuilder, seg: Segment, w: L.Value, pcs: L.Value, mask: L.Value
                     ) -> tuple[L.Value, list[int]]:
        """The segment for the lanes of `mask` (those standing at its start; `pcs`: the warp's pcs): the warp's
        pcs after it and the pcs its lanes may go on at (none after a barrier: they wait)."""
        if seg.kind == "bar":
            self._check_bar(seg.start)
            self._count(b, mask, 1)
            return self._set_pcs(b, w, pcs, mask, L.Constant(V(I32), (seg.start + 1) | WAIT_BAR)), []
        if seg.kind == "warp":
            return self.emit_warp(b, seg, w, pcs, mask), [seg.start + 1]
        self._count(b, mask, seg.end - seg.start)
        regs = self.seg_regs = SegmentRegs()
        regs.values.update(self.entry_regs[seg.start])
        for s, phi in self.entry_regs[seg.start].items():
            st = self.lane_stride(s, seg.start)
            if st is not None:  # (a stepped register's test made once here, for all the segment's accesses)
                regs.lanes[id(phi)] = (phi, st[0], st[1], affine.lanes_test(b, phi, st[0]) if st[2] else False)
        regs.groups = access_groups(self.layout, seg.start, seg.end)
        for pc in range(seg.start, seg.end):
            op = self.ops[pc]
            ins = self.layout.placed[pc].ins
            env = WarpEnv(self, b, w, pc, mask, regs)
            if ins.guard is not None:
                env.guard = self._guard(env, ins)
            if op.kind == C.NORMAL:
                lower(ins, env)
                continue
            if op.kind == C.WARPSYNC:  # (inline_warp_op: the segment's lanes stand at it)
                self._warp_op(b, env, ins, pcs)
                continue
            nxt = L.Constant(V(I32), pc + 1)
            if op.kind == C.BRA:
                tgt = L.Constant(V(I32), op.target)
                dest = tgt if env.guard is None else b.select(env.guard, tgt, nxt)
                after_pcs = [op.target] if ins.guard is None else [op.target, pc + 1]
            elif op.kind in (C.EXIT, C.RET):
                ex = L.Constant(V(I32), EXITED)
                dest = ex if env.guard is None else b.select(env.guard, ex, nxt)
                after_pcs = [] if ins.guard is None else [pc + 1]
            else:
                raise NotNative(f"{ins.mnemonic} is not in the native tier yet")
            self.pending = (regs, mask, self._live_after(after_pcs))
            return self._set_pcs(b, w, pcs, mask, dest), after_pcs
        self.pending = (regs, mask, self._live_after([seg.end]))
        return self._set_pcs(b, w, pcs, mask, L.Constant(V(I32), seg.end)), [seg.end]

    def _flush_pending(self, b: L.IRBuilder, w: L.Value, pending: tuple[SegmentRegs, L.Value, int] | None,
                       kept_into: int | None = None) -> None:
        """The flush of the "lanes" segment just emitted (`pending`: its registers, mask and the registers live
        after it), on one way out of it. Into segment `kept_into` with every lane (`_enter` with the values
        held in SSA) a register that segment takes in and that is dead after it is left out: only that segment
        reads it, from SSA."""
        if pending is None:
            return
        regs, mask, keep = pending
        if kept_into is not None:
            seg = self.seg_at[kept_into]
            carried = sum(1 << s for s in self.entry_regs[kept_into])
            keep &= ~(carried & ~self._live_after(next_pcs(self.layout, self.ops, seg.end - 1, seg.end + 1)))
        self._flush(b, w, regs, mask, keep)

    def _flush(self, b: L.IRBuilder, w: L.Value, regs: SegmentRegs, mask: L.Value, keep: int) -> None:
        """Store the written registers whose bit is set in `keep`, for the lanes of `mask`."""
        slots = sorted(s for s in regs.dirty if keep >> s & 1)
        if not slots:
            return
        full = self.all_of(b, mask)
        fn = self.fn
        whole, part, done = (fn.append_basic_block(f"flush_{x}") for x in ("all", "some", "done"))
        b.cbranch(full, whole, part)
        for blk, m in ((whole, None), (part, mask)):
            b.position_at_end(blk)
            for s in slots:
                self.store_slot(b, w, s, regs.values[s], m)
            b.branch(done)
        b.position_at_end(done)

    def _live_after(self, pcs: list[int]) -> int:
        bits = self.shuffled
        for pc in pcs:
            bits |= self.live.get(pc, 0)
        return bits & ~self.remade

    def _guard(self, env: WarpEnv, ins: ir.Instruction) -> L.Value:
        g = ins.guard
        assert g is not None
        p = read(env, ir.Register(g.predicate), ".pred")
        return env.b.not_(p) if g.negated else p

    def _check_bar(self, pc: int) -> None:
        self.current_pc = pc
        ins = self.layout.placed[pc].ins
        op = self.ops[pc]
        ok = ins.opcode in BARRIER_OPCODES and ins.guard is None and getattr(op.extra, "mode", None) == "sync" \
            and getattr(op.extra, "count", 1) is None and getattr(op.extra, "fixed_id", None) == 0
        if not ok:
            raise NotNative(f"{ins.mnemonic} (other than bar.sync 0 for the whole block) is not in the native tier yet")

    def emit_warp(self, b: L.IRBuilder, seg: Segment, w: L.Value, pcs: L.Value, here: L.Value) -> L.Value:
        """A warp-wide instruction, once every running lane of its member mask stands at it (the warp's pcs
        after it)."""
        pc = self.current_pc = seg.start
        ins = self.layout.placed[pc].ins
        if ins.guard is not None:
            raise NotNative(f"{ins.mnemonic} under a guard is not in the native tier yet")
        regs = SegmentRegs()
        env = WarpEnv(self, b, w, pc, here, regs)
        self._count(b, here, 1)
        self._warp_op(b, env, ins, pcs)
        self._flush(b, w, regs, here, self._live_after([pc + 1]))
        return self._set_pcs(b, w, pcs, here, L.Constant(V(I32), pc + 1))

    def _warp_op(self, b: L.IRBuilder, env: WarpEnv, ins: ir.Instruction, pcs: L.Value) -> None:
        """A warp-wide instruction for the lanes standing at it (`env.mask`; `pcs`: the warp's pcs), once every
        running lane of its member mask stands there; else the launch stops (the interpreter would make the
        early lanes wait: a diverged warp is for the interpreter)."""
        fn, pc, w, here = self.fn, env.pc, env.w, env.mask
        here_bits = b.bitcast(here, I32)
        alive_bits = b.bitcast(b.icmp_unsigned("!=", pcs, L.Constant(V(I32), EXITED)), I32)
        mo = member_operand(ins)
        if mo is not None:
            cttz = self.intrinsic("llvm.cttz.i32", I32, [I32, I1])
            lead = b.call(cttz, [here_bits, L.Constant(I1, 1)])
            mm = b.extract_element(read(env, mo, ".b32"), lead)
        else:
            mm = L.Constant(I32, 0xFFFFFFFF)
        missing = b.and_(b.and_(mm, alive_bits), b.not_(here_bits))
        fail = fn.append_basic_block(f"s{pc}_unconverged")
        mid = fn.append_basic_block(f"s{pc}_mid")
        b.cbranch(b.icmp_unsigned("!=", missing, L.Constant(I32, 0)), fail, mid)
        b.position_at_end(fail)
        self._set_status(b, ST_NOT_CONVERGED, pc, b.mul(w, L.Constant(I64, 32)), L.Constant(I64, 0), 4, False)
        b.branch(self.ret_block)
        b.position_at_end(mid)
        if ins.opcode == "shfl":
            self._shfl(b, env, ins)
        elif ins.opcode in WARP_OPS:
            WARP_OPS[ins.opcode](ins, env)
        elif not (ins.opcode == "bar" and "warp" in ins.suffixes):  # (bar.warp.sync: the wait above is all)
            raise NotNative(f"{ins.mnemonic} is not in the native tier yet")

    def _shfl(self, b: L.IRBuilder, env: WarpEnv, ins: ir.Instruction) -> None:
        if "b32" not in ins.suffixes:
            raise NotNative(f"{ins.mnemonic} is not in the native tier yet")
        mode = next((s for s in ins.suffixes if s in ("up", "down", "bfly", "idx")), None)
        ops = ins.operands
        if mode is None or len(ops) != 5:
            raise NotNative(f"{ins.mnemonic} is not in the native tier yet")
        if isinstance(ops[0], ir.PredPair):
            d, p = ops[0].first, (None if isinstance(ops[0].second, ir.Sink) else ops[0].second)
        else:
            d, p = ops[0], None
        bk, ck = env.constant(ops[2], ".b32"), env.constant(ops[3], ".b32")
        if bk is not None and ck is not None:  # (the usual case) a fixed permutation: one vector shuffle
            j, ok = shfl_lanes(mode, np.arange(WARP, dtype=np.int64), bk, ck)
            write(env, d, b.shuffle_vector(env.read_every_lane(ops[1], ".b32"), L.Constant(V(I32), None),
                                           L.Constant(V(I32), [int(x) for x in j])))
            if p is not None:
                write(env, p, L.Constant(V(I1), [bool(x) for x in ok]))
            return
        bv = b.and_(read(env, ops[2], ".b32"), L.Constant(V(I32), 31))
        cv = read(env, ops[3], ".b32")
        seg_mask = b.and_(b.lshr(cv, L.Constant(V(I32), 8)), L.Constant(V(I32), 31))
        clamp = b.and_(cv, L.Constant(V(I32), 31))
        ln = IOTA
        max_lane = b.or_(b.and_(ln, seg_mask), b.and_(clamp, b.not_(seg_mask)))
        if mode == "up":
            j = b.sub(ln, bv)
            ok = b.icmp_signed(">=", j, max_lane)
        else:
            j = {"down": lambda: b.add(ln, bv), "bfly": lambda: b.xor(ln, bv),
                 "idx": lambda: b.or_(b.and_(ln, seg_mask), b.and_(bv, b.not_(seg_mask)))}[mode]()
            ok = b.icmp_signed("<=", j, max_lane)
        j = b.select(ok, j, ln)
        b.store(env.read_every_lane(ops[1], ".b32"), self.tmp, align=64)
        base = b.ptrtoint(self.tmp, I64)
        ptrs = b.inttoptr(b.add(splat(b, base), b.mul(b.zext(j, V(I64)), L.Constant(V(I64), 4))),
                          V(I32.as_pointer()))
        gather = self.intrinsic("llvm.masked.gather.v32i32.v32p0", V(I32), [V(I32.as_pointer()), I32, V(I1), V(I32)])
        got = b.call(gather, [ptrs, L.Constant(I32, 4), L.Constant(V(I1), 1), L.Constant(V(I32), 0)])
        write(env, d, got)
        if p is not None:
            write(env, p, ok)

    # ------------------------------------------------------------------ memory
    def _set_status(self, b: L.IRBuilder, code: int | L.Value, pc: int, lane: L.Value, addr: L.Value, nbytes: int,
                    wr: bool) -> None:
        code_v = code if isinstance(code, L.Value) else L.Constant(I64, code)
        vals = [code_v, L.Constant(I64, pc), lane, b.load(self.bid), addr, L.Constant(I64, nbytes),
                L.Constant(I64, int(wr))]
        for i, v in enumerate(vals[1:], 1):
            b.store(v, b.gep(self.status, [L.Constant(I64, i)]))
        b.store(vals[0], self.status)  # the code last: the launcher reads the rest once it is set

    def checked(self, b: L.IRBuilder, space: str, a: L.Value, nbytes: int, wr: bool, pc: int, w: L.Value,
                active: L.Value, proven: L.Value | None = None, consecutive: L.Value | None = None) -> L.Value:
        """Host addresses of the PTX addresses `a` (<32 x i64>); an active lane's bad one (misaligned, out of
        bounds, a write to read-only memory) stops the launch, naming the first such lane. `proven` (i1, shared
        memory only): where set, every active lane's access is known good and nothing is checked.
        `consecutive` (i1, global memory): whether `a` is consecutive `nbytes` apart, where the caller has it
        already. The checks and the fault report are functions of the module (access_calls.py)."""
        fn = self.fn
        ok, fault = fn.append_basic_block(f"pc{pc}_ok"), fn.append_basic_block(f"pc{pc}_fault")
        codes = (ST_MISALIGNED, ST_READONLY, ST_FAULT)
        shared = space == "shared"
        assert proven is None or shared
        if shared:  # (in bounds: a + nbytes <= size, that is a below a limit, with no sum to wrap)
            limit = self._shared_limit(nbytes)
            bad_bits = access_calls.shared_bad(self, b, a, active, limit, nbytes, proven)
        else:
            bad_bits = access_calls.global_bad(self, b, a, active, nbytes, wr, consecutive)
        # (a fault ends the launch: weighted so, LLVM lays the good path out straight; without the weights the
        # 1M-thread vector add's optimized code was 5% slower than with the checks written inline)
        br = b.cbranch(b.icmp_unsigned("!=", bad_bits, L.Constant(I32, 0)), fault, ok)
        br.set_weights([1, 1 << 20])
        b.position_at_end(fault)
        if shared:
            access_calls.report_shared(self, b, codes, pc, w, a, active, limit, nbytes, wr)
        else:
            access_calls.report_global(self, b, codes, pc, w, a, active, nbytes, wr)
        b.branch(self.ret_block)
        b.position_at_end(ok)
        # (the bases as warp vectors at each access, not once in the entry: LLVM places them)
        if shared:
            return b.add(a, splat(b, self.shared_base))
        return b.add(b.sub(a, L.Constant(V(I64), GLOBAL_BASE)), splat(b, self.arena_base))

    def _shared_limit(self, nbytes: int) -> L.Value:
        """shared_size - nbytes + 1 (0 when shared memory is smaller than nbytes): an access of nbytes at a lies
        in shared memory exactly when a is below it. Made once per size, in the entry block."""
        v = self.limits.get(nbytes)
        if v is None:
            b = L.IRBuilder()
            b.position_before(self.fn.entry_basic_block.terminator)
            size, n = self.shared_size, L.Constant(I64, nbytes)
            v = self.limits[nbytes] = b.select(b.icmp_unsigned(">=", size, n),
                                               b.add(b.sub(size, n), L.Constant(I64, 1)), L.Constant(I64, 0))
        return v

    # ------------------------------------------------------------------ special registers
    def sreg(self, b: L.IRBuilder, name: str, w: L.Value) -> L.Value:
        if name.startswith("%ntid."):
            return L.Constant(V(I32), self.block["xyz".index(name[-1])])
        if name.startswith("%nctaid."):
            return splat(b, self.grid["xyz".index(name[-1])])
        if name.startswith("%ctaid."):
            return splat(b, b.load(self.ctaid["xyz".index(name[-1])]))
        if name == "%laneid":
            return IOTA
        if name == "%warpid":
            return splat(b, b.trunc(w, I32))
        return thread_index(b, name, w, self.block)
