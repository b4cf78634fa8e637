"""Asynchronous normal-mode calls (`async_finish=True`) on real gloo processes: results bit for bit those of the
synchronous call (BF16 and FP8, worst-case padding, cached dispatch, combine with weights and bias); the call
returns with its all_to_all still pending; `previous_event` orders a call after earlier work; errors of the
pending work (a rank that never sends, a rank that dies) surface at the wait, naming the call, on every rank
that waits."""

from __future__ import annotations

import os
import signal
import time

import pytest
import torch
from ep_checks import E, encoded_x, random_topk

import ptxforge.ep as deep_ep
from ptxforge.ep.config import Completion
from ptxforge.ep.layout import dispatch_layout
from ptxforge.ep.spawn import run_ranks
from ptxforge.kernels import ops


def _inputs(rank: int, seed: int = 0):
    idx, w = random_topk(rank, seed=seed)
    return encoded_x(rank, seed=seed), idx, w


def _forms(x):
    q, s = ops.per_token_cast_to_fp8(x)
    return {"bf16": x, "fp8": (q, s)}


def _flat(out) -> list:
    """Every tensor of a result (nested tuples, handle fields) in order; None and ints kept as they are."""
    if isinstance(out, torch.Tensor) or out is None or isinstance(out, int):
        return [out]
    if isinstance(out, deep_ep.EventOverlap):
        return []
    return [t for o in out for t in _flat(o)]


def _same(a, b) -> bool:
    fa, fb = _flat(a), _flat(b)
    return len(fa) == len(fb) and all(
        (u is None and v is None) or (isinstance(u, int) and u == v)
        or (isinstance(u, torch.Tensor) and isinstance(v, torch.Tensor) and u.dtype == v.dtype
            and u.shape == v.shape and bool(torch.equal(u.view(torch.uint8) if u.dtype.itemsize == 1 else u,
                                                        v.view(torch.uint8) if v.dtype.itemsize == 1 else v)))
        for u, v in zip(fa, fb, strict=True))


def _calls(buf, x, idx, w, async_finish: bool, worst: int) -> dict:
    """dispatch, cached dispatch and combine (with bias), each waited for when async."""
    ntr, _, nte, in_rank, _ = buf.get_dispatch_layout(idx, E)
    out = {}
    recv, ridx, rw, per_expert, handle, ev = buf.dispatch(
        x, num_tokens_per_rank=ntr, is_token_in_rank=in_rank, num_tokens_per_expert=nte, topk_idx=idx,
        topk_weights=w, num_worst_tokens=worst, async_finish=async_finish)
    out["returned_pending"] = ev.event is not None and not ev.event.done
    ev.current_stream_wait()
    out["dispatch"] = (recv, ridx, rw, per_expert, tuple(handle), handle._order)
    cached, *_, ev2 = buf.dispatch(x, handle=handle, async_finish=async_finish)
    with ev2:
        pass
    out["cached"] = cached
    plain = recv if isinstance(recv, torch.Tensor) else deep_ep_cast_back(recv)
    tokens = x.shape[0] if isinstance(x, torch.Tensor) else x[0].shape[0]
    bias = torch.full((tokens, plain.shape[1]), 0.5, dtype=torch.bfloat16)
    combined, cw, ev3 = buf.combine(plain, handle, topk_weights=rw, bias=bias, async_finish=async_finish)
    ev3.current_stream_wait()
    out["combine"] = (combined, cw)
    return out


def deep_ep_cast_back(recv):
    return ops.per_token_cast_back(*recv).to(torch.bfloat16)


def equal_world(rank: int, world: int) -> dict:
    buf = deep_ep.Buffer(None, timeout_s=20)
    x, idx, w = _inputs(rank)
    res = {}
    for form, payload in _forms(x).items():
        for worst in (0, 64):
            sync = _calls(buf, payload, idx, w, False, worst)
            asyn = _calls(buf, payload, idx, w, True, worst)
            key = f"{form}/worst={worst}"
            res[key] = {part: _same(sync[part], asyn[part]) for part in ("dispatch", "cached", "combine")}
            res[key]["pending"] = asyn["returned_pending"] and not sync["returned_pending"]
    buf.destroy()
    return res


def test_async_results_equal_the_synchronous_call_bit_for_bit():
    for rank, res in enumerate(run_ranks(equal_world, 2, timeout_s=120)):
        for key, parts in res.items():
            assert all(parts.values()), (rank, key, parts)


