"""Asynchronous copies and mbarriers: cp.async (+ commit/wait groups), cp.async.bulk, mbarrier.*
(cp.async.bulk.tensor and cp.async.bulk.prefetch: ops_tma).

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
from ptxforge.emu.operands import bits_of_type
from ptxforge.emu.ops_atomic import OPS, _combine
from ptxforge.emu.ops_memory import space_of
from ptxforge.emu.rmw import atomic_apply, atomic_apply_global
from ptxforge.ptx import ir

if TYPE_CHECKING:
    from ptxforge.emu.operands import Ctx


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
            vals = M.load(st.mem, src_space, s[sel], np.uint32, words, lanes[sel]) if (ss[sel] > 0).any() \
                else [np.zeros(int(sel.sum()), np.uint32)] * words
            keep = ss[sel]
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
        reduce_op = next(s for s in ins.suffixes if s in OPS)
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
            ops_tma.land(st, "shared", d0 + offs, np.asarray(v, np.uint32), ops_tma.cluster_lane(st, lane, r), bar, k)


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
            full[lanes] = cur != want
            p(st, full, m)
        return _op(wait)
    raise ctx.error(f"{ins.mnemonic} is not supported")


BUILDERS = {"cp": build_cp, "mbarrier": build_mbarrier}
