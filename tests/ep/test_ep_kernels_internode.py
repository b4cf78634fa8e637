"""Buffer(backend="kernels") across nodes: 2 nodes x 2 GPUs as 4 gloo processes, each rank's emulated GPU
running the internode kernels (its own process, the NIC model between nodes), bit-identical to the torch
backend in the same world; the bytes each link carried as measured by the NIC and by counting the kernels'
stores into peers' memory.

The default suite runs one world of three cases that cover each payload and each num_sms of the must-show:
BF16 at num_sms 2 with an empty rank, a cached dispatch, a plain combine and a combine of weights and two
biases; FP8 (FP32 scales) at num_sms 4 with async_finish; FP8 at num_sms 20 with an empty rank and a cached
dispatch. The parent traces, validates and compiles the kernels once before the fork. UE8M0 scales, BF16 at
num_sms 20, the bytes against `ptxforge plan --routing` and 2 nodes x 4 GPUs are slow-marked."""

import ep_warm
import internode_buffer_cases as C
import internode_links as L
import numpy as np
import pytest
from ep_checks import E

from ptxforge.ep.spawn import run_ranks

NODES, GPUS = 2, 2
WORLD = NODES * GPUS
CASES = [("bf16", 2, 1, True), ("fp8", 4, None, False), ("fp8", 20, 0, True)]


@pytest.fixture(scope="module")
def world():
    ep_warm.warm()  # the layout and FP8 kernels, then the internode ones: built once, before the fork
    C.warm(NODES, GPUS)
    return run_ranks(C.compare, WORLD, GPUS, CASES, timeout_s=600)


def _mismatches(results):
    return {r: res["mismatch"] for r, res in enumerate(results) if res["mismatch"]}


def test_bit_identical_to_the_torch_backend_bf16_fp8_empty_rank_cached_two_biases(world):
    assert not _mismatches(world), _mismatches(world)
    assert all(set(res["cpu_s"]) == {(f, s) for f, s, _, _ in CASES} for res in world)


def test_measured_links_rdma_to_the_same_local_gpu_of_the_other_node_nvlink_inside_the_node(world):
    for r, res in enumerate(world):
        for case, calls in res["links"].items():
            full = next(f for form, sms, _, f in CASES if (form, sms) == case)  # a cached dispatch, a plain combine
            assert [c for c, _ in calls] == ["dispatch", "combine"] * (2 if full else 1), calls
            for call, links in calls:
                rail = {(r + GPUS) % WORLD}  # each token crosses to the other node once, to this local index
                assert set(links["rdma"]) <= rail, (r, case, call, links)
                assert set(links["nvlink"]) <= {r // GPUS * GPUS + j for j in range(GPUS)} - {r}, (r, case, links)
        (_, first), = [c for c in res["links"][("bf16", 2)][:1]]
        if r != 1:  # the empty rank sends no rows: at most the ring's tails and heads
            assert first["rdma"][(r + GPUS) % WORLD] > C.TOKENS * 2 * C.HIDDEN // 4, first
    assert {role for _, role in world[0]["roles"]} >= {"notify", "forwarder"}


@pytest.mark.slow
def test_ue8m0_and_num_sms_20_bit_identical():
    ep_warm.warm()
    out = run_ranks(C.compare, WORLD, GPUS, [("fp8-ue8m0", 4, 2, True), ("bf16", 20, None, True)], timeout_s=900)
    assert not _mismatches(out), _mismatches(out)


@pytest.mark.slow
def test_2_nodes_of_4_gpus_bit_identical():
    ep_warm.warm()
    out = run_ranks(C.compare, 8, 4, [("fp8", 4, 5, True)], timeout_s=1200)
    assert not _mismatches(out), _mismatches(out)


def _routed(rank, world, per_node, ids, hidden):
    """A dispatch and a combine of `ids[rank]` on a kernels Buffer: the measured links of each."""
    import torch

    import ptxforge.ep as deep_ep

    buf = deep_ep.Buffer(None, 0, 0, num_ranks_per_node=per_node, backend="kernels", timeout_s=120)
    idx = torch.from_numpy(ids[rank])
    x = torch.zeros((idx.shape[0], hidden), dtype=torch.bfloat16)
    w = torch.ones(idx.shape, dtype=torch.float32)
    ntr, ntrr, nte, in_rank, _ = buf.get_dispatch_layout(idx, E)
    recv, _, rw, _, handle, _ = buf.dispatch(x, num_tokens_per_rank=ntr, num_tokens_per_rdma_rank=ntrr,
                                             is_token_in_rank=in_rank, num_tokens_per_expert=nte, topk_idx=idx,
                                             topk_weights=w, config=deep_ep.Config(2, 6, 16, 6, 16))
    buf.combine(recv, handle, topk_weights=rw)
    links = [s.links for s in buf.stats()]
    buf.destroy()
    return links


@pytest.mark.slow
def test_measured_link_bytes_equal_what_ptxforge_plan_predicts_for_the_routing(tmp_path):
    ids = L.torus_routing(NODES, GPUS)
    plan_d, plan_c = L.planned(tmp_path, ids, NODES, GPUS)
    ep_warm.warm()
    links = run_ranks(_routed, WORLD, GPUS, ids, L.HIDDEN, timeout_s=900)
    tokens = ids.shape[1]
    in_rank = [np.zeros((tokens, WORLD), bool) for _ in range(WORLD)]
    for s, ids_s in enumerate(ids):
        rows, cols = np.nonzero(ids_s >= 0)
        in_rank[s][rows, ids_s[rows, cols] // (E // WORLD)] = True
    d_slot, c_slot = L.slots(GPUS)
    for r in range(WORLD):
        (d, c) = links[r]
        for measured, plan in ((d, plan_d), (c, plan_c)):  # each link as the planner predicts, per rank
            L.assert_as_planned(r, {kind: sum(measured[kind].values()) for kind in ("rdma", "nvlink")}, plan)
        # NVLink, per peer: the forwarder passes each token a peer wants once (a whole slot, then its tail word);
        # the combine sends back each row that came through another local GPU's forwarder
        node, local = divmod(r, GPUS)
        for j in range(GPUS):
            peer = node * GPUS + j
            if peer == r:
                continue
            forwarded = sum(int(in_rank[s][:, peer].sum()) for s in range(WORLD) if s % GPUS == local)
            back = sum(int(in_rank[s][:, r].sum()) for s in range(WORLD) if s % GPUS == j)
            assert abs(d["nvlink"].get(peer, 0) / (forwarded * d_slot) - 1) < 0.01, (r, peer, forwarded, d)
            assert abs(c["nvlink"].get(peer, 0) / (back * c_slot) - 1) < 0.01, (r, peer, back, c)