def order_world(rank: int, world: int) -> dict:
    """Two dispatches in flight at once, then a combine ordered after the first by previous_event only."""
    buf = deep_ep.Buffer(None, timeout_s=20)
    x, idx, w = _inputs(rank)
    x2, idx2, w2 = _inputs(rank, seed=1)
    ntr, _, nte, in_rank, _ = buf.get_dispatch_layout(idx, E)
    sync = buf.dispatch(x, num_tokens_per_rank=ntr, is_token_in_rank=in_rank, num_tokens_per_expert=nte,
                        topk_idx=idx, topk_weights=w)
    sync_combined, _, _ = buf.combine(sync[0], sync[4], topk_weights=sync[2])
    first = buf.dispatch(x, num_tokens_per_rank=ntr, is_token_in_rank=in_rank, num_tokens_per_expert=nte,
                         topk_idx=idx, topk_weights=w, async_finish=True)
    ntr2, _, nte2, in_rank2, _ = buf.get_dispatch_layout(idx2, E)  # synchronous, with the first in flight
    second = buf.dispatch(x2, num_tokens_per_rank=ntr2, is_token_in_rank=in_rank2, num_tokens_per_expert=nte2,
                          topk_idx=idx2, topk_weights=w2, async_finish=True)
    ev1, ev2 = first[5], second[5]
    pending_before = not ev1.event.done and not ev2.event.done
    combined, _, ev3 = buf.combine(first[0], first[4], topk_weights=first[2], previous_event=ev1, async_finish=True)
    first_done_by_combine = ev1.event.done and not ev2.event.done
    ev3.current_stream_wait()
    ev2.current_stream_wait()
    combined2, _, _ = buf.combine(second[0], second[4])
    out = {"pending_before": pending_before, "first_done_by_combine": first_done_by_combine,
           "same_as_sync": bool(torch.equal(combined, sync_combined)) and _same(first[:5], sync[:5]),
           "second": bool(torch.equal(combined2, (x2.float() * in_rank2.sum(1, keepdim=True)).to(torch.bfloat16))),
           "extra_released": ev1.extra_tensors is None and ev3.extra_tensors is None}
    buf.destroy()
    return out


def test_previous_event_orders_a_call_after_earlier_work():
    for rank, res in enumerate(run_ranks(order_world, 2, timeout_s=120)):
        assert all(res.values()), (rank, res)


def stuck_world(rank: int, world: int) -> dict:
    """Rank 1 never sends its rows (stuck past the timeout): the others' async dispatch returns at once and
    their wait raises the transport's timeout naming the call; a second wait raises it again."""
    buf = deep_ep.Buffer(None, timeout_s=1)
    x, idx, w = _inputs(rank)
    ntr, _, nte, in_rank, _ = buf.get_dispatch_layout(idx, E)
    if rank == 1:
        buf.transport.exchange_rows_async = lambda *a, **k: time.sleep(3)
        try:
            buf.dispatch(x, num_tokens_per_rank=ntr, is_token_in_rank=in_rank, num_tokens_per_expert=nte,
                         topk_idx=idx, topk_weights=w, async_finish=True)
        except Exception:  # noqa: BLE001 - the stuck rank's own fate is not what is tested
            pass
        return {}
    t0 = time.monotonic()
    *_, ev = buf.dispatch(x, num_tokens_per_rank=ntr, is_token_in_rank=in_rank, num_tokens_per_expert=nte,
                          topk_idx=idx, topk_weights=w, async_finish=True)
    call_s = time.monotonic() - t0
    errors = []
    for _ in range(2):
        try:
            ev.current_stream_wait()
            errors.append(None)
        except Exception as e:  # noqa: BLE001 - the error is the evidence
            errors.append(f"{type(e).__name__}: {e}")
    return {"call_s": call_s, "wait_s": time.monotonic() - t0 - call_s, "errors": errors}


def test_an_error_of_pending_work_is_raised_at_the_wait_on_every_waiting_rank():
    res = run_ranks(stuck_world, 4, timeout_s=60)
    for rank in (0, 2, 3):
        case = res[rank]
        first, again = case["errors"]
        assert first is not None and first.startswith("EPTimeoutError: ptxforge.ep dispatch: "), (rank, first)
        assert "waited 1 s in the data all_to_all" in first, first
        assert again == first, case  # the error is kept: no later wait returns unfilled results
        assert case["call_s"] < 0.8 < case["wait_s"] < 10, case


