"""Asynchronous calls on backend="kernels" (2 real gloo processes, emulated IPC GPUs): the call returns while its
kernels have not run (they run on the device's worker thread), `previous_event` orders work on that worker
without a wait on the caller, work ordered after failed work is not run, and the errors of pending work (a
kernel's timeout, a peer that dies) are raised at the wait, on every rank that waits, naming the call.

Deterministic by construction, not by timing: a rank holds its own worker behind a gate (a job queued before
its call) that opens only once the other rank has looked at its pending event. Bit-for-bit equality of
async and sync results on 4 ranks is `check_async_matches_sync` in the shared world of test_ep_intranode.py."""

from __future__ import annotations

import os
import signal
import threading
import time
import traceback
from datetime import timedelta

import ep_warm
import pytest
import torch
import torch.distributed as dist
from ep_checks import E, encoded_x, random_topk

import ptxforge.ep as deep_ep
from ptxforge.ep.device_worker import worker_for
from ptxforge.ep.spawn import run_ranks

WORLD = 2


def _setup(rank: int, timeout_s: float = 20.0):
    deep_ep.Buffer.set_num_sms(2)
    buf = deep_ep.Buffer(None, backend="kernels", timeout_s=timeout_s)
    x = encoded_x(rank)
    idx, w = random_topk(rank)
    ntr, _, nte, in_rank, _ = buf.get_dispatch_layout(idx, E)
    recv, _, rw, _, handle, _ = buf.dispatch(x, num_tokens_per_rank=ntr, is_token_in_rank=in_rank,
                                             num_tokens_per_expert=nte, topk_idx=idx, topk_weights=w)
    want = (x.float() * in_rank.sum(1, keepdim=True)).to(torch.bfloat16)
    return buf, x, recv, rw, handle, want


def _gate(buf) -> threading.Event:
    """Hold this rank's device worker until the returned event is set (bounded: 30 s)."""
    gate = threading.Event()
    worker_for(buf._comm_rank.device).submit(lambda: gate.wait(30))
    return gate


def _store():
    return dist.distributed_c10d._get_default_store()


def pending_case(rank: int) -> dict:
    """Rank 1 holds its worker; both ranks' async combines return with their kernels not ended (rank 0's wait
    on rank 1's, which have not started); rank 1 opens its gate once rank 0 has looked."""
    buf, x, recv, rw, handle, want = _setup(rank)
    gate = _gate(buf) if rank == 1 else None
    t0 = time.monotonic()
    combined, cw, ev = buf.combine(recv, handle, topk_weights=rw, async_finish=True)
    call_s = time.monotonic() - t0
    ended_at_return = ev.event.future.done()
    if rank == 0:
        _store().set("pending-looked", "1")
    else:
        _store().wait(["pending-looked"], timedelta(seconds=30))
        gate.set()
    with ev:
        pass
    out = {"call_s": call_s, "ended_at_return": ended_at_return, "ended": ev.event.future.done(),
           "right": bool(combined.equal(want)), "released": ev.extra_tensors is None}
    buf.destroy()
    return out


def order_case(rank: int) -> dict:
    """A cached dispatch queued, then a combine ordered after it by previous_event only: the combine call does
    not wait for it on the caller (its event is still unwaited), the worker runs them in order."""
    buf, x, recv, rw, handle, want = _setup(rank)
    cached, *_, ev1 = buf.dispatch(x, handle=handle, async_finish=True)
    combined, _, ev2 = buf.combine(recv, handle, topk_weights=rw, previous_event=ev1, async_finish=True)
    out = {"not_waited_by_the_call": not ev1.event.done}
    ev2.current_stream_wait()
    out["first_ended_before"] = ev1.event.future.done()
    ev1.current_stream_wait()
    out["right"] = bool(combined.equal(want)) and bool(cached.equal(recv))
    buf.destroy()
    return out


def failed_before_case(rank: int) -> dict:
    """Work ordered after failed work is not run: a cached dispatch whose num_worst_tokens is too small fails
    (on every rank), the combine ordered after it raises at its wait naming both calls; the Buffer then works."""
    buf, x, recv, rw, handle, want = _setup(rank)
    *_, bad = buf.dispatch(x, handle=handle, num_worst_tokens=1, async_finish=True)
    _, _, after = buf.combine(recv, handle, topk_weights=rw, previous_event=bad, async_finish=True)
    errors = []
    for ev in (bad, after, after):
        try:
            ev.current_stream_wait()
            errors.append(None)
        except Exception as e:  # noqa: BLE001 - the error is the evidence
            errors.append(f"{type(e).__name__}: {e}")
    again, _, _ = buf.combine(recv, handle, topk_weights=rw)
    buf.destroy()
    return {"errors": errors, "works_after": bool(again.equal(want))}


def concurrent_case(rank: int) -> dict:
    """While a combine's kernels run on the worker, the caller launches other DSL kernels on the emulator (FP8
    quantization, the layout kernel), as a model computing during the communication does: all results exact."""
    from ptxforge.kernels import ops

    buf, x, recv, rw, handle, want = _setup(rank)
    idx, _ = random_topk(rank)
    q_ref, s_ref = ops.per_token_cast_to_fp8(x)
    in_rank_ref = ops.get_dispatch_layout(idx, E, WORLD, WORLD)[3]
    right = []
    for _ in range(2):
        combined, _, ev = buf.combine(recv, handle, topk_weights=rw, async_finish=True)
        for _ in range(3):
            q, s = ops.per_token_cast_to_fp8(x)
            right.append(q.view(torch.uint8).equal(q_ref.view(torch.uint8)) and s.equal(s_ref))
            right.append(ops.get_dispatch_layout(idx, E, WORLD, WORLD)[3].equal(in_rank_ref))
        ev.current_stream_wait()
        right.append(combined.equal(want))
    buf.destroy()
    return {"all_right": all(right), "checked": len(right)}


