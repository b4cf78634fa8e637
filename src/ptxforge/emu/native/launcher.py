"""Run a launch's blocks on the native tier: the machine code over all blocks, spread over threads.

The caller's thread runs a first chunk of blocks through the compiled `run_blocks` (ctypes drops the GIL for
the call) and times it; the rest it shares with the helper threads of the team (team.py), each worker taking
chunks of blocks from a shared counter inside the machine code, with its own shared-memory buffer; blocks
write their own count slot, so the counts never race. With the default thread count, a launch the first chunk
shows would finish within ALONE_S on the caller's thread runs there alone; `threads=N` uses N workers unless
the rest fits one chunk (or another thread's launch has the team: the caller runs it alone). A fault stops every
worker at its next segment; the launcher then raises the fault the interpreter would (out of bounds,
misaligned, read-only), naming the PTX line, the thread and the block.
"""

from __future__ import annotations

import ctypes
import math
import os
import threading
import time
import weakref
from typing import TYPE_CHECKING, Any

import numpy as np

from ptxforge.emu.errors import EmulatorError, MemoryFault, TimeLimitExceeded, WatchdogTimeout
from ptxforge.emu.memory import PAD, describe_address
from ptxforge.emu.native import codegen as G
from ptxforge.emu.native.jit import load
from ptxforge.emu.native.team import team
from ptxforge.emu.native.watchdog import STALLED_WORKER, WATCHDOG

if TYPE_CHECKING:
    from ptxforge.emu.machine import Machine
    from ptxforge.emu.native.plan import NativePlan

_RUN = ctypes.CFUNCTYPE(None, ctypes.c_void_p, ctypes.c_int64, ctypes.c_int64)


def default_threads() -> int:
    """Worker threads a launch uses unless told: every core this process may run on (asked once)."""
    if not _CORES:
        try:
            _CORES.append(max(1, len(os.sched_getaffinity(0))))
        except AttributeError:  # (not Linux)
            _CORES.append(max(1, os.cpu_count() or 1))
    return _CORES[0]


_CORES: list[int] = []


_Memory = tuple[int, int, int, int, tuple[np.ndarray, np.ndarray]]  # (`_global_memory`)
_MAPS: weakref.WeakKeyDictionary[Any, tuple[tuple, weakref.ref, _Memory]] = weakref.WeakKeyDictionary()
# (IR text, level asked: "quick", "opt", or "auto": quick or better) -> (the ctypes function, its level)
_FUNCS: dict[tuple[str, str], tuple[Any, str]] = {}


def _global_memory(memory: Any) -> _Memory:
    """(the arena's address, its size, the validity map's address, the allocation table's address, (the map, the
    table)) of `memory` as its launches see it (the addresses looked up once per arena and map)."""
    allocs = memory.allocations  # (one snapshot, taken before the arena: an arena only grows, so it holds them
    arena = memory.arena  # all even where another thread allocates meanwhile)
    key = (arena.size, allocs)  # (the same Allocation objects compare by identity first)
    last = _LAST_MAP[0]  # (the memory of the last launch: most launches run where the one before ran)
    hit = last[1] if last is not None and last[0]() is memory else _MAPS.get(memory)
    if hit is not None and hit[0] == key and hit[1]() is arena:
        found = hit[2]
    else:
        gmap, table = _build_map(arena.size, allocs), _allocation_table(allocs)
        found = (arena.ctypes.data, arena.size, gmap.ctypes.data, table.ctypes.data, (gmap, table))
        hit = _MAPS[memory] = (key, weakref.ref(arena), found)  # (a weak reference: a grown arena's old array
        # is not kept alive by its entry)
    if last is None or last[1] is not hit:
        _LAST_MAP[0] = (weakref.ref(memory), hit)
    return found


_LAST_MAP: list[tuple[weakref.ref, tuple] | None] = [None]


