"""wgmma on the native tier, bit for bit as the interpreter's `ops_wgmma` computes it.

Forms: wgmma.mma_async with .f16/.bf16/.tf32/.e4m3/.e5m2 inputs (A from a shared-memory descriptor or from
registers, B from a descriptor, either transposed where the form allows) into .f32 or .f16 accumulators;
wgmma.fence / commit_group / wait_group do nothing (each wgmma completes at issue, as in the interpreter).
and .s32 with .s8/.u8 inputs (any mix, {.satfinite}). The form is checked by the interpreter's own `WgmmaForm`.

Each warp computes its own 16 rows of the warpgroup's 64 x N result: a D element depends only on its row of
A, its column of B and its C, so the warps of a warpgroup need not meet (descriptors and scale-d, which the
manual requires to be the same across the warpgroup, are read from the warp's lane 0; the interpreter reads
the warpgroup's first thread). One helper function per form does the work: it decodes the operands from the
16-byte chunks of the canonical layouts (`ops_wgmma.canonical_addresses`, every swizzle mode), then sums each
element as `semantics.mma.dot_tensor_core` does: products exact, aligned to the largest exponent (of the
products and C), truncated to 2**(largest - bits), summed exactly, the sum rounded toward zero to .f32 or to
nearest to .f16; an element with a non-finite input takes the IEEE sum (an infinity or NaN whatever the
order). FP8 products and their truncated terms are exact in f32 (8-bit products, sums under 2**20), so FP8
forms compute in float32 vectors and the others in float64. Integer forms are exact in i32 vectors: the 32
products of 8-bit values sum to under 2**21, then C is added wrapping, or saturating (llvm.sadd.sat) with
.satfinite, as `semantics.mma.mma_codes` clamps the exact sum. A chunk outside shared memory stops the launch
with a fault naming its first byte out of bounds.
"""

from __future__ import annotations

from types import SimpleNamespace
from typing import TYPE_CHECKING, Any

import numpy as np
from llvmlite import ir as L

from ptxforge.emu.errors import UnsupportedInstruction
from ptxforge.emu.native import lower_round as R
from ptxforge.emu.native.lower import F32, F64, I1, I8, I16, I32, I64, INT, WARP, NotNative, V, counted_loop, read
from ptxforge.emu.native.lower_half import decode as decode_half
from ptxforge.emu.native.warp import IOTA, splat
from ptxforge.emu.ops_wgmma import WgmmaForm
from ptxforge.emu.semantics import formats
from ptxforge.emu.semantics import mma as S

if TYPE_CHECKING:
    from ptxforge.emu.native.codegen import BlockGen
    from ptxforge.emu.native.warp import WarpEnv
    from ptxforge.ptx import ir

ROWS = 16  # of D (and A) per warp
FP8 = (".e4m3", ".e5m2")
ZERO_EXP, NO_TERM, BAD_EXP = -16000, -10000, 128  # (semantics.mma's; BAD_EXP: an exponent this large: not finite)


class _FormCtx:
    """What `WgmmaForm` asks of the interpreter's context: the instruction, and errors (NotNative here)."""

    def __init__(self, ins: ir.Instruction):
        self.ins = ins

    def error(self, msg: str) -> NotNative:
        return NotNative(f"{self.ins.mnemonic}: {msg}")


def form_of(ins: ir.Instruction) -> WgmmaForm:
    """The checked static form of a wgmma.mma_async (NotNative where the interpreter would refuse it)."""
    try:
        fm = WgmmaForm(_FormCtx(ins))
    except UnsupportedInstruction as e:
        raise NotNative(str(e)) from None
    return fm


def sync_op(ins: ir.Instruction, env: WarpEnv) -> None:
    """wgmma.fence / commit_group / wait_group: nothing to wait for (every wgmma completed at issue)."""
    if not ins.has("fence") and not ins.has("commit_group") and not ins.has("wait_group"):
        raise NotNative(f"{ins.mnemonic} is not in the native tier yet")


