"""The low-latency communication kernels (`Buffer(low_latency_mode=True, backend="kernels")`).

- On 4 gloo ranks (one emulated IPC GPU each): DeepEP's low-latency test contract (test_ep_low_latency.py's
  `ll_suite`, every check on every rank) passes, and every defined output is bit-identical to the torch
  backend's (BF16, FP8 with FP32 scales, round_scale, use_ue8m0; async_finish and the receive hook;
  zero_copy and out=).
- On one process's 2 nodes x 2 GPUs `Cluster`, the same kernels with NVLink stores inside a node and RDMA
  puts across give the same bytes; the send and receive phases are separate launches with none resident in
  between; under the sanitizer dispatch and combine are race-free and a count signalled without ordering
  after its data is reported.
- A rank killed in the middle of a low-latency dispatch or combine makes the others raise, naming it.
"""

from __future__ import annotations

import os
import signal
import time

import numpy as np
import pytest
import torch
from ep_checks import survivors_meet
from test_ep_low_latency import (
    EXPERTS,
    FORMS,
    HIDDEN,
    N_MAX,
    WORLD,
    bf16_bits,
    ll_suite,
    make_inputs,
    simulated_gemm,
    valid_rows,
    warm_low_latency,
)

import ptxforge.ep as deep_ep
from ptxforge.emu import Cluster
from ptxforge.emu.sanitizer import SanitizerError
from ptxforge.ep.errors import CommTimeout
from ptxforge.ep.low_latency_group import LowLatencyGroup
from ptxforge.ep.spawn import run_ranks


@pytest.fixture(scope="module")
def gloo_runs():
    warm_low_latency()
    return {b: run_ranks(ll_suite, WORLD, b, timeout_s=300) for b in ("kernels", "torch")}


def same(want, got, what: str) -> None:
    if isinstance(want, dict):
        assert want.keys() == got.keys(), what
        for k in want:
            same(want[k], got[k], f"{what} {k}")
        return
    assert want.dtype == got.dtype and want.shape == got.shape, what
    assert np.array_equal(want.view(np.uint8), got.view(np.uint8)), what


def two_rank_inputs(rank: int):
    """make_inputs with expert ids folded into 8 experts (4 per rank of 2)."""
    x, idx, w = make_inputs(rank)
    return x, torch.where(idx >= 0, idx % 8, idx), w


def test_kernels_backend_passes_the_contract_on_4_gloo_ranks(gloo_runs):
    kernels = gloo_runs["kernels"]
    assert len(kernels) == WORLD  # ll_suite asserted every check on every rank
    for diffs, _ in kernels:
        assert len(diffs) == 2 * len(FORMS) * 2
        assert diffs[(False, False, False, False, False)] < 1e-5


def test_kernels_backend_is_bit_identical_to_the_torch_backend(gloo_runs):
    for rank, ((kd, kt), (td, tt)) in enumerate(zip(gloo_runs["kernels"], gloo_runs["torch"], strict=True)):
        assert kd == td, rank
        assert kt.keys() == tt.keys()
        for case in tt:
            same(tt[case], kt[case], f"rank {rank} case {case}")


# --------------------------------------------------------------------------- one process, a Cluster

def cluster_run(cluster: Cluster, hook_mode: bool = False, forms=FORMS) -> dict:
    """ll_suite's calls for every rank at once; {case: per rank tensors}, as ll_suite records them."""
    group = LowLatencyGroup(cluster, timeout_s=30)
    ins = [make_inputs(r) for r in range(WORLD)]
    out: dict = {}
    for use_fp8, round_scale, use_ue8m0 in forms:
        res, hook = group.dispatch([i[0] for i in ins], [i[1] for i in ins], N_MAX, EXPERTS, use_fp8=use_fp8,
                                   round_scale=round_scale, use_ue8m0=use_ue8m0, return_recv_hook=hook_mode)
        if hook is not None:
            hook()
        out[(hook_mode, use_fp8, round_scale, use_ue8m0)] = [valid_rows(*r) for r in res]
        ys = [simulated_gemm(r[0], use_fp8, use_ue8m0) for r in res]
        combined, hook = group.combine(ys, [i[1] for i in ins], [i[2] for i in ins], [r[2] for r in res],
                                       return_recv_hook=hook_mode)
        if hook is not None:
            hook()
        for zero_copy in (False, True):  # what the torch backend combined from x, and from its zero-copy buffer
            out[(hook_mode, use_fp8, round_scale, use_ue8m0, zero_copy)] = [bf16_bits(c) for c in combined]
    return out


