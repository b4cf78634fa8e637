"""Read-modify-write of memory words in lane order: the one primitive atom/red, mbarrier arrivals and TMA
reductions share; and the cross-process lock they hold on memory other processes share.

Lanes hitting distinct addresses update in one vector step. Lanes sharing an address are applied in
lane order: by rank rounds (k-th lane of every address group at once) for small groups, and by a
sequential `ufunc.accumulate` per group for large groups of associative ops.

The lock: `DeviceMemory.atomic_lock` (set by ptxforge.emu.ipc's memory only) around every read-modify-write
of global memory that must be atomic against other processes: atom/red, strong stores, and the element-wise
reductions of cp.reduce.async.bulk{.tensor}. Memory this process has alone has no lock, and pays nothing.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np

if TYPE_CHECKING:
    from collections.abc import Callable
    from contextlib import AbstractContextManager

    import numpy.typing as npt

    from ptxforge.emu.machine import LaneState
    from ptxforge.emu.operands import Value

SMALL_GROUP = 32


def cross_process_lock(st: LaneState) -> Callable[[npt.ArrayLike], AbstractContextManager[object]] | None:
    """The lock atomics hold on the memory `st` runs on when other processes share it (ipc/memory.py), else
    None (a lone device's or a Node's memory, whose `atomic_lock` is None)."""
    return st.mem.device.atomic_lock


def locked(fn: Callable[[LaneState, object], object],
           addr: Callable[[LaneState], Value]) -> Callable[[LaneState, object], object]:
    """An op function `fn(st, m)` that holds the cross-process lock on the addresses `addr(st)` where there
    is one (so another process's atomic never interleaves with it); elsewhere `fn` runs as it is."""
    def f(st, m):
        lock = cross_process_lock(st)
        if lock is None:
            return fn(st, m)
        with lock(addr(st)):
            return fn(st, m)
    return f


def atomic_apply_global(st: LaneState, addresses: Value, view: np.ndarray, ei: np.ndarray, vals: Value,
                        step: Callable[[Value, Value, Value], Value], ufunc: np.ufunc | None,
                        vdtype: npt.DTypeLike) -> np.ndarray:
    """`atomic_apply` on global memory at byte `addresses` (elements `ei` of `view`), holding the
    cross-process lock where there is one: the element-wise atomics of bulk and tensor reductions."""
    lock = cross_process_lock(st)
    if lock is None:
        return atomic_apply(view, ei, vals, None, step, ufunc, vdtype)
    with lock(addresses):
        return atomic_apply(view, ei, vals, None, step, ufunc, vdtype)


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
