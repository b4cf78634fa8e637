"""Asynchronous copies and mbarriers: cp.async (+ commit/wait groups), cp.async.bulk, mbarrier.*
(cp.async.bulk.tensor and cp.async.bulk.prefetch: ops_tma); st.bulk, the bulk initialisation of shared memory.

Copies complete at issue (a legal schedule: the program may only rely on the data after the wait),
so commit/wait groups need no queue. An mbarrier's state word and its arrivals: mbarrier.py.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np

from ptxforge.emu import memory as M
from ptxforge.emu import ops_tma
from ptxforge.emu.mbarrier import (
    S_PH,
    F,
    _lanes,
    _mbar_update,
    _pack,
    with_complete_tx,  # noqa: F401 (imported from here by other code)
)
from ptxforge.emu.op import NORMAL, Op
from ptxforge.emu.operands import bits_of_type, is_signed
from ptxforge.emu.ops_atomic import OPS, _combine
from ptxforge.emu.ops_memory import space_of
from ptxforge.emu.rmw import atomic_apply, atomic_apply_global
from ptxforge.ptx import ir
from ptxforge.ptx.isa.data_mem import ST_BULK_GRANULE, ST_BULK_MAX_SIZE

if TYPE_CHECKING:
    from ptxforge.emu.operands import Ctx, Reader




def _op(fn):
    return Op(NORMAL, fn=fn)


def _compact(v, lanes, n, dt):
    return np.broadcast_to(np.asarray(v, dt), (n,))[lanes]


# ---------------------------------------------------------------------------- cp.async


def build_cp(ctx: Ctx) -> Op:
    ins = ctx.ins
    if not ins.has("async"):
        raise ctx.error(f"{ins.mnemonic} is not supported")
    if ins.has("commit_group") or ins.has("wait_group") or ins.has("wait_all"):
        return _op(lambda st, m: None)
    if ins.has("mbarrier") and ins.has("arrive"):
        noinc = ins.has("noinc")
        space, addr = ctx.address(ins.operands[0], space_of(ins))

        def arrive_on(st, m):  # every prior copy has completed already
            if noinc:
                _mbar_update(st, m, space, addr, count=1)
        return _op(arrive_on)
    if ins.has("bulk"):
        return _build_bulk(ctx)
    ops = ins.operands
    dst_space, dst = ctx.address(ops[0], "shared")
    src_space, src = ctx.address(ops[1], "global")
    size = ctx.read(ops[2], ".u32")
    src_size = ctx.read(ops[3], ".u32") if len(ops) > 3 and not isinstance(ops[3], ir.Address) else None
    if dst_space == "generic":
        dst_space = "shared"

    def f(st, m):
        lanes = _lanes(st, m)
        if lanes.size == 0:
            return
        n = st.N
        d = _compact(dst(st), lanes, n, np.int64 if np.ndim(dst(st)) == 0 else np.asarray(dst(st)).dtype)
        s = _compact(src(st), lanes, n, np.uint64)
        sz = _compact(size(st), lanes, n, np.int64)
        ss = sz if src_size is None else np.minimum(_compact(src_size(st), lanes, n, np.int64), sz)
        for nb in np.unique(sz):  # 4, 8 or 16 bytes
            sel = sz == nb
            nb = int(nb)
            words = nb // 4
            keep = ss[sel]
            reads = keep > 0  # a lane with src-size 0 reads nothing (Triton's masked loads point past the end)
            vals = [np.zeros(int(sel.sum()), np.uint32) for _ in range(words)]
            if reads.any():
                for w, v in enumerate(M.load(st.mem, src_space, s[sel][reads], np.uint32, words,
                                             lanes[sel][reads])):
                    vals[w][reads] = v
            out = []
            for w, v in enumerate(vals):  # zero-fill past src-size
                v = np.broadcast_to(v, keep.shape).copy()
                lo = w * 4
                full = keep >= lo + 4
                part = (keep > lo) & ~full
                v[~full & ~part] = 0
                if part.any():
                    nbytes = (keep[part] - lo).astype(np.uint32)
                    v[part] &= ((np.uint64(1) << (nbytes.astype(np.uint64) * np.uint64(8))) - np.uint64(1)).astype(
                        np.uint32)
                out.append(v)
            M.store(st.mem, dst_space, d[sel], np.uint32, out, lanes[sel])
    return _op(f)


def _build_bulk(ctx: Ctx) -> Op:
    """cp{.reduce}.async.bulk: global or shared::cta to shared::cta/cluster completes transaction bytes on an
    mbarrier (a shared::cluster destination and its mbarrier may be another CTA's; .multicast::cluster
    writes several); the global destination form (bulk_group) may reduce. Tensor-map copies and L2
    prefetches are in ops_tma."""
    ins = ctx.ins
    if ins.has("prefetch"):
        return ops_tma.build_prefetch(ctx)
    if ins.has("tensor"):
        return ops_tma.build_tensor(ctx)
    spaces = [s.split("::")[0] for s in ins.suffixes if s.split("::")[0] in ("global", "shared")]
    to_global = spaces[:1] == ["global"]
    src_default = spaces[1] if len(spaces) > 1 else "shared" if to_global else "global"
    ops = ins.operands
    dst_space, dst = ctx.address(ops[0], "global" if to_global else "shared")
    src_space, src = ctx.address(ops[1], src_default)
    size = ctx.read(ops[2], ".u32")
    mbar = mask = None
    if not to_global:
        if len(ops) < 4:
            raise ctx.error("a bulk copy into shared memory needs an mbarrier operand")
        mbar = ctx.address(ops[3], "shared")
        if ins.has("multicast::cluster"):
            if len(ops) < 5:
                raise ctx.error(f"{ins.mnemonic}: .multicast::cluster needs a ctaMask operand after [mbar]")
            mask = ctx.read(ops[4], ".b16")
    reduce_op = None
    if ins.has("reduce"):
        reduce_op = next((s for s in ins.suffixes if s in ops_tma.BULK_RED_OPS), None)
        if reduce_op is None:  # atom's .exch/.cas are no reductions: ptxas refuses them here
            atom_op = next((f".{s} is no reduction; " for s in ins.suffixes if s in OPS), "")
            raise ctx.error(f"{ins.mnemonic}: {atom_op}needs one of {', '.join(sorted(ops_tma.BULK_RED_OPS))}")
        rty = ins.types[-1]
        step, ufunc, vdtype = _combine(reduce_op, rty)
        ebytes = bits_of_type(rty) // 8
        edt = np.dtype(f"u{ebytes}")

    def addr_dtype(space):
        return np.int64 if space in ("shared", "param", "local") else np.uint64

    def f(st, m):
        lanes = _lanes(st, m)
        n = st.N
        d = _compact(dst(st), lanes, n, addr_dtype(dst_space))
        s_ = _compact(src(st), lanes, n, addr_dtype(src_space))
        sz = _compact(size(st), lanes, n, np.int64)
        bars = None if mbar is None else _compact(mbar[1](st), lanes, n, np.int64)
        if mask is not None:
            _multicast(st, lanes, d, s_, sz, _compact(mask(st), lanes, n, np.int64), bars)
            return
        if reduce_op is None and _copy_together(st, lanes, d, s_, sz, dst_space, src_space, mbar, bars):
            return
        for i, lane in enumerate(lanes.tolist()):
            k = int(sz[i])
            if k % 16:
                raise M.MemoryFault(f"cp.async.bulk size {k} is not a multiple of 16")
            # a shared::cluster destination is written as the thread of the CTA that owns it
            dlane, d0 = ops_tma.owner(st, lane, dst_space, int(d[i]))
            if reduce_op is None:
                offs = np.arange(0, k, 4)
                v = M.load(st.mem, src_space, s_[i] + offs.astype(s_.dtype), np.uint32, 1, np.full(offs.size, lane))[0]
                M.store(st.mem, dst_space, np.asarray(d0 + offs).astype(d.dtype), np.uint32, [v],
                        np.full(offs.size, dlane))
            else:
                offs = np.arange(0, k, ebytes)
                v = M.load(st.mem, src_space, s_[i] + offs.astype(s_.dtype), edt, 1, np.full(offs.size, lane))[0]
                da = np.asarray(d0 + offs).astype(d.dtype)
                r = st.mem.resolve(dst_space, da, ebytes, np.full(offs.size, dlane), write=True)
                buf, idx = r if not isinstance(r, list) else (r[0][1], r[0][2])
                ei, ev = np.asarray(idx) >> (ebytes.bit_length() - 1), np.asarray(v, edt)
                if to_global:  # element-wise atomics, also against other processes sharing the memory
                    atomic_apply_global(st, da, buf.view(edt), ei, ev, step, ufunc, vdtype)
                else:
                    atomic_apply(buf.view(edt), ei, ev, None, step, ufunc, vdtype)
            if mbar is not None:
                ops_tma.complete_tx(st, lane, mbar[0], int(bars[i]), k)
    return _op(f)


def _copy_together(st, lanes, dst, src, size, dst_space, src_space, mbar, bars) -> bool:
    """The plain copies of a cp.async.bulk run by several lanes, as one load, one store and one mbarrier
    update, when that is the same as the lanes one after another: no check that watches the memory needs
    them apart (the sanitizer does; `Check.whole_bulk_copies`), no destination overlaps another lane's
    destination or source or an mbarrier of the copy, and no destination or mbarrier is another CTA's.
    Else False, with nothing done."""
    hooks = st.mem.hooks
    if st.mem.reference or lanes.size < 2 or (hooks is not None and not hooks.whole_bulk_copies):
        return False
    if not {dst_space, src_space} <= {"shared", "global"} or (mbar is not None and mbar[0] != "shared"):
        return False
    k = size.astype(np.int64)
    if (k % 16).any():
        return False  # the lane-by-lane path names the lane's size
    d0, s0 = dst.astype(np.int64), src.astype(np.int64)
    if st.mem.cluster_size > 1:  # shared addresses may name another CTA: the lane-by-lane path owns that
        return False
    if dst_space == "shared" and ((d0 < 0) | (d0 >> M.CLUSTER_RANK_SHIFT != 0)).any():
        return False
    if mbar is not None and mbar[0] == "shared" and ((bars < 0) | (bars >> M.CLUSTER_RANK_SHIFT != 0)).any():
        return False
    # a CTA's shared offsets: apart from the other CTAs' (each wave slot's window), the key's high bits
    key = np.asarray(st.machine.slot, np.int64)[lanes] << 40
    kd = key if dst_space == "shared" else 0
    ks = key if src_space == "shared" else 0
    same = src_space == dst_space
    lo = [d0 + kd] + ([s0 + ks] if same else []) + ([bars + key] if mbar is not None else [])
    hi = [d0 + kd + k] + ([s0 + ks + k] if same else []) + ([bars + key + 8] if mbar is not None else [])
    starts, ends = np.concatenate(lo), np.concatenate(hi)
    is_dst = np.zeros(starts.size, bool)
    is_dst[:lanes.size] = True
    order = np.argsort(starts, kind="stable")
    # any interval overlapping a destination: the running end of the sorted intervals passes the next start
    s_sorted, e_sorted, d_sorted = starts[order], ends[order], is_dst[order]
    run_end = np.maximum.accumulate(e_sorted)
    run_dst_end = np.maximum.accumulate(np.where(d_sorted, e_sorted, np.iinfo(np.int64).min))
    if s_sorted.size > 1 and ((s_sorted[1:] < run_dst_end[:-1]).any() or
                              (d_sorted[1:] & (s_sorted[1:] < run_end[:-1])).any()):
        return False
    offs = np.concatenate([np.arange(0, int(x), 4, dtype=np.int64) for x in k.tolist()])
    who = np.repeat(lanes, k // 4)
    base_s = np.repeat(s0, k // 4) + offs
    base_d = np.repeat(d0, k // 4) + offs
    v = M.load(st.mem, src_space, base_s.astype(src.dtype), np.uint32, 1, who)[0]
    M.store(st.mem, dst_space, base_d.astype(dst.dtype), np.uint32, [v], who)
    if mbar is not None:
        one = np.zeros(st.N, bool)
        one[lanes] = True
        at = np.zeros(st.N, np.int64)
        at[lanes] = bars
        _mbar_update(st, one, mbar[0], lambda st_: at, count=0, tx=-k, tx_lanes=True)
    return True


def _multicast(st, lanes, dst, src, size, masks, bars) -> None:
    """cp.async.bulk.shared::cluster.global...multicast::cluster: `size` bytes from global memory to the
    same shared offset, and a complete-tx on the mbarrier at the same offset, in each CTA of ctaMask."""
    for i, lane in enumerate(lanes.tolist()):
        k = int(size[i])
        if k % 16:
            raise M.MemoryFault(f"cp.async.bulk size {k} is not a multiple of 16")
        offs = np.arange(0, k, 4)
        v = M.load(st.mem, "global", np.uint64(src[i]) + offs.astype(np.uint64), np.uint32, 1,
                   np.full(offs.size, lane))[0]
        d0, bar = ops_tma.shared_offset(int(dst[i])), ops_tma.shared_offset(int(bars[i]))
        for r in ops_tma.cta_mask_ranks(st, lane, int(masks[i])):
            c = ops_tma.in_cta(r)
            ops_tma.land(st, "shared", d0 + c + offs, np.asarray(v, np.uint32), ops_tma.cluster_lane(st, lane, r),
                         bar + c, k)


# ---------------------------------------------------------------------------- mbarrier


def build_mbarrier(ctx: Ctx) -> Op:
    ins = ctx.ins
    ops = ins.operands
    sp = space_of(ins)
    sp = "shared" if sp == "generic" and not ins.has("b64") else sp
    if ins.has("init"):
        space, addr = ctx.address(ops[0], sp)
        count = ctx.read(ops[1], ".u32")

        def init(st, m):
            lanes = _lanes(st, m)
            c = np.broadcast_to(np.asarray(count(st), np.uint64), (st.N,))[lanes]
            a = np.broadcast_to(np.asarray(addr(st)), (st.N,))[lanes]
            M.store(st.mem, space, a, np.uint64, [_pack(c, c, np.uint64(0), np.uint64(0))], lanes)
        return _op(init)
    if ins.has("inval"):
        space, addr = ctx.address(ops[0], sp)
        return _op(lambda st, m: M.store(st.mem, space, np.broadcast_to(np.asarray(addr(st)), (st.N,))[
            _lanes(st, m)], np.uint64, [np.uint64(0)], _lanes(st, m)))
    if ins.has("pending_count"):
        d, s = ctx.write(ops[0], ".u32"), ctx.read(ops[1], ".b64")
        return _op(lambda st, m: d(st, (np.asarray(s(st), np.uint64) & F).astype(np.uint32), m))
    if ins.has("expect_tx") and not ins.has("arrive") or ins.has("complete_tx"):
        space, addr = ctx.address(ops[0], sp)
        txr = ctx.read(ops[1], ".u32")
        sign = 1 if ins.has("expect_tx") else -1

        def transact(st, m):
            _mbar_update(st, m, space, addr, count=0, tx=sign * np.asarray(txr(st), np.int64))
        return _op(transact)
    if ins.has("arrive") or ins.has("arrive_drop"):
        d = ctx.write(ops[0], ".b64")
        space, addr = ctx.address(ops[1], sp)
        extra = ctx.read(ops[2], ".u32") if len(ops) > 2 else None
        expect = ins.has("expect_tx")
        drop = ins.has("arrive_drop")

        def arrive(st, m):
            lanes = _lanes(st, m)
            if expect:
                old = _mbar_update(st, m, space, addr, count=1, tx=np.asarray(extra(st), np.int64))
            else:
                cnt = 1 if extra is None else np.asarray(extra(st), np.int64)
                old = _mbar_update(st, m, space, addr, count=cnt, drop=drop)
            full = np.zeros(st.N, np.uint64)
            full[lanes] = old
            d(st, full, m)
        return _op(arrive)
    if ins.has("test_wait") or ins.has("try_wait"):
        p = ctx.write(ops[0], ".pred")
        space, addr = ctx.address(ops[1], sp)
        parity = ins.has("parity")
        tok = ctx.read(ops[2], ".u32" if parity else ".b64")

        def wait(st, m):
            lanes = _lanes(st, m)
            a = np.broadcast_to(np.asarray(addr(st)), (st.N,))[lanes]
            cur = M.load(st.mem, space, a, np.uint64, 1, lanes)[0] >> S_PH
            t = np.broadcast_to(np.asarray(tok(st)), (st.N,))[lanes]
            want = (np.asarray(t, np.uint64) & np.uint64(1)) if parity else (np.asarray(t, np.uint64) >> S_PH)
            full = np.zeros(st.N, bool)
            done = cur != want
            full[lanes] = done
            if lanes.size and not done.any():
                st.spun = True  # (machine.py: the scheduler lets other lanes run)
            p(st, full, m)
        return _op(wait)
    raise ctx.error(f"{ins.mnemonic} is not supported")


# ---------------------------------------------------------------------------- st.bulk


def build_st_bulk(ctx: Ctx) -> Op:
    """st.bulk{.weak}{.shared::cta} [a], size, 0: each thread sets `size` bytes of shared memory from `a` to 0.

    The bytes are stored through the memory choke point as 8-byte words (ptxas 13.0 lowers st.bulk to
    UMEMSETS.64, which clears 8-byte granules), so a range running past the block's shared memory, or an
    address that is not a multiple of 8, faults as an 8-byte st.shared would, and checks see every byte
    written. What the PTX ISA leaves undefined faults too: a size that is not a multiple of 8 or is above
    16777216, and a generic address outside the shared window."""
    ins = ctx.ins
    ops = ins.operands
    if len(ops) != 3:
        raise ctx.error("expected 3 operands: [a], size, initval")
    init = ops[2]
    if not (isinstance(init, ir.Immediate) and not init.is_float and init.value == 0):
        raise ctx.error("initval must be the constant 0, the only value the PTX ISA allows")
    space, addr = ctx.address(ops[0], "shared" if ins.has("shared::cta") else "generic")
    size, signed = _st_bulk_size(ctx, ops[1])
    adt = np.int64 if space == "shared" else np.uint64
    window = np.uint64(M.SHARED_WINDOW >> M.WINDOW_BITS)

    def f(st, m):
        lanes = _lanes(st, m)
        if lanes.size == 0:
            return
        a = _compact(addr(st), lanes, st.N, adt)
        sz = _compact(size(st), lanes, st.N, np.int64)
        bad = (sz < 0) | (sz > ST_BULK_MAX_SIZE) | (sz % ST_BULK_GRANULE != 0)
        if bad.any():
            j = int(np.flatnonzero(bad)[0])
            k = int(sz[j]) if signed or sz[j] >= 0 else int(sz[j]) + (1 << 64)  # as the register holds it
            why = f"not a multiple of {ST_BULK_GRANULE}" if 0 <= k <= ST_BULK_MAX_SIZE else \
                f"outside [0, {ST_BULK_MAX_SIZE}]"
            raise ops_tma._fault(f"st.bulk size {k} is {why} (undefined in the PTX ISA)", int(lanes[j]),
                                 "misaligned" if 0 <= k <= ST_BULK_MAX_SIZE else "out-of-bounds")
        if space == "generic" and ((a >> np.uint64(M.WINDOW_BITS)) != window).any():
            j = int(np.flatnonzero((a >> np.uint64(M.WINDOW_BITS)) != window)[0])
            raise ops_tma._fault(f"st.bulk generic address {int(a[j]):#x} is not in the shared window (st.bulk "
                                 f"initializes shared memory; the PTX ISA leaves other addresses undefined)",
                                 int(lanes[j]))
        # words per lane; past the end of the window one word is enough to fault, so no more are made
        counts = np.minimum(sz // ST_BULK_GRANULE, st.mem.shared_size // ST_BULK_GRANULE + 1)
        total = int(counts.sum())
        if total == 0:
            return
        first = np.repeat(np.cumsum(counts) - counts, counts)
        offs = (np.arange(total, dtype=np.int64) - first) * ST_BULK_GRANULE
        words = np.repeat(a, counts) + offs.astype(adt)
        M.store(st.mem, space, words, np.uint64, [np.zeros(total, np.uint64)], np.repeat(lanes, counts))
    return _op(f)


def _st_bulk_size(ctx: Ctx, op: ir.Operand) -> tuple[Reader, bool]:
    """(reader of st.bulk's size as int64 per lane, whether the operand is signed): a 32-bit register (or
    register+offset, added in 32 bits) extends by its signedness, anything else is read as 64 bits."""
    reg = op.register if isinstance(op, ir.RegisterOffset) else op
    hit = ctx.lookup(reg.name) if isinstance(reg, ir.Register) else None
    rty = ctx.reg_type(hit[1]) if isinstance(hit, tuple) else ".u64"
    signed = is_signed(rty)
    if bits_of_type(rty) != 32:
        r64 = ctx.read(op, ".u64")
        return (lambda st: np.asarray(r64(st)).astype(np.uint64).view(np.int64)), signed
    r32 = ctx.read(op, ".s32" if signed else ".u32")
    dt = np.int32 if signed else np.uint32
    return (lambda st: np.asarray(r32(st)).astype(np.uint32).view(dt).astype(np.int64)), signed


BUILDERS = {"cp": build_cp, "mbarrier": build_mbarrier, "st.bulk": build_st_bulk,
            "tensormap.replace": ops_tma.build_tensormap_replace,
            "tensormap.cp_fenceproxy": ops_tma.build_tensormap_cp_fenceproxy}