def timeout_case(rank: int) -> dict:
    """Rank 1's worker is busy 5 s while timeout_s is 1: both ranks' async combines return at once and their
    waits raise the kernels' CommTimeout naming the combine (rank 0 at the notify barrier, rank 1 after)."""
    buf, x, recv, rw, handle, want = _setup(rank, timeout_s=1.0)
    if rank == 1:
        worker_for(buf._comm_rank.device).submit(lambda: time.sleep(5))
    t0 = time.monotonic()
    *_, ev = buf.combine(recv, handle, topk_weights=rw, async_finish=True)
    call_s = time.monotonic() - t0
    try:
        ev.current_stream_wait()
        error = None
    except Exception as e:  # noqa: BLE001 - the error is the evidence
        error = f"{type(e).__name__}: {e}"
    wait_s = time.monotonic() - t0 - call_s
    dist.barrier()
    return {"call_s": call_s, "error": error, "wait_s": wait_s}


def _case(fn, rank):
    try:
        return {"ok": True, "value": fn(rank)}
    except BaseException:  # noqa: BLE001 - reported by the test that reads this case
        return {"ok": False, "error": traceback.format_exc()}


def every_case(rank: int, world: int) -> dict:
    out = {}
    # the timeout last: it leaves the rings of its Buffer broken
    for fn in (pending_case, order_case, failed_before_case, concurrent_case, timeout_case):
        out[fn.__name__] = _case(fn, rank)
        dist.barrier()
    return out


@pytest.fixture(scope="module")
def results():
    ep_warm.warm_comm(WORLD)
    return run_ranks(every_case, WORLD, timeout_s=300)


def _values(results, case):
    failed = {r: res[case]["error"] for r, res in enumerate(results) if not res[case]["ok"]}
    assert not failed, "\n".join(f"--- rank {r} ---\n{e}" for r, e in failed.items())
    return [res[case]["value"] for res in results]


def test_an_async_call_returns_before_its_kernels_have_run(results):
    for rank, v in enumerate(_values(results, "pending_case")):
        assert not v["ended_at_return"] and v["ended"] and v["right"] and v["released"], (rank, v)
        assert v["call_s"] < 10, (rank, v)


def test_previous_event_orders_on_the_worker_without_a_wait_on_the_caller(results):
    for rank, v in enumerate(_values(results, "order_case")):
        assert all(v.values()), (rank, v)


def test_work_ordered_after_failed_work_is_not_run(results):
    for rank, v in enumerate(_values(results, "failed_before_case")):
        bad, after, again = v["errors"]
        assert bad.startswith("EPInputError: ptxforge.ep dispatch: num_worst_tokens=1 is too small"), (rank, bad)
        assert after.startswith("EPError: ptxforge.ep combine #") and "not run: it was ordered after dispatch #" \
            in after and "which failed (EPInputError: " in after, (rank, after)
        assert again == after and v["works_after"], (rank, v)


def test_the_caller_launches_other_kernels_while_the_worker_runs_the_communication(results):
    for rank, v in enumerate(_values(results, "concurrent_case")):
        assert v == {"all_right": True, "checked": 14}, (rank, v)


def test_a_kernel_timeout_of_pending_work_is_raised_at_the_wait_on_every_rank(results):
    for rank, v in enumerate(_values(results, "timeout_case")):
        assert v["error"] is not None and v["error"].startswith("CommTimeout: "), (rank, v)
        assert v["error"].startswith("CommTimeout: ptxforge.ep combine #"), (rank, v)
        assert f"rank {rank}'s" in v["error"] and "timeout_s = 1 s" in v["error"], (rank, v)
        # returned before rank 1's busy worker (5 s) could have run it; raised after timeout_s, well before 30 s
        assert v["call_s"] < 5.0 and 1.0 < v["call_s"] + v["wait_s"] < 30, (rank, v)


def dies_world(rank: int, world: int) -> dict:
    """Rank 1's worker kills its process once rank 1's async combine has returned; rank 0's combine, pending
    then, raises at its wait the peer's loss, naming the call and the peer, long before timeout_s."""
    buf, x, recv, rw, handle, want = _setup(rank, timeout_s=30)
    if rank == 1:
        gate = threading.Event()
        worker_for(buf._comm_rank.device).submit(lambda: gate.wait(30) and os.kill(os.getpid(), signal.SIGKILL))
        buf.combine(recv, handle, topk_weights=rw, async_finish=True)
        gate.set()
        time.sleep(30)  # killed by its own worker before this ends
        return {}
    *_, ev = buf.combine(recv, handle, topk_weights=rw, async_finish=True)
    t0 = time.monotonic()
    pids = [p for _, p in buf.transport.processes]
    try:
        ev.current_stream_wait()
        return {"error": None, "pids": pids}
    except Exception as e:  # noqa: BLE001 - the error is the evidence
        return {"error": f"{type(e).__name__}: {e}", "s": time.monotonic() - t0, "pids": pids}


def test_a_peer_that_dies_while_kernels_are_pending_is_named_at_the_wait():
    ep_warm.warm_comm(WORLD)
    res = run_ranks(dies_world, WORLD, timeout_s=120, killed=(1,))
    case = res[0]
    err = case["error"]
    assert err is not None and err.startswith("EPPeerLostError: ptxforge.ep combine: "), err
    assert f"rank 1 (pid {case['pids'][1]}) has exited" in err, err
    assert case["s"] < 15, case  # timeout_s is 30: seen through the process group, not by waiting it out
