"""The block function: a kernel's PTX as one LLVM function that runs a range of blocks.

Execution model (the interpreter's, per block): each thread has a pc; a warp is 32 lanes of the block's
threads in order (the last one padded with exited lanes). A warp steps the segment at the lowest pc of its
runnable lanes for exactly the lanes standing there, so diverged paths reconverge where their pcs meet. A
segment is a run of lane-local instructions ending at a branch, an exit or before a label; the warp-wide
ones (shfl, bar.sync) are segments of their own. A warp runs until all its lanes wait at a barrier or have
exited, then the next warp runs; when every warp waits, the barrier releases. Per-lane results do not depend
on which warp runs first for a race-free kernel, so they equal the interpreter's, and so do the counts (each
lane counts every instruction it steps, a guarded-off one too).

Registers live in a register file on the stack (one i64 per register per thread), pcs in an i32 per
thread. Out-of-bounds and misaligned accesses stop the launch with a status the launcher turns into the
interpreter's kind of fault.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from llvmlite import ir as L

from ptxforge.emu import op as C
from ptxforge.emu.memory import GLOBAL_BASE
from ptxforge.emu.native.dataflow import live_in, registers_to_zero, shuffled
from ptxforge.emu.native.lower import I1, I8, I32, I64, SREGS, NotNative, lower, read, write
from ptxforge.ptx import ir

if TYPE_CHECKING:
    from ptxforge.emu.program import Layout

WAIT_BAR, EXITED = C.WAIT_BAR, C.EXITED
MAX_REGFILE = 4 << 20  # bytes of register file a block may keep on a worker's stack

# the context array the launcher passes (i64 each)
CTX_PARAMS, CTX_ARENA, CTX_ARENA_SIZE, CTX_GMAP, CTX_SHARED, CTX_STATUS, CTX_COUNTS = range(7)
CTX_GRID = 7  # 7, 8, 9: nctaid.x/y/z
CTX_SHARED_SIZE = 10
CTX_LEN = 11
# status[0] codes (status: [code, pc, thread, block, address, nbytes, write])
ST_OK, ST_FAULT, ST_MISALIGNED, ST_READONLY, ST_NOT_CONVERGED, ST_STOP = 0, 1, 2, 3, 4, 5
GRANULE = 64  # bytes per entry of the global validity map (allocations start on 256-byte boundaries)
GMAP_READONLY = 0x80  # flag in a map entry: the bytes belong to a read-only (.const) allocation

BARRIER_OPCODES = ("bar", "barrier")


@dataclass
class Segment:
    start: int
    end: int  # one past its last pc
    kind: str  # "lanes", "shfl", "bar"


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
        elif k in (C.BAR, C.WARPSYNC):
            leaders.add(pc)
            leaders.add(pc + 1)
        elif k != C.NORMAL:
            raise NotNative("not in the native tier yet", pc)
    cuts = sorted(x for x in leaders if lo <= x < hi) + [hi]
    out = []
    for a, z in zip(cuts, cuts[1:], strict=False):
        k = ops[a].kind
        kind = "bar" if k == C.BAR else "shfl" if k == C.WARPSYNC else "lanes"
        out.append(Segment(a, z, kind))
    return out


class LaneEnv:
    """What `lower` needs while emitting one lane's code: the builder, registers, memory, sregs."""

    def __init__(self, gen: BlockGen, b: L.IRBuilder, lane: L.Value, pc: int, cache: dict | None = None):
        self.gen, self.b, self.lane, self.pc = gen, b, lane, pc
        self.cache = cache  # slot -> its value written earlier in this segment (stored at its end if live)
        gen.current_pc = pc
        self.placed = gen.layout.placed[pc]

    def reg(self, o: Any) -> tuple[int, str]:
        hit = self.gen.layout.lookup(self.placed, o.name)
        if not isinstance(hit, tuple):
            raise NotNative(f"{o.name} is not a plain register")
        return hit[1], self.gen.layout.reg_types[hit[1]]

    def symbol_address(self, name: str) -> int | None:
        hit = self.gen.layout.lookup(self.placed, name)
        if hit is None or isinstance(hit, tuple):
            return None
        if hit.kind == "shared":
            return int(hit.value)
        if hit.kind == "global":
            return int(hit.value)
        return None

    def _slot_ptr(self, slot: int) -> L.Value:
        b = self.b
        idx = b.add(b.mul(self.lane, L.Constant(I64, self.gen.nregs)), L.Constant(I64, slot))
        return b.gep(self.gen.regfile, [idx], inbounds=True)

    def load_reg(self, slot: int) -> L.Value:
        if self.cache is not None and slot in self.cache:
            return self.cache[slot]
        return self.b.load(self._slot_ptr(slot), align=8)

    def store_reg(self, slot: int, v: L.Value) -> None:
        if self.cache is not None:
            self.cache[slot] = v
        else:
            self.b.store(v, self._slot_ptr(slot), align=8)

    def flush(self, keep: int) -> None:
        """Store the cached registers whose bit is set in `keep` and forget them all."""
        assert self.cache is not None
        for slot, v in self.cache.items():
            if keep >> slot & 1:
                self.b.store(v, self._slot_ptr(slot), align=8)
        self.cache.clear()

    def sreg(self, name: str) -> L.Value:
        if name not in SREGS:
            raise NotNative(f"special register {name} is not in the native tier yet")
        return self.gen.sreg(self.b, name, self.lane)

    def module_intrinsic(self, name: str, ret: L.Type, args: list[L.Type]) -> L.Function:
        return self.gen.intrinsic(name, ret, args)

    def param_offset(self, addr: Any) -> int:
        if not isinstance(addr, ir.Address) or not isinstance(addr.base, ir.Symbol | ir.Register):
            raise NotNative("ld.param from a register address")
        hit = self.gen.layout.kparams.get(addr.base.name)
        if hit is None:
            raise NotNative(f"ld.param of {addr.base.name}")
        return hit[0] + addr.offset

    def load_param(self, off: int, t: L.Type) -> L.Value:
        if off < 0 or off + t.width // 8 > self.gen.layout.kparam_size:
            raise NotNative("ld.param outside the parameters")
        b = self.b
        p = b.gep(self.gen.params, [L.Constant(I64, off)])
        return b.load(b.bitcast(p, t.as_pointer()), align=1)

    def address(self, space: str, addr: Any, nbytes: int, write: bool, text: Any) -> L.Value:
        """An i8* to `nbytes` at the address operand, after the interpreter's checks (else the fault path)."""
        if not isinstance(addr, ir.Address):
            raise NotNative("address operand")
        b = self.b
        if addr.base is None:
            raise NotNative("absolute address")
        sym = self.symbol_address(addr.base.name)
        if sym is not None:
            hit = self.gen.layout.lookup(self.placed, addr.base.name)
            if space != "shared" or isinstance(hit, tuple) or hit is None or hit.kind != "shared":
                raise NotNative("a symbol address outside shared memory")
            a = L.Constant(I64, sym + addr.offset)
        else:
            a = read(self, addr.base, ".u64" if self.reg(addr.base)[1] in (".u64", ".b64", ".s64") else ".u32")
            if a.type.width < 64:
                a = b.zext(a, I64)
            if addr.offset:
                a = b.add(a, L.Constant(I64, addr.offset & (2**64 - 1)))
        return self.gen.checked_pointer(b, space, a, nbytes, write, self.pc, self.lane)


