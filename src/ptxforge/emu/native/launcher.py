"""Run a launch's blocks on the native tier: the machine code over all blocks, spread over threads.

Each worker thread takes chunks of blocks from a shared counter and calls the compiled `run_blocks` (ctypes
drops the GIL for the call), with its own shared-memory buffer; blocks write their own count slot, so the
counts never race. A fault stops every worker at its next segment; the launcher then raises the fault the
interpreter would (out of bounds, misaligned, read-only), naming the PTX line, the thread and the block.
"""

from __future__ import annotations

import ctypes
import os
import threading
import time
from typing import TYPE_CHECKING, Any

import numpy as np

from ptxforge.emu.errors import EmulatorError, MemoryFault, WatchdogTimeout
from ptxforge.emu.memory import describe_address
from ptxforge.emu.native import codegen as G
from ptxforge.emu.native.jit import load

if TYPE_CHECKING:
    from ptxforge.emu.machine import Machine
    from ptxforge.emu.native.plan import NativePlan

_RUN = ctypes.CFUNCTYPE(None, ctypes.c_void_p, ctypes.c_int64, ctypes.c_int64)


def default_threads() -> int:
    """Worker threads a launch uses unless told: every core this process may run on."""
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except AttributeError:  # (not Linux)
        return max(1, os.cpu_count() or 1)


def validity_map(memory: Any) -> np.ndarray:
    """Per 64-byte granule of the arena: how many of its bytes from its start lie in an allocation (flag 0x80:
    a read-only one). Allocations start on 256-byte boundaries, so a granule belongs to at most one."""
    n = (memory.arena.size + G.GRANULE - 1) // G.GRANULE
    gmap = np.zeros(n + 1, np.uint8)
    for a in memory.allocations:
        first, end = a.offset, a.offset + a.size
        g0, g1 = first // G.GRANULE, (end + G.GRANULE - 1) // G.GRANULE
        valid = np.minimum(end - np.arange(g0, g1, dtype=np.int64) * G.GRANULE, G.GRANULE).astype(np.uint8)
        gmap[g0:g1] = valid | (G.GMAP_READONLY if a.readonly else 0)
    return gmap


def run_native(m: Machine, plan: NativePlan, threads: int | None = None) -> dict:
    """Run every block of the launch `m` (a Machine set up for it) natively; its stats as `Machine.run` gives."""
    t0 = time.perf_counter()
    assert plan.ir_text is not None
    fn = _RUN(load(plan.ir_text))
    memory = m.device
    arena = memory.arena
    gmap = validity_map(memory)
    nblocks = m.nblocks
    nthreads = max(1, min(threads or default_threads(), nblocks))
    status = np.zeros(8, np.int64)
    counts = np.zeros(nblocks, np.int64)
    shared_size = int(m.shared_size)
    params = m.params
    chunk = max(1, nblocks // (nthreads * 8))
    next_block = [0]
    lock = threading.Lock()
    errors: list[BaseException] = []

    def worker() -> None:
        shared = np.zeros(max(shared_size, 8), np.uint8)
        ctx = np.zeros(G.CTX_LEN, np.int64)
        ctx[G.CTX_PARAMS] = params.ctypes.data
        ctx[G.CTX_ARENA] = arena.ctypes.data
        ctx[G.CTX_ARENA_SIZE] = arena.size
        ctx[G.CTX_GMAP] = gmap.ctypes.data
        ctx[G.CTX_SHARED] = shared.ctypes.data
        ctx[G.CTX_STATUS] = status.ctypes.data
        ctx[G.CTX_COUNTS] = counts.ctypes.data
        ctx[G.CTX_GRID:G.CTX_GRID + 3] = m.grid
        ctx[G.CTX_SHARED_SIZE] = shared_size
        try:
            while status[0] == 0:
                with lock:
                    first = next_block[0]
                    next_block[0] = first + chunk
                if first >= nblocks:
                    return
                fn(ctx.ctypes.data, first, min(first + chunk, nblocks))
        except BaseException as e:  # (a ctypes error): reported by the launcher
            errors.append(e)
            status[0] = G.ST_STOP

    limit = m.time_limit_s if m.time_limit_s is not None else m.watchdog_s
    if nthreads == 1:
        worker_thread = None
        worker()
    else:
        pool = [threading.Thread(target=worker, daemon=True) for _ in range(nthreads)]
        for t in pool:
            t.start()
        deadline = time.monotonic() + limit
        for t in pool:
            t.join(max(0.0, deadline - time.monotonic()) if limit != float("inf") else None)
        if any(t.is_alive() for t in pool):
            status[0] = G.ST_STOP
            for t in pool:
                t.join()
            raise WatchdogTimeout(f"{m.layout.kernel_func.name}: the native tier stopped the launch after "
                                  f"{limit:g} s (its wall-clock limit: watchdog_s / time_limit_s)")
        worker_thread = pool
    del worker_thread
    if errors:
        raise EmulatorError(f"{m.layout.kernel_func.name}: the native tier failed: {errors[0]}")
    if status[0] != 0:
        raise _fault(m, status)
    per_slot_sm = m.sm_ids[np.arange(m.resident) % m.sm_ids.size]
    per_sm = np.zeros_like(m.per_sm)
    np.add.at(per_sm, per_slot_sm[np.arange(nblocks) % m.resident], counts)
    return {"thread_instructions": int(counts.sum()), "per_sm": per_sm, "wall_s": time.perf_counter() - t0,
            "waves": -(-nblocks // m.resident), "resident_blocks": m.resident, "steps": 0}


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
    space = "shared" if ".shared" in op.text.split()[0] else "global"
    note = ""
    if space == "global" and code != G.ST_MISALIGNED:
        memory = m.device
        note = (f"{_alloc_name(memory, addr)} is read-only" if code == G.ST_READONLY
                else describe_address(memory.allocations, addr, nbytes))
    msg = f"{kind} {space} access of {nbytes} bytes at {addr:#x}" + (f" ({note})" if note else "")
    return MemoryFault(f"{op.where}: {op.text}: {msg} by {who}", kind=kind, address=addr, size=nbytes, thread=tid,
                       block=cta, ptx_line=op.line, instruction=op.text)


def _alloc_name(memory: Any, addr: int) -> str:
    a = memory.find(addr)
    return (a.name or "allocation") if a is not None else "allocation"
