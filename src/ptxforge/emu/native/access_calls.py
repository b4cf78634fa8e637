"""A memory access's code as functions of the module, called from every access instead of repeated at each.

LLVM's instruction selection dominates a native compile, and its cost grows with every vector instruction
and basic block of the block function; a shared-memory-heavy kernel (the bitonic sort: 224 accesses) spent
most of it on the same few blocks per access. The access code here is written once per module and called:

- `shared_bad` / `global_bad`: the lanes of an access that are misaligned, out of bounds or (a write) on
  read-only memory (i32 lane bits). Global memory's looks at a whole warp on consecutive bytes at once, else
  at each half-warp on its own consecutive bytes (up to 4 granules of the validity map as one 32-bit read),
  else lane by lane; a shared access of a group whose check passed (`group_ok`, access.py) is not looked at;
- `span_fits`: the same look at a warp's span of consecutive bytes from one scalar offset (a lane-affine
  address's: affine.py), and `alloc_window`: the allocation such a span lies in, from the launcher's
  allocation table (the access's window of good offsets, warp.py);
- `consecutive` / `half_shapes`: the addresses' shape, which the caller makes once per access or per access
  group (access.py) and passes to the check and to
- `load` / `store`: a warp's load or store of one element per lane: one vector access when the lanes are
  all active on consecutive addresses, two half-warp loads when each half is consecutive or one value, one
  scalar store for one active lane, else a masked gather or scatter (the highest lane wins, as the
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
HALF = WARP // 2
GRANULE = 64  # bytes per entry of the global validity map (allocations start on 256-byte boundaries)
GMAP_READONLY = 0x80  # flag in a map entry: the bytes belong to a read-only (.const) allocation


def _function(gen: BlockGen, name: str, ret: L.Type, args: list[L.Type], hot: bool | None
              ) -> tuple[L.Function, bool]:
    """The module's function `name` and whether it is new (its body to be written). `hot`: inlined; False: a
    fault's cold path, never optimized; None: called now and then (a span's window), optimized, not inlined."""
    f = gen.module.globals.get(name)
    if f is not None:
        return f, False
    f = L.Function(gen.module, L.FunctionType(ret, args), name)
    f.linkage = "internal"
    if hot:
        f.attributes.add("alwaysinline")
    elif hot is None:
        f.attributes.add("noinline")
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


def shared_bad(gen: BlockGen, b: L.IRBuilder, a: L.Value, active: L.Value, limit: L.Value, nbytes: int,
               proven: L.Value | None = None) -> L.Value:
    """i32 lane bits: the active lanes whose access of `nbytes` at `a` (<32 x i64>) is misaligned or outside
    shared memory (`limit`: see `_shared_lanes`); none, unchecked, where `proven` (i1: an access group's check,
    access.py) is set."""
    f, new = _function(gen, "shared_bad", I32, [V(I64), V(I1), I64, I64, I1], hot=True)
    if new:
        fa, fact, flim, fn, fproven = f.args
        fb = L.IRBuilder(f.append_basic_block("entry"))
        good, check = f.append_basic_block("proven"), f.append_basic_block("check")
        fb.cbranch(fproven, good, check)
        fb.position_at_end(good)
        fb.ret(L.Constant(I32, 0))
        fb.position_at_end(check)
        mis, out = _shared_lanes(fb, fa, flim, fn)
        fb.ret(fb.bitcast(fb.and_(fact, fb.or_(mis, out)), I32))
    return b.call(f, [a, active, limit, L.Constant(I64, nbytes), L.Constant(I1, 0) if proven is None else proven])


def group_ok(gen: BlockGen, b: L.IRBuilder, base: L.Value, mask: L.Value, align: int, end: int) -> L.Value:
    """i1: every lane of `mask` has the bytes base..base + end (<32 x i64> `base`) in shared memory, `base`
    aligned to `align`: an access group's one check (access.py)."""
    f, new = _function(gen, "group_ok", I1, [V(I64), V(I1), I64, I64, I64], hot=True)
    if new:
        fa, fmask, fsize, falign, fend = f.args
        fb = L.IRBuilder(f.append_basic_block("entry"))
        size = _splat(fb, fsize)
        aligned = fb.icmp_unsigned("==", fb.and_(fa, _splat(fb, fb.sub(falign, L.Constant(I64, 1)))),
                                   L.Constant(V(I64), 0))
        inside = fb.and_(fb.icmp_unsigned("<", fa, size), fb.icmp_unsigned("<=", fb.add(fa, _splat(fb, fend)), size))
        bad = fb.and_(fmask, fb.not_(fb.and_(aligned, inside)))
        fb.ret(fb.icmp_unsigned("==", fb.bitcast(bad, I32), L.Constant(I32, 0)))
    return b.call(f, [base, mask, gen.shared_size, L.Constant(I64, align), L.Constant(I64, end)])


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


