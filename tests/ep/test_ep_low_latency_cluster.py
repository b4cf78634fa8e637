"""Low-latency mode across nodes: 2 nodes x 2 GPUs as 4 real gloo processes, backend="kernels", each process's
GPU a `ClusterRank` (the same node's peers by pointer, the other node's by the emulated NIC's RDMA puts).

One world of 4 processes runs every case: DeepEP's low-latency contract (test_ep_low_latency.py's `ll_suite`,
every check on every rank) with the kernels and with the torch backend, whose outputs must be bit-identical;
an `async_finish` call that returns with its kernels pending on the device worker; a `return_recv_hook` call
that returns with only its send phase queued, the receive phase run by `hook()`; and a kernel timeout on one
rank raised at the wait on every rank, naming the call (last: it stops the cluster's NICs).

Held workers are deterministic by construction, not by timing: a rank queues a job on its own device worker
that blocks until the rank has looked at its pending call (or, for the timeout, until another rank has raised).
"""

from __future__ import annotations

import threading
import traceback
from datetime import timedelta

import numpy as np
import pytest
import torch
import torch.distributed as dist
from test_ep_low_latency import (
    EXPERTS,
    FORMS,
    HIDDEN,
    N_MAX,
    WORLD,
    ll_suite,
    make_inputs,
    valid_rows,
    warm_low_latency,
)

import ptxforge.ep as deep_ep
from ptxforge.ep.device_worker import worker_for
from ptxforge.ep.spawn import run_ranks

PER_NODE = 2


def _buffer(timeout_s: float = 20.0, n_max: int = N_MAX):
    hint = deep_ep.Buffer.get_low_latency_rdma_size_hint(n_max, HIDDEN, WORLD, EXPERTS)
    return deep_ep.Buffer(None, 0, hint, low_latency_mode=True, backend="kernels", timeout_s=timeout_s,
                          num_ranks_per_node=PER_NODE)


def _held(buf, until) -> threading.Event:
    """Hold this rank's device worker until the returned event is set or `until()` returns (bounded: 30 s).
    After the Buffer's first low-latency call (its cluster GPU is made by a collective)."""
    gate = threading.Event()
    worker_for(buf._backend.cluster_rank().device).submit(until or (lambda: gate.wait(30)))
    return gate


def _ll_rank(buf):
    return buf._backend.low_latency_ops.rank_side


def async_case(rank: int) -> dict:
    """A synchronous dispatch, then the same call with async_finish while this rank's worker is held: it
    returns with nothing received, its event pending; the wait fills the same results."""
    buf = _buffer()
    x, idx, _ = make_inputs(rank)
    want = valid_rows(*buf.low_latency_dispatch(x, idx, N_MAX, EXPERTS, use_fp8=True)[:3])
    gate = _held(buf, None)
    recv, count, handle, event, _ = buf.low_latency_dispatch(x, idx, N_MAX, EXPERTS, use_fp8=True,
                                                             async_finish=True)
    out = {"pending_at_return": not event.event.work.ended, "count_at_return": int(count.sum())}
    gate.set()
    event.current_stream_wait()
    got = valid_rows(recv, count, handle)
    out["same"] = all(np.array_equal(want[k], got[k]) for k in want) and want.keys() == got.keys()
    out["received"] = int(count.sum())
    buf.destroy()
    return out