def _build_map(arena_size: int, allocs: tuple) -> np.ndarray:
    """The validity map of an arena of `arena_size` bytes holding `allocs`: a byte per 64-byte granule, its
    valid bytes from the granule's start and the read-only flag."""
    n = (arena_size + G.GRANULE - 1) // G.GRANULE
    gmap = np.zeros(n + 4, np.uint8)  # (+4: the code reads each entry as the low byte of an i32)
    for a in allocs:
        first, end = a.offset, a.offset + a.size
        g0, g1 = first // G.GRANULE, (end + G.GRANULE - 1) // G.GRANULE
        valid = np.minimum(end - np.arange(g0, g1, dtype=np.int64) * G.GRANULE, G.GRANULE).astype(np.uint8)
        gmap[g0:g1] = valid | (G.GMAP_READONLY if a.readonly else 0)
    return gmap


def _allocation_table(allocs: tuple) -> np.ndarray:
    """`allocs` by arena offset for `access_calls.alloc_window`: their count, then (start, end with the
    read-only flag in bit TABLE_READONLY_BIT) each."""
    allocs = tuple(sorted(allocs, key=lambda a: a.offset))
    table = np.zeros(1 + 2 * len(allocs), np.int64)
    table[0] = len(allocs)
    for i, a in enumerate(allocs):
        table[1 + 2 * i], table[2 + 2 * i] = a.offset, a.offset + a.size | int(a.readonly) << G.TABLE_READONLY_BIT
    return table


_LOCAL = threading.local()  # per thread: its shared-memory buffer and launch record, reused by later launches
STATUS_LEN = 8


def _shared_buffer(nbytes: int) -> int:
    """The address of this thread's shared-memory buffer of at least `nbytes` (the code zeroes it per block)."""
    buf = getattr(_LOCAL, "shared", None)
    if buf is None or buf[0].size < nbytes:
        arr = np.zeros(max(nbytes, 4096), np.uint8)
        buf = _LOCAL.shared = (arr, arr.ctypes.data)
    return buf[1]


class _Record:
    """A thread's launch record, reused by its later launches: the context, the status and a count per block
    (int64s: `arr`, at `address`; `words` writes single slots for a fraction of numpy's per-call cost), and
    a copy of the launch's parameter buffer (`params`, at `params_address`)."""

    __slots__ = ("arr", "words", "address", "status", "params", "params_view", "params_address")

    def __init__(self, nblocks: int, nparams: int) -> None:
        self.arr = np.zeros(max(G.CTX_LEN + STATUS_LEN + nblocks, 4096), np.int64)
        self.words = self.arr.data
        self.address = self.arr.ctypes.data
        self.status = self.arr[G.CTX_LEN:G.CTX_LEN + STATUS_LEN]
        self.params = np.zeros(max(nparams, 4096), np.uint8)
        self.params_view = self.params.data
        self.params_address = self.params.ctypes.data


_ZERO_STATUS = np.zeros(STATUS_LEN, np.int64).data
_ZERO_PAD = memoryview(bytes(PAD))


def _record(nblocks: int, nparams: int = 0) -> _Record:
    """This thread's launch record, with room for `nblocks` counts and `nparams` bytes of parameters."""
    rec: _Record | None = getattr(_LOCAL, "record", None)
    if rec is None or rec.arr.size < G.CTX_LEN + STATUS_LEN + nblocks or rec.params.size < nparams:
        rec = _LOCAL.record = _Record(max(nblocks, rec.arr.size if rec else 0),
                                      max(nparams, rec.params.size if rec else 0))
    return rec


def _probes(nthreads: int) -> tuple[np.ndarray, int]:
    """This thread's probe rows for a launch of `nthreads` workers (PROBE_BLOCK -1: nothing answered yet)."""
    pr = getattr(_LOCAL, "probes", None)
    if pr is None or pr[0].shape[0] < nthreads:
        arr = np.zeros((max(nthreads, 4), G.PROBE_LEN), np.int64)
        fresh = np.zeros(arr.shape, np.int64)
        fresh[:, G.PROBE_BLOCK] = -1
        pr = _LOCAL.probes = (arr, arr.ctypes.data, arr.data.cast("B"), fresh.data.cast("B"))
    arr = pr[0][:nthreads]
    pr[2][:] = pr[3]  # every row reset (a byte copy: numpy's two assignments cost more than a tiny launch's work)
    return arr, pr[1]


