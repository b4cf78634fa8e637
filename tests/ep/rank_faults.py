"""Per-rank code of the EP fault tests (test_ep_rank_faults.py): each scenario returns what happened on this
rank (the error's type and text, how long it took) so the test can check every surviving rank."""

from __future__ import annotations

import os
import signal
import time

import torch.distributed as dist
from ep_checks import E, encoded_x, random_topk, survivors_meet

import ptxforge.ep as deep_ep
from ptxforge.emu.ipc import live_segments


def _outcome(fn) -> dict:
    t0 = time.monotonic()
    try:
        fn()
        return {"error": None, "s": time.monotonic() - t0}
    except Exception as e:  # noqa: BLE001 - the outcome is the test's evidence
        return {"error": f"{type(e).__name__}: {e}", "s": time.monotonic() - t0}


def _inputs(rank: int):
    idx, w = random_topk(rank)
    return encoded_x(rank), idx, w


def _dispatch(buf, x, idx, w):
    ntr, _, nte, in_rank, _ = buf.get_dispatch_layout(idx, E)
    out = buf.dispatch(x, num_tokens_per_rank=ntr, is_token_in_rank=in_rank, num_tokens_per_expert=nte,
                       topk_idx=idx, topk_weights=w)
    return out, in_rank


def call_order(rank: int, world: int, backend: str) -> dict:
    """Rank 1 skips `combine` and calls `get_dispatch_layout`; afterwards the group still works."""
    buf = deep_ep.Buffer(None, backend=backend, timeout_s=20)
    x, idx, w = _inputs(rank)
    (recv, _, _, _, handle, _), in_rank = _dispatch(buf, x, idx, w)
    out = {"mismatch": _outcome(lambda: buf.get_dispatch_layout(idx, E) if rank == 1 else buf.combine(recv, handle))}
    combined, _, _ = buf.combine(recv, handle)  # every rank again in the same call: it works
    out["after"] = bool(combined.equal((x.float() * in_rank.sum(1, keepdim=True)).to(combined.dtype)))
    buf.destroy()
    return out


def never_arrives(rank: int, world: int, backend: str) -> dict:
    """The last rank never calls dispatch; the others time out naming it (the group is unusable after)."""
    buf = deep_ep.Buffer(None, backend=backend, timeout_s=2)
    x, idx, w = _inputs(rank)
    ntr, _, nte, in_rank, _ = buf.get_dispatch_layout(idx, E)
    if rank == world - 1:
        time.sleep(4)
        return {"error": None, "s": 0.0, "absent": True}
    return _outcome(lambda: buf.dispatch(x, num_tokens_per_rank=ntr, is_token_in_rank=in_rank,
                                         num_tokens_per_expert=nte, topk_idx=idx, topk_weights=w))


def order_world(rank: int, world: int) -> dict:
    """Every scenario that leaves the group usable, then the one that does not (a rank that never comes)."""
    out = {f"order-{b}": call_order(rank, world, b) for b in ("torch", "kernels")}
    dist.barrier()
    out["never-kernels"] = never_arrives(rank, world, "kernels")
    if rank != world - 1:  # a survivor that left early would reset a slower survivor's wait: a lost peer
        survivors_meet(world - 1)  # instead of the timeout under test
    out["pids"] = [os.getpid()]
    return out


def killed_mid_dispatch(rank: int, world: int, backend: str, victim: int) -> dict:
    """Rank `victim` SIGKILLs itself in the middle of a dispatch: after the agreement (torch: as its rows are
    about to move) or after the notify kernel (kernels: the dispatch kernels' counters never come)."""
    from ptxforge.ep import kernel_backend as KB

    buf = deep_ep.Buffer(None, backend=backend, timeout_s=30)
    x, idx, w = _inputs(rank)
    _dispatch(buf, x, idx, w)  # a first dispatch works (the kernels backend maps every peer's segment)
    if rank == victim:
        die = lambda *a, **k: os.kill(os.getpid(), signal.SIGKILL)  # noqa: E731
        if backend == "torch":
            buf.transport.exchange_rows_async = die
        else:
            drive = KB.drive

            def drive_then_die(gen, device, comm=None):
                next(gen)  # the notify phase
                die()
                return drive(gen, device, comm)
            KB.drive = drive_then_die
    dead_pid = buf.transport.processes[victim][1]
    out = _outcome(lambda: _dispatch(buf, x, idx, w))
    survivors_meet(world - 1)  # no survivor exits before every survivor saw the loss (it names who is gone)
    out["dead_segments"] = [n for n in live_segments() if n.startswith(f"ptxforge-emu-{dead_pid}-")]
    out["pids"] = [p for _, p in buf.transport.processes]
    out["destroy"] = _outcome(buf.destroy)  # releasing what is left works after a peer was lost
    return out