def consecutive(gen: BlockGen, b: L.IRBuilder, a: L.Value, nbytes: int) -> L.Value:
    """i1: the addresses `a` (<32 x i64>) are consecutive `nbytes` apart (lane i's is lane 0's + i * nbytes)."""
    f, new = _function(gen, f"consecutive{nbytes}", I1, [V(I64)], hot=True)
    if new:
        fb = L.IRBuilder(f.append_basic_block("entry"))
        fa = f.args[0]
        first = fb.extract_element(fa, L.Constant(I32, 0))
        expect = fb.add(_splat(fb, first), L.Constant(V(I64), [i * nbytes for i in range(WARP)]))
        fb.ret(_all(fb, fb.icmp_unsigned("==", fa, expect)))
    return b.call(f, [a])


def half_shapes(gen: BlockGen, b: L.IRBuilder, host: L.Value, nbytes: int) -> L.Value:
    """i32: `_half_shapes` of the addresses `host` as bits (1: the shape holds, 2 and 4: the first and the
    second half consecutive), which `load` takes."""
    f, new = _function(gen, f"half_shapes{nbytes}", I32, [V(I64)], hot=True)
    if new:
        fb = L.IRBuilder(f.append_basic_block("entry"))
        ok, contig = _half_shapes(fb, f.args[0], nbytes)
        bits = fb.zext(ok, I32)
        for i, c in enumerate(contig, 1):
            bits = fb.or_(bits, fb.shl(fb.zext(c, I32), L.Constant(I32, i)))
        fb.ret(bits)
    return b.call(f, [host])


def _half_shapes(b: L.IRBuilder, host: L.Value, nbytes: int) -> tuple[L.Value, list[L.Value]]:
    """(i1: each half-warp's addresses are consecutive `nbytes` apart or all the same, [i1 per half:
    consecutive]): a row of a block narrower than a warp, or one value per row."""
    firsts = b.shuffle_vector(host, host, L.Constant(V(I32), [0] * HALF + [HALF] * HALF))
    d = b.sub(host, firsts)
    step = b.bitcast(b.icmp_unsigned("==", d, L.Constant(V(I64), [i % HALF * nbytes for i in range(WARP)])), I32)
    same = b.bitcast(b.icmp_unsigned("==", d, L.Constant(V(I64), 0)), I32)
    ok: L.Value = L.Constant(I1, 1)
    contig = []
    for h in range(2):
        bits = L.Constant(I32, 0xFFFF << (HALF * h))
        c = b.icmp_unsigned("==", b.and_(step, bits), bits)
        ok = b.and_(ok, b.or_(c, b.icmp_unsigned("==", b.and_(same, bits), bits)))
        contig.append(c)
    return ok, contig