def mma_async(ins: ir.Instruction, env: WarpEnv) -> None:
    """wgmma.mma_async for one warp: its 16 rows of D (see the module docstring), read from and written to the
    register file by the form's helper (the active lanes' registers only)."""
    fm = form_of(ins)
    gen = env.gen
    if gen.threads % 128:
        raise NotNative(f"{ins.mnemonic} needs whole warpgroups (the block has {gen.threads} threads)")
    b = env.b
    ops = ins.operands
    regs = list(ops[0].elements) + (list(ops[1].elements) if fm.a_in_regs else [])  # type: ignore[union-attr]
    offsets = []
    for e in regs:
        slot, rty = env.reg(e)
        if gen.slot_type[slot].width != 32:
            raise NotNative(f"{ins.mnemonic}: {e.name} is not a 32-bit register")
        offsets.append(gen.slot_off[slot])
    zero = L.Constant(I32, 0)
    adesc = L.Constant(I64, 0) if fm.a_in_regs else b.extract_element(read(env, ops[1], ".b64"), zero)
    bdesc = b.extract_element(read(env, ops[2], ".b64"), zero)
    scale_d = b.extract_element(read(env, ops[3], ".pred"), zero)
    table = L.GlobalVariable(gen.module, L.ArrayType(I64, len(offsets)), name=f"wgmma_regs_pc{env.pc}")
    table.global_constant = True
    table.linkage = "internal"
    table.initializer = L.Constant(L.ArrayType(I64, len(offsets)), offsets)
    warp_regs = b.gep(gen.regfile, [b.mul(env.w, L.Constant(I64, gen.warp_bytes))], inbounds=True)
    fn = _helper(gen, fm)
    bad = b.call(fn, [gen.shared, gen.shared_size, adesc, bdesc, b.and_(env.w, L.Constant(I64, 3)), scale_d,
                      warp_regs, b.bitcast(table, I64.as_pointer()), b.bitcast(env.active(), I32)])
    fault = b.icmp_signed(">=", bad, L.Constant(I64, 0))  # (checked() stops the launch, naming lane 0)
    lane0 = b.icmp_unsigned("==", IOTA, L.Constant(V(I32), 0))
    gen.checked(b, "shared", b.select(fault, splat(b, bad), L.Constant(V(I64), 0)), fm.esize, False, env.pc,
                env.w, b.and_(lane0, splat(b, fault)))


# ---------------------------------------------------------------------------------------------- the helper
def _helper(gen: BlockGen, fm: WgmmaForm) -> L.Function:
    """The module's function for this form (built once)."""
    key = (fm.n, fm.dt, fm.at, fm.bt, fm.neg_a, fm.neg_b, fm.tnsp_a, fm.tnsp_b, fm.a_in_regs, fm.satfinite)
    cache = gen.__dict__.setdefault("_wgmma_helpers", {})
    f = cache.get(key)
    if f is None:
        f = cache[key] = _HelperBuilder(gen, fm, f"wgmma_{len(cache)}").fn
    return f


def _c(t: L.Type, v: Any) -> L.Constant:
    return L.Constant(t, v)


def d_offset(r: int, n: int, f16: bool) -> int:
    """Where D element (row r of the warp's 16, column n) sits in the register buffer, in elements (i32 units
    for .f32, i16 units for .f16): register i of lane l (`semantics.mma.wgmma_d_coords`)."""
    i = (n >> 3) * 4 + ((r >> 3) & 1) * 2 + (n & 1)
    lane = (r & 7) * 4 + ((n >> 1) & 3)
    return ((i >> 1) * WARP + lane) * 2 + (i & 1) if f16 else i * WARP + lane


