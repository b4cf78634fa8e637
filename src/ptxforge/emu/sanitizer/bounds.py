"""Which lanes of a faulting access are bad, and why; the allocation nearest to a bad address.

The emulator's `LaneMemory.resolve` stops at the first bad lane. The sanitizer calls `classify` only on
that (rare) path, to find every bad lane of the access at once so it can report them and run the
instruction again for the good lanes.
"""

from __future__ import annotations

import bisect
from typing import Any

import numpy as np

from ptxforge.emu import memory as M

OK, OOB, MISALIGNED, READONLY = 0, 1, 2, 3
KIND_NAMES = {OOB: "out-of-bounds", MISALIGNED: "misaligned", READONLY: "read-only"}
_WIN = {M.SHARED_WINDOW >> M.WINDOW_BITS: "shared", M.LOCAL_WINDOW >> M.WINDOW_BITS: "local",
        M.PARAM_WINDOW >> M.WINDOW_BITS: "param", M.GLOBAL_BASE >> M.WINDOW_BITS: "global"}


def classify(mem: M.LaneMemory, space: str, addr: Any, nbytes: int, n: int,
             write: bool) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Per lane: (kind code, effective space name, offset/address as int64-able uint64) for n lanes."""
    a = np.broadcast_to(np.asarray(addr), (n,))
    a = a.astype(np.uint64) if a.dtype != np.uint64 else a
    kind = np.zeros(n, np.int8)
    spaces = np.empty(n, object)
    if space == "generic":
        win = (a >> np.uint64(M.WINDOW_BITS)).astype(np.int64)
        groups = {w: win == w for w in np.unique(win).tolist()}
    else:
        groups = {None: np.ones(n, bool)}
    for w, sel in groups.items():
        sp = space if w is None else _WIN.get(w, "global")
        if sp == "const":
            sp = "global"
        spaces[sel] = sp
        sub = a[sel]
        if w is not None and sp != "global":
            sub = sub - np.uint64(w << M.WINDOW_BITS)
        kind[sel] = _check(mem, sp, sub, nbytes, write)
    return kind, spaces, a


def _check(mem, space, a, nbytes, write):
    k = np.zeros(a.shape, np.int8)
    if space == "global":
        allocs = mem.device.allocations
        bases = np.asarray([x.base for x in allocs], np.uint64)
        ends = np.asarray([x.base + x.size for x in allocs], np.uint64)
        i = np.searchsorted(bases, a, side="right") - 1
        ic = np.clip(i, 0, None)
        if bases.size:  # without wrap-around: an address near 2^64 plus nbytes must not pass
            end = ends[ic]
            ok = (i >= 0) & (a < end) & (end - np.minimum(a, end) >= np.uint64(nbytes))
        else:
            ok = np.zeros(a.shape, bool)
        k[~ok] = OOB
        if write and bases.size:
            ro = np.asarray([x.readonly for x in allocs])[ic]
            k[ok & ro] = READONLY
    else:
        limit = {"shared": mem.shared_size, "local": mem.local_stride, "param": mem.params.size}[space]
        s = a.astype(np.int64)
        if space == "shared" and mem.cluster_size > 1:  # the CTA's rank in the high bits (memory.py)
            hi = s >> M.CLUSTER_RANK_SHIFT
            k[hi >= mem.cluster_size] = OOB
            s = np.where(hi > 0, s & M.CLUSTER_OFF_MASK, s)
        k[(s < 0) | (s > limit - nbytes)] = OOB
        if space == "param" and write:
            k[k == OK] = READONLY
    if nbytes > 1:
        mis = (a & np.uint64(nbytes - 1)) != 0
        k[(k == OK) & mis] = MISALIGNED
    return k


def nearest_allocation(device: M.DeviceMemory, addr: int) -> tuple[str, int, int] | None:
    """(name, base, size) of the allocation closest to `addr` (before or after it), or None."""
    allocs = device.allocations
    if not allocs:
        return None
    bases = [x.base for x in allocs]
    i = bisect.bisect(bases, addr) - 1
    cands = [allocs[j] for j in (i, i + 1) if 0 <= j < len(allocs)]

    def dist(x):
        if x.base <= addr < x.base + x.size:
            return 0
        return x.base - addr if addr < x.base else addr - (x.base + x.size) + 1
    best = min(cands, key=dist)
    return (best.name or f"allocation at {best.base:#x}"), best.base, best.size


def nearest_variable(variables: list[tuple[str, int, int]], off: int) -> tuple[str, int, int] | None:
    """(name, start, size) of the shared variable closest to shared offset `off`, or None."""
    if not variables:
        return None

    def dist(v):
        _, s, n = v
        if s <= off < s + max(n, 1):
            return 0
        return s - off if off < s else off - (s + n) + 1
    return min(variables, key=dist)