def per_sm_counts(m: Machine, counts: np.ndarray) -> np.ndarray:
    """Thread-instructions per SM: block b ran on slot b % resident of its wave, slot i on SM sm_ids[i % n]."""
    nblocks, sm_ids = counts.size, m.sm_ids
    if nblocks <= sm_ids.size:  # one wave, one block per SM (a small launch: skip the index arithmetic)
        if m.all_sms:  # (SM i is slot i: the counts are the first SMs')
            per_sm = np.zeros(m.per_sm.size, np.int64)
            per_sm[:nblocks] = counts
            return per_sm
        sms = sm_ids[:nblocks]
    elif m.all_sms and m.resident % sm_ids.size == 0:  # (block b on SM b % n: sum the rows of n blocks)
        n = sm_ids.size
        full = nblocks // n * n
        per_sm = counts[:full].reshape(-1, n).sum(0)
        per_sm[:nblocks - full] += counts[full:]
        return per_sm
    else:
        sms = sm_ids[np.arange(nblocks) % m.resident % sm_ids.size]
    return np.bincount(sms, weights=counts, minlength=m.per_sm.size).astype(np.int64)


def function(ir_text: str, level: str, exact: bool = False) -> tuple[Any, str]:
    """(the callable machine code of `ir_text`, the level it was compiled at) for a launch asking `level`
    (jit.load: unless `exact`, the optimized code serves a quick request once it is loaded)."""
    key = (ir_text, level if exact or level == "opt" else "auto")
    hit = _FUNCS.get(key)
    if hit is None or (hit[1] == "quick" and key[1] == "auto" and (ir_text, "opt") in _FUNCS):
        addr, got = load(ir_text, level, exact)
        hit = _FUNCS[key] = (_RUN(addr), got)
    return hit