def test_two_nodes_of_two_gpus_with_rdma_puts_give_the_same_bytes(gloo_runs):
    cluster = Cluster(nodes=2, gpus_per_node=2, sms=16, watchdog_s=60)
    got = cluster_run(cluster)
    want = gloo_runs["torch"]
    for case, per_rank in got.items():
        for rank in range(WORLD):
            same(want[rank][1][case], per_rank[rank], f"rank {rank} case {case}")
    traffic = cluster.traffic()  # the data crossed the nodes through the NICs, both ways
    assert traffic.bytes() > 0
    assert {(t.src // 2, t.dst // 2) for t in traffic.links} == {(0, 1), (1, 0)}


def test_the_hook_runs_the_receive_kernel_with_no_block_resident_in_between():
    cluster = Cluster(nodes=2, gpus_per_node=2, sms=16, watchdog_s=60)
    group = LowLatencyGroup(cluster, timeout_s=30)
    ins = [make_inputs(r) for r in range(WORLD)]
    res, hook = group.dispatch([i[0] for i in ins], [i[1] for i in ins], N_MAX, EXPERTS, use_fp8=True,
                               return_recv_hook=True)
    assert hook is not None
    assert cluster.pending == []  # nothing queued or resident: the send kernels have ended
    assert all(int(r[1].sum()) == 0 for r in res)  # nothing received yet
    assert [row["phase"] for r in range(WORLD) for row in group.sm_map(r)] == ["send"] * WORLD
    between = time.perf_counter()
    hook()
    assert cluster.pending == []
    assert sum(int(r[1].sum()) for r in res) == sum(int((i[1] >= 0).sum()) for i in ins)
    send, receive = group.timeline[-2:]
    assert (send["phase"], receive["phase"]) == ("send", "receive")
    assert send["end"] <= between <= receive["start"]
    for r in range(WORLD):
        rows = group.sm_map(r)
        assert [row["phase"] for row in rows] == ["send", "receive"]
        assert rows[0]["kernel"].startswith("ll_dispatch_send") and rows[1]["kernel"].startswith("ll_dispatch_recv")
        assert all(row["sms"] and row["thread_instructions"] > 0 for row in rows)


def test_dispatch_and_combine_are_race_free_under_the_cluster_sanitizer():
    cluster = Cluster(nodes=2, gpus_per_node=2, sms=16, sanitize=True, watchdog_s=60)
    # without the hook each GPU's receive kernel runs while the other GPUs still send: any race or scope error
    # between a rank's data and its count (or flag) raises
    got = cluster_run(cluster, hook_mode=False, forms=[(True, False, False)])
    assert len(got) == 3


@pytest.mark.parametrize("nodes, gpus, finding", [(1, 2, "no release/acquire pair"), (2, 1, "nvshmem_fence")])
def test_a_count_signalled_without_a_fence_is_reported(nodes, gpus, finding):
    """NVLink (1 node x 2): the count stored without release; RDMA (2 nodes x 1): no nvshmem_fence before
    the signal. The receiver's reads of the data race with its writes."""
    cluster = Cluster(nodes=nodes, gpus_per_node=gpus, sms=16, sanitize=True, watchdog_s=60)
    group = LowLatencyGroup(cluster, timeout_s=30)
    ins = [two_rank_inputs(r) for r in range(2)]
    with pytest.raises(SanitizerError) as err:
        group.dispatch([i[0] for i in ins], [i[1] for i in ins], N_MAX, 8, use_fp8=False, bug="no_fence")
    text = str(err.value)
    assert finding in text, text
    assert err.value.reports and all(rep.ptx_line for rep in err.value.reports), text


def test_a_wait_that_never_completes_times_out_naming_it():
    cluster = Cluster(nodes=1, gpus_per_node=2, sms=16, watchdog_s=60)
    group = LowLatencyGroup(cluster, timeout_s=0.5)
    x, idx, _ = two_rank_inputs(0)
    gen = group.ranks[0].dispatch(bf16_bits(x).view(np.uint16), idx.numpy(), N_MAX, 8, False, False, False, 0, 1)
    group._run("low_latency_dispatch", "send", [gen])  # rank 0 sends; rank 1 never does
    with pytest.raises(CommTimeout, match="rank 0's low_latency_dispatch receive timed out: it waited for rank 1's "
                                          "count for local expert [0-3]"):
        group._run("low_latency_dispatch", "receive", [gen])


# --------------------------------------------------------------------------- a rank that dies

def killed_mid_call(rank: int, world: int, victim: int, call: str) -> dict:
    """Rank `victim` dies in `call` after the agreement, before its send kernel: its counts (dispatch) or
    flags (combine) never come, and the others' receive kernels wait for them."""
    from ptxforge.ep.low_latency_kernels import LowLatencyKernels

    hint = deep_ep.Buffer.get_low_latency_rdma_size_hint(N_MAX, HIDDEN, world, EXPERTS)
    buf = deep_ep.Buffer(None, 0, hint, low_latency_mode=True, backend="kernels", timeout_s=30)
    x, idx, w = make_inputs(rank)
    recv, _, handle, _, _ = buf.low_latency_dispatch(x, idx, N_MAX, EXPERTS, use_fp8=False)  # works
    if rank == victim:
        LowLatencyKernels._start = lambda *a, **k: os.kill(os.getpid(), signal.SIGKILL)  # type: ignore[method-assign]
    t0 = time.monotonic()
    try:
        if call == "dispatch":
            buf.low_latency_dispatch(x, idx, N_MAX, EXPERTS)
        else:
            buf.low_latency_combine(recv, idx, w, handle)
        error = None
    except Exception as e:  # noqa: BLE001 - the outcome is the test's evidence
        error = f"{type(e).__name__}: {e}"
    out = {"error": error, "s": time.monotonic() - t0, "pids": [p for _, p in buf.transport.processes]}
    survivors_meet(world - 1)  # no survivor exits before every survivor saw the loss (it names who is gone)
    buf.destroy()  # releasing what is left works after a peer was lost
    return out


@pytest.mark.parametrize("call", ["dispatch", "combine"])
def test_a_rank_killed_mid_low_latency_call_fails_the_others_naming_it(call):
    warm_low_latency()
    victim = 1
    res = run_ranks(killed_mid_call, WORLD, victim, call, timeout_s=120, killed=(victim,))
    assert res[victim] is None
    for rank, case in enumerate(res):
        if rank == victim:
            continue
        err = case["error"]
        assert err is not None and err.startswith(f"EPPeerLostError: ptxforge.ep low_latency_{call}: "), (rank, err)
        assert f"rank {victim} (pid {case['pids'][victim]}) has exited" in err, err
        assert case["s"] < 15, case  # timeout_s is 30: noticed through the process group, not by waiting


# --------------------------------------------------------------------------- PTX a GPU would take

def _have_ptxas() -> bool:
    try:
        from ptxforge.toolchain import find_tool

        find_tool("ptxas")
        return True
    except Exception:  # noqa: BLE001 - any failure to find it means: not here
        return False


@pytest.mark.skipif(not _have_ptxas(), reason="ptxas not found (install the tools extra)")
@pytest.mark.parametrize("rdma", [False, True])
def test_ptxas_accepts_the_low_latency_kernels(rdma):
    """8 ranks, FP8 and power-of-two scales; with RDMA the NVSHMEM calls are externs (-c: relocatable, as
    linked against NVSHMEM's device library)."""
    from ptxforge.ep.low_latency_rank import _special
    from ptxforge.kernels import low_latency as K
    from ptxforge.toolchain import assemble

    kernels = [_special(K.ll_dispatch_send, R=8, FP8=True, ROUND=rnd, RDMA=rdma, BUG="") for rnd in (False, True)]
    kernels += [_special(K.ll_combine_send, R=8, RDMA=rdma)]
    if not rdma:
        kernels += [_special(K.ll_dispatch_recv, R=8, FP8=True, UE8M0=ue) for ue in (False, True)]
        kernels += [K.ll_combine_recv]
    for k in kernels:
        res = assemble(k.ptx(), k.arch, ["-c"] if rdma else [])
        assert res.ok, f"ptxas -arch={k.arch} rejected {k.name}:\n{res.stderr}"
