"""The mbarrier state word and arrivals on it, shared by mbarrier.*, cp.async.bulk, TMA, st.async/red.async
and tcgen05.commit.

An mbarrier is an 8-byte shared-memory word; this emulator's
encoding (opaque to programs) is: bits 0-20 pending arrivals, 21-41 expected arrivals,
42-62 the tx-count (signed, two's complement: a complete-tx may land before its expect-tx, e.g. a
multicast copy from another CTA of the cluster), 63 phase parity. A phase completes when the pending
arrivals and the tx-count are both zero. Arrivals from many lanes are applied in lane order.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np

from ptxforge.emu.op import NORMAL, Op
from ptxforge.emu.rmw import atomic_apply

if TYPE_CHECKING:
    from ptxforge.emu.operands import Ctx

F = np.uint64(0x1FFFFF)
S_EXP, S_TX, S_PH = np.uint64(21), np.uint64(42), np.uint64(63)


def _op(fn):
    return Op(NORMAL, fn=fn)


def _lanes(st, m):
    return np.arange(st.N) if m is None else np.flatnonzero(m)


TX_LIMIT = (1 << 20) - 1  # the tx-count range is -TX_LIMIT..TX_LIMIT


def _unpack(s):
    """(pending arrivals, expected arrivals, tx-count as uint64 two's complement, phase)."""
    s = np.asarray(s, np.uint64)
    tx = ((s >> S_TX) & F).astype(np.int64)
    tx = np.where(tx > TX_LIMIT, tx - (1 << 21), tx).astype(np.uint64)
    return s & F, (s >> S_EXP) & F, tx, s >> S_PH


def _pack(pend, exp, tx, ph):
    return (pend & F) | ((exp & F) << S_EXP) | ((tx & F) << S_TX) | (ph << S_PH)


def _step(old, cnt, tx):
    """Apply arrivals `cnt` (and transaction bytes `tx`, negative = completed) to states `old`."""
    pend, exp, txc, ph = _unpack(old)
    p = pend.astype(np.int64) - np.asarray(cnt, np.int64)
    t = txc.view(np.int64) + (0 if tx is None else np.asarray(tx).astype(np.uint64).view(np.int64))
    done = (p <= 0) & (t == 0)
    p = np.where(done, exp.astype(np.int64), np.maximum(p, 0))
    t = np.clip(np.where(done, 0, t), -TX_LIMIT, TX_LIMIT)
    ph = np.where(done, ph ^ np.uint64(1), ph)
    return _pack(p.astype(np.uint64), exp, t.astype(np.uint64), ph.astype(np.uint64))


def _mbar_update(st, m, space, addr, count=1, tx=None, drop=False, tx_lanes=False):
    """Arrive on the mbarrier at `addr` for the lanes of `m`; returns the old states (compact)."""
    lanes = _lanes(st, m)
    if lanes.size == 0:
        return np.zeros(0, np.uint64)
    a = np.broadcast_to(np.asarray(addr(st)), (st.N,))[lanes]
    if space == "generic":
        r = st.mem.resolve("generic", a, 8, lanes, write=True)
    else:
        r = st.mem.resolve(space, a, 8, lanes, write=True)
    buf, idx = r if not isinstance(r, list) else (r[0][1], r[0][2])
    view = buf.view(np.uint64)
    cnt = np.broadcast_to(np.asarray(count, np.int64), (st.N,))[lanes] if np.ndim(count) else \
        np.full(lanes.size, count, np.int64)
    txv = None
    if tx is not None:
        txv = np.asarray(tx, np.int64)
        txv = txv if tx_lanes else np.broadcast_to(txv, (st.N,))[lanes] if np.ndim(txv) else \
            np.full(lanes.size, int(txv), np.int64)
        txv = txv.view(np.uint64)

    def step(o, c, t):
        new = _step(o, c.view(np.int64), t)
        if drop:
            pend, exp, txc, ph = _unpack(new)
            new = _pack(pend, exp - np.uint64(1), txc, ph)
        return new
    return atomic_apply(view, np.asarray(idx) >> 3, cnt.view(np.uint64), txv, step, None, np.uint64)


def with_complete_tx(ctx: Ctx, op: Op, nbytes: int) -> Op:
    """st.async / red.async ...mbarrier::complete_tx::bytes: after the access, complete `nbytes`
    transaction bytes on the mbarrier of the last operand (often another CTA's, via mapa)."""
    ins = ctx.ins
    if not (ins.has("async") and ins.has("mbarrier::complete_tx::bytes")):
        return op
    space, bar = ctx.address(ins.operands[-1], "shared")
    inner = op.fn

    def f(st, m):
        inner(st, m)
        _mbar_update(st, m, space, bar, count=0, tx=-nbytes)
    return _op(f)