def hook_case(rank: int) -> dict:
    """return_recv_hook: the call returns while its send phase waits in the (held) worker's queue; once the
    worker has run it, this rank's last launch is the send kernel and nothing is received; hook() launches the
    receive kernel and fills the results (dispatch, then combine). A call that would grow the buffer while a
    hook is pending is refused on every rank (the hook reads the buffer a growth replaces)."""
    buf = _buffer(n_max=2 * N_MAX)
    x, idx, w = make_inputs(rank)
    want_recv, want_count, want_handle, _, _ = buf.low_latency_dispatch(x, idx, N_MAX, EXPERTS, use_fp8=False)
    want = valid_rows(want_recv, want_count, want_handle)
    want_comb = buf.low_latency_combine(want_recv, idx, w, want_handle)[0].clone()
    out: dict = {}
    gate = _held(buf, None)
    recv, count, handle, _, hook = buf.low_latency_dispatch(x, idx, N_MAX, EXPERTS, use_fp8=False,
                                                            return_recv_hook=True)
    ll = _ll_rank(buf)
    out["dispatch_launches_at_return"] = [la["phase"] for la in ll.launches[-2:]]  # the previous combine's
    gate.set()
    worker_for(ll.device).drain()
    out["dispatch_before_hook"] = [la["phase"] for la in ll.launches[-2:]]
    out["received_before_hook"] = int(count.sum())
    hook()
    out["dispatch_after_hook"] = [la["phase"] for la in ll.launches[-2:]]
    got = valid_rows(recv, count, handle)
    out["dispatch_same"] = want.keys() == got.keys() and all(np.array_equal(want[k], got[k]) for k in want)
    combined, _, hook = buf.low_latency_combine(recv, idx, w, handle, return_recv_hook=True)
    worker_for(ll.device).drain()
    out["combine_before_hook"] = [la["phase"] for la in ll.launches[-2:]]
    hook()
    out["combine_same"] = bool(torch.equal(combined.view(torch.int16), want_comb.view(torch.int16)))
    *_, hook = buf.low_latency_dispatch(x, idx, N_MAX, EXPERTS, use_fp8=False, return_recv_hook=True)
    try:
        buf.low_latency_dispatch(x, idx, 2 * N_MAX, EXPERTS, use_fp8=False)
        out["growth"] = "no error"
    except deep_ep.EPInputError as e:
        out["growth"] = str(e)
    hook()
    buf.destroy()
    return out


def timeout_case(rank: int) -> dict:
    """Rank 1's worker is held until another rank's wait has raised; timeout_s is 3: every rank's async
    dispatch returns at once, the others' receive kernels time out waiting for rank 1's counts, and rank 1's
    send then stops (the NICs carried the first failure to it). Every wait raises, naming the call."""
    buf = _buffer(timeout_s=3.0)
    store = dist.distributed_c10d._get_default_store()
    x, idx, _ = make_inputs(rank)
    buf.low_latency_dispatch(x, idx, N_MAX, EXPERTS, use_fp8=False)  # the cluster GPU and its buffer exist
    if rank == 1:
        _held(buf, lambda: store.wait(["ll-raised"], timedelta(seconds=30)))
    *_, event, _ = buf.low_latency_dispatch(x, idx, N_MAX, EXPERTS, use_fp8=False, async_finish=True)
    try:
        event.current_stream_wait()
        error = None
    except Exception as e:  # noqa: BLE001 - the error is the evidence
        error = f"{type(e).__name__}: {e}"
    if rank != 1:
        store.set("ll-raised", "1")
    buf.destroy()
    return {"error": error}


def _case(fn, rank: int) -> dict:
    try:
        return {"ok": True, "value": fn(rank)}
    except BaseException:  # noqa: BLE001 - reported by the test that reads this case
        return {"ok": False, "error": traceback.format_exc()}


def cluster_world(rank: int, world: int, hook_modes: tuple[bool, ...]) -> dict:
    out = {"kernels": ll_suite(rank, world, "kernels", PER_NODE, hook_modes),
           "torch": ll_suite(rank, world, "torch", PER_NODE, hook_modes)}
    if hook_modes == (False,):  # the default world: the asynchronous cases too
        for fn in (async_case, hook_case, timeout_case):  # the timeout last: it stops the cluster's NICs
            out[fn.__name__] = _case(fn, rank)
            dist.barrier()
    return out


@pytest.fixture(scope="module")
def results():
    warm_low_latency(rdma=True)
    return run_ranks(cluster_world, WORLD, (False,), timeout_s=400)


