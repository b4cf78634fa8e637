"""A memory access's code as functions of the module, called from every access instead of repeated at each.

LLVM's instruction selection dominates a native compile, and its cost grows with every vector instruction
and basic block of the block function; a shared-memory-heavy kernel (the bitonic sort: 224 accesses) spent
most of it on the same few blocks per access. The access code here is written once per module and called:

- `shared_bad` / `global_bad`: the lanes of an access that are misaligned, out of bounds or (a write) on
  read-only memory (i32 lane bits); global memory's looks at a whole warp on consecutive bytes at once, else
  lane by lane, in the validity map;
- `load` / `store`: a warp's load or store of one element per lane: one vector access when the lanes are
  all active on consecutive addresses, else a masked gather or scatter (the highest lane wins, as the
  interpreter's);
- `report_shared` / `report_global` (through `report_access`): the cold path of a faulting access, which
  names the first bad lane and its fault in the status words the launcher reads (status: [code, pc, thread,
  block, address, nbytes, write], the code stored last).

The hot functions are `alwaysinline`: the optimized level inlines them (its code is what it was), the quick
level (no passes) calls them, which costs each access a call and saves most of its compile.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from llvmlite import ir as L

from ptxforge.emu.memory import GLOBAL_BASE
from ptxforge.emu.native.lower import I1, I8, I32, I64, WARP, V

if TYPE_CHECKING:
    from ptxforge.emu.native.codegen import BlockGen

SPAN_BYTES = (1, 2, 4, 8, 16)  # access sizes whose consecutive warp-wide accesses `_span_ok` checks at once
GRANULE = 64  # bytes per entry of the global validity map (allocations start on 256-byte boundaries)
GMAP_READONLY = 0x80  # flag in a map entry: the bytes belong to a read-only (.const) allocation

def _function(gen: BlockGen, name: str, ret: L.Type, args: list[L.Type], hot: bool) -> tuple[L.Function, bool]:
    """The module's function `name` and whether it is new (its body to be written)."""
    f = gen.module.globals.get(name)
    if f is not None:
        return f, False
    f = L.Function(gen.module, L.FunctionType(ret, args), name)
    f.linkage = "internal"
    if hot:
        f.attributes.add("alwaysinline")
    else:
        for attr in ("noinline", "optnone", "cold"):  # (optnone: the optimized level's passes skip it too)
            f.attributes.add(attr)
    return f, True


def _splat(b: L.IRBuilder, x: L.Value) -> L.Value:
    zero = L.Constant(V(x.type), None)
    return b.shuffle_vector(b.insert_element(zero, x, L.Constant(I32, 0)), zero, L.Constant(V(I32), None))


def _all(b: L.IRBuilder, v: L.Value) -> L.Value:
    return b.icmp_unsigned("==", b.bitcast(v, I32), L.Constant(I32, 0xFFFFFFFF))


# ---------------------------------------------------------------------------------------------- shared memory
def _shared_lanes(b: L.IRBuilder, a: L.Value, limit: L.Value, nbytes: L.Value) -> tuple[L.Value, L.Value]:
    """(misaligned, out of bounds) lanes (<32 x i1>) of an access of `nbytes` at `a` in shared memory whose
    in-bounds addresses are those below `limit` (shared_size - nbytes + 1, or 0)."""
    vt = V(I64)
    mis = b.icmp_unsigned("!=", b.and_(a, _splat(b, b.sub(nbytes, L.Constant(I64, 1)))), L.Constant(vt, 0))
    return mis, b.icmp_unsigned(">=", a, _splat(b, limit))


def shared_bad(gen: BlockGen, b: L.IRBuilder, a: L.Value, active: L.Value, limit: L.Value, nbytes: int
               ) -> L.Value:
    """i32 lane bits: the active lanes whose access of `nbytes` at `a` (<32 x i64>) is misaligned or outside
    shared memory (`limit`: see `_shared_lanes`)."""
    f, new = _function(gen, "shared_bad", I32, [V(I64), V(I1), I64, I64], hot=True)
    if new:
        fa, fact, flim, fn = f.args
        fb = L.IRBuilder(f.append_basic_block("entry"))
        mis, out = _shared_lanes(fb, fa, flim, fn)
        fb.ret(fb.bitcast(fb.and_(fact, fb.or_(mis, out)), I32))
    return b.call(f, [a, active, limit, L.Constant(I64, nbytes)])