class BlockGen:
    """Builds `run_blocks(ctx, first, last)` for one kernel at one block shape."""

    def __init__(self, layout: Layout, ops: list[Any], block: tuple[int, int, int]):
        self.layout, self.ops, self.block = layout, ops, block
        self.current_pc: int | None = None
        self.threads = block[0] * block[1] * block[2]
        self.nwarps = (self.threads + 31) // 32
        self.nlanes = self.nwarps * 32
        self.nregs = max(1, len(layout.reg_types))
        if self.nlanes * self.nregs * 8 > MAX_REGFILE:
            raise NotNative(f"{self.nlanes} threads x {self.nregs} registers exceed the native register file")
        self.segs = segments(layout, ops)
        fl = layout.functions[layout.kernel_func.name]
        self.live = live_in(layout, ops, fl.entry, fl.end)
        self.shuffled = shuffled(layout, fl.entry, fl.end)
        self.module = L.Module(name="ptxforge_native")
        self.module.triple = ""
        self._intrinsics: dict[str, L.Function] = {}

    def intrinsic(self, name: str, ret: L.Type, args: list[L.Type]) -> L.Function:
        f = self._intrinsics.get(name)
        if f is None:
            f = self._intrinsics[name] = L.Function(self.module, L.FunctionType(ret, args), name)
        return f

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
        self.arena = b.inttoptr(ctx(CTX_ARENA), i8p)
        self.arena_size = ctx(CTX_ARENA_SIZE)
        self.gmap = b.inttoptr(ctx(CTX_GMAP), i8p)
        self.shared = b.inttoptr(ctx(CTX_SHARED), i8p)
        self.status = b.inttoptr(ctx(CTX_STATUS), I64.as_pointer())
        self.counts = b.inttoptr(ctx(CTX_COUNTS), I64.as_pointer())
        self.grid = [b.trunc(ctx(CTX_GRID + i), I32) for i in range(3)]
        self.shared_size = ctx(CTX_SHARED_SIZE)
        self.regfile = b.alloca(I64, self.nlanes * self.nregs, name="regs")
        self.pcs = b.alloca(I32, self.nlanes, name="pcs")
        self.tmp = b.alloca(I64, 32, name="shfl_tmp")
        self.tmp_ok = b.alloca(I1, 32, name="shfl_ok")
        self.icount = b.alloca(I64, name="icount")
        self.ctaid = [b.alloca(I32, name=f"ctaid{d}") for d in "xyz"]
        self.bid = b.alloca(I64, name="bid")
        self.warp = b.alloca(I64, name="warp")
        memset = self.intrinsic("llvm.memset.p0i8.i64", L.VoidType(), [i8p, I8, I64, I1])
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
        b.call(memset, [self.shared, L.Constant(I8, 0), self.shared_size, L.Constant(I1, 0)])
        b.store(L.Constant(I64, 0), self.icount)
        entry_pc = self.segs[0].start
        for w in range(self.nwarps):
            vals = [entry_pc if w * 32 + i < self.threads else EXITED for i in range(32)]
            vp = b.bitcast(b.gep(self.pcs, [L.Constant(I64, w * 32)]), L.VectorType(I32, 32).as_pointer())
            b.store(L.Constant(L.VectorType(I32, 32), vals), vp, align=4)

        sched = fn.append_basic_block("sched")
        warp_top = fn.append_basic_block("warp_top")
        next_warp = fn.append_basic_block("next_warp")
        release = fn.append_basic_block("release")
        block_done = fn.append_basic_block("block_done")
        b.branch(sched)
        b.position_at_end(sched)
        b.store(L.Constant(I64, 0), self.warp)
        b.branch(warp_top)

        # warp_top: the lowest pc of the warp's runnable lanes, dispatched to its segment
        b.position_at_end(warp_top)
        stopped = b.load_atomic(self.status, "monotonic", 8)  # the launcher's stop (its watchdog), or a fault
        warp_go = fn.append_basic_block("warp_go")
        b.cbranch(b.icmp_signed("!=", stopped, L.Constant(I64, 0)), self.ret_block, warp_go)
        b.position_at_end(warp_go)
        w = b.load(self.warp)
        vp = b.bitcast(b.gep(self.pcs, [b.mul(w, L.Constant(I64, 32))]), L.VectorType(I32, 32).as_pointer())
        vec = b.load(vp, align=4)
        umin = self.intrinsic("llvm.vector.reduce.umin.v32i32", I32, [L.VectorType(I32, 32)])
        lowest = b.call(umin, [vec])
        runnable = b.icmp_unsigned("<", lowest, L.Constant(I32, WAIT_BAR))
        dispatch = fn.append_basic_block("dispatch")
        b.cbranch(runnable, dispatch, next_warp)
        b.position_at_end(dispatch)
        bad = fn.append_basic_block("bad_pc")
        sw = b.switch(lowest, bad)
        for seg in self.segs:
            blk = fn.append_basic_block(f"seg{seg.start}")
            sw.add_case(L.Constant(I32, seg.start), blk)
            b.position_at_end(blk)
            self.emit_segment(b, seg, w, warp_top)
        b.position_at_end(bad)
        b.branch(next_warp)  # (no segment starts there: cannot happen for pcs this code writes)

        b.position_at_end(next_warp)
        w2 = b.add(b.load(self.warp), L.Constant(I64, 1))
        b.store(w2, self.warp)
        b.cbranch(b.icmp_signed("<", w2, L.Constant(I64, self.nwarps)), warp_top, release)

        # every warp waits or has exited: a barrier releases its lanes, or the block is done
        b.position_at_end(release)
        any_wait = L.Constant(I32, 0)
        vt = L.VectorType(I32, 32)
        for wi in range(self.nwarps):
            vp = b.bitcast(b.gep(self.pcs, [L.Constant(I64, wi * 32)]), vt.as_pointer())
            v = b.load(vp, align=4)
            waiting = b.icmp_unsigned("<", v, L.Constant(vt, [EXITED] * 32))
            flag = b.and_(v, L.Constant(vt, [WAIT_BAR] * 32))
            orr = self.intrinsic("llvm.vector.reduce.or.v32i32", I32, [vt])
            any_wait = b.or_(any_wait, b.call(orr, [flag]))
            cleared = b.and_(v, L.Constant(vt, [~WAIT_BAR & 0xFFFFFFFF] * 32))
            b.store(b.select(waiting, cleared, v), vp, align=4)
        b.cbranch(b.icmp_unsigned("!=", any_wait, L.Constant(I32, 0)), sched, block_done)

        b.position_at_end(block_done)
        bid = b.load(self.bid)
        b.store(b.load(self.icount), b.gep(self.counts, [bid]))
        b.store(b.add(bid, L.Constant(I64, 1)), self.bid)
        b.branch(blk_top)
        return self.module

    def _zero_registers(self, b: L.IRBuilder) -> None:
        """Zero the registers some path may read before writing (zeroing.py), in every lane of the block."""
        fl = self.layout.functions[self.layout.kernel_func.name]
        need = registers_to_zero(self.layout, self.ops, fl.entry, fl.end)
        if not need:
            return
        if 2 * len(need) >= self.nregs:
            memset = self.intrinsic("llvm.memset.p0i8.i64", L.VoidType(), [I8.as_pointer(), I8, I64, I1])
            b.call(memset, [b.bitcast(self.regfile, I8.as_pointer()), L.Constant(I8, 0),
                            L.Constant(I64, self.nlanes * self.nregs * 8), L.Constant(I1, 0)])
            return
        fn = self.fn
        head, body, done = (fn.append_basic_block(f"zero_{x}") for x in ("head", "body", "done"))
        pre = b.block
        b.branch(head)
        b.position_at_end(head)
        lane = b.phi(I64)
        lane.add_incoming(L.Constant(I64, 0), pre)
        b.cbranch(b.icmp_signed("<", lane, L.Constant(I64, self.nlanes)), body, done)
        b.position_at_end(body)
        base = b.mul(lane, L.Constant(I64, self.nregs))
        for slot in need:
            b.store(L.Constant(I64, 0), b.gep(self.regfile, [b.add(base, L.Constant(I64, slot))], inbounds=True))
        lane.add_incoming(b.add(lane, L.Constant(I64, 1)), body)
        b.branch(head)
        b.position_at_end(done)

    # ------------------------------------------------------------------ segments
    def _lane_loop(self, b: L.IRBuilder, seg: Segment, w: L.Value, body, after: L.Block) -> None:
        """for l in 0..31: lane = w*32 + l; if pcs[lane] == seg.start: body(b, lane, pc_ptr); then `after`."""
        fn = self.fn
        head = fn.append_basic_block(f"s{seg.start}_head")
        test = fn.append_basic_block(f"s{seg.start}_test")
        run = fn.append_basic_block(f"s{seg.start}_run")
        step = fn.append_basic_block(f"s{seg.start}_step")
        pre = b.block
        b.branch(head)
        b.position_at_end(head)
        li = b.phi(I64)
        li.add_incoming(L.Constant(I64, 0), pre)
        b.cbranch(b.icmp_signed("<", li, L.Constant(I64, 32)), test, after)
        b.position_at_end(test)
        lane = b.add(b.mul(w, L.Constant(I64, 32)), li)
        pcp = b.gep(self.pcs, [lane], inbounds=True)
        here = b.icmp_unsigned("==", b.load(pcp), L.Constant(I32, seg.start))
        b.cbranch(here, run, step)
        b.position_at_end(run)
        body(b, lane, pcp, li)
        b.branch(step)
        b.position_at_end(step)
        li.add_incoming(b.add(li, L.Constant(I64, 1)), step)
        b.branch(head)

    def _count(self, b: L.IRBuilder, n: int) -> None:
        b.store(b.add(b.load(self.icount), L.Constant(I64, n)), self.icount)

    def emit_segment(self, b: L.IRBuilder, seg: Segment, w: L.Value, after: L.Block) -> None:
        if seg.kind == "bar":
            self._check_bar(seg.start)

            def bar_body(b, lane, pcp, li):
                self._count(b, 1)
                b.store(L.Constant(I32, (seg.start + 1) | WAIT_BAR), pcp)
            self._lane_loop(b, seg, w, bar_body, after)
            return
        if seg.kind == "shfl":
            self.emit_shfl(b, seg, w, after)
            return

        def body(b, lane, pcp, li):
            self._count(b, seg.end - seg.start)
            cache: dict[int, L.Value] = {}
            every = (1 << self.nregs) - 1
            for pc in range(seg.start, seg.end):
                op = self.ops[pc]
                ins = self.layout.placed[pc].ins
                env = LaneEnv(self, b, lane, pc, cache)
                if op.kind == C.NORMAL:
                    if ins.guard is not None:  # a guarded write may not happen: the file holds the current values
                        env.flush(every)
                        direct = LaneEnv(self, b, lane, pc, None)
                        self._guarded(b, direct, ins, lambda env=direct, ins=ins: lower(ins, env))
                    else:
                        lower(ins, env)
                    continue
                nxt = L.Constant(I32, pc + 1)
                if op.kind == C.BRA:
                    tgt = L.Constant(I32, op.target)
                    dest = tgt if ins.guard is None else b.select(self._guard(env, ins), tgt, nxt)
                    after_pcs = [op.target] if ins.guard is None else [op.target, pc + 1]
                elif op.kind in (C.EXIT, C.RET):
                    ex = L.Constant(I32, EXITED)
                    dest = ex if ins.guard is None else b.select(self._guard(env, ins), ex, nxt)
                    after_pcs = [] if ins.guard is None else [pc + 1]
                else:
                    raise NotNative(f"{ins.mnemonic} is not in the native tier yet")
                env.flush(self._live_after(after_pcs))
                b.store(dest, pcp)
                return
            LaneEnv(self, b, lane, seg.end - 1, cache).flush(self._live_after([seg.end]))
            b.store(L.Constant(I32, seg.end), pcp)
        self._lane_loop(b, seg, w, body, after)

    def _live_after(self, pcs: list[int]) -> int:
        bits = self.shuffled
        for pc in pcs:
            bits |= self.live.get(pc, 0)
        return bits

    def _guard(self, env: LaneEnv, ins: ir.Instruction) -> L.Value:
        g = ins.guard
        assert g is not None
        p = read(env, ir.Register(g.predicate), ".pred")
        return env.b.not_(p) if g.negated else p

    def _guarded(self, b: L.IRBuilder, env: LaneEnv, ins: ir.Instruction, emit) -> None:
        if ins.guard is None:
            emit()
            return
        with b.if_then(self._guard(env, ins)):
            emit()

    def _check_bar(self, pc: int) -> None:
        self.current_pc = pc
        ins = self.layout.placed[pc].ins
        op = self.ops[pc]
        ok = ins.opcode in BARRIER_OPCODES and ins.guard is None and getattr(op.extra, "mode", None) == "sync" \
            and getattr(op.extra, "count", 1) is None and getattr(op.extra, "fixed_id", None) == 0
        if not ok:
            raise NotNative(f"{ins.mnemonic} (other than bar.sync 0 for the whole block) is not in the native tier yet")

    def emit_shfl(self, b: L.IRBuilder, seg: Segment, w: L.Value, after: L.Block) -> None:
        pc = self.current_pc = seg.start
        ins = self.layout.placed[pc].ins
        if ins.opcode != "shfl" or ins.guard is not None or "b32" not in ins.suffixes:
            raise NotNative(f"{ins.mnemonic} is not in the native tier yet")
        mode = next((s for s in ins.suffixes if s in ("up", "down", "bfly", "idx")), None)
        ops = ins.operands
        if mode is None or len(ops) != 5:
            raise NotNative(f"{ins.mnemonic} is not in the native tier yet")
        if isinstance(ops[0], ir.PredPair):
            d, p = ops[0].first, (None if isinstance(ops[0].second, ir.Sink) else ops[0].second)
        else:
            d, p = ops[0], None
        fn = self.fn
        mid = fn.append_basic_block(f"s{pc}_mid")
        # the lanes of the member mask still running must all stand here (the interpreter waits for them)
        vt = L.VectorType(I32, 32)
        vp = b.bitcast(b.gep(self.pcs, [b.mul(w, L.Constant(I64, 32))]), vt.as_pointer())
        v = b.load(vp, align=4)
        lanebits = L.Constant(vt, [1 << i for i in range(32)])
        orr = self.intrinsic("llvm.vector.reduce.or.v32i32", I32, [vt])
        zero = L.Constant(vt, [0] * 32)
        here = b.call(orr, [b.select(b.icmp_unsigned("==", v, L.Constant(vt, [pc] * 32)), lanebits, zero)])
        alive = b.call(orr, [b.select(b.icmp_unsigned("!=", v, L.Constant(vt, [EXITED] * 32)), lanebits, zero)])
        env0 = LaneEnv(self, b, b.mul(w, L.Constant(I64, 32)), pc)
        mm = read(env0, ops[4], ".b32")
        missing = b.and_(b.and_(mm, alive), b.not_(here))
        fail = fn.append_basic_block(f"s{pc}_unconverged")
        b.cbranch(b.icmp_unsigned("!=", missing, L.Constant(I32, 0)), fail, mid)
        b.position_at_end(fail)
        self._set_status(b, ST_NOT_CONVERGED, pc, b.mul(w, L.Constant(I64, 32)), L.Constant(I64, 0), 4, False)
        b.branch(self.ret_block)
        b.position_at_end(mid)
        gather_done = fn.append_basic_block(f"s{pc}_gathered")

        def gather(b, lane, pcp, li):
            env = LaneEnv(self, b, lane, pc)
            bv = b.and_(read(env, ops[2], ".b32"), L.Constant(I32, 31))
            cv = read(env, ops[3], ".b32")
            seg_mask = b.and_(b.lshr(cv, L.Constant(I32, 8)), L.Constant(I32, 31))
            clamp = b.and_(cv, L.Constant(I32, 31))
            ln = b.trunc(li, I32)
            max_lane = b.or_(b.and_(ln, seg_mask), b.and_(clamp, b.not_(seg_mask)))
            if mode == "up":
                j = b.sub(ln, bv)
                ok = b.icmp_signed(">=", j, max_lane)
            else:
                j = {"down": lambda: b.add(ln, bv), "bfly": lambda: b.xor(ln, bv),
                     "idx": lambda: b.or_(b.and_(ln, seg_mask), b.and_(bv, b.not_(seg_mask)))}[mode]()
                ok = b.icmp_signed("<=", j, max_lane)
            j = b.select(ok, j, ln)
            src = LaneEnv(self, b, b.add(b.mul(w, L.Constant(I64, 32)), b.zext(j, I64)), pc)
            b.store(b.zext(read(src, ops[1], ".b32"), I64), b.gep(self.tmp, [li]))
            b.store(ok, b.gep(self.tmp_ok, [li]))
        self._lane_loop(b, seg, w, gather, gather_done)
        b.position_at_end(gather_done)
        seg2 = Segment(seg.start, seg.end, "shfl_write")

        def scatter(b, lane, pcp, li):
            env = LaneEnv(self, b, lane, pc)
            self._count(b, 1)
            write(env, d, b.trunc(b.load(b.gep(self.tmp, [li])), I32))
            if p is not None:
                write(env, p, b.load(b.gep(self.tmp_ok, [li])))
            b.store(L.Constant(I32, pc + 1), pcp)
        self._lane_loop(b, seg2, w, scatter, after)

    # ------------------------------------------------------------------ memory
    def _set_status(self, b: L.IRBuilder, code: int, pc: int, lane: L.Value, addr: L.Value, nbytes: int,
                    wr: bool) -> None:
        vals = [L.Constant(I64, code), L.Constant(I64, pc), lane, b.load(self.bid), addr,
                L.Constant(I64, nbytes), L.Constant(I64, int(wr))]
        for i, v in enumerate(vals[1:], 1):
            b.store(v, b.gep(self.status, [L.Constant(I64, i)]))
        b.store(vals[0], self.status)  # the code last: the launcher reads the rest once it is set

    def checked_pointer(self, b: L.IRBuilder, space: str, a: L.Value, nbytes: int, wr: bool, pc: int,
                        lane: L.Value) -> L.Value:
        fn = self.fn
        ok_blk = fn.append_basic_block(f"pc{pc}_ok")
        bad_blk = fn.append_basic_block(f"pc{pc}_fault")
        mis_blk = fn.append_basic_block(f"pc{pc}_misaligned")
        aligned = b.icmp_unsigned("==", b.and_(a, L.Constant(I64, nbytes - 1)), L.Constant(I64, 0))
        check = fn.append_basic_block(f"pc{pc}_check")
        b.cbranch(aligned, check, mis_blk)
        b.position_at_end(mis_blk)
        self._set_status(b, ST_MISALIGNED, pc, lane, a, nbytes, wr)
        b.branch(self.ret_block)
        b.position_at_end(check)
        if space == "shared":
            inb = b.icmp_unsigned("<=", b.add(a, L.Constant(I64, nbytes)), self.shared_size)
            inb = b.and_(inb, b.icmp_unsigned("<", a, self.shared_size))
            b.cbranch(inb, ok_blk, bad_blk)
            b.position_at_end(bad_blk)
            self._set_status(b, ST_FAULT, pc, lane, a, nbytes, wr)
            b.branch(self.ret_block)
            b.position_at_end(ok_blk)
            return b.gep(self.shared, [a])
        off = b.sub(a, L.Constant(I64, GLOBAL_BASE))
        inarena = b.icmp_unsigned("<", off, self.arena_size)
        mapped = fn.append_basic_block(f"pc{pc}_mapped")
        b.cbranch(inarena, mapped, bad_blk)
        b.position_at_end(mapped)
        g = b.load(b.gep(self.gmap, [b.lshr(off, L.Constant(I64, 6))]))
        g = b.zext(g, I64)
        valid = b.and_(g, L.Constant(I64, GMAP_READONLY - 1))
        within = b.add(b.and_(off, L.Constant(I64, GRANULE - 1)), L.Constant(I64, nbytes))
        ok = b.icmp_unsigned("<=", within, valid)
        if wr:
            ro = b.icmp_unsigned("!=", b.and_(g, L.Constant(I64, GMAP_READONLY)), L.Constant(I64, 0))
            ro_blk = fn.append_basic_block(f"pc{pc}_readonly")
            ok2 = fn.append_basic_block(f"pc{pc}_ok2")
            b.cbranch(ok, ok2, bad_blk)
            b.position_at_end(ok2)
            b.cbranch(ro, ro_blk, ok_blk)
            b.position_at_end(ro_blk)
            self._set_status(b, ST_READONLY, pc, lane, a, nbytes, wr)
            b.branch(self.ret_block)
        else:
            b.cbranch(ok, ok_blk, bad_blk)
        b.position_at_end(bad_blk)
        self._set_status(b, ST_FAULT, pc, lane, a, nbytes, wr)
        b.branch(self.ret_block)
        b.position_at_end(ok_blk)
        return b.gep(self.arena, [off])

    # ------------------------------------------------------------------ special registers
    def sreg(self, b: L.IRBuilder, name: str, lane: L.Value) -> L.Value:
        bx, by, bz = self.block
        if name.startswith("%ntid."):
            return L.Constant(I32, self.block["xyz".index(name[-1])])
        if name.startswith("%nctaid."):
            return self.grid["xyz".index(name[-1])]
        if name.startswith("%ctaid."):
            return b.load(self.ctaid["xyz".index(name[-1])])
        t = b.trunc(lane, I32)
        if name == "%laneid":
            return b.and_(t, L.Constant(I32, 31))
        if name == "%warpid":
            return b.lshr(t, L.Constant(I32, 5))
        if name == "%tid.x":
            return b.urem(t, L.Constant(I32, bx))
        if name == "%tid.y":
            return b.urem(b.udiv(t, L.Constant(I32, bx)), L.Constant(I32, by))
        return b.udiv(t, L.Constant(I32, bx * by))