def dies_world(rank: int, world: int) -> dict:
    """Rank 1 SIGKILLs itself as its rows are about to move; rank 0's async dispatch is pending then."""
    buf = deep_ep.Buffer(None, timeout_s=30)
    x, idx, w = _inputs(rank)
    ntr, _, nte, in_rank, _ = buf.get_dispatch_layout(idx, E)
    if rank == 1:
        buf.transport.exchange_rows_async = lambda *a, **k: os.kill(os.getpid(), signal.SIGKILL)
    *_, ev = buf.dispatch(x, num_tokens_per_rank=ntr, is_token_in_rank=in_rank, num_tokens_per_expert=nte,
                          topk_idx=idx, topk_weights=w, async_finish=True)
    t0 = time.monotonic()
    try:
        with ev:
            pass
        return {"error": None, "pids": [p for _, p in buf.transport.processes]}
    except Exception as e:  # noqa: BLE001 - the error is the evidence
        return {"error": f"{type(e).__name__}: {e}", "s": time.monotonic() - t0,
                "pids": [p for _, p in buf.transport.processes]}


def test_a_rank_that_dies_while_work_is_pending_is_named_at_the_wait():
    res = run_ranks(dies_world, 2, timeout_s=60, killed=(1,))
    case = res[0]
    err = case["error"]
    assert err is not None and err.startswith("EPPeerLostError: ptxforge.ep dispatch: "), err
    assert f"rank 1 (pid {case['pids'][1]}) has exited" in err, err
    assert case["s"] < 10, case  # timeout_s is 30: seen through the connection, not by waiting it out


def test_an_event_keeps_the_error_of_its_work_and_releases_its_tensors():
    runs = []

    def finish():
        runs.append(1)
        raise RuntimeError("ptxforge.ep dispatch: the rows did not come")

    event = deep_ep.EventOverlap(Completion("dispatch #1", finish), extra_tensors=(torch.zeros(1),))
    for _ in range(2):
        with pytest.raises(RuntimeError, match="dispatch: the rows did not come"):
            with event:
                pass
    assert runs == [1] and not event.event.done and event.extra_tensors is None
    filled = []
    ok = deep_ep.EventOverlap(Completion("combine #2", lambda: filled.append(1)))
    ok.current_stream_wait()
    ok.current_stream_wait()
    assert filled == [1] and ok.event.done


def whole_call_world(rank: int, world: int) -> dict:
    """A dispatch given num_worst_tokens (sizes known without asking the peers) runs whole on the Buffer's
    communication thread: it returns while the peer has not even entered the call (its agreement and counts
    included), and a bad input on one rank is raised at the wait, on every rank, naming the call."""
    buf = deep_ep.Buffer(None, timeout_s=20)
    x, idx, w = _inputs(rank)
    if rank == 1:
        time.sleep(1.0)  # rank 0's agreement with this rank waits that long: on its thread, not in the call
    t0 = time.monotonic()
    ntr, _, nte, in_rank = dispatch_layout(idx, E, world, world)  # get_dispatch_layout's, without its agreement
    layout = {"num_tokens_per_rank": ntr, "is_token_in_rank": in_rank, "num_tokens_per_expert": nte}
    *_, ev = buf.dispatch(x, topk_idx=idx, topk_weights=w, **layout, num_worst_tokens=64, async_finish=True)
    call_s = time.monotonic() - t0
    ev.current_stream_wait()
    bad = w.to(torch.float64) if rank == 1 else w  # rank 1's weights have the wrong dtype
    *_, ev2 = buf.dispatch(x, topk_idx=idx, topk_weights=bad, **layout, num_worst_tokens=64, async_finish=True)
    try:
        ev2.current_stream_wait()
        error = None
    except Exception as e:  # noqa: BLE001 - the error is the evidence
        error = f"{type(e).__name__}: {e}"
    buf.destroy()
    return {"call_s": call_s, "error": error}


def test_a_call_with_known_sizes_runs_whole_off_the_callers_thread_and_errors_at_the_wait():
    res = run_ranks(whole_call_world, 2, timeout_s=60)
    assert res[0]["call_s"] < 0.5, res  # rank 1 entered the call a second later
    for case in res:
        err = case["error"]
        assert err is not None and err.startswith("EPInputError: ptxforge.ep dispatch: bad input"), err
        assert "rank 1: " in err, err
