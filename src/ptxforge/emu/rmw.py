"""Read-modify-write of memory words in lane order: the one primitive atom/red, mbarrier arrivals and TMA
reductions share.

Lanes hitting distinct addresses update in one vector step. Lanes sharing an address are applied in
lane order: by rank rounds (k-th lane of every address group at once) for small groups, and by a
sequential `ufunc.accumulate` per group for large groups of associative ops.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np

if TYPE_CHECKING:
    from collections.abc import Callable

    import numpy.typing as npt

    from ptxforge.emu.operands import Value

SMALL_GROUP = 32


def atomic_apply(view: np.ndarray, ei: np.ndarray, vals: Value, cvals: Value | None,
                 step: Callable[[Value, Value, Value], Value], ufunc: np.ufunc | None,
                 vdtype: npt.DTypeLike) -> np.ndarray:
    """Apply an atomic to elements `ei` of `view` in lane order; returns the old values."""
    ei = np.asarray(ei)
    n = ei.size
    vals = np.broadcast_to(vals, (n,)).copy() if np.ndim(vals) == 0 else vals
    cvals = None if cvals is None else (np.broadcast_to(cvals, (n,)).copy() if np.ndim(cvals) == 0
                                        else cvals)
    old = np.empty(n, view.dtype)
    order = np.argsort(ei, kind="stable")
    se = ei[order]
    start = np.ones(n, bool)
    start[1:] = se[1:] != se[:-1]
    starts = np.flatnonzero(start)
    sizes = np.diff(np.append(starts, n))
    if sizes.size == n:  # all distinct
        o = view[ei]
        old[:] = o
        view[ei] = step(o, vals, cvals)
        return old
    gid = np.cumsum(start) - 1
    rank = np.arange(n) - starts[gid]
    big = sizes > SMALL_GROUP
    if ufunc is not None and big.any():
        for g in np.flatnonzero(big):  # sequential accumulate inside each large group
            lanes = order[starts[g]: starts[g] + sizes[g]]
            e = se[starts[g]]
            seq = np.concatenate(([view[e].view(vdtype)], vals[lanes].view(vdtype)))
            acc = ufunc.accumulate(seq, dtype=vdtype)
            old[lanes] = acc[:-1].view(view.dtype)
            view[e] = acc[-1].view(view.dtype)
        small_lane = ~big[gid]
        rounds = int(rank[small_lane].max()) + 1 if small_lane.any() else 0
    else:
        small_lane = np.ones(n, bool)
        rounds = int(sizes.max())
    for r in range(rounds):
        sel = order[(rank == r) & small_lane]
        if sel.size == 0:
            continue
        e = ei[sel]
        o = view[e]
        old[sel] = o
        view[e] = step(o, vals[sel], None if cvals is None else cvals[sel])
    return old