def _span_ok(b: L.IRBuilder, off: L.Value, nbytes: int, cons: L.Value, wr: L.Value, active: L.Value,
             arena_size: L.Value, gmap: L.Value) -> L.Value:
    """i1: every lane is active, the arena offsets are consecutive (`cons`, the caller's test), lane 0's is
    aligned, and the warp's bytes lie in the arena with every 64-byte granule they touch valid up to where
    they end (writable for a write, `wr`). Then every lane passes the per-lane check, which runs only where
    this fails (and names the faulting lane as before)."""
    first = b.extract_element(off, L.Constant(I32, 0))
    good = b.and_(_all(b, active), cons)
    return b.and_(good, _bytes_ok(b, first, nbytes, WARP * nbytes, wr, arena_size, gmap))


def _halves_ok(b: L.IRBuilder, off: L.Value, nbytes: int, wr: L.Value, active: L.Value, arena_size: L.Value,
               gmap: L.Value) -> L.Value:
    """`_span_ok` for each half-warp on its own (two rows of a block narrower than a warp)."""
    firsts = b.shuffle_vector(off, off, L.Constant(V(I32), [0] * HALF + [HALF] * HALF))
    step = L.Constant(V(I64), [i % HALF * nbytes for i in range(WARP)])
    good = b.and_(_all(b, active), _all(b, b.icmp_unsigned("==", b.sub(off, firsts), step)))
    for h in (0, HALF):
        first = b.extract_element(off, L.Constant(I32, h))
        good = b.and_(good, _bytes_ok(b, first, nbytes, HALF * nbytes, wr, arena_size, gmap))
    return good