def _values(results, case):
    failed = {r: res[case]["error"] for r, res in enumerate(results) if not res[case]["ok"]}
    assert not failed, "\n".join(f"--- rank {r} ---\n{e}" for r, e in failed.items())
    return [res[case]["value"] for res in results]


def _same(want, got, what: str) -> None:
    assert want.keys() == got.keys(), what
    for k in want:
        assert want[k].dtype == got[k].dtype and want[k].shape == got[k].shape, (what, k)
        assert np.array_equal(want[k].view(np.uint8), got[k].view(np.uint8)), (what, k)


def _bit_identical(per_rank: list[dict]) -> None:
    for rank, res in enumerate(per_rank):
        (kd, kt), (td, tt) = res["kernels"], res["torch"]
        assert kd == td, rank
        assert kt.keys() == tt.keys()
        for case, want in tt.items():
            if isinstance(want, dict):
                _same(want, kt[case], f"rank {rank} case {case}")
            else:
                assert np.array_equal(want, kt[case]), f"rank {rank} case {case}"


def test_the_contract_holds_on_2_nodes_of_2_gpus_as_4_processes(results):
    for rank, res in enumerate(results):
        diffs, _ = res["kernels"]  # ll_suite asserted every check of the contract on this rank
        assert len(diffs) == len(FORMS) * 2, rank
        assert diffs[(False, False, False, False, False)] < 1e-5


def test_the_kernels_are_bit_identical_to_the_torch_backend_in_the_same_world(results):
    _bit_identical(results)


def test_an_async_call_returns_with_its_kernels_pending_on_the_worker(results):
    for rank, v in enumerate(_values(results, "async_case")):
        assert v["pending_at_return"] and v["count_at_return"] == 0, (rank, v)
        assert v["same"] and v["received"] > 0, (rank, v)


def test_the_hook_runs_the_receive_phase(results):
    for rank, v in enumerate(_values(results, "hook_case")):
        assert v["dispatch_launches_at_return"] == ["send", "receive"], (rank, v)  # the combine before: held
        assert v["dispatch_before_hook"] == ["receive", "send"] and v["received_before_hook"] == 0, (rank, v)
        assert v["dispatch_after_hook"] == ["send", "receive"] and v["dispatch_same"], (rank, v)
        assert v["combine_before_hook"] == ["receive", "send"] and v["combine_same"], (rank, v)
        assert "needs a larger low-latency buffer" in v["growth"] and "low_latency_dispatch #5 still waits for " \
            "its receive hook" in v["growth"], (rank, v)


def test_a_kernel_timeout_is_raised_at_the_wait_on_every_rank_naming_the_call(results):
    errors = [v["error"] for v in _values(results, "timeout_case")]
    assert all(e is not None and "ptxforge.ep low_latency_dispatch #2: " in e for e in errors), errors
    timed_out = [r for r, e in enumerate(errors) if e.startswith("CommTimeout: ")]
    assert timed_out and 1 not in timed_out, errors  # rank 1's counts are the ones never sent
    for r in timed_out:
        assert f"rank {r}'s low_latency_dispatch receive timed out: it waited for rank 1's count" in errors[r]
    for r in set(range(WORLD)) - set(timed_out):  # the first failure, carried to them by the NICs
        assert errors[r].startswith("EPError: ptxforge.ep low_latency_dispatch #2: PeerStopped: "), errors
        assert "stopped: CommTimeout: ptxforge.ep: rank " in errors[r] and "'s count" in errors[r], errors


@pytest.mark.slow
def test_the_contract_with_the_hook_and_async_finish_on_2_nodes_of_2_gpus():
    warm_low_latency(rdma=True)
    per_rank = run_ranks(cluster_world, WORLD, (False, True), timeout_s=600)
    for diffs, _ in (res["kernels"] for res in per_rank):
        assert len(diffs) == len(FORMS) * 2 * 2
    _bit_identical(per_rank)
