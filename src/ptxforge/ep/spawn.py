"""Run a function on N real processes joined by a gloo process group (file:// rendezvous), bounded in time.

`run_ranks(fn, world, *args, timeout_s=, start=, preload=)` starts `world` processes, forked from this one
(start="fork": what it has imported and compiled comes along; torch resets its thread pools at fork) or from
a fork server that imports torch and the `preload` modules once ("forkserver"); each initializes gloo and calls
fn(rank, world, *args), whose (picklable) return value comes back as results[rank]. An exception in a rank
comes back as its traceback text; a rank that does not finish in time is killed and reported; fault tests
name the ranks they kill on purpose (`killed`).
"""

from __future__ import annotations

import os
import sys
import tempfile
import time
import traceback
from collections.abc import Callable
from datetime import timedelta
from multiprocessing.context import BaseContext
from typing import Any

import torch
import torch.distributed as dist
import torch.multiprocessing as mp


def _entry(rank, world, store, fn, args, queue):
    torch.set_num_threads(1)  # N ranks on a few cores: intra-op threads would only fight each other
    try:
        dist.init_process_group("gloo", init_method=f"file://{store}", rank=rank, world_size=world,
                                timeout=timedelta(seconds=60))
        queue.put((rank, "ok", fn(rank, world, *args)))
    except BaseException:  # noqa: BLE001 - everything goes back to the parent
        queue.put((rank, "error", traceback.format_exc()))
    finally:
        queue.close()
        queue.join_thread()  # the result must leave before the hard exit
        ipc = sys.modules.get("ptxforge.emu.ipc")
        if ipc is not None:  # the hard exit skips atexit: remove this rank's emulator IPC segments here
            ipc.close_all()
        os._exit(0)  # skip gloo's teardown, which can wait for peers that already left


def run_ranks(fn: Callable[..., Any], world: int, *args: Any, timeout_s: float = 120.0, start: str = "fork",
              preload: tuple[str, ...] = (), killed: tuple[int, ...] = ()) -> list:
    """The ranks' results in rank order. `killed`: ranks a fault test kills on purpose (SIGKILL); their results
    are None, and any other way of ending (no result, another signal, an abort) is an error."""
    ctx: BaseContext
    if start == "fork":  # the ranks start as copies of this process: nothing is imported or built again
        ctx = mp.get_context("fork")
    else:  # torch is imported once, in the fork server, not once per rank
        ctx = mp.get_context("forkserver")
        ctx.set_forkserver_preload(["torch", "torch.distributed", "ptxforge.ep", *preload])
    queue = ctx.Queue()
    with tempfile.TemporaryDirectory() as tmp:
        store = os.path.join(tmp, "store")
        procs = [ctx.Process(target=_entry, args=(r, world, store, fn, args, queue), daemon=True)
                 for r in range(world)]
        for p in procs:
            p.start()
        results: dict[int, tuple] = {}
        deadline = time.monotonic() + timeout_s
        while len(results) < world and time.monotonic() < deadline:
            try:
                rank, status, value = queue.get(timeout=max(0.1, min(1.0, deadline - time.monotonic())))
                results[rank] = (status, value)
            except Exception:  # noqa: BLE001 - queue.Empty: poll again until the deadline
                if not any(p.is_alive() for p in procs) and queue.empty():
                    break
        for p in procs:
            p.join(timeout=max(0.1, deadline - time.monotonic()))
            if p.is_alive():
                p.kill()
                p.join(timeout=5)
    ends = {r: procs[r].exitcode for r in killed}
    if any(r in results or code != -9 for r, code in ends.items()):
        raise AssertionError(f"ranks {list(killed)} were to die by SIGKILL: exit codes {ends}, "
                             f"results from {sorted(set(killed) & set(results))}")
    missing = [r for r in range(world) if r not in results and r not in killed]
    if missing:
        raise TimeoutError(f"ranks {missing} did not finish within {timeout_s} s")
    errors = {r: v for r, (s, v) in results.items() if s == "error"}
    if errors:
        raise AssertionError("\n".join(f"--- rank {r} ---\n{tb}" for r, tb in sorted(errors.items())))
    return [results[r][1] if r in results else None for r in range(world)]
