"""TMA tensor copies: cp.async.bulk.tensor.{1..5}d (tile mode), cp.reduce.async.bulk.tensor (tile mode)
and cp.async.bulk.prefetch(.tensor).

`[tmap, {c0, c1, ...}]` names a box of the tensor described by a 128-byte tensor map (see
`ptxforge.emu.tensormap`) whose first element sits at the signed element coordinates c0 (innermost
dimension) ... . Along dimension i the box holds ceil(box[i] / elementStride[i]) elements at
c_i, c_i + elementStride[i], ...; in shared memory it is dense, dimension 0 innermost, then swizzled.
Global->shared fills elements outside the tensor with zero and completes the box's full byte count on
the mbarrier; shared->global (bulk_group) skips them. Copies complete at issue, as in ops_async.

.multicast::cluster (global->shared::cluster): the box lands at the same shared offset in every CTA of
the cluster whose %cluster_ctarank bit is set in the 16-bit ctaMask, and each of them gets the
complete-tx on the mbarrier at the same offset as `mbar`. The emulator performs each destination's
part as the thread with the same index in that CTA (`cluster_lane`), so bounds checks and the
sanitizer see a plain shared access of that CTA, ordered by that CTA's own mbarrier wait.

cp.reduce.async.bulk.tensor combines each in-bounds box element into global memory with .redOp,
element by element as atomics (each has .relaxed.gpu semantics), in the element type the map records
(`REDUCE_TYPES` is the PTX ISA's table of valid combinations); on memory other processes share it holds
their atomics' lock (rmw.atomic_apply_global).

A shared::cta -> global copy (store or reduction) whose box does not start on a 16-byte boundary of dimension
0 is a fault (`STORE_START_ALIGN`), as on a GPU.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np

from ptxforge.emu import memory as M
from ptxforge.emu import tensormap as TM
from ptxforge.emu.mbarrier import _mbar_update
from ptxforge.emu.op import NORMAL, Op
from ptxforge.emu.ops_atomic import _BITWISE, _combine
from ptxforge.emu.rmw import atomic_apply_global
from ptxforge.ptx import ir
from ptxforge.ptx.isa import modifier_slot

if TYPE_CHECKING:
    from collections.abc import Sequence

    from ptxforge.emu.machine import LaneState
    from ptxforge.emu.operands import Ctx, Value


def _op(fn):
    return Op(NORMAL, fn=fn)


def _lanes(st, m):
    return np.arange(st.N) if m is None else np.flatnonzero(m)


def _at(v, st, lanes):
    return np.broadcast_to(np.asarray(v), (st.N,))[lanes]


def _tensor_operand(ctx, op, rank):
    """(space, address reader, [coordinate readers]) of `[tmap, {c0, ...}]`."""
    if not isinstance(op, ir.AddressList) or len(op.items) != 2 or not isinstance(op.items[1], ir.Vector):
        raise ctx.error("expected a tensor operand [tensorMap, {coordinates}]")
    base, vec = op.items
    if isinstance(base, ir.Address):
        addr_op = base
    elif isinstance(base, ir.Register | ir.Symbol):
        addr_op = ir.Address(base=base)
    else:
        raise ctx.error("the tensor map must be a register or a parameter name")
    if len(vec.elements) != rank:
        raise ctx.error(f"a {rank}d tensor copy needs {rank} coordinates, got {len(vec.elements)}")
    space, addr = ctx.address(addr_op, "generic")
    return space, addr, [ctx.read(e, ".b32") for e in vec.elements]


def _fault(msg: str, lane: int, kind: str = "out-of-bounds") -> M.MemoryFault:
    e = M.MemoryFault(msg, kind=kind)
    e._lane = lane  # the machine names the thread
    return e


def _map_words(space: str, addr: int) -> np.ndarray:
    """The addresses of the 32 words of the 128-byte map at `addr`."""
    offs = np.arange(0, TM.SIZE, 4)
    return (np.uint64(addr) + offs.astype(np.uint64)) if space != "param" else np.int64(addr) + offs


def load_map_bytes(st: LaneState, space: str, addr: int, lane: int) -> np.ndarray:
    """The 128 bytes at `addr` (64-byte aligned, as a tensor map must be), read as lane `lane`."""
    if addr % 64:
        raise _fault(f"tensor map address {addr:#x} is not 64-byte aligned", lane, "misaligned")
    words = M.load(st.mem, space, _map_words(space, addr), np.uint32, 1, np.full(TM.SIZE // 4, lane))[0]
    return np.asarray(words, np.uint32).view(np.uint8)


def store_map_bytes(st: LaneState, space: str, addr: int, raw: np.ndarray, lane: int) -> None:
    M.store(st.mem, space, _map_words(space, addr), np.uint32, [np.ascontiguousarray(raw, np.uint8).view(np.uint32)],
            np.full(TM.SIZE // 4, lane))


def read_map(st: LaneState, space: str, addr: int, lane: int) -> TM.TensorMap:
    """Decode the tensor map at `addr` as lane `lane` sees it; a bad map (also one a kernel edited into a
    combination the host builder refuses) is a MemoryFault naming the instruction that uses it."""
    raw = load_map_bytes(st, space, addr, lane)
    try:
        return TM.decode(raw)
    except ValueError as e:
        raise _fault(f"tensor map at {addr:#x}: {e}", lane, "invalid-argument") from None


# What a load reads for an element outside the tensor: zero, or with fill mode NaN the canonical NaN of the
# map's floating-point type (the bits a GPU writes have not been recorded here).
_NAN_BITS = {2: 0x7FFF, 4: 0x7FFFFFFF, 8: 0x7FFFFFFFFFFFFFFF}


def oob_value(tm: TM.TensorMap) -> int:
    return _NAN_BITS[tm.esize] if tm.fill == "nan" else 0


def box_elements(tm: TM.TensorMap, coords: Sequence[int], store: bool = False) -> tuple[Value, Value, Value]:
    """(global byte addresses, in-bounds mask, shared byte offsets before swizzle) of the box's elements,
    in shared-memory order (dimension 0 fastest).

    `store`: the bounds of a tile store. An H200 writes dimension 0 in whole 16-byte pieces, so the
    elements up to the next 16-byte boundary past the tensor's end are written too (recorded in
    tests/conformance/data: a 70-float row gets 72 written)."""
    counts = tm.box_counts
    grids = np.meshgrid(*[np.arange(n, dtype=np.int64) for n in reversed(counts)], indexing="ij")
    gaddr = np.full(grids[0].shape, tm.address, np.int64)
    inb = np.ones(grids[0].shape, bool)
    for i in range(tm.rank):
        g = coords[i] + grids[tm.rank - 1 - i] * tm.estrides[i]
        limit = tm.dims[i]
        if store and i == 0:
            limit = -(-limit * tm.esize // 16) * 16 // tm.esize
        inb &= (g >= 0) & (g < limit)
        gaddr = gaddr + g * tm.strides[i]
    soff = np.arange(inb.size, dtype=np.int64) * tm.esize
    return gaddr.reshape(-1), inb.reshape(-1), soff


def im2col_elements(tm: TM.TensorMap, coords: Sequence[int], offsets: Sequence[int],
                    lane: int) -> tuple[Value, Value, Value]:
    """(global byte addresses, in-bounds mask, shared byte offsets) of an .im2col load, in shared order:
    `pixels` rows of `channels` elements.

    coords are (c, w[, h[, d]], n): c and n start the channel and image ranges as in tiled mode; the
    spatial ones place the filter base, which must lie in the map's bounding box [lower, dim - 1 + upper].
    Pixel p is read at base + offsets; the base then steps by the traversal stride along W, wrapping to
    the lower corner into the next H (then D, then the next image n) when it passes the upper corner.
    Pixels outside the tensor (padding, or past the last image) read as zero. The C and N traversal
    strides are ignored (the driver ignores C's; the manual applies strides to D, H and W only).

    The manual shows the traversal mostly in figures; this reading is the one under which consecutive
    loads are the rows of a convolution's im2col matrix (what implicit-GEMM convolutions rely on), and
    the corpus test checks exactly that against numpy. It has not been compared with a GPU here.
    """
    i2c = tm.im2col
    if i2c is None:
        raise _fault("an .im2col copy needs an im2col tensor map (ptxforge.runtime.tensor_map_im2col)", lane,
                     "invalid-argument")
    ns = tm.rank - 2
    bits = TM.IM2COL_CORNER_BITS[tm.rank]
    for i, o in enumerate(offsets):
        if o >= 1 << bits:
            raise _fault(f"im2col offset {i} = {o} is outside 0..{(1 << bits) - 1} for a rank-{tm.rank} map", lane,
                         "invalid-argument")
    lo = i2c.lower
    hi = tuple(tm.dims[1 + i] - 1 + i2c.upper[i] for i in range(ns))
    cur = list(coords[1: 1 + ns])
    for i in range(ns):
        if not lo[i] <= cur[i] <= hi[i]:
            raise _fault(f"im2col filter base coordinate {i + 1} = {cur[i]} is outside the bounding box "
                         f"[{lo[i]}, {hi[i]}]", lane, "invalid-argument")
    n = coords[-1]
    pix = np.empty((i2c.pixels, tm.rank - 1), np.int64)  # spatial coordinates, then n
    for p in range(i2c.pixels):
        pix[p, :ns] = [cur[i] + offsets[i] for i in range(ns)]
        pix[p, ns] = n
        for i in range(ns):
            cur[i] += tm.estrides[1 + i]
            if cur[i] <= hi[i]:
                break
            cur[i] = lo[i]
        else:
            n += 1
    ch = coords[0] + np.arange(i2c.channels, dtype=np.int64)
    inb = ((ch >= 0) & (ch < tm.dims[0]))[None, :] & \
        ((pix >= 0) & (pix < np.asarray(tm.dims[1:], np.int64))).all(1)[:, None]  # type: ignore[index]  # an array
    gaddr = tm.address + ch[None, :] * tm.strides[0] + (pix * np.asarray(tm.strides[1:], np.int64)).sum(1)[:, None]
    soff = np.arange(inb.size, dtype=np.int64) * tm.esize
    return gaddr.reshape(-1), inb.reshape(-1), soff


# cp.reduce.async.bulk{.tensor}'s .redOp, read from the ISA table ('add' ... 'xor'; atom's combines compute them)
BULK_RED_OPS = modifier_slot("cp.reduce.async.bulk", "redop")
# The PTX ISA's valid (.redOp, element type) pairs for cp.reduce.async.bulk.tensor, keyed by BULK_RED_OPS. The
# bitwise ops take .b32/.b64: here any 32- or 64-bit integer map type (the manual names no float type for them).
REDUCE_TYPES = {
    "add": (".u32", ".s32", ".u64", ".f32", ".f16", ".bf16"),
    "min": (".u32", ".s32", ".u64", ".s64", ".f16", ".bf16"),
    "max": (".u32", ".s32", ".u64", ".s64", ".f16", ".bf16"),
    "inc": (".u32",), "dec": (".u32",),
    "and": (".u32", ".s32", ".u64", ".s64"), "or": (".u32", ".s32", ".u64", ".s64"),
    "xor": (".u32", ".s32", ".u64", ".s64"),
}


def cta_mask_ranks(st: LaneState, lane: int, mask: int) -> list[int]:
    """The %cluster_ctarank values a 16-bit ctaMask names; a rank outside the cluster is a fault."""
    mask &= 0xFFFF
    ranks = [r for r in range(16) if mask >> r & 1]
    csize = st.mem.cluster_size
    if not ranks:
        raise _fault("ctaMask is 0: a multicast copy needs at least one destination CTA", lane, "invalid-argument")
    if ranks[-1] >= csize:
        raise _fault(f"ctaMask {mask:#06x} names CTA rank {ranks[-1]}, outside this cluster of {csize} CTA(s)",
                     lane, "out-of-bounds")
    return ranks


def shared_offset(addr: int) -> int:
    """The byte offset inside its CTA's shared memory of a shared::cluster (or generic shared) address."""
    if addr >= M.SHARED_WINDOW:
        addr -= M.SHARED_WINDOW
    return addr & M.CLUSTER_OFF_MASK


def in_cta(rank: int) -> int:
    """What a byte offset in CTA `rank`'s shared memory adds to become its shared::cluster address."""
    return rank << M.CLUSTER_RANK_SHIFT


def cluster_lane(st: LaneState, lane: int, rank: int) -> int:
    """The lane of the thread with `lane`'s thread index in CTA `rank` of `lane`'s cluster."""
    lps, csize = st.mem.lanes_per_slot, st.mem.cluster_size
    slot = lane // lps
    return (slot // csize * csize + rank) * lps + lane % lps


def _reducer(ins, ctx):
    """(redOp, {element type: (step, ufunc, value dtype)}) of cp.reduce.async.bulk.tensor."""
    ops = [s for s in ins.suffixes if s in REDUCE_TYPES]
    if len(ops) != 1:
        raise ctx.error(f"{ins.mnemonic}: expected one reduction operation of {', '.join(REDUCE_TYPES)}")
    op = ops[0]
    bitwise = op in _BITWISE
    return op, {t: _combine(op, (".b" + t[2:]) if bitwise else t) for t in REDUCE_TYPES[op]}


def _check_reduce_type(tm: TM.TensorMap, op: str, lane: int) -> None:
    if tm.etype in REDUCE_TYPES[op]:
        return
    if tm.etype is None:
        raise _fault(f"cp.reduce.async.bulk.tensor .{op}: the tensor map does not record its element type; "
                     f"build it with ptxforge.runtime.tensor_map(..., dtype=...)", lane, "invalid-argument")
    raise _fault(f"cp.reduce.async.bulk.tensor .{op} is not defined on {tm.etype} elements (the tensor map's "
                 f"type); the PTX ISA allows .{op} on {', '.join(REDUCE_TYPES[op])}", lane, "invalid-argument")


# A shared::cta -> global tensor copy (a tile store or a reduction) writes dimension 0 of the tensor in 16-byte
# pieces, so its box must start on a 16-byte boundary of the row. ptxas and cuTensorMapEncodeTiled accept any
# coordinate (it is a register, the element size is in the map); a Hopper GPU stops the kernel with
# CUDA_ERROR_ILLEGAL_INSTRUCTION (reported on an H100 for a TMA store at column 1 of an int32 tensor, TileLang
# issue #2527, and for Triton's TMA tail stores, #8657; the H200's fault in the tma_reduce_* GPU tests, whose
# boxes started at x = -5 + 7b, fits it). Loads get no such rule here: that they need one is not established.
STORE_START_ALIGN = 16


def _check_store_start(tm: TM.TensorMap, c0: int, reduce_op: str | None, lane: int) -> None:
    offset = c0 * tm.esize
    if offset % STORE_START_ALIGN == 0:
        return
    what = f"cp.reduce.async.bulk.tensor .{reduce_op}" if reduce_op else "cp.async.bulk.tensor shared::cta -> global"
    etype = f"{tm.etype} elements (the tensor map's type)" if tm.etype else f"{tm.esize}-byte elements"
    step = STORE_START_ALIGN // tm.esize
    raise _fault(f"{what}: the box starts at dimension-0 coordinate {c0}, byte {offset} of a row of {etype}, "
                 f"not a multiple of {STORE_START_ALIGN} bytes; a GPU writes "
                 f"dimension 0 in {STORE_START_ALIGN}-byte pieces and stops such a copy with "
                 f"CUDA_ERROR_ILLEGAL_INSTRUCTION (ptxas and the driver accept it): start the box at a multiple "
                 f"of {step} elements", lane, "misaligned")


def build_tensor(ctx: Ctx) -> Op:
    ins = ctx.ins
    mode = next((s for s in ins.suffixes if s.startswith("im2col") or s.startswith("tile::")), None)
    im2col = mode == "im2col"
    if mode is not None and not im2col:
        raise ctx.error(f"{ins.mnemonic}: .{mode} mode is not supported (.tile, and .im2col loads into shared "
                        f"memory)")
    multicast = any(s.startswith("multicast") for s in ins.suffixes)
    if any(s.startswith("cta_group") for s in ins.suffixes):
        raise ctx.error(f"{ins.mnemonic}: .cta_group (CTA pairs, sm_100a) is not supported")
    dims = [s for s in ins.suffixes if len(s) == 2 and s[1] == "d" and s[0] in "12345"]
    if len(dims) != 1:
        raise ctx.error("expected one of .1d ... .5d")
    rank = int(dims[0][0])
    spaces = [s.split("::")[0] for s in ins.suffixes if s.split("::")[0] in ("global", "shared")]
    to_global = spaces[:1] == ["global"]
    reduce_op, reducers = _reducer(ins, ctx) if ins.has("reduce") else (None, None)
    if reduce_op is not None and not to_global:
        raise ctx.error(f"{ins.mnemonic}: a tensor reduction goes from shared::cta to global memory")
    if im2col and to_global:
        raise ctx.error(f"{ins.mnemonic}: .im2col is supported for loads into shared memory only")
    if multicast and to_global:
        raise ctx.error(f"{ins.mnemonic}: .multicast::cluster is a global -> shared::cluster copy")
    ops = ins.operands
    mask = offsets = None
    if to_global:
        tspace, taddr, coords = _tensor_operand(ctx, ops[0], rank)
        sspace, saddr = ctx.address(ops[1], "shared")
        mbar = None
    else:
        sspace, saddr = ctx.address(ops[0], "shared")
        tspace, taddr, coords = _tensor_operand(ctx, ops[1], rank)
        if len(ops) < 3:
            raise ctx.error("a tensor copy into shared memory needs an mbarrier operand")
        mbar = ctx.address(ops[2], "shared")
        nxt = 3
        if im2col:
            if rank < 3:
                raise ctx.error(f"{ins.mnemonic}: .im2col needs a tensor of rank 3 to 5")
            if len(ops) < 4 or not isinstance(ops[3], ir.Vector) or len(ops[3].elements) != rank - 2:
                raise ctx.error(f"{ins.mnemonic}: .im2col needs {{im2colOffsets}} ({rank - 2} of them) after [mbar]")
            offsets = [ctx.read(e, ".b16") for e in ops[3].elements]
            nxt = 4
        if multicast:
            if len(ops) <= nxt or isinstance(ops[nxt], ir.Address | ir.Vector):
                raise ctx.error(f"{ins.mnemonic}: .multicast::cluster needs a ctaMask operand after [mbar]")
            mask = ctx.read(ops[nxt], ".b16")
    if sspace == "generic":
        sspace = "shared"

    def f(st, m):
        lanes = _lanes(st, m)
        if lanes.size == 0:
            return
        ta = _at(taddr(st), st, lanes)
        sa = _at(saddr(st), st, lanes)
        cs = [_at(c(st), st, lanes).astype(np.uint32).view(np.int32) for c in coords]
        masks = None if mask is None else _at(mask(st), st, lanes).astype(np.int64)
        bars = None if mbar is None else _at(mbar[1](st), st, lanes).astype(np.int64)
        offs = None if offsets is None else [_at(o(st), st, lanes).astype(np.int64) & 0xFFFF for o in offsets]
        for i, lane in enumerate(lanes.tolist()):
            tm = read_map(st, tspace, int(ta[i]), lane)
            if reduce_op is not None:
                _check_reduce_type(tm, reduce_op, lane)
            if to_global:
                _check_store_start(tm, int(cs[0][i]), reduce_op, lane)
            s0 = int(sa[i])
            if s0 % 128:
                raise _fault(f"tensor copy shared address {s0:#x} is not 128-byte aligned", lane)
            if im2col:
                gaddr, inb, soff = im2col_elements(tm, [int(c[i]) for c in cs], [int(o[i]) for o in offs], lane)
            elif tm.im2col is not None:
                raise _fault("an im2col tensor map used by a .tile copy", lane, "invalid-argument")
            else:
                gaddr, inb, soff = box_elements(tm, [int(c[i]) for c in cs], store=to_global and reduce_op is None)
            dt = np.dtype(f"u{tm.esize}")
            gsel = gaddr[inb].astype(np.uint64)
            if to_global:
                saddrs = TM.swizzle_offsets(s0 + soff, tm.swizzle)
                v = M.load(st.mem, sspace, saddrs[inb], dt, 1, np.full(gsel.size, lane))[0]
                if gsel.size and reduce_op is None:
                    M.store(st.mem, "global", gsel, dt, [v], np.full(gsel.size, lane))
                elif gsel.size:
                    _reduce_global(st, gsel, v, tm, reducers[tm.etype], lane)
                continue
            vals = np.full(inb.size, oob_value(tm), dt)
            if gsel.size:
                vals[inb] = M.load(st.mem, "global", gsel, dt, 1, np.full(gsel.size, lane))[0]
            if masks is None:  # one destination: the address may name any CTA of the cluster
                dlane, d0 = owner(st, lane, sspace, s0)
                M.store(st.mem, sspace, TM.swizzle_offsets(d0 + soff, tm.swizzle), dt, [vals],
                        np.full(vals.size, dlane))
                complete_tx(st, lane, mbar[0], int(bars[i]), tm.box_bytes)
                continue
            saddrs = TM.swizzle_offsets(shared_offset(s0) + soff, tm.swizzle)
            for r in cta_mask_ranks(st, lane, int(masks[i])):
                land(st, "shared", saddrs + in_cta(r), vals, cluster_lane(st, lane, r),
                     shared_offset(int(bars[i])) + in_cta(r), tm.box_bytes)
    return _op(f)


def land(st: LaneState, space: str, saddrs: Value, vals: Value, lane: int, bar: int, nbytes: int) -> None:
    """Write a box into shared memory as `lane`, then complete `nbytes` on the mbarrier at shared `bar`."""
    M.store(st.mem, space, saddrs, vals.dtype, [vals], np.full(vals.size, lane))
    complete_tx(st, lane, "shared", bar, nbytes)


def owner(st: LaneState, lane: int, space: str, addr: int) -> tuple[int, int]:
    """(lane, address) that reach shared::cluster `addr` as the thread with `lane`'s index in the CTA owning
    it, so the sanitizer sees that CTA's own access; other addresses, and ranks outside the cluster (left
    for memory.py to report), stay with `lane`."""
    if space != "shared" or addr < 0:
        return lane, addr
    rank = addr >> M.CLUSTER_RANK_SHIFT
    if rank >= st.mem.cluster_size:
        return lane, addr
    return cluster_lane(st, lane, rank), addr


def complete_tx(st: LaneState, lane: int, space: str, bar: int, nbytes: int) -> None:
    """A complete-tx of `nbytes` on the mbarrier at `bar` (possibly another CTA's), on behalf of `lane`."""
    blane, b = owner(st, lane, space, bar)
    one = np.zeros(st.N, bool)
    one[blane] = True
    _mbar_update(st, one, space, lambda st_: np.int64(b), count=0, tx=-nbytes)


def _reduce_global(st, gaddr, vals, tm: TM.TensorMap, reducer, lane: int) -> None:
    """Combine `vals` into the global elements at `gaddr` (atomically, also against other processes sharing
    the memory, in box order)."""
    step, ufunc, vdtype = reducer
    edt = np.dtype(f"u{tm.esize}")
    buf, idx = st.mem.resolve("global", gaddr, tm.esize, np.full(gaddr.size, lane), write=True)
    atomic_apply_global(st, gaddr, buf.view(edt), np.asarray(idx) // tm.esize, np.asarray(vals, edt), step, ufunc,
                        vdtype)


def build_prefetch(ctx: Ctx) -> Op:
    """cp.async.bulk.prefetch(.tensor).L2: a hint; the emulator has no L2, so nothing happens."""
    return _op(lambda st, m: None)


# ---------------------------------------------------------------------------- tensormap.replace / cp_fenceproxy

_FIELD1 = ("global_address", "rank")
_FIELD3 = ("elemtype", "interleave_layout", "swizzle_mode", "swizzle_atomicity", "fill_mode")
_FIELDS = _FIELD1 + TM.ORDINAL_FIELDS + _FIELD3
_B64_FIELDS = ("global_address", "global_stride")  # new_val is .b64 for these, .b32 for the rest


def build_tensormap_replace(ctx: Ctx) -> Op:
    """tensormap.replace.tile.field{.global, .shared::cta}.b1024.type [map], {ord,} new_val: edit one field of
    the tensor map at `map` in place, as CUTLASS's and DeepGEMM's grouped GEMMs do before publishing the map
    to global memory with tensormap.cp_fenceproxy.

    Every field of the PTX ISA: .global_address, .rank (new_val = rank - 1), .box_dim / .global_dim /
    .element_stride ord (dimension ord), .global_stride ord (the byte stride of dimension ord + 1, as
    cuTensorMapEncodeTiled's globalStrides[ord]; CUTLASS passes bytes from CUDA 12.5 on), and the immediate
    codes of .elemtype, .interleave_layout, .swizzle_mode, .swizzle_atomicity and .fill_mode (the ISA's table;
    `TM.replace`). A value that can never be valid faults here; how the fields combine is checked by the next
    instruction that uses the map, by the host builder's rules. The map must be one ptxforge made; the edit is
    one 128-byte read and write through the memory choke point (the ISA makes it a weak access of the whole
    object), so bounds checks and the sanitizer see it."""
    ins = ctx.ins
    ops = ins.operands
    field = next((f for f in _FIELDS if ins.has(f)), None)
    if field is None or not ins.has("tile"):
        raise ctx.error(f"expected tensormap.replace.tile.<field>, field one of {', '.join(_FIELDS)}")
    want = ".b64" if field in _B64_FIELDS else ".b32"
    types = [t for t in ins.types if t != ".b1024"]
    if types != [want]:
        raise ctx.error(f".{field} takes a {want} new_val (.b1024{want}), got {''.join(types) or 'no type'}")
    space, addr = ctx.address(ops[0], "shared" if ins.has("shared::cta") else "global" if ins.has("global")
                              else "generic")
    ordinal = 0
    if field in TM.ORDINAL_FIELDS:
        if len(ops) != 3 or not (isinstance(ops[1], ir.Immediate) and not ops[1].is_float):
            raise ctx.error(f"expected 3 operands for .{field}: [map], ord (an integer constant), new_val")
        ordinal = int(ops[1].value)
    elif len(ops) != 2:
        raise ctx.error(f"expected 2 operands for .{field}: [map], new_val")
    if field in _FIELD3 and not (isinstance(ops[-1], ir.Immediate) and not ops[-1].is_float):
        raise ctx.error(f"the new_val of .{field} must be an integer constant (a code of the PTX ISA's table)")
    val = ctx.read(ops[-1], want)

    def f(st: LaneState, m: np.ndarray | None) -> None:
        lanes = _lanes(st, m)
        if lanes.size == 0:
            return
        a = _at(addr(st), st, lanes)
        v = _at(np.asarray(val(st)).astype(np.uint64), st, lanes)
        for lane, at, new in zip(lanes.tolist(), a.tolist(), v.tolist(), strict=True):
            raw = load_map_bytes(st, space, int(at), lane)
            try:
                raw = TM.replace(raw, field, ordinal, int(new))
            except ValueError as e:
                raise _fault(f"tensormap.replace.{field}{f' ord {ordinal}' if field in TM.ORDINAL_FIELDS else ''}"
                             f": {e}", lane, "invalid-argument") from None
            store_map_bytes(st, space, int(at), raw, lane)
    return _op(f)


# tensormap.cp_fenceproxy's only valid size (the PTX ISA; ptxas refuses others)
CP_FENCEPROXY_SIZE = 128


def build_tensormap_cp_fenceproxy(ctx: Ctx) -> Op:
    """tensormap.cp_fenceproxy.global.shared::cta.tensormap::generic.release.scope.sync.aligned [dst], [src], 128:
    copy the 128-byte map at shared::cta `src` to global `dst` (in the generic proxy), then a release of the
    tensormap proxy on `dst`, which fence.proxy.tensormap::generic.acquire pairs with before TMA uses the map.

    The emulator reads maps through the same memory as every other access, so the proxy fence orders
    nothing more here; the copy is a plain 128-byte read and write, which the sanitizer checks as such.
    Warp-collective (.sync.aligned): each warp copies each distinct (dst, src) its threads name once, as the
    first of those threads (CUTLASS issues it from a whole warp with one map)."""
    ins = ctx.ins
    ops = ins.operands
    if len(ops) != 3 or not isinstance(ops[2], ir.Immediate) or ops[2].is_float:
        raise ctx.error("expected [dst], [src], size (an integer constant)")
    if int(ops[2].value) != CP_FENCEPROXY_SIZE:
        raise ctx.error(f"size must be {CP_FENCEPROXY_SIZE} (a tensor map), got {int(ops[2].value)}")
    _, dst = ctx.address(ops[0], "global")
    _, src = ctx.address(ops[1], "shared")

    def f(st: LaneState, m: np.ndarray | None) -> None:
        lanes = _lanes(st, m)
        if lanes.size == 0:
            return
        d = _at(dst(st), st, lanes).astype(np.uint64)
        s = _at(src(st), st, lanes).astype(np.uint64)
        done: set[tuple[int, int, int]] = set()
        for lane, da, sa in zip(lanes.tolist(), d.tolist(), s.tolist(), strict=True):
            key = (lane >> 5, int(da), int(sa))
            if key in done:
                continue
            done.add(key)
            raw = load_map_bytes(st, "shared", int(sa), lane)
            if int(da) % 64:
                raise _fault(f"tensormap.cp_fenceproxy destination {int(da):#x} is not 64-byte aligned", lane,
                             "misaligned")
            store_map_bytes(st, "global", int(da), raw, lane)
    return _op(f)