def run_native(m: Machine, plan: NativePlan, threads: int | None = None, level: str = "opt",
               exact: bool = False, params: bytes | None = None) -> dict:
    """Run every block of the launch `m` (a Machine set up for it) natively at `level` (`function`), with the
    packed parameters `params` (None: the machine's own); its stats as `Machine.run` gives, with the compile
    level that ran (`level`)."""
    t0 = time.perf_counter()
    assert plan.ir_text is not None
    fn, ran_level = function(plan.ir_text, level, exact)
    arena_address, arena_size, gmap_address, table_address, _ = _global_memory(m.device)
    nblocks = m.nblocks
    nthreads = max(1, min(threads or default_threads(), nblocks))
    shared_size = int(m.shared_size)
    gx, gy, gz = m.grid
    raw: Any = m.params if params is None else params
    nraw = len(raw)
    padded = max(PAD, -(-nraw // PAD) * PAD)  # (zeros past the end, as the interpreter's parameter buffer has)
    rec = _record(nblocks, padded)
    pv = rec.params_view  # (the record's copy: its address is known, an array's costs a lookup)
    pv[:nraw] = raw
    pv[nraw:padded] = _ZERO_PAD[:padded - nraw]
    addr, w, status = rec.address, rec.words, rec.status
    counts = rec.arr[G.CTX_LEN + STATUS_LEN:G.CTX_LEN + STATUS_LEN + nblocks]
    w[G.CTX_LEN:G.CTX_LEN + STATUS_LEN] = _ZERO_STATUS
    w[G.CTX_PARAMS] = rec.params_address
    w[G.CTX_ARENA] = arena_address
    w[G.CTX_ARENA_SIZE] = arena_size
    w[G.CTX_GMAP] = gmap_address
    w[G.CTX_ALLOCS] = table_address
    w[G.CTX_SHARED] = _shared_buffer(shared_size)
    w[G.CTX_STATUS] = addr + 8 * G.CTX_LEN
    w[G.CTX_COUNTS] = addr + 8 * (G.CTX_LEN + STATUS_LEN)
    w[G.CTX_GRID], w[G.CTX_GRID + 1], w[G.CTX_GRID + 2] = gx, gy, gz
    w[G.CTX_SHARED_SIZE] = shared_size
    probes, w[G.CTX_PROBE] = _probes(nthreads)
    token = WATCHDOG.watch(status, probes, m.time_limit_s, m.watchdog_s)
    try:
        if nthreads == 1:  # (no team, no lock: a tiny launch's cost is mostly this path)
            fn(addr, 0, nblocks)
        else:  # every core unless the launch is small; as many workers as asked unless it fits one chunk
            _run_spread(fn, addr, w, nblocks, nthreads, shared_size, threads is None)
    finally:
        WATCHDOG.forget(token)
    code = w[G.CTX_LEN]  # (status[0])
    if code != 0:
        name = m.layout.kernel_func.name
        if code == G.ST_STOP:
            raise TimeLimitExceeded(f"{name}: kernel ran past its time limit of {m.time_limit_s:g} s (time_limit_s) "
                                    f"on the native tier")
        if code == G.ST_NO_PROGRESS:
            raise _no_progress(m, probes[int(status[STALLED_WORKER])])
        raise _fault(m, status.copy())
    per_sm = per_sm_counts(m, counts)
    # (a few blocks' counts summed in Python: numpy's sum costs more than that)
    total = sum(w[G.CTX_LEN + STATUS_LEN:G.CTX_LEN + STATUS_LEN + nblocks]) if nblocks <= 64 else int(counts.sum())
    return {"thread_instructions": total, "per_sm": per_sm, "wall_s": time.perf_counter() - t0,
            "waves": -(-nblocks // m.resident), "resident_blocks": m.resident, "steps": 0, "level": ran_level}


# a launch the caller's thread would finish alone within this (estimated) runs there: sharing costs the team's
# set-up and a helper's first look (a few microseconds when it spins, tens when it sleeps), and two workers share
# the caches and the memory (a 1M-thread vector add on two threads of a 2-core machine: 0.32 ms, not half of 0.53)
ALONE_S = 0.0001
CHUNK_S = 0.000005  # a chunk of blocks a worker claims runs at least about this long (estimated): a claim is a
# compare-and-swap in the machine code, and chunks shrink from 1/4 of the blocks left (two workers) to this
# in the team's quiet spells (helpers found no core lately) a launch under this (estimated) runs alone: a helper
# that loses its core mid-chunk keeps the caller waiting a time slice (milliseconds), while a longer launch gains
# from a helper even when it joins late
QUIET_MAX_S = 0.002


def _run_spread(fn: Any, addr: int, words: memoryview, nblocks: int, nthreads: int, shared_size: int,
                may_be_alone: bool) -> None:
    """The first chunk of blocks on the caller's thread, timed; the rest shared with up to `nthreads - 1` helpers
    of the team (team.py) unless it would take the caller under ALONE_S (`may_be_alone`: threads=None) or one
    chunk (threads=N) alone. The caller also runs alone whenever another thread's launch has the team, and with
    `may_be_alone` a launch under QUIET_MAX_S in the team's quiet spells."""
    first = max(1, min(nblocks // 8, max(nblocks // (nthreads * 64), 16)))  # (a few blocks at least: one
    # cold block's time is a poor estimate)
    t = time.perf_counter()
    fn(addr, 0, first)
    if words[G.CTX_LEN] != 0:  # (status[0]: a fault, a stop)
        return
    per_block = (time.perf_counter() - t) / first
    rest = nblocks - first
    if per_block * rest < (ALONE_S if may_be_alone else CHUNK_S):
        fn(addr, first, nblocks)
        return
    crew = team()
    quiet = may_be_alone and per_block * rest < QUIET_MAX_S and crew is not None and crew.quiet()
    if crew is None or quiet or not crew.lock.acquire(blocking=False):
        fn(addr, first, nblocks)
        return
    try:
        chunk = max(1, math.ceil(CHUNK_S / max(per_block, 1e-12)))
        fn_address = ctypes.cast(fn, ctypes.c_void_p).value or 0  # (the machine code the helpers call too)
        crew.run(fn_address, words[:G.CTX_LEN], addr, words[G.CTX_PROBE], nthreads, first, nblocks, chunk, shared_size)
    finally:
        crew.lock.release()


_KINDS = {G.ST_FAULT: "out-of-bounds", G.ST_MISALIGNED: "misaligned", G.ST_READONLY: "write to read-only memory"}


def _fault(m: Machine, status: np.ndarray) -> EmulatorError:
    code, pc, lane, bid, addr, nbytes, wr = (int(x) for x in status[:7])
    op = m.ops[pc]
    bx, by, _ = m.block
    gx, gy, _ = m.grid
    tid = (lane % bx, lane // bx % by, lane // (bx * by))
    cta = (bid % gx, bid // gx % gy, bid // (gx * gy))
    who = f"thread ({tid[0]},{tid[1]},{tid[2]}) block ({cta[0]},{cta[1]},{cta[2]})"
    if code == G.ST_NOT_CONVERGED:
        return EmulatorError(f"{op.where}: {op.text}: the native tier runs warp-wide instructions for converged "
                             f"member lanes only, and warp {lane // 32} of block ({cta[0]}, {cta[1]}, {cta[2]}) "
                             f"reached it diverged; launch with tier='interp' (or PTXFORGE_EMU_TIER=interp)")
    kind = _KINDS.get(code, "out-of-bounds")
    space = "shared" if "shared" in m.layout.placed[pc].ins.suffixes else "global"  # (the interpreter's notes:)
    if code == G.ST_MISALIGNED:
        note = f"needs {nbytes}-byte alignment"
    elif space == "shared":
        note = f"the shared window of this block is {int(m.shared_size)} bytes"
    else:
        memory = m.device
        note = (f"{_alloc_name(memory, addr)} is read-only" if code == G.ST_READONLY
                else describe_address(memory.allocations, addr, nbytes))
    msg = f"{kind} {space} access of {nbytes} bytes at {addr:#x}" + (f" ({note})" if note else "")
    return MemoryFault(f"{op.where}: {op.text}: {msg} by {who}", kind=kind, address=addr, size=nbytes, thread=tid,
                       block=cta, ptx_line=op.line, instruction=op.text)


def _no_progress(m: Machine, probe: np.ndarray) -> WatchdogTimeout:
    bid, warp, pc = (int(probe[i]) for i in (G.PROBE_BLOCK, G.PROBE_WARP, G.PROBE_PC))
    gx, gy, _ = m.grid
    cta = (bid % gx, bid // gx % gy, bid // (gx * gy))
    where = f"{m.ops[pc].where}: {m.ops[pc].text}" if 0 <= pc < len(m.ops) else "a barrier"
    return WatchdogTimeout(
        f"{m.layout.kernel_func.name}: kernel made no progress for {m.watchdog_s:g} s (watchdog_s): block "
        f"({cta[0]},{cta[1]},{cta[2]}) keeps coming back to the same state (the same pcs and registers, no memory "
        f"written), warp {warp} at {where}. The native tier runs a block's warps in turn and each worker's blocks "
        f"one after another: a block waiting for another block's write waits forever there; launch with "
        f"tier='interp' if the kernel waits on other blocks")


def _alloc_name(memory: Any, addr: int) -> str:
    a = memory.find(addr)
    return (a.name or "allocation") if a is not None else "allocation"
