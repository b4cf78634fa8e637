"""Group-limited routing and the statistics the planner takes from it."""

from __future__ import annotations

import numpy as np
import pytest

from ptxforge.plan import plan, preset
from ptxforge.plan.routing import apply, generate_scores, group_limited_topk, load_topk_ids, routing_stats


def test_group_limited_topk_matches_a_direct_reading():
    rng = np.random.default_rng(1)
    s = 1 / (1 + np.exp(-rng.standard_normal((64, 32)).astype(np.float32)))
    bias = rng.standard_normal(32).astype(np.float32) * 0.1
    ids, w = group_limited_topk(s, bias, n_group=4, topk_group=2, top_k=4, routed_scaling=2.5)
    for t in range(64):
        b = s[t] + bias
        groups = sorted(range(4), key=lambda g: -np.sort(b[g * 8:(g + 1) * 8])[-2:].sum())[:2]
        allowed = [e for g in groups for e in range(g * 8, (g + 1) * 8)]
        want = sorted(allowed, key=lambda e: -b[e])[:4]
        assert list(ids[t]) == want
        assert w[t].sum() == pytest.approx(2.5)
        assert np.allclose(w[t], s[t][want] / s[t][want].sum() * 2.5)


def test_node_limit_holds_and_dedup_saves_ib_copies():
    ids, _ = group_limited_topk(generate_scores(2048, 256, "random", seed=3))
    st = routing_stats(ids, 256, 8, 8)
    nodes = ids // 32
    assert max(len(set(row)) for row in nodes) <= 4
    assert 3.8 < st.nodes_per_token <= 4
    assert st.remote_nodes_per_token < st.nodes_per_token
    assert st.gpus_per_node_copy <= st.experts_per_node_copy <= 8
    # 8 experts over ~4 nodes: node-level dedup keeps about half of the remote expert copies off IB
    assert 0.4 < st.saved_fraction < 0.6
    assert st.imbalance_gpu >= 1 and st.imbalance_node >= 1


def test_skewed_scores_are_imbalanced():
    rand = routing_stats(group_limited_topk(generate_scores(4096, 256, "random"))[0], 256, 8, 8)
    skew = routing_stats(group_limited_topk(generate_scores(4096, 256, "skewed"))[0], 256, 8, 8)
    assert skew.imbalance_gpu > 2 * rand.imbalance_gpu


def test_stats_from_every_gpu_and_a_file(tmp_path):
    ids = np.stack([group_limited_topk(generate_scores(256, 256, seed=r))[0] for r in range(64)])
    f = tmp_path / "ids.npy"
    np.save(f, ids)
    st = routing_stats(load_topk_ids(f), 256, 8, 8)
    assert st.tokens == 64 * 256
    assert st.tokens_per_node.sum() == pytest.approx(st.nodes_per_token * st.tokens)


def test_bad_routing_inputs(tmp_path):
    with pytest.raises(ValueError, match="no such file"):
        load_topk_ids(tmp_path / "none.npy")
    f = tmp_path / "x.npy"
    np.save(f, np.zeros((4,), np.int64))
    with pytest.raises(ValueError, match=r"\[T, k\]"):
        load_topk_ids(f)
    with pytest.raises(ValueError, match="expert ids"):
        routing_stats(np.full((4, 8), 300), 256, 8, 8)
    with pytest.raises(ValueError, match="topk_group must lie in 1..1"):
        group_limited_topk(generate_scores(4, 32), n_group=1, topk_group=4)
    with pytest.raises(ValueError, match="source GPUs"):
        routing_stats(np.zeros((3, 4, 8), np.int64), 256, 8, 8)


def test_real_routing_needs_fewer_sms_than_the_design_point():
    p = preset("deepseek-v3-h800")
    st = routing_stats(group_limited_topk(generate_scores(4096, 256, "random"))[0], 256, 8, 8)
    routed = apply(p, st)
    assert routed.experts_per_node == pytest.approx(st.gpus_per_node_copy)
    res = plan(routed, overlap=False)
    assert res.bottleneck == "ib"
    assert 16 <= res.sms < plan(p, overlap=False).sms


def test_pt_routing_file(tmp_path):
    torch = pytest.importorskip("torch")
    ids = group_limited_topk(generate_scores(128, 256))[0]
    f = tmp_path / "ids.pt"
    torch.save(torch.from_numpy(ids), f)
    assert np.array_equal(load_topk_ids(f), ids)
    torch.save({"ids": torch.from_numpy(ids)}, f)
    with pytest.raises(ValueError, match="one tensor"):
        load_topk_ids(f)


def test_nvlink_copies_count_the_gpus_a_token_reaches_other_than_the_forwarding_local_index():
    # 2 nodes x 2 GPUs, one expert each; GPU 1 (node 0, local 1) sends a token to every GPU and one to GPU 3
    ids = np.full((4, 2, 4), 0, np.int64)
    ids[1] = [[0, 1, 2, 3], [3, 3, 3, 3]]
    st = routing_stats(ids, 4, 2, 2)
    # the first token: GPUs 0 and 2 over NVLink (1 and 3 hold it at local index 1); the second: none
    # the others go to GPU 0 only: over NVLink when they come from GPU 3 (local 1), not from GPUs 0 and 2
    assert st.nvlink_copies_per_token == pytest.approx((2 + 0 + 0 + 0 + 0 + 0 + 1 + 1) / 8)
    p = apply(preset("deepseek-v3-h800", nodes=2, gpus_per_node=2, experts=4, top_k=4, tokens=2), st)
    assert plan(p, overlap=False).dispatch.link_bytes["nvlink"] == pytest.approx(
        2 * p.dispatch_bytes_per_copy * p.imbalance * st.nvlink_copies_per_token)