def report_shared(gen: BlockGen, b: L.IRBuilder, codes: tuple[int, int, int], pc: int, w: L.Value, a: L.Value,
                  active: L.Value, limit: L.Value, nbytes: int, wr: bool) -> None:
    """`report_access` for a shared-memory access (its lanes' bits recomputed here, on the cold path)."""
    report = _report(gen, codes)
    f, new = _function(gen, "shared_fault", L.VoidType(), list(report.function_type.args[:4]) +
                       [V(I64), V(I1), I64, I64, I64], hot=False)
    if new:
        status, block, fpc, fw, fa, fact, flim, fn, fwr = f.args
        fb = L.IRBuilder(f.append_basic_block("entry"))
        mis, out = _shared_lanes(fb, fa, flim, fn)
        bad = fb.bitcast(fb.and_(fact, fb.or_(mis, out)), I32)
        fb.call(report, [status, block, fpc, fw, bad, fb.bitcast(mis, I32), fb.not_(fb.bitcast(out, I32)), fa, fn,
                         fwr])
        fb.ret_void()
    b.call(f, [gen.status, b.load(gen.bid), L.Constant(I64, pc), w, a, active, limit, L.Constant(I64, nbytes),
               L.Constant(I64, int(wr))])


# ---------------------------------------------------------------------------------------------- global memory
def _global_lanes(gen: BlockGen, b: L.IRBuilder, a: L.Value, active: L.Value, arena_size: L.Value, gmap: L.Value,
                  nbytes: L.Value, wr: L.Value) -> tuple[L.Value, L.Value, L.Value]:
    """(misaligned, out of bounds, read-only) lanes of an access of `nbytes` (i64) at the PTX addresses `a`:
    each lane's bytes must lie in the arena and in the valid part of their 64-byte granule of the validity
    map (`gmap`, an i8*), writable for a write (`wr`, i1)."""
    vt = V(I64)
    zero = L.Constant(vt, 0)
    misaligned = b.icmp_unsigned("!=", b.and_(a, _splat(b, b.sub(nbytes, L.Constant(I64, 1)))), zero)
    off = b.sub(a, L.Constant(vt, GLOBAL_BASE))
    inarena = b.icmp_unsigned("<", off, _splat(b, arena_size))
    # (an i32 gather of the map's bytes, the map padded for it: x86 has no byte gather, and LLVM would turn an
    # i8 one into 32 branches)
    gptrs = b.inttoptr(b.add(_splat(b, b.ptrtoint(gmap, I64)), b.lshr(off, L.Constant(vt, 6))), V(I32.as_pointer()))
    g = b.call(_masked(gen, "gather", I32), [gptrs, L.Constant(I32, 1), b.and_(active, inarena), L.Constant(V(I32), 0)])
    g = b.zext(b.trunc(g, V(I8)), vt)
    valid = b.and_(g, L.Constant(vt, GMAP_READONLY - 1))
    within = b.add(b.and_(off, L.Constant(vt, GRANULE - 1)), _splat(b, nbytes))
    out = b.not_(b.and_(inarena, b.icmp_unsigned("<=", within, valid)))
    readonly = b.and_(b.icmp_unsigned("!=", b.and_(g, L.Constant(vt, GMAP_READONLY)), zero), _splat(b, wr))
    return misaligned, out, readonly


