"""What lowering one instruction for a warp needs: its registers, special registers and memory, under a mask.

A `WarpEnv` belongs to one segment of one warp. Values are <32 x T> vectors. Registers a segment writes stay
in SSA values (`SegmentRegs`) and reach the register file at its end, only for the lanes that stood there
and only where live afterwards; a guarded instruction writes under its guard. Memory is touched by the
active lanes only (the segment's lanes and the guard), after the interpreter's checks for all of them, so a
faulting warp stores nothing, as in the interpreter. Consecutive addresses of a full warp are one vector
load or store; others are a masked gather or scatter (a scatter writes lanes in order: the highest lane
wins, as the interpreter's). Atomics go lane by lane in lane order.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from llvmlite import ir as L

from ptxforge.emu.memory import GLOBAL_BASE
from ptxforge.emu.native import access_calls, affine
from ptxforge.emu.native.access import AccessGroup
from ptxforge.emu.native.lower import I1, I8, I32, I64, INT, SREGS, WARP, NotNative, V, bits_of, read
from ptxforge.ptx import ir

if TYPE_CHECKING:
    from ptxforge.emu.native.codegen import BlockGen

IOTA = L.Constant(V(I32), list(range(WARP)))
IOTA64 = L.Constant(V(I64), list(range(WARP)))


class SegmentRegs:
    """The registers a segment has read or written: slot -> vector value, and which it wrote."""

    def __init__(self) -> None:
        self.values: dict[int, L.Value] = {}
        self.dirty: set[int] = set()
        self.groups: dict[int, AccessGroup] = {}  # pc -> its shared-memory access group (access.py)
        # slot -> (its value, that value before a NaN in it was made canonical): see WarpEnv.read_nan_free
        self.raw: dict[int, tuple[L.Value, L.Value]] = {}
        # (id of a shape root (`shape_root`), bytes) -> (the root, whether it is consecutive that many bytes apart)
        self.consecutive: dict[tuple[int, int], tuple[L.Value, L.Value]] = {}
        self.lanes: affine.Tags = {}  # registers taken in that are lane-affine (affine.py): id -> (value, lanes)


class WarpEnv:
    """One instruction's view of the warp (see the module docstring)."""

    def __init__(self, gen: BlockGen, b: L.IRBuilder, w: L.Value, pc: int, mask: L.Value, regs: SegmentRegs):
        self.gen, self.b, self.w, self.pc, self.mask, self.regs = gen, b, w, pc, mask, regs
        gen.current_pc = pc
        self.placed = gen.layout.placed[pc]
        self.guard: L.Value | None = None  # the instruction's guard (<32 x i1>), set by the caller
        self.shapes: dict[Any, Any] = {}  # this instruction's address shape tests (`_memo`)

    def active(self) -> L.Value:
        return self.mask if self.guard is None else self.b.and_(self.mask, self.guard)

    # ------------------------------------------------------------------ registers
    def reg(self, o: Any) -> tuple[int, str]:
        hit = self.gen.layout.lookup(self.placed, o.name)
        if not isinstance(hit, tuple):
            raise NotNative(f"{o.name} is not a plain register")
        return hit[1], self.gen.layout.reg_types[hit[1]]

    def symbol_address(self, name: str) -> int | None:
        hit = self.gen.layout.lookup(self.placed, name)
        if hit is None or isinstance(hit, tuple) or hit.kind not in ("shared", "global"):
            return None
        return int(hit.value)

    def load_reg(self, slot: int) -> L.Value:
        v = self.regs.values.get(slot)
        if v is None:
            k = self.gen.constant(slot, self.pc)
            prm = self.gen.param_register(slot, self.pc)
            if k is not None:
                v = L.Constant(V(self.gen.slot_type[slot]), k)
            elif prm is not None:
                v = self.load_param(prm[0], INT[prm[1]])
            else:
                v = self.gen.load_slot(self.b, self.w, slot)
                st = self.gen.lane_stride(slot, self.pc)
                if st is not None:
                    self.regs.lanes[id(v)] = (v, *st)
            self.regs.values[slot] = v
        return v

    def read_every_lane(self, o: Any, ty: str) -> L.Value:
        """`read(o, ty)` with the lanes not standing here as the register file holds them (a shfl reads other
        lanes' registers; this segment's values of a register it wrote are good for its own lanes only)."""
        if not isinstance(o, ir.Register):
            return read(self, o, ty)
        slot, _ = self.reg(o)
        if slot not in self.regs.dirty:
            return read(self, o, ty)
        mine = self.regs.values[slot]
        self.regs.values[slot] = self.b.select(self.mask, mine, self.gen.load_slot(self.b, self.w, slot))
        try:
            return read(self, o, ty)
        finally:
            self.regs.values[slot] = mine

    def keep_raw(self, o: Any, raw: L.Value) -> None:
        """Register `o` was just written with `raw`'s bits, a NaN in them made canonical: remember `raw`."""
        if isinstance(o, ir.Register):
            slot, _ = self.reg(o)
            v = self.regs.values.get(slot)
            if v is not None and v is not raw and self.guard is None:
                self.regs.raw[slot] = (v, raw)

    def read_nan_free(self, o: Any, ty: str) -> L.Value:
        """`read(o, ty)` for an operation whose result does not depend on which NaN an input holds (its NaN
        results are made canonical): a register written in this segment by one such comes as it was before its
        NaN was made canonical (`keep_raw`), which saves that step on a chain of them (an fma's accumulator)."""
        v = read(self, o, ty)
        if isinstance(o, ir.Register):
            hit = self.regs.raw.get(self.reg(o)[0])
            if hit is not None and hit[0] is v:
                return hit[1]
        return v

    def constant(self, o: Any, ty: str) -> int | None:
        """The bits of operand `o` read as `ty` (an integer type) where the same in every lane and known when
        compiling: an immediate, or a register `BlockGen.constant` knows the value of here; else None."""
        if isinstance(o, ir.Immediate):
            return o.value & ((1 << bits_of(ty)) - 1) if isinstance(o.value, int) else None
        if not isinstance(o, ir.Register):
            return None
        slot, _ = self.reg(o)
        # (written in this segment: by its one write, the mov)
        k = self.gen.constants.get(slot) if slot in self.regs.dirty else self.gen.constant(slot, self.pc)
        return None if k is None else k & ((1 << bits_of(ty)) - 1)

    def store_reg(self, slot: int, v: L.Value) -> None:
        if self.guard is not None:
            v = self.b.select(self.guard, v, self.load_reg(slot))
        self.regs.values[slot] = v
        self.regs.dirty.add(slot)

    def sreg(self, name: str) -> L.Value:
        if name not in SREGS:
            raise NotNative(f"special register {name} is not in the native tier yet")
        return self.gen.sreg(self.b, name, self.w)

    def module_intrinsic(self, name: str, ret: L.Type, args: list[L.Type]) -> L.Function:
        return self.gen.intrinsic(name, ret, args)

    # ------------------------------------------------------------------ parameters
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
        x = b.load(b.bitcast(p, t.as_pointer()), align=1)
        return splat(b, x)

    # ------------------------------------------------------------------ memory
    def address(self, space: str, addr: Any, nbytes: int, write: bool) -> L.Value:
        """The active lanes' host addresses (<32 x i64>) of `nbytes` at the operand, checked as the interpreter
        checks them (a bad one stops the launch with its fault; an access of a group (access.py) whose group
        check passed needs no check of its own)."""
        if not isinstance(addr, ir.Address):
            raise NotNative("address operand")
        if addr.base is None:
            raise NotNative("absolute address")
        b = self.b
        sym = self.symbol_address(addr.base.name)
        proven = None
        if sym is not None:
            hit = self.gen.layout.lookup(self.placed, addr.base.name)
            if space != "shared" or isinstance(hit, tuple) or hit is None or hit.kind != "shared":
                raise NotNative("a symbol address outside shared memory")
            a: L.Value = L.Constant(V(I64), sym + addr.offset)
        else:
            wide = self.reg(addr.base)[1] in (".u64", ".b64", ".s64")
            a = read(self, addr.base, ".u64" if wide else ".u32")
            if not wide:
                a = b.zext(a, V(I64))
            group = self.regs.groups.get(self.pc) if space == "shared" else None
            if group is not None:
                proven = self._group_in_bounds(group, a)
            if addr.offset:
                a = b.add(a, L.Constant(V(I64), addr.offset & (2**64 - 1)))
        consecutive = None
        # (the span check's and a scalar access's shape test)
        if space != "shared" and nbytes in access_calls.SPAN_BYTES:
            consecutive = self._consecutive(a, nbytes)
        return self.gen.checked(b, space, a, nbytes, write, self.pc, self.w, self.active(), proven, consecutive)

    def _group_in_bounds(self, group: AccessGroup, base: L.Value) -> L.Value:
        """i1: every lane of the segment has the group's whole range in shared memory, aligned for its widest
        access (computed at the group's first access)."""
        ok = group.values.get("in_bounds")
        if ok is None:
            ok = group.values["in_bounds"] = access_calls.group_ok(self.gen, self.b, base, self.mask, group.align,
                                                                   group.end)
        return ok

    def _memo(self, key: Any, make: Any) -> Any:
        """`make()`, once per instruction, or per access group (the addresses' shape is the base register's and
        stays the same under a constant offset; see access.py)."""
        group = self.regs.groups.get(self.pc)
        memo = group.values if group is not None else self.shapes
        if key not in memo:
            memo[key] = make()
        return memo[key]

    def _consecutive(self, host: L.Value, nbytes: int) -> L.Value:
        """i1: the addresses are consecutive `nbytes` apart: tested once per segment for addresses that differ
        by a value the same in every lane (`shape_root`: the loads and the store of `c[i] = a[i] + b[i]`; the
        test is made where an instruction starts, on the segment's straight line, so it holds at every later
        use in the segment)."""
        root = shape_root(host)
        hit = self.regs.consecutive.get((id(root), nbytes))
        if hit is None:
            hit = self.regs.consecutive[(id(root), nbytes)] = (root, access_calls.consecutive(self.gen, self.b,
                                                                                               root, nbytes))
        return hit[1]

    def _half_shapes(self, host: L.Value, nbytes: int) -> L.Value:
        """`access_calls.half_shapes` of the addresses."""
        return self._memo(("halves", nbytes), lambda: access_calls.half_shapes(self.gen, self.b, host, nbytes))

    def load(self, space: str, addr: Any, t: L.IntType, count: int = 1) -> list[L.Value]:
        """A plain load of `count` consecutive `t`s per active lane (a vector `ld` for several; inactive lanes:
        0), checked as `address` checks it: one scalar check and one vector load where the lanes' addresses are
        known one span (`_span`), else `address` and `load_mem` (a gather per element for several)."""
        nbytes = t.width // 8
        size = nbytes * count

        def vector_way() -> list[L.Value]:
            host = self.address(space, addr, size, False)
            return [self.load_mem(host, t, i * nbytes, count == 1) for i in range(count)]
        span = self._span(space, addr, size, False)
        if span is None:
            return vector_way()
        b = self.b
        fast, slow, done = self._fork(span[0], "ld")
        b.position_at_end(fast)
        whole = b.load(b.inttoptr(span[1], L.VectorType(t, WARP * count).as_pointer()), align=nbytes)
        parts = [whole] if count == 1 else [  # (element i of every lane)
            b.shuffle_vector(whole, whole, L.Constant(V(I32), [j * count + i for j in range(WARP)]))
            for i in range(count)]
        b.branch(done)
        b.position_at_end(slow)
        others = self._vector_way(addr, vector_way)
        slow_end = b.block
        b.branch(done)
        b.position_at_end(done)
        out = []
        for v, v2 in zip(parts, others, strict=True):
            phi = b.phi(V(t))
            phi.add_incoming(v, fast)
            phi.add_incoming(v2, slow_end)
            out.append(phi)
        return out

    def store(self, space: str, addr: Any, vals: list[L.Value]) -> None:
        """A plain store of `vals` (one vector each: consecutive elements per lane) by the active lanes: `load`'s
        two ways."""
        count = len(vals)
        t: Any = vals[0].type.element
        nbytes = t.width // 8
        size = nbytes * count

        def vector_way() -> None:
            host = self.address(space, addr, size, True)
            for i, v in enumerate(vals):
                self.store_mem(host, v, i * nbytes, count == 1)
        span = self._span(space, addr, size, True)
        if span is None:
            vector_way()
            return
        b = self.b
        fast, slow, done = self._fork(span[0], "st")
        b.position_at_end(fast)
        self.gen.count_write(b)
        b.store(_interleaved(b, vals), b.inttoptr(span[1], L.VectorType(t, WARP * count).as_pointer()),
                align=nbytes)
        b.branch(done)
        b.position_at_end(slow)
        self._vector_way(addr, vector_way)
        b.branch(done)
        b.position_at_end(done)

    def _span(self, space: str, addr: Any, nbytes: int, write: bool) -> tuple[L.Value, L.Value] | None:
        """(i1: the access is good as one span of the warp's lanes, lane 0's host address (i64; where good)) for a
        global access whose addresses are lane 0's + nbytes * lane (affine.py: lane-affine, `nbytes` apart), where
        every lane is active and the span's bytes are good (`_span_good`); None for any other access."""
        if space != "global" or nbytes not in access_calls.SPAN_BYTES or not isinstance(addr, ir.Address) \
                or not isinstance(addr.base, ir.Register) or self.symbol_address(addr.base.name) is not None \
                or self.reg(addr.base)[1] not in (".u64", ".b64", ".s64"):
            return None
        a = read(self, addr.base, ".u64")  # (read here: the vector way's blocks find it in the segment's values)
        if affine.stride(a, self.regs.lanes) != nbytes:
            return None
        b = self.b
        self.gen.spans += 1
        # (a warp with a lane inactive goes the vector way at once: a diverged warp may store lane by lane)
        pre = b.block
        attempt, join = (self.gen.fn.append_basic_block(f"pc{self.pc}_span_{x}") for x in ("try", "tried"))
        b.cbranch(self.gen.all_of(b, self.active()), attempt, join)
        b.position_at_end(attempt)
        first, cond = affine.base(b, a, self.regs.lanes)
        off = b.sub(b.add(first, L.Constant(I64, addr.offset & (2**64 - 1))), L.Constant(I64, GLOBAL_BASE))
        ok = self._span_good(off, L.Constant(I1, 1) if cond is None else cond, nbytes, write)
        host = b.add(off, self.gen.arena_base)
        tried = b.block
        b.branch(join)
        b.position_at_end(join)
        good, at = b.phi(I1), b.phi(I64)
        good.add_incoming(L.Constant(I1, 0), pre)
        good.add_incoming(ok, tried)
        at.add_incoming(L.Constant(I64, 0), pre)
        at.add_incoming(host, tried)
        return good, at

    def _span_good(self, off: L.Value, go: L.Value, nbytes: int, write: bool) -> L.Value:
        """i1: `go` and the span of 32 * `nbytes` bytes at arena offset `off` is good. Each access keeps a window of
        offsets known good for its span: the allocation its last checked span lay in (the allocations do not
        change during a launch). An offset inside it, aligned, is good at once; one outside it opens the window
        of its own allocation (`access_calls.alloc_window`, a bisection of the allocation table), or, where the
        span lies in none alone (across two adjacent ones), is checked on the validity map for itself
        (`access_calls.span_fits`). So warps marching through an array, or jumping through it (a grid-stride
        loop), check it once a call."""
        gen, b = self.gen, self.b
        lo, count = self._window()
        span = WARP * nbytes
        aligned = b.icmp_unsigned("==", b.and_(off, L.Constant(I64, nbytes - 1)), L.Constant(I64, 0))
        inside = b.and_(b.icmp_unsigned("<", b.sub(off, b.load(lo)), b.load(count)), aligned)
        pre = b.block
        fn = gen.fn
        maybe, check, opened, alone, done = (fn.append_basic_block(f"pc{self.pc}_window_{x}")
                                             for x in ("maybe", "check", "open", "alone", "done"))
        b.cbranch(b.and_(go, inside), done, maybe).set_weights([1 << 10, 1])
        b.position_at_end(maybe)  # (not a converged span: no look at the map)
        b.cbranch(go, check, done)
        b.position_at_end(check)
        new_lo, new_count = access_calls.alloc_window(gen, b, off, span, write)
        b.cbranch(b.and_(aligned, b.icmp_unsigned("!=", new_count, L.Constant(I64, 0))), opened, alone)
        b.position_at_end(opened)
        b.store(new_lo, lo)
        b.store(new_count, count)
        b.branch(done)
        b.position_at_end(alone)
        fits = access_calls.span_fits(gen, b, off, nbytes, write)
        b.branch(done)
        b.position_at_end(done)
        good = b.phi(I1)
        good.add_incoming(L.Constant(I1, 1), pre)
        good.add_incoming(L.Constant(I1, 0), maybe)
        good.add_incoming(L.Constant(I1, 1), opened)
        good.add_incoming(fits, alone)
        return good

    def _window(self) -> tuple[L.Value, L.Value]:
        """This access's window (`_span_good`): its first offset and how many offsets from there (i64 allocas,
        empty at the start of a call; one pair per instruction, its span way's and vector way's)."""
        hit = self.gen.windows.get(self.pc)
        if hit is not None:
            return hit
        b = L.IRBuilder()
        b.position_before(self.gen.fn.entry_basic_block.terminator)
        lo, count = b.alloca(I64, name=f"window{self.pc}"), b.alloca(I64, name=f"window{self.pc}_count")
        b.store(L.Constant(I64, 0), lo)
        b.store(L.Constant(I64, 0), count)
        self.gen.windows[self.pc] = lo, count
        return lo, count

    def _fork(self, ok: L.Value, what: str) -> tuple[L.Block, L.Block, L.Block]:
        """Branch on `ok` to the span way (weighted likely) or the vector way: (span, vector, join) blocks."""
        fn = self.gen.fn
        span, vector, done = (fn.append_basic_block(f"pc{self.pc}_{what}_{x}") for x in ("span", "vector", "done"))
        br = self.b.cbranch(ok, span, vector)
        br.set_weights([1 << 10, 1])
        return span, vector, done

    def _vector_way(self, addr: ir.Address, make: Any) -> Any:
        """`make()` on the side path of a span access (`_span`), from the address register's vector made again
        there (the span way needs none of it). The shape tests it makes there are not the segment's (they would
        not dominate its later accesses)."""
        regs = self.regs
        slot = self.reg(addr.base)[0]
        saved, value = dict(regs.consecutive), regs.values[slot]
        regs.values[slot] = affine.remake(self.b, value, regs.lanes)
        try:
            return make()
        finally:
            regs.consecutive, regs.values[slot] = saved, value

    def load_mem(self, host: L.Value, t: L.IntType, offset: int, contiguous: bool) -> L.Value:
        b = self.b
        nbytes = t.width // 8
        if offset:
            host = b.add(host, L.Constant(V(I64), offset))
        gather = self.gen.intrinsic(f"llvm.masked.gather.v32i{t.width}.v32p0", V(t),
                                    [V(t.as_pointer()), I32, V(I1), V(t)])
        if not contiguous:
            return b.call(gather, [b.inttoptr(host, V(t.as_pointer())), L.Constant(I32, nbytes), self.active(),
                                   L.Constant(V(t), 0)])
        # (a group's shape is computed at its first access, where every later one can use it)
        rows = self.gen.rows_in_warp  # (a block narrower than a warp: half-warps on rows of their own)
        shape = self._half_shapes(host, nbytes) if rows and self.pc in self.regs.groups else None
        return access_calls.load(self.gen, b, host, t, self.active(), self._consecutive(host, nbytes), shape, rows)

    def store_mem(self, host: L.Value, v: L.Value, offset: int, contiguous: bool) -> None:
        b = self.b
        self.gen.count_write(b)
        t = v.type.element
        nbytes = t.width // 8
        if offset:
            host = b.add(host, L.Constant(V(I64), offset))
        scatter = self.gen.intrinsic(f"llvm.masked.scatter.v32i{t.width}.v32p0", L.VoidType(),
                                     [V(t), V(t.as_pointer()), I32, V(I1)])
        if not contiguous:
            b.call(scatter, [v, b.inttoptr(host, V(t.as_pointer())), L.Constant(I32, nbytes), self.active()])
            return
        access_calls.store(self.gen, b, host, v, self.active(), self._consecutive(host, nbytes))

    def atomic(self, host: L.Value, rmw: str, data: list[L.Value], shared: bool, t: L.IntType | None = None
               ) -> L.Value:
        """An atomic read-modify-write (`rmw`: an LLVM atomicrmw operation or "cas"; "load": an atomic load of
        type `t`, which no loop hoists and which sees other workers' stores) of each active lane, in lane
        order; the old values (inactive lanes: 0). On shared memory it is a plain load and store: a block's
        shared memory is only ever touched by the one worker thread running the block."""
        b = self.b
        if rmw != "load":
            self.gen.count_write(b)
            t = data[0].type.element
        assert t is not None
        fn = self.gen.fn
        bits = b.bitcast(self.active(), I32)
        pre = b.block
        head, body, do, step, done = (fn.append_basic_block(f"pc{self.pc}_atom_{x}")
                                      for x in ("head", "body", "do", "step", "done"))
        b.branch(head)
        b.position_at_end(head)
        li = b.phi(I32)
        acc = b.phi(V(t))
        li.add_incoming(L.Constant(I32, 0), pre)
        acc.add_incoming(L.Constant(V(t), 0), pre)
        b.cbranch(b.icmp_unsigned("<", li, L.Constant(I32, WARP)), body, done)
        b.position_at_end(body)
        on = b.trunc(b.lshr(bits, li), I1)
        b.cbranch(on, do, step)
        b.position_at_end(do)
        ptr = b.inttoptr(b.extract_element(host, li), t.as_pointer())
        xs = [b.extract_element(d, li) for d in data]
        if rmw == "load":
            old = b.load_atomic(ptr, "monotonic", t.width // 8)
        elif shared:
            old = b.load(ptr, align=t.width // 8)
            b.store(_plain_rmw(b, rmw, old, xs), ptr, align=t.width // 8)
        elif rmw == "cas":
            old = b.extract_value(b.cmpxchg(ptr, xs[0], xs[1], "seq_cst", "seq_cst"), 0)
        else:
            old = b.atomic_rmw(rmw, ptr, xs[0], "seq_cst")
        acc2 = b.insert_element(acc, old, li)
        b.branch(step)
        b.position_at_end(step)
        acc3 = b.phi(V(t))
        acc3.add_incoming(acc, body)
        acc3.add_incoming(acc2, do)
        li.add_incoming(b.add(li, L.Constant(I32, 1)), step)
        acc.add_incoming(acc3, step)
        b.branch(head)
        b.position_at_end(done)
        return acc


def _interleaved(b: L.IRBuilder, vals: list[L.Value]) -> L.Value:
    """One vector of `vals`' lanes in memory order: lane 0's elements, then lane 1's, ... (1, 2 or 4 of them)."""
    n = len(vals)
    if n == 1:
        return vals[0]
    if n == 4:  # (two pairs side by side first: a shuffle takes two vectors)
        vals = [b.shuffle_vector(vals[0], vals[1], L.Constant(L.VectorType(I32, 2 * WARP), list(range(2 * WARP)))),
                b.shuffle_vector(vals[2], vals[3], L.Constant(L.VectorType(I32, 2 * WARP), list(range(2 * WARP))))]
    if len(vals) != 2:
        raise NotNative(f"a store of {n} elements per lane")
    return b.shuffle_vector(vals[0], vals[1], L.Constant(L.VectorType(I32, n * WARP),
                                                         [(j % n) * WARP + j // n for j in range(n * WARP)]))


def _plain_rmw(b: L.IRBuilder, rmw: str, old: L.Value, xs: list[L.Value]) -> L.Value:
    """The value an atomicrmw `rmw` (or "cas") of `xs` stores over `old`."""
    x = xs[0]
    if rmw == "cas":
        return b.select(b.icmp_unsigned("==", old, x), xs[1], old)
    if rmw == "xchg":
        return x
    if rmw in ("add", "and", "or", "xor"):
        return {"add": b.add, "and": b.and_, "or": b.or_, "xor": b.xor}[rmw](old, x)
    cmp = b.icmp_unsigned if rmw.startswith("u") else b.icmp_signed
    return b.select(cmp("<" if rmw.endswith("min") else ">", x, old), x, old)


_ZEROS: dict[str, L.Constant] = {}  # a warp vector of zeros per element type (its text formatted once)
_LANE0 = L.Constant(I32, 0)
_SPLAT_MASK = L.Constant(V(I32), None)  # (zeroinitializer: lane 0 to every lane)


def splat(b: L.IRBuilder, x: L.Value) -> L.Value:
    """A scalar as a warp's vector."""
    zero = _ZEROS.get(str(x.type))
    if zero is None:
        zero = _ZEROS[str(x.type)] = L.Constant(V(x.type), None)
    return b.shuffle_vector(b.insert_element(zero, x, _LANE0), zero, _SPLAT_MASK)


def shape_root(v: L.Value) -> L.Value:
    """`v` less the terms the same in every lane it adds or subtracts (`affine.uniform`): lane i of `v` less lane 0
    is lane i of the root less lane 0, modulo 2**64, so the two have the same shape (consecutive or not)."""
    while isinstance(v, L.Instruction) and v.opname in ("add", "sub") and len(v.operands) == 2:
        x, y = v.operands
        if affine.uniform(y):
            v = x
        elif v.opname == "add" and affine.uniform(x):
            v = y
        else:
            break
    return v


def thread_index(b: L.IRBuilder, name: str, w: L.Value, block: tuple[int, int, int]) -> L.Value:
    """%tid.x, %tid.y or %tid.z (`name`) of warp `w`'s lanes in a block of shape `block`."""
    bx, by, _ = block
    first = b.mul(b.trunc(w, I32), L.Constant(I32, WARP))  # the warp's first thread
    if bx % WARP == 0:  # (a warp lies in one row: lane 0's x + lane, one y and z; affine.py sees them so)
        if name == "%tid.x":
            return b.add(splat(b, b.urem(first, L.Constant(I32, bx))), IOTA)
        if name == "%tid.y":
            return splat(b, b.urem(b.udiv(first, L.Constant(I32, bx)), L.Constant(I32, by)))
        return splat(b, b.udiv(first, L.Constant(I32, bx * by)))
    t = b.add(splat(b, first), IOTA)
    if name == "%tid.x":
        return b.urem(t, L.Constant(V(I32), bx))
    if name == "%tid.y":
        return b.urem(b.udiv(t, L.Constant(V(I32), bx)), L.Constant(V(I32), by))
    return b.udiv(t, L.Constant(V(I32), bx * by))


def storage(rty: str) -> L.IntType:
    """How a register of PTX type `rty` is kept in the register file (a predicate as a byte)."""
    bits = bits_of(rty)
    return I8 if bits == 1 else INT[bits]