class _HelperBuilder:
    """i64 fn(i8* shared, i64 shared_size, i64 adesc, i64 bdesc, i64 wq, i1 scale_d, i8* regs, i64* offsets,
    i32 mask): D (16 rows of warp wq of the warpgroup) from and into the warp's registers (`regs`: its register
    file; `offsets`: the byte offsets of D's registers, then A's) for the lanes of `mask`; returns -1, or the
    first shared address out of bounds (then no register is written)."""

    def __init__(self, gen: BlockGen, fm: WgmmaForm, name: str):
        self.gen, self.fm = gen, fm
        self.k, self.n = fm.k, fm.n
        self.np = -(-fm.n // WARP) * WARP  # columns padded to whole vectors
        self.fp8 = fm.at in FP8
        self.integer = fm.integer
        self.ft = I32 if self.integer else F32 if self.fp8 else F64
        self.bits = S.FP8_WGMMA_BITS if self.fp8 else S.TC_BITS
        self.f16_out = fm.dt == ".f16"
        ty = L.FunctionType(I64, [I8.as_pointer(), I64, I64, I64, I64, I1, I8.as_pointer(), I64.as_pointer(), I32])
        fn = self.fn = L.Function(gen.module, ty, name)
        fn.linkage = "internal"
        fn.attributes.add("noinline")
        self.shared, self.size, adesc, bdesc, self.wq, self.scale_d, self.regs, self.offsets, mask = fn.args
        entry = fn.append_basic_block("entry")
        self.fail = fn.append_basic_block("fail")
        b = self.b = L.IRBuilder(entry)
        k, np_ = self.k, self.np
        self.nd = fm.n // 2 * fm.d_bits // 32
        self.d = self._alloca(I32, self.nd * WARP)
        self._copy(0, self.nd, self.d, None)
        if fm.a_in_regs:
            self.a = self._alloca(I32, 4 * WARP)
            self._copy(self.nd, 4, self.a, None)
        self.av, self.bv = self._alloca(self.ft, ROWS * k), self._alloca(self.ft, k * np_)
        if not self.integer:  # (the exponents of A's and B's elements)
            self.ae, self.be = self._alloca(I32, ROWS * k), self._alloca(I32, k * np_)
        self.bad_at = b.alloca(I64)
        b.store(_c(I64, -1), self.bad_at)
        # (padding columns: B zero, its exponent that of zero)
        self._fill(self.bv, k * np_, L.Constant(V(self.ft), 0 if self.integer else 0.0))
        if not self.integer:
            self._fill(self.be, k * np_, L.Constant(V(I32), ZERO_EXP))
        if fm.a_in_regs:
            self._a_from_registers()
        else:
            self._from_shared(adesc, "a")
        self._from_shared(bdesc, "b")
        if not self.integer:
            self.colbad = self._alloca(I8, np_)
            self._column_flags()
        self._compute()
        self._copy(0, self.nd, self.d, b.bitcast(mask, V(I1)))
        b.ret(_c(I64, -1))
        b.position_at_end(self.fail)
        b.ret(b.load(self.bad_at))

    # ------------------------------------------------------------------ storage
    def _alloca(self, t: L.Type, n: int) -> L.Value:
        b = self.b
        here = b.block
        b.position_at_start(self.fn.entry_basic_block)
        arr = b.alloca(L.ArrayType(t, n))
        arr.align = 64
        b.position_at_end(here)
        return b.bitcast(arr, t.as_pointer())

    def _copy(self, first: int, count: int, buf: L.Value, mask: L.Value | None) -> None:
        """Registers first.. first+count-1 (of `offsets`) into `buf` ([count][32] i32), or with `mask` from `buf`
        back into the registers' lanes it selects."""
        b = self.b

        def body(j: L.Value) -> None:
            off = b.load(b.gep(self.offsets, [b.add(j, _c(I64, first))]))
            reg = b.bitcast(b.gep(self.regs, [off]), V(I32).as_pointer())
            mine = self._vptr(buf, b.mul(j, _c(I64, WARP)))
            if mask is None:
                b.store(b.load(reg, align=4), mine, align=4)
            else:
                b.store(b.select(mask, b.load(mine, align=4), b.load(reg, align=4)), reg, align=4)
        counted_loop(b, self.fn, count, body, "copy")

    def _vptr(self, base: L.Value, idx: L.Value) -> L.Value:
        """A <32 x T>* at element `idx` of array `base` (T*)."""
        b = self.b
        return b.bitcast(b.gep(base, [idx]), V(base.type.pointee).as_pointer())

    def _fill(self, base: L.Value, count: int, v: L.Value) -> None:
        self_b = self.b

        def body(i: L.Value) -> None:
            self_b.store(v, self._vptr(base, self_b.mul(i, _c(I64, WARP))), align=4)
        counted_loop(self_b, self.fn, count // WARP, body, "fill")

    # ------------------------------------------------------------------ decoding
    def _decode(self, codes: L.Value, ty: str, neg: bool) -> tuple[L.Value, L.Value | None]:
        """<32 x iE> element codes of type `ty` -> (values <32 x ft>, exponents <32 x i32>; integers: None)."""
        b = self.b
        if ty in (".s8", ".u8"):  # (no imm-scale: never negated)
            return (b.sext if ty == ".s8" else b.zext)(codes, V(I32)), None
        if ty in FP8:
            table = S.element_values(np.arange(256), ty).astype(np.float32).view(np.uint32)
            env = SimpleNamespace(gen=self.gen, b=b, module_intrinsic=self.gen.intrinsic)
            v = b.bitcast(R.table_lookup(env, f"wgmma{ty}", table, codes), V(F32))  # type: ignore[arg-type]
        elif ty == ".tf32":
            v = b.fpext(b.bitcast(b.and_(codes, R.c(I32, 0xFFFFE000)), V(F32)), V(F64))
        else:
            v = decode_half(b, codes, formats.F16 if ty == ".f16" else formats.BF16)
        if neg:
            v = b.fneg(v)
        return v, self._exponent(v)

    def _exponent(self, v: L.Value) -> L.Value:
        """floor(log2|v|) at least -126 (as semantics.mma._exponent16); zero: ZERO_EXP; not finite: >= 128."""
        b = self.b
        wide = v.type.element == F64
        it = V(I64 if wide else I32)
        bits = b.bitcast(v, it)
        e = b.and_(b.lshr(bits, R.c(it.element, 52 if wide else 23)), R.c(it.element, 0x7FF if wide else 0xFF))
        e = b.sub(e, R.c(it.element, 1023 if wide else 127))
        if wide:
            e = b.trunc(e, V(I32))
        e = b.select(b.icmp_signed("<", e, R.c(I32, -126)), R.c(I32, -126), e)
        zero = b.fcmp_ordered("==", v, L.Constant(v.type, 0.0))
        return b.select(zero, R.c(I32, ZERO_EXP), e)

    def _a_from_registers(self) -> None:
        """A's 16 x K from the warp's 4 registers (the mma.m16n8kK A fragment, `semantics.mma.wgmma_a_coords`)."""
        fm, b = self.fm, self.b
        rows, cols = S.wgmma_a_coords(fm.at)
        ebits = 8 * fm.esize
        per = 32 // ebits
        for j in range(4):
            x = b.load(self._vptr(self.a, _c(I64, j * WARP)), align=4)
            for h in range(per):
                slot = j * per + h
                code = b.trunc(b.lshr(x, R.c(I32, ebits * h)), V(INT[ebits])) if ebits < 32 else x
                v, e = self._decode(code, fm.at, fm.neg_a)
                off = L.Constant(V(I64), [int(t) for t in rows[:WARP, slot] * self.k + cols[:WARP, slot]])
                self._scatter(self.av, off, v)
                if e is not None:
                    self._scatter(self.ae, off, e)

    def _scatter(self, base: L.Value, off: L.Value, v: L.Value, mask: L.Value | None = None) -> None:
        b = self.b
        t = v.type.element
        ptrs = b.inttoptr(b.add(splat(b, b.ptrtoint(base, I64)), b.mul(off, R.c(I64, _bytes(t)))),
                          V(t.as_pointer()))
        sc = self.gen.intrinsic(f"llvm.masked.scatter.v32{_vname(t)}.v32p0", L.VoidType(),
                                [V(t), V(t.as_pointer()), I32, V(I1)])
        b.call(sc, [v, ptrs, L.Constant(I32, _bytes(t)), mask if mask is not None else R.c(I1, 1)])

    def _gather(self, base: L.Value, off: L.Value, t: L.Type, mask: L.Value) -> L.Value:
        b = self.b
        ptrs = b.inttoptr(b.add(splat(b, b.ptrtoint(base, I64)), b.mul(off, R.c(I64, _bytes(t)))),
                          V(t.as_pointer()))
        g = self.gen.intrinsic(f"llvm.masked.gather.v32{_vname(t)}.v32p0", V(t),
                               [V(t.as_pointer()), I32, V(I1), V(t)])
        return b.call(g, [ptrs, L.Constant(I32, _bytes(t)), mask, L.Constant(V(t), 0 if t != F64 else 0.0)])

    def _from_shared(self, desc: L.Value, which: str) -> None:
        """An operand from shared memory: A (the warp's 16 rows of 64) or B (all N columns), 32 elements at a
        time, each 32 made of whole 16-byte chunks of the canonical layout."""
        fm, b = self.fm, self.b
        k, esize = self.k, fm.esize
        mn_major = fm.tnsp_a if which == "a" else fm.tnsp_b
        ty = fm.at if which == "a" else fm.bt
        neg = fm.neg_a if which == "a" else fm.neg_b
        mn = ROWS if which == "a" else fm.n
        mn0 = b.mul(self.wq, _c(I64, ROWS)) if which == "a" else _c(I64, 0)
        # the grid of element positions (strided, contiguous) of the canonical layout
        s_len, c_len = (k, mn) if mn_major else (mn, k)
        per = 16 // esize
        start = b.shl(b.and_(desc, _c(I64, 0x3FFF)), _c(I64, 4))
        lbo = b.shl(b.and_(b.lshr(desc, _c(I64, 16)), _c(I64, 0x3FFF)), _c(I64, 4))
        sbo = b.shl(b.and_(b.lshr(desc, _c(I64, 32)), _c(I64, 0x3FFF)), _c(I64, 4))
        mode = b.and_(b.lshr(desc, _c(I64, 62)), _c(I64, 3))
        # log2 of the swizzle width (mode 1: 128, 2: 64, 3: 32 bytes; 0: no swizzle, 5 as a placeholder)
        lw = b.select(b.icmp_unsigned("==", mode, _c(I64, 1)), _c(I64, 7),
                      b.select(b.icmp_unsigned("==", mode, _c(I64, 2)), _c(I64, 6), _c(I64, 5)))
        noswz = b.icmp_unsigned("==", mode, _c(I64, 0))
        group, chunk_off = (lbo, sbo) if mn_major else (sbo, lbo)
        et = INT[8 * esize]
        vals = self.av if which == "a" else self.bv
        row_len = k if which == "a" else self.np

        def address(strided: L.Value, contig: L.Value) -> L.Value:
            byte = b.mul(contig, _c(I64, esize))
            s8, s7 = b.lshr(strided, _c(I64, 3)), b.and_(strided, _c(I64, 7))
            inner = b.add(b.shl(s7, _c(I64, 4)), b.and_(byte, _c(I64, 15)))
            plain = b.add(b.add(start, b.mul(s8, group)), b.add(b.mul(b.lshr(byte, _c(I64, 4)), chunk_off), inner))
            width = b.shl(_c(I64, 1), lw)
            inner = b.add(b.shl(s7, lw), b.and_(byte, b.sub(width, _c(I64, 1))))
            swz = b.add(b.add(start, b.mul(s8, sbo)), b.add(b.mul(b.lshr(byte, lw), lbo), inner))
            msk = b.sub(b.lshr(width, _c(I64, 4)), _c(I64, 1))
            swz = b.xor(swz, b.shl(b.and_(b.lshr(swz, _c(I64, 7)), msk), _c(I64, 4)))
            return b.select(noswz, plain, swz)

        def batch(t: L.Value) -> None:
            t0 = b.mul(t, _c(I64, WARP))
            parts = []
            for q in range(WARP // per):
                tq = b.add(t0, _c(I64, q * per))
                sl, cl = b.udiv(tq, _c(I64, c_len)), b.urem(tq, _c(I64, c_len))
                if mn_major:
                    strided, contig = sl, b.add(cl, mn0)
                else:
                    strided, contig = b.add(sl, mn0), cl
                addr = address(strided, contig)
                self._check(addr, esize)
                p = b.bitcast(b.gep(self.shared, [addr]), L.VectorType(et, per).as_pointer())
                parts.append(b.load(p, align=1))
            codes = _concat(b, parts)
            v, e = self._decode(codes, ty, neg)
            tv = b.add(splat(b, t0), b.zext(IOTA, V(I64)))
            sl, cl = b.udiv(tv, R.c(I64, c_len)), b.urem(tv, R.c(I64, c_len))
            kk, mm = (sl, cl) if mn_major else (cl, sl)
            off = b.add(b.mul(mm, R.c(I64, row_len)), kk) if which == "a" else b.add(b.mul(kk, R.c(I64, row_len)), mm)
            self._scatter(vals, off, v)
            if e is not None:
                self._scatter(self.ae if which == "a" else self.be, off, e)
        counted_loop(b, self.fn, s_len * c_len // WARP, batch, f"load_{which}")

    def _check(self, addr: L.Value, esize: int) -> None:
        """The 16 bytes at `addr` lie in shared memory, else the helper returns its first byte out of bounds
        (element by element, as the interpreter reads them)."""
        b = self.b
        ok = b.icmp_unsigned("<=", b.add(addr, _c(I64, 16)), self.size)
        go, bad = self.fn.append_basic_block("in_bounds"), self.fn.append_basic_block("out_of_bounds")
        b.cbranch(ok, go, bad)
        b.position_at_end(bad)
        inside = b.select(b.icmp_unsigned("<", addr, self.size), b.sub(self.size, addr), _c(I64, 0))
        b.store(b.add(addr, b.mul(b.udiv(inside, _c(I64, esize)), _c(I64, esize))), self.bad_at)
        b.branch(self.fail)
        b.position_at_end(go)

    def _column_flags(self) -> None:
        """colbad[n]: some B[k][n] is not finite."""
        b = self.b

        def body(q: L.Value) -> None:
            n0 = b.mul(q, _c(I64, WARP))
            acc = R.c(I1, 0)
            for kk in range(self.k):
                e = b.load(self._vptr(self.be, b.add(n0, _c(I64, kk * self.np))), align=4)
                acc = b.or_(acc, b.icmp_signed(">=", e, R.c(I32, BAD_EXP)))
            b.store(b.zext(acc, V(I8)), self._vptr(self.colbad, n0), align=1)
        counted_loop(b, self.fn, self.np // WARP, body, "colbad")

    # ------------------------------------------------------------------ the sums
    def _compute(self) -> None:
        b, fn, k = self.b, self.fn, self.k
        f16 = self.f16_out
        pattern = [d_offset(0, j, f16) for j in range(WARP)]
        for r in range(ROWS):  # (an offset is a row part, a column part and 16 per column block)
            for n in range(self.n):
                want = d_offset(r, 0, f16) + pattern[n % WARP] + n // WARP * WARP * 16
                assert d_offset(r, n, f16) == want
        pat = L.Constant(V(I64), pattern)

        def row(r: L.Value) -> None:
            rbase = b.add(b.shl(b.and_(b.lshr(r, _c(I64, 3)), _c(I64, 1)), _c(I64, 6)),
                          b.mul(b.and_(r, _c(I64, 7)), _c(I64, 8 if f16 else 4)))
            ea, av = [], []
            rowbad = _c(I1, 0)
            for kk in range(k):
                idx = b.add(b.mul(r, _c(I64, k)), _c(I64, kk))
                av.append(splat(b, b.load(b.gep(self.av, [idx]))))
                if not self.integer:
                    e = b.load(b.gep(self.ae, [idx]))
                    ea.append(splat(b, e))
                    rowbad = b.or_(rowbad, b.icmp_signed(">=", e, _c(I32, BAD_EXP)))

            def chunk(q: L.Value) -> None:
                n0 = b.mul(q, _c(I64, WARP))
                off = b.add(splat(b, b.add(rbase, b.mul(n0, _c(I64, 16)))), pat)
                live = b.icmp_unsigned("<", b.add(splat(b, n0), b.zext(IOTA, V(I64))), R.c(I64, self.n))
                if self.integer:
                    self._integer_block(n0, av, off, live)
                else:
                    self._element_block(r, n0, ea, av, rowbad, off, live)
            counted_loop(b, fn, self.np // WARP, chunk, "cols")
        counted_loop(b, fn, ROWS, row, "rows")

    def _integer_block(self, n0: L.Value, av: list, off: L.Value, live: L.Value) -> None:
        """D[r, n0:n0+32] of an integer form (the columns past N masked off): C + the exact sum, wrapped or
        saturated."""
        b = self.b
        total = None
        for kk in range(self.k):
            bv = b.load(self._vptr(self.bv, b.add(n0, _c(I64, kk * self.np))), align=4)
            term = b.mul(av[kk], bv)
            total = term if total is None else b.add(total, term)
        c = b.select(splat(b, self.scale_d), self._gather(self.d, off, I32, live), L.Constant(V(I32), 0))
        if self.fm.satfinite:
            sat = self.gen.intrinsic("llvm.sadd.sat.v32i32", V(I32), [V(I32), V(I32)])
            res = b.call(sat, [c, total])
        else:
            res = b.add(c, total)
        self._scatter(self.d, off, res, live)

    def _element_block(self, r: L.Value, n0: L.Value, ea: list, av: list, rowbad: L.Value, off: L.Value,
                       live: L.Value) -> None:
        """D[r, n0:n0+32] (the columns past N masked off)."""
        b, k, ft = self.b, self.k, self.ft
        f16 = self.f16_out
        if f16:
            raw = self._gather(self.d, off, I16, live)  # (self.d is i32*: its i16 view below)
            c = decode_half(b, raw, formats.F16)
        else:
            raw = self._gather(self.d, off, I32, live)
            c = b.fpext(b.bitcast(raw, V(F32)), V(F64))
        c = b.select(splat(b, self.scale_d), c, L.Constant(V(F64), 0.0))
        cbad = b.not_(b.fcmp_ordered("<", R._fabs(b, c), L.Constant(V(F64), float("inf"))))
        colbad = b.icmp_unsigned("!=", b.load(self._vptr(self.colbad, n0), align=1), R.c(I8, 0))
        special = b.or_(b.or_(cbad, colbad), splat(b, rowbad))
        c = b.select(cbad, L.Constant(V(F64), 0.0), c)
        top = self._exponent(c)
        bvs = []
        for kk in range(k):
            base = b.add(n0, _c(I64, kk * self.np))
            eb = b.load(self._vptr(self.be, base), align=4)
            s = b.add(ea[kk], eb)
            top = b.select(b.icmp_signed(">", s, top), s, top)
            bvs.append(b.load(self._vptr(self.bv, base), align=4))
        none = b.icmp_signed("<", top, R.c(I32, NO_TERM))
        sh = b.select(none, R.c(I32, 0), b.sub(R.c(I32, self.bits), top))
        scale64 = b.bitcast(b.shl(b.add(b.sext(sh, V(I64)), R.c(I64, 1023)), R.c(I64, 52)), V(F64))
        if ft == F32:  # (beyond 2**127 only when every product is zero: any scale gives their terms)
            sh32 = b.select(b.icmp_signed(">", sh, R.c(I32, 127)), R.c(I32, 127), sh)
            scale = b.bitcast(b.shl(b.add(sh32, R.c(I32, 127)), R.c(I32, 23)), V(F32))
        else:
            scale = scale64
        trunc = self.gen.intrinsic(f"llvm.trunc.v32{_vname(ft)}", V(ft), [V(ft)])
        total = None
        for kk in range(k):
            term = b.call(trunc, [b.fmul(b.fmul(av[kk], bvs[kk]), scale)])
            total = term if total is None else b.fadd(total, term)
        t64 = total if ft == F64 else b.fpext(total, V(F64))
        trunc64 = self.gen.intrinsic("llvm.trunc.v32f64", V(F64), [V(F64)])
        t64 = b.fadd(t64, b.call(trunc64, [b.fmul(c, scale64)]))
        val = b.fdiv(t64, scale64)
        if f16:
            res = b.trunc(R.encode(b, val, formats.F16, "rn"), V(I16))
        else:
            res = R.canon32(b, R.f64_to_f32(b, val, "rz"))
        # elements with a non-finite input: the IEEE sum
        fn = self.fn
        any_special = b.icmp_unsigned("!=", b.bitcast(special, I32), _c(I32, 0))
        here = b.block
        slow, join = fn.append_basic_block("special"), fn.append_basic_block("special_done")
        b.cbranch(any_special, slow, join)
        b.position_at_end(slow)
        raw_c = b.select(splat(b, self.scale_d),
                         decode_half(b, self._gather(self.d, off, I16, live), formats.F16) if f16 else
                         b.fpext(b.bitcast(self._gather(self.d, off, I32, live), V(F32)), V(F64)),
                         L.Constant(V(F64), 0.0))
        ieee = raw_c
        for kk in range(k):
            x, y = av[kk], bvs[kk]
            if ft == F32:
                x, y = b.fpext(x, V(F64)), b.fpext(y, V(F64))
            ieee = b.fadd(ieee, b.fmul(x, y))
        if f16:
            sp = b.trunc(R.encode(b, ieee, formats.F16, "rn"), V(I16))
        else:
            sp = R.canon32(b, b.bitcast(b.fptrunc(ieee, V(F32)), V(I32)))
        res2 = b.select(special, sp, res)
        slow_end = b.block
        b.branch(join)
        b.position_at_end(join)
        out = b.phi(res.type)
        out.add_incoming(res, here)
        out.add_incoming(res2, slow_end)
        self._scatter(self.d, off, out, live)


def _bytes(t: L.Type) -> int:
    return 4 if t == F32 else 8 if t == F64 else t.width // 8


def _vname(t: L.Type) -> str:
    return {F32: "f32", F64: "f64"}.get(t, f"i{getattr(t, 'width', 0)}")


def _concat(b: L.IRBuilder, parts: list[L.Value]) -> L.Value:
    """Vectors of equal length joined into one (as a balanced tree of shuffles)."""
    while len(parts) > 1:
        n = parts[0].type.count
        idx = L.Constant(L.VectorType(I32, 2 * n), list(range(2 * n)))
        parts = [b.shuffle_vector(parts[i], parts[i + 1], idx) for i in range(0, len(parts), 2)]
    return parts[0]