def _bytes_ok(b: L.IRBuilder, first: L.Value, nbytes: int, span: int, wr: L.Value, size: L.Value, gmap: L.Value
              ) -> L.Value:
    """i1: arena offset `first` is `nbytes`-aligned and the `span` bytes from it lie in the arena (of `size`
    bytes) with every 64-byte granule they touch valid up to where they end (writable for a write)."""
    good = b.icmp_unsigned("==", b.and_(first, L.Constant(I64, nbytes - 1)), L.Constant(I64, 0))
    end = b.add(first, L.Constant(I64, span))
    inarena = b.and_(b.icmp_unsigned("<", first, size), b.icmp_unsigned("<=", end, size))
    good = b.and_(good, inarena)
    g_first = b.select(inarena, b.lshr(first, L.Constant(I64, 6)), L.Constant(I64, 0))
    last = b.sub(end, L.Constant(I64, 1))
    g_last = b.select(inarena, b.lshr(last, L.Constant(I64, 6)), L.Constant(I64, 0))
    need = b.add(b.and_(last, L.Constant(I64, GRANULE - 1)), L.Constant(I64, 1))  # bytes valid in the last
    ro_bad = b.select(wr, L.Constant(I64, GMAP_READONLY), L.Constant(I64, 0))  # (a write: the flag must be clear)
    if span <= 3 * GRANULE + 1:  # at most 4 granules: one 32-bit read of the map (padded for it)
        return b.and_(good, _granules_ok(b, gmap, g_first, g_last, need, wr, ro_bad))
    mask = b.select(wr, L.Constant(I64, 0xFF), L.Constant(I64, GMAP_READONLY - 1))
    for j in range((span + GRANULE - 2) // GRANULE + 1):  # (the most granules `span` bytes can touch)
        g = b.add(g_first, L.Constant(I64, j))
        g = b.select(b.icmp_unsigned("<", g, g_last), g, g_last)  # (past the last: the last again)
        entry = b.zext(b.load(b.gep(gmap, [g])), I64)
        full = b.icmp_unsigned("==", b.and_(entry, mask), L.Constant(I64, GRANULE))
        ends = b.icmp_unsigned("<=", need, b.and_(entry, L.Constant(I64, GMAP_READONLY - 1)))
        ends = b.and_(ends, b.icmp_unsigned("==", b.and_(entry, ro_bad), L.Constant(I64, 0)))
        good = b.and_(good, b.select(b.icmp_unsigned("<", g, g_last), full, ends))
    return good


def _granules_ok(b: L.IRBuilder, gmap: L.Value, g_first: L.Value, g_last: L.Value, need: L.Value, wr: L.Value,
                 ro_bad: L.Value) -> L.Value:
    """i1: map entries g_first..g_last - 1 (at most 3) say full (64 valid bytes, and writable for a write,
    `wr`) and g_last's say at least `need` valid bytes (writable for a write: `ro_bad` clear), read as the
    bytes of one 32-bit word."""
    word = b.load(b.bitcast(b.gep(gmap, [g_first]), I32.as_pointer()), align=1)
    n = b.trunc(b.mul(b.sub(g_last, g_first), L.Constant(I64, 8)), I32)  # bits of the full ones
    below = b.sub(b.shl(L.Constant(I32, 1), n), L.Constant(I32, 1))
    pattern = L.Constant(I32, GRANULE * 0x01010101)
    mask = b.select(wr, L.Constant(I32, 0xFFFFFFFF), L.Constant(I32, (GMAP_READONLY - 1) * 0x01010101))
    full = b.icmp_unsigned("==", b.and_(b.and_(b.xor(word, pattern), mask), below), L.Constant(I32, 0))
    entry = b.zext(b.and_(b.lshr(word, n), L.Constant(I32, 0xFF)), I64)
    ends = b.icmp_unsigned("<=", need, b.and_(entry, L.Constant(I64, GMAP_READONLY - 1)))
    ends = b.and_(ends, b.icmp_unsigned("==", b.and_(entry, ro_bad), L.Constant(I64, 0)))
    return b.and_(full, ends)


def _bad_bits(b: L.IRBuilder, active: L.Value, lanes: tuple[L.Value, L.Value, L.Value]) -> L.Value:
    mis, out, readonly = lanes
    return b.bitcast(b.and_(active, b.or_(b.or_(mis, out), readonly)), I32)


def global_bad(gen: BlockGen, b: L.IRBuilder, a: L.Value, active: L.Value, nbytes: int, wr: bool,
               cons: L.Value | None = None) -> L.Value:
    """i32 lane bits: the active lanes whose access of `nbytes` at `a` (<32 x i64>) is misaligned, outside the
    valid bytes of global memory or, for a write (`wr`), on read-only memory. `cons` (i1): whether `a` is
    consecutive `nbytes` apart, where the caller has it (its load or store uses it too). Each half-warp is
    tried on its own only in a block narrower than a warp (`gen.rows_in_warp`: half-warps on rows of their
    own)."""
    rows = gen.rows_in_warp
    args = [V(I64), V(I1), I1, I1, I64, I8.as_pointer()]
    f, new = _function(gen, f"global_bad{nbytes}" + ("_rows" if rows else ""), I32, args, hot=True)
    if new:
        fa, fact, fcons, fwr, fsize, fmap = f.args
        fb = L.IRBuilder(f.append_basic_block("entry"))
        lanes_blk = f.append_basic_block("lanes")
        if nbytes in SPAN_BYTES:  # a whole warp, or each half, on consecutive valid bytes: no per-lane look
            clean = f.append_basic_block("clean")
            off = fb.sub(fa, L.Constant(V(I64), GLOBAL_BASE))
            if rows:
                halves = f.append_basic_block("halves")
                fb.cbranch(_span_ok(fb, off, nbytes, fcons, fwr, fact, fsize, fmap), clean, halves)
                fb.position_at_end(halves)
                fb.cbranch(_halves_ok(fb, off, nbytes, fwr, fact, fsize, fmap), clean, lanes_blk)
            else:
                fb.cbranch(_span_ok(fb, off, nbytes, fcons, fwr, fact, fsize, fmap), clean, lanes_blk)
            fb.position_at_end(clean)
            fb.ret(L.Constant(I32, 0))
        else:
            fb.branch(lanes_blk)
        fb.position_at_end(lanes_blk)
        fb.ret(_bad_bits(fb, fact, _global_lanes(gen, fb, fa, fact, fsize, fmap, L.Constant(I64, nbytes), fwr)))
    if cons is None:
        cons = consecutive(gen, b, a, nbytes) if nbytes in SPAN_BYTES else L.Constant(I1, 0)
    return b.call(f, [a, active, cons, L.Constant(I1, int(wr)), gen.arena_size, gen.gmap])


def span_fits(gen: BlockGen, b: L.IRBuilder, off: L.Value, nbytes: int, wr: bool) -> L.Value:
    """i1: a warp's access of `nbytes` per lane at consecutive arena offsets from `off` (i64, lane 0's) is good:
    aligned, in the arena and on valid bytes (writable for a write), all 32 lanes' at once (a lane-affine
    address's check, where its window (warp.py) does not hold it: inlined, as a jumping access, a transpose's
    rows, makes it often)."""
    f, new = _function(gen, f"span_fits{nbytes}", I1, [I64, I1, I64, I8.as_pointer()], hot=True)
    if new:
        fo, fwr, fsize, fmap = f.args
        fb = L.IRBuilder(f.append_basic_block("entry"))
        fb.ret(_bytes_ok(fb, fo, nbytes, WARP * nbytes, fwr, fsize, fmap))
    return b.call(f, [off, L.Constant(I1, int(wr)), gen.arena_size, gen.gmap])


TABLE_READONLY_BIT = 62  # an allocation table entry's end: bit 62 set for a read-only allocation


def alloc_window(gen: BlockGen, b: L.IRBuilder, off: L.Value, span: int, wr: bool) -> tuple[L.Value, L.Value]:
    """(lo, count): the arena offsets lo .. lo + count - 1 at which a span of `span` bytes lies inside the one
    allocation holding arena offset `off` (writable for a write), found by bisection in the allocation table;
    count 0 where `off`'s span does not lie in one (it may still lie on valid bytes of two adjacent ones:
    `span_fits` tells). A span access's window (warp.py): it holds every later span of that allocation."""
    f, new = _function(gen, f"alloc_window{span}_{'w' if wr else 'r'}", L.LiteralStructType([I64, I64]),
                       [I64, I64.as_pointer()], hot=None)
    if new:
        _alloc_window_body(f, span, wr)
    got = b.call(f, [off, gen.allocs])
    return b.extract_value(got, 0), b.extract_value(got, 1)


def _alloc_window_body(f: L.Function, span: int, wr: bool) -> None:
    fo, table = f.args
    fb = L.IRBuilder(f.append_basic_block("entry"))
    count = fb.load(table, align=8)
    entry = fb.block
    head, body, found = (f.append_basic_block(x) for x in ("bisect", "step", "found"))
    fb.branch(head)
    fb.position_at_end(head)  # (lo, hi): the last entry starting at or before `fo` is below hi, from lo - 1 on
    lo, hi = fb.phi(I64), fb.phi(I64)
    lo.add_incoming(L.Constant(I64, 0), entry)
    hi.add_incoming(count, entry)
    fb.cbranch(fb.icmp_unsigned("<", lo, hi), body, found)
    fb.position_at_end(body)
    mid = fb.lshr(fb.add(lo, hi), L.Constant(I64, 1))
    start = fb.load(fb.gep(table, [fb.add(fb.shl(mid, L.Constant(I64, 1)), L.Constant(I64, 1))]), align=8)
    before = fb.icmp_unsigned("<=", start, fo)
    lo.add_incoming(fb.select(before, fb.add(mid, L.Constant(I64, 1)), lo), body)
    hi.add_incoming(fb.select(before, hi, mid), body)
    fb.branch(head)
    fb.position_at_end(found)
    i = fb.sub(lo, L.Constant(I64, 1))
    some = fb.icmp_unsigned("!=", lo, L.Constant(I64, 0))
    i = fb.select(some, i, L.Constant(I64, 0))
    first = fb.load(fb.gep(table, [fb.add(fb.shl(i, L.Constant(I64, 1)), L.Constant(I64, 1))]), align=8)
    word = fb.load(fb.gep(table, [fb.add(fb.shl(i, L.Constant(I64, 1)), L.Constant(I64, 2))]), align=8)
    end = fb.and_(word, L.Constant(I64, (1 << TABLE_READONLY_BIT) - 1))
    ok = fb.and_(some, fb.icmp_unsigned("<=", fb.add(fo, L.Constant(I64, span)), end))
    ok = fb.and_(ok, fb.icmp_unsigned("<=", L.Constant(I64, span), fb.sub(end, first)))
    if wr:
        ok = fb.and_(ok, fb.icmp_unsigned("==", fb.lshr(word, L.Constant(I64, TABLE_READONLY_BIT)),
                                          L.Constant(I64, 0)))
    n = fb.add(fb.sub(fb.sub(end, L.Constant(I64, span)), first), L.Constant(I64, 1))
    ret = L.Constant(L.LiteralStructType([I64, I64]), None)
    ret = fb.insert_value(ret, fb.select(ok, first, L.Constant(I64, 0)), 0)
    fb.ret(fb.insert_value(ret, fb.select(ok, n, L.Constant(I64, 0)), 1))


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
def _masked(gen: BlockGen, what: str, t: L.IntType) -> L.Function:
    p = V(t.as_pointer())
    if what == "gather":
        return gen.intrinsic(f"llvm.masked.gather.v32i{t.width}.v32p0", V(t), [p, I32, V(I1), V(t)])
    return gen.intrinsic(f"llvm.masked.scatter.v32i{t.width}.v32p0", L.VoidType(), [V(t), p, I32, V(I1)])


def load(gen: BlockGen, b: L.IRBuilder, host: L.Value, t: L.IntType, active: L.Value, cons: L.Value,
         shape: L.Value | None = None, rows: bool = True) -> L.Value:
    """<32 x t> from the host addresses `host` of the `active` lanes (the others: 0): one vector load where
    every lane is active on consecutive addresses (`cons`: the caller's test), two half-warp loads where each
    half is consecutive or one value (`shape`: `half_shapes`'s bits, where the caller has them: an access
    group's; only where `rows`: a block narrower than a warp, half-warps on rows of their own), else a masked
    gather."""
    args = [V(I64), V(I1), I1] + ([I32] if shape is not None else [])
    name = f"load_v32i{t.width}" + ("_shaped" if shape is not None else "") + ("" if rows else "_warp")
    f, new = _function(gen, name, V(t), args, hot=True)
    if new:
        fh, fact, fcons = f.args[:3]
        nbytes = t.width // 8
        fb = L.IRBuilder(f.append_basic_block("entry"))
        fast, slow, gath = (f.append_basic_block(x) for x in ("vector", "other", "gather"))
        every = _all(fb, fact)
        fb.cbranch(fb.and_(fcons, every), fast, slow)
        fb.position_at_end(fast)
        fb.ret(fb.load(fb.inttoptr(fb.extract_element(fh, L.Constant(I32, 0)), V(t).as_pointer()), align=nbytes))
        fb.position_at_end(slow)
        if rows:
            halves = f.append_basic_block("halves")
            if shape is not None:
                ok, contig = _bit(fb, f.args[3], 0), [_bit(fb, f.args[3], 1), _bit(fb, f.args[3], 2)]
            else:
                ok, contig = _half_shapes(fb, fh, nbytes)
            fb.cbranch(fb.and_(ok, every), halves, gath)
            fb.position_at_end(halves)
            fb.ret(_load_halves(gen, fb, fh, t, contig))
        else:
            fb.branch(gath)
        fb.position_at_end(gath)
        fb.ret(fb.call(_masked(gen, "gather", t), [fb.inttoptr(fh, V(t.as_pointer())), L.Constant(I32, nbytes),
                                                     fact, L.Constant(V(t), None)]))
    return b.call(f, [host, active, cons] + ([shape] if shape is not None else []))


def _bit(b: L.IRBuilder, bits: L.Value, i: int) -> L.Value:
    return b.trunc(b.lshr(bits, L.Constant(I32, i)), I1)


def _load_halves(gen: BlockGen, b: L.IRBuilder, host: L.Value, t: L.IntType, contig: list[L.Value]) -> L.Value:
    """The warp's values where `half_shapes` holds: per half a vector load, or one value for all of it (a
    masked load of its first lane: nothing past it is touched)."""
    ht = L.VectorType(t, HALF)
    load = gen.intrinsic(f"llvm.masked.load.v{HALF}i{t.width}.p0", ht,
                         [ht.as_pointer(), I32, L.VectorType(I1, HALF), ht])
    first_only = L.Constant(L.VectorType(I1, HALF), [1] + [0] * (HALF - 1))
    all_lanes = L.Constant(L.VectorType(I1, HALF), [1] * HALF)
    parts = []
    for h in range(2):
        p = b.inttoptr(b.extract_element(host, L.Constant(I32, HALF * h)), ht.as_pointer())
        v = b.call(load, [p, L.Constant(I32, t.width // 8), b.select(contig[h], all_lanes, first_only),
                          L.Constant(ht, None)])
        one = b.shuffle_vector(v, v, L.Constant(L.VectorType(I32, HALF), None))
        parts.append(b.select(contig[h], v, one))
    return b.shuffle_vector(parts[0], parts[1], L.Constant(V(I32), list(range(WARP))))


def store(gen: BlockGen, b: L.IRBuilder, host: L.Value, v: L.Value, active: L.Value, cons: L.Value) -> None:
    """`v` (<32 x t>) to the host addresses `host` of the `active` lanes: one vector store where every lane is
    active on consecutive addresses (`cons`: the caller's test), one scalar store where one lane is active
    (`if (tid == 0) ...`), else a masked scatter."""
    t: Any = v.type.element
    f, new = _function(gen, f"store_v32i{t.width}", L.VoidType(), [V(I64), V(t), V(I1), I1], hot=True)
    if new:
        fh, fv, fact, fcons = f.args
        nbytes = t.width // 8
        fb = L.IRBuilder(f.append_basic_block("entry"))
        fast, slow, one, many = (f.append_basic_block(x) for x in ("vector", "other", "one", "scatter"))
        fb.cbranch(fb.and_(fcons, _all(fb, fact)), fast, slow)
        fb.position_at_end(fast)
        fb.store(fv, fb.inttoptr(fb.extract_element(fh, L.Constant(I32, 0)), V(t).as_pointer()), align=nbytes)
        fb.ret_void()
        fb.position_at_end(slow)
        bits = fb.bitcast(fact, I32)
        pop = gen.intrinsic("llvm.ctpop.i32", I32, [I32])
        fb.cbranch(fb.icmp_unsigned("==", fb.call(pop, [bits]), L.Constant(I32, 1)), one, many)
        fb.position_at_end(one)
        lane = fb.call(gen.intrinsic("llvm.cttz.i32", I32, [I32, I1]), [bits, L.Constant(I1, 1)])
        fb.store(fb.extract_element(fv, lane), fb.inttoptr(fb.extract_element(fh, lane), t.as_pointer()), align=nbytes)
        fb.ret_void()
        fb.position_at_end(many)
        fb.call(_masked(gen, "scatter", t), [fv, fb.inttoptr(fh, V(t.as_pointer())), L.Constant(I32, nbytes), fact])
        fb.ret_void()
    b.call(f, [host, v, active, cons])