def _span_ok(b: L.IRBuilder, off: L.Value, nbytes: int, wr: L.Value, active: L.Value, arena_size: L.Value,
             gmap: L.Value) -> L.Value:
    """i1: every lane is active, lane i's arena offset is lane 0's + i * nbytes, lane 0's is aligned, and
    the warp's bytes lie in the arena with every 64-byte granule they touch valid up to where they end
    (writable for a write, `wr`). Then every lane passes the per-lane check, which runs only where this fails
    (and names the faulting lane as before). Granules are read from the validity map one by one."""
    span = WARP * nbytes
    first = b.extract_element(off, L.Constant(I32, 0))
    expect = b.add(_splat(b, first), L.Constant(V(I64), [i * nbytes for i in range(WARP)]))
    good = b.and_(_all(b, active), _all(b, b.icmp_unsigned("==", off, expect)))
    good = b.and_(good, b.icmp_unsigned("==", b.and_(first, L.Constant(I64, nbytes - 1)), L.Constant(I64, 0)))
    end = b.add(first, L.Constant(I64, span))
    inarena = b.and_(b.icmp_unsigned("<", first, arena_size), b.icmp_unsigned("<=", end, arena_size))
    good = b.and_(good, inarena)
    g_first = b.select(inarena, b.lshr(first, L.Constant(I64, 6)), L.Constant(I64, 0))
    last = b.sub(end, L.Constant(I64, 1))
    g_last = b.select(inarena, b.lshr(last, L.Constant(I64, 6)), L.Constant(I64, 0))
    need = b.add(b.and_(last, L.Constant(I64, GRANULE - 1)), L.Constant(I64, 1))  # bytes valid in the last
    # (a write needs the read-only flag clear)
    mask = b.select(wr, L.Constant(I64, 0xFF), L.Constant(I64, GMAP_READONLY - 1))
    ro_bad = b.select(wr, L.Constant(I64, GMAP_READONLY), L.Constant(I64, 0))
    for j in range(span // GRANULE + 2):
        g = b.add(g_first, L.Constant(I64, j))
        g = b.select(b.icmp_unsigned("<", g, g_last), g, g_last)  # (past the last: the last again)
        entry = b.zext(b.load(b.gep(gmap, [g])), I64)
        full = b.icmp_unsigned("==", b.and_(entry, mask), L.Constant(I64, GRANULE))
        ends = b.icmp_unsigned("<=", need, b.and_(entry, L.Constant(I64, GMAP_READONLY - 1)))
        ends = b.and_(ends, b.icmp_unsigned("==", b.and_(entry, ro_bad), L.Constant(I64, 0)))
        good = b.and_(good, b.select(b.icmp_unsigned("<", g, g_last), full, ends))
    return good


def _bad_bits(b: L.IRBuilder, active: L.Value, lanes: tuple[L.Value, L.Value, L.Value]) -> L.Value:
    mis, out, readonly = lanes
    return b.bitcast(b.and_(active, b.or_(b.or_(mis, out), readonly)), I32)


def global_bad(gen: BlockGen, b: L.IRBuilder, a: L.Value, active: L.Value, nbytes: int, wr: bool) -> L.Value:
    """i32 lane bits: the active lanes whose access of `nbytes` at `a` (<32 x i64>) is misaligned, outside the
    valid bytes of global memory or, for a write (`wr`), on read-only memory."""
    args = [V(I64), V(I1), I1, I64, I8.as_pointer()]
    f, new = _function(gen, f"global_bad{nbytes}", I32, args, hot=True)
    if new:
        fa, fact, fwr, fsize, fmap = f.args
        fb = L.IRBuilder(f.append_basic_block("entry"))
        lanes_blk = f.append_basic_block("lanes")
        if nbytes in SPAN_BYTES:  # a whole warp on consecutive valid bytes: no per-lane look
            clean = f.append_basic_block("clean")
            off = fb.sub(fa, L.Constant(V(I64), GLOBAL_BASE))
            fb.cbranch(_span_ok(fb, off, nbytes, fwr, fact, fsize, fmap), clean, lanes_blk)
            fb.position_at_end(clean)
            fb.ret(L.Constant(I32, 0))
        else:
            fb.branch(lanes_blk)
        fb.position_at_end(lanes_blk)
        fb.ret(_bad_bits(fb, fact, _global_lanes(gen, fb, fa, fact, fsize, fmap, L.Constant(I64, nbytes), fwr)))
    return b.call(f, [a, active, L.Constant(I1, int(wr)), gen.arena_size, gen.gmap])


def report_global(gen: BlockGen, b: L.IRBuilder, codes: tuple[int, int, int], pc: int, w: L.Value, a: L.Value,
                  active: L.Value, nbytes: int, wr: bool) -> None:
    """`report_access` for a global-memory access (its lanes' bits recomputed here, on the cold path)."""
    report = _report(gen, codes)
    f, new = _function(gen, "global_fault", L.VoidType(),
                       list(report.function_type.args[:4]) + [V(I64), V(I1), I64, I8.as_pointer(), I64, I64],
                       hot=False)
    if new:
        status, block, fpc, fw, fa, fact, fsize, fmap, fn, fwr = f.args
        fb = L.IRBuilder(f.append_basic_block("entry"))
        wr1 = fb.icmp_unsigned("!=", fwr, L.Constant(I64, 0))
        lanes = _global_lanes(gen, fb, fa, fact, fsize, fmap, fn, wr1)
        fb.call(report, [status, block, fpc, fw, _bad_bits(fb, fact, lanes), fb.bitcast(lanes[0], I32),
                         fb.not_(fb.bitcast(lanes[1], I32)), fa, fn, fwr])
        fb.ret_void()
    b.call(f, [gen.status, b.load(gen.bid), L.Constant(I64, pc), w, a, active, gen.arena_size, gen.gmap,
               L.Constant(I64, nbytes), L.Constant(I64, int(wr))])


def report_access(gen: BlockGen, b: L.IRBuilder, codes: tuple[int, int, int], pc: int, w: L.Value,
                  bad: L.Value, misaligned: L.Value, inb: L.Value, a: L.Value, nbytes: int, wr: bool) -> None:
    """Set the status of the first lane of `bad` (lane bits, i32, as `misaligned` and `inb`): code misaligned,
    read-only (in bounds) or out of bounds (`codes`, in that order), the pc, its thread (warp `w`), the block,
    its address (of `a`, <32 x i64>), the size and whether it wrote."""
    b.call(_report(gen, codes), [gen.status, b.load(gen.bid), L.Constant(I64, pc), w, bad, misaligned, inb, a,
                                 L.Constant(I64, nbytes), L.Constant(I64, int(wr))])


def _report(gen: BlockGen, codes: tuple[int, int, int]) -> L.Function:
    f, new = _function(gen, "access_fault", L.VoidType(),
                       [I64.as_pointer(), I64, I64, I64, I32, I32, I32, V(I64), I64, I64], hot=False)
    if not new:
        return f
    status, block, pc, w, bad, mis, inb, a, nbytes, wr = f.args
    b = L.IRBuilder(f.append_basic_block("entry"))
    cttz = gen.intrinsic("llvm.cttz.i32", I32, [I32, I1])
    li = b.call(cttz, [bad, L.Constant(I1, 1)])
    one = L.Constant(I32, 1)
    lane_mis = b.trunc(b.and_(b.lshr(mis, li), one), I1)
    lane_inb = b.trunc(b.and_(b.lshr(inb, li), one), I1)
    st_mis, st_ro, st_fault = (L.Constant(I64, c) for c in codes)
    code = b.select(lane_mis, st_mis, b.select(lane_inb, st_ro, st_fault))
    thread = b.add(b.mul(w, L.Constant(I64, WARP)), b.zext(li, I64))
    for i, v in enumerate([pc, thread, block, b.extract_element(a, li), nbytes, wr], 1):
        b.store(v, b.gep(status, [L.Constant(I64, i)]))
    b.store(code, status)  # the code last: the launcher reads the rest once it is set
    b.ret_void()
    return f


# ---------------------------------------------------------------------------------------------- loads, stores
def _contiguous(fb: L.IRBuilder, host: L.Value, active: L.Value, nbytes: int) -> tuple[L.Value, L.Value]:
    """(i1: every lane active on consecutive addresses `nbytes` apart, lane 0's address)."""
    first = fb.extract_element(host, L.Constant(I32, 0))
    expect = fb.add(_splat(fb, first), L.Constant(V(I64), [i * nbytes for i in range(WARP)]))
    return fb.and_(_all(fb, fb.icmp_unsigned("==", host, expect)), _all(fb, active)), first


def _masked(gen: BlockGen, what: str, t: L.IntType) -> L.Function:
    p = V(t.as_pointer())
    if what == "gather":
        return gen.intrinsic(f"llvm.masked.gather.v32i{t.width}.v32p0", V(t), [p, I32, V(I1), V(t)])
    return gen.intrinsic(f"llvm.masked.scatter.v32i{t.width}.v32p0", L.VoidType(), [V(t), p, I32, V(I1)])


def load(gen: BlockGen, b: L.IRBuilder, host: L.Value, t: L.IntType, active: L.Value) -> L.Value:
    """<32 x t> from the host addresses `host` of the `active` lanes (the others: 0)."""
    f, new = _function(gen, f"load_v32i{t.width}", V(t), [V(I64), V(I1)], hot=True)
    if new:
        fh, fact = f.args
        nbytes = t.width // 8
        fb = L.IRBuilder(f.append_basic_block("entry"))
        fast, slow = f.append_basic_block("vector"), f.append_basic_block("gather")
        ok, first = _contiguous(fb, fh, fact, nbytes)
        fb.cbranch(ok, fast, slow)
        fb.position_at_end(fast)
        fb.ret(fb.load(fb.inttoptr(first, V(t).as_pointer()), align=nbytes))
        fb.position_at_end(slow)
        fb.ret(fb.call(_masked(gen, "gather", t), [fb.inttoptr(fh, V(t.as_pointer())), L.Constant(I32, nbytes),
                                                     fact, L.Constant(V(t), None)]))
    return b.call(f, [host, active])


def store(gen: BlockGen, b: L.IRBuilder, host: L.Value, v: L.Value, active: L.Value) -> None:
    """`v` (<32 x t>) to the host addresses `host` of the `active` lanes."""
    t: Any = v.type.element
    f, new = _function(gen, f"store_v32i{t.width}", L.VoidType(), [V(I64), V(t), V(I1)], hot=True)
    if new:
        fh, fv, fact = f.args
        nbytes = t.width // 8
        fb = L.IRBuilder(f.append_basic_block("entry"))
        fast, slow = f.append_basic_block("vector"), f.append_basic_block("scatter")
        ok, first = _contiguous(fb, fh, fact, nbytes)
        fb.cbranch(ok, fast, slow)
        fb.position_at_end(fast)
        fb.store(fv, fb.inttoptr(first, V(t).as_pointer()), align=nbytes)
        fb.ret_void()
        fb.position_at_end(slow)
        fb.call(_masked(gen, "scatter", t), [fv, fb.inttoptr(fh, V(t.as_pointer())), L.Constant(I32, nbytes), fact])
        fb.ret_void()
    b.call(f, [host, v, active])
