"""Start a local torch.distributed world (one process per rank) and collect each rank's result.

Used to run pipelines on one machine: gloo for CPU ranks, NCCL when every rank has its own GPU.
"""

from __future__ import annotations

import multiprocessing as mp
import os
import queue as queue_mod
import socket
import time
import traceback
from collections.abc import Callable
from datetime import timedelta
from multiprocessing.context import ForkContext, ForkServerContext, SpawnContext
from typing import Any

from ptxforge import _optional


def free_port() -> int:
    """A TCP port that was free a moment ago on 127.0.0.1."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _entry(rank: int, world: int, port: int, backend: str, threads: int, fn, args, results) -> None:
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    try:
        torch = _optional.torch()
        dist = torch.distributed
        torch.set_num_threads(threads)
        if "nccl" in backend:
            torch.cuda.set_device(rank % torch.cuda.device_count())
        dist.init_process_group(backend, rank=rank, world_size=world, timeout=timedelta(seconds=120))
        try:
            results.put((rank, True, fn(rank, world, *args)))
        finally:
            dist.destroy_process_group()
    except BaseException:  # report every failure to the parent, which raises it
        results.put((rank, False, traceback.format_exc()))


def spawn(fn: Callable[..., Any], world_size: int, *args: Any, backend: str = "gloo", threads: int = 1,
          timeout: float = 300.0, start: str = "spawn") -> list[Any]:
    """Run `fn(rank, world_size, *args)` in `world_size` fresh processes that share an initialized default
    process group; return the per-rank results (picklable) in rank order. Raises RuntimeError with the
    failing ranks' tracebacks, or on timeout.

    start="fork" starts the ranks as copies of this process instead (no torch import per rank; gloo only,
    from a process that has initialized neither CUDA nor a process group of its own)."""
    ctx: SpawnContext | ForkContext | ForkServerContext
    if start == "spawn":
        ctx = mp.get_context("spawn")
    elif start == "fork":
        ctx = mp.get_context("fork")
    elif start == "forkserver":
        ctx = mp.get_context("forkserver")
    else:
        raise ValueError(f"start must be 'spawn', 'fork' or 'forkserver', got {start!r}")
    results = ctx.Queue()
    port = free_port()
    procs = [ctx.Process(target=_entry, args=(r, world_size, port, backend, threads, fn, args, results),
                         daemon=True) for r in range(world_size)]
    for p in procs:
        p.start()
    out: dict[int, tuple[bool, Any]] = {}
    deadline = time.monotonic() + timeout
    dead_since: float | None = None
    try:
        while len(out) < world_size:
            try:
                rank, ok, value = results.get(timeout=0.5)
            except queue_mod.Empty:
                missing = sorted(set(range(world_size)) - set(out))
                if time.monotonic() > deadline:
                    raise RuntimeError(f"ranks {missing} gave no result within {timeout:.0f} s (hang?)") from None
                if any(procs[r].exitcode is not None for r in missing):
                    dead_since = dead_since or time.monotonic()
                    if time.monotonic() - dead_since > 5:
                        codes = {r: procs[r].exitcode for r in missing}
                        raise RuntimeError(f"ranks exited without a result (exit codes {codes})") from None
                continue
            out[rank] = (ok, value)
            if not ok:
                break
    finally:
        for p in procs:
            p.join(timeout=5 if len(out) == world_size else 0.5)
        for p in procs:
            if p.is_alive():
                p.kill()
                p.join()
    errors = [f"rank {r}:\n{v}" for r, (ok, v) in sorted(out.items()) if not ok]
    if errors:
        raise RuntimeError("distributed run failed\n" + "\n".join(errors))
    return [out[r][1] for r in range(world_size)]
