"""DeepEP V2's `ElasticBuffer` on 4 real gloo processes, checked as V2's tests/elastic/test_ep.py checks it (written
here from its description), one world for every case: received source token indices equal a reference dispatch's
(built here from every rank's all-gathered input), rows, local ids and weights bit-equal; the expand layout's slots
(expert-major, each block aligned, padding zeroed); combine of generated per-(token, k) data equal to a reference
reduce within BF16 rounding (bit-equal without allow_multiple_reduction); cached dispatch equal; FP8 and BF16;
biases 0, 1 and 2; a dispatch without CPU sync; bad input on one rank raising on all."""

from __future__ import annotations

import math

import pytest
import torch
import torch.distributed as dist

import ptxforge.ep as deep_ep
from ptxforge.ep.elastic_layout import align, buffer_size_hint
from ptxforge.ep.low_latency import cast_to_fp8
from ptxforge.ep.spawn import run_ranks
from ptxforge.ep.testing import calc_diff
from ptxforge.plan.deepep_v2 import v2_num_sms

WORLD, M, HIDDEN, EXPERTS, TOPK = 4, 24, 256, 16, 4
LOCAL = EXPERTS // WORLD


def make_inputs(rank: int):
    """Rank r has M - r tokens; ids unique per token, a few -1; weights random."""
    g = torch.Generator().manual_seed(100 + rank)
    t_ = M - rank
    x = torch.randn((t_, HIDDEN), generator=g).to(torch.bfloat16)
    idx = torch.topk(torch.rand((t_, EXPERTS), generator=g), TOPK, dim=-1).indices.to(torch.int64)
    idx[torch.rand((t_, TOPK), generator=g) < 0.1] = -1
    w = torch.rand((t_, TOPK), generator=g).masked_fill(idx < 0, 0.0)
    return x, idx, w


def generated(gidx: torch.Tensor) -> torch.Tensor:
    """Per-(token, k) data [n, K, H] from the global token index: what an expert 'computes' for each top-k."""
    seeds = (gidx.to(torch.int64).unsqueeze(1) * TOPK + torch.arange(TOPK)).to(torch.float32)
    cols = torch.arange(1, HIDDEN + 1, dtype=torch.float32)
    return torch.sin(seeds.unsqueeze(-1) * 0.37 + cols * 0.011).to(torch.bfloat16)


def reference_dispatch(rank: int, payloads, all_idx, all_w):
    """What rank `rank` must receive, sorted by source global index: (gidx, rows..., local ids, weights)."""
    lo, hi = rank * LOCAL, (rank + 1) * LOCAL
    gidx, rows, ids, ws = [], [], [], []
    for src, (p, idx, w) in enumerate(zip(payloads, all_idx, all_w, strict=True)):
        toks = torch.nonzero(((idx >= lo) & (idx < hi)).any(1)).flatten()
        gidx.append(src * M + toks)
        rows.append([t[toks] for t in p])
        mine = (idx[toks] >= lo) & (idx[toks] < hi)
        ids.append(torch.where(mine, idx[toks] - lo, torch.full_like(idx[toks], -1)))
        ws.append(w[toks])
    cat_rows = [torch.cat([r[i] for r in rows]) for i in range(len(rows[0]))]
    return torch.cat(gidx), cat_rows, torch.cat(ids), torch.cat(ws)


def reference_combine(gidx, idx, bias, per_rank_first: bool) -> torch.Tensor:
    """V2's reference: y = generated data (0 where the id is -1); with per_rank_first each rank's top-k slots
    are summed in f32 and rounded to BF16 at the last slot of that rank; then bias + every slot in top-k order."""
    y = generated(gidx)
    y[idx < 0] = 0
    if per_rank_first:
        owner = torch.where(idx >= 0, idx // LOCAL, -1)
        out = torch.zeros_like(y)
        for t in range(y.shape[0]):
            for r in set(owner[t].tolist()) - {-1}:
                ks = [k for k in range(TOPK) if owner[t, k] == r]
                s = torch.zeros(HIDDEN)
                for k in ks:
                    s += y[t, k].float()
                out[t, ks[-1]] = s.to(torch.bfloat16)
        y = out
    acc = torch.zeros((y.shape[0], HIDDEN))
    for b in (bias if isinstance(bias, tuple) else (bias,)):
        if b is not None:
            acc += b.float()
    for k in range(TOPK):
        acc += y[:, k].float()
    return acc.to(torch.bfloat16)


def expert_output_rows(handle, recv_idx) -> torch.Tensor:
    """Non-expand combine input: each received token's generated data summed over its local top-k (f32 -> BF16)."""
    n = handle.psum_num_recv_tokens_per_scaleup_rank[-1].item()
    y = generated(handle.recv_src_metadata[:n, 0])
    y[recv_idx[:n] < 0] = 0
    return y.float().sum(1).to(torch.bfloat16)


def expanded_input(handle, rows: int) -> torch.Tensor:
    """Expand combine input: slot of (token, k) holds generated[token, k]; padding rows garbage (NaN)."""
    n = handle.psum_num_recv_tokens_per_scaleup_rank[-1].item()
    y = generated(handle.recv_src_metadata[:n, 0])
    x = torch.full((rows, HIDDEN), float("nan"), dtype=torch.bfloat16)
    slots = handle.recv_src_metadata[:n, 2:].to(torch.int64)
    r, k = torch.nonzero(slots >= 0, as_tuple=True)
    x[slots[r, k]] = y[r, k]
    return x


def check_dispatch(recv, recv_idx, recv_w, handle, ref, use_fp8):
    gidx, ref_rows, ref_ids, ref_w = ref
    n = gidx.numel()
    assert handle.num_recv_tokens == n and handle.psum_num_recv_tokens_per_scaleup_rank[-1].item() == n
    assert torch.equal(torch.sort(handle.recv_src_metadata[:, 0].to(torch.int64)).values, gidx)
    assert torch.equal(handle.recv_src_metadata[:, 0].to(torch.int64), gidx)  # rows come sorted
    got = list(recv) if use_fp8 else [recv]
    for a, b in zip(got, ref_rows, strict=True):
        assert torch.equal(a.view(torch.uint8), b.view(torch.uint8))
    assert torch.equal(recv_idx, ref_ids)
    assert torch.equal(recv_w.masked_fill(ref_ids < 0, 0), ref_w.masked_fill(ref_ids < 0, 0))
    # column 1: source scale-up rank * K + the first top-k on this rank
    src = gidx // M
    first = torch.argmax((ref_ids >= 0).to(torch.int8), 1)
    assert torch.equal(handle.recv_src_metadata[:, 1].to(torch.int64), src * TOPK + first)
    per_src = torch.bincount(src, minlength=WORLD)
    assert handle.psum_num_recv_tokens_per_scaleup_rank.tolist() == torch.cumsum(per_src, 0).tolist()


def check_expand(recv, recv_w, handle, flat_ref, alignment, use_fp8, zero_padding):
    """Every (token, local expert) in its slot, expert-major, blocks aligned; padding zero when asked."""
    gidx, ref_rows, ref_ids, ref_w = flat_ref
    slots = handle.recv_src_metadata[:, 2:].to(torch.int64)
    assert torch.equal(slots >= 0, ref_ids >= 0)
    counts = torch.bincount(ref_ids[ref_ids >= 0], minlength=LOCAL)
    start = 0
    for e in range(LOCAL):
        c = int(counts[e])
        assert start % alignment == 0
        mine = slots[ref_ids == e]
        assert sorted(mine.tolist()) == list(range(start, start + c))
        # within an expert's block the slots follow the source global index
        order = torch.nonzero((ref_ids == e).any(1)).flatten()
        assert torch.equal(slots[order][ref_ids[order] == e], torch.arange(start, start + c))
        assert handle.psum_num_recv_tokens_per_expert[e].item() == start + c
        assert handle.num_unaligned_recv_tokens_per_expert[e].item() == c
        start = align(start + c, alignment)
    assert handle.num_expanded_tokens == start
    got = list(recv) if use_fp8 else [recv]
    assert got[0].shape[0] == start and recv_w.shape == (start,)
    r, k = torch.nonzero(slots >= 0, as_tuple=True)
    for a, b in zip(got, ref_rows, strict=True):
        assert torch.equal(a[slots[r, k]].view(torch.uint8), b[r].view(torch.uint8))
    assert torch.equal(recv_w[slots[r, k]], ref_w[r, k])
    if zero_padding:
        used = torch.zeros(start, dtype=torch.bool)
        used[slots[r, k]] = True
        for a in got:
            assert bool((a[~used].view(torch.uint8) == 0).all())
        assert bool((recv_w[~used] == 0).all())


def elastic_suite(rank: int, world: int):
    group = dist.new_group(list(range(world)))
    buf = deep_ep.ElasticBuffer(group, num_max_tokens_per_rank=M, hidden=HIDDEN, num_topk=TOPK,
                                explicitly_destroy=True, num_cpu_timeout_secs=30)
    single = deep_ep.ElasticBuffer(group, num_max_tokens_per_rank=M, hidden=HIDDEN, num_topk=TOPK,
                                   allow_multiple_reduction=False, allow_hybrid_mode=False, num_cpu_timeout_secs=30)
    x, idx, w = make_inputs(rank)
    inputs = [make_inputs(r) for r in range(world)]
    out: dict = {"diffs": {}, "exact_single_reduction": [], "cases": 0}
    torch.manual_seed(7 + rank)
    for use_fp8 in (False, True):
        payloads = [cast_to_fp8(xx, False) if use_fp8 else (xx,) for xx, _, _ in inputs]
        ref = reference_dispatch(rank, payloads, [i for _, i, _ in inputs], [ww for _, _, ww in inputs])
        xin = cast_to_fp8(x, False) if use_fp8 else x
        for alignment in (1, 8):
            stats = torch.zeros(LOCAL, dtype=torch.int32)
            recv, recv_idx, recv_w, handle, event = buf.dispatch(
                xin, topk_idx=idx, topk_weights=w, num_experts=EXPERTS, expert_alignment=alignment,
                cumulative_local_expert_recv_stats=stats)
            event.current_stream_wait()
            check_dispatch(recv, recv_idx, recv_w, handle, ref, use_fp8)
            counts = torch.bincount(ref[2][ref[2] >= 0], minlength=LOCAL)
            assert stats.tolist() == counts.tolist()
            assert handle.num_recv_tokens_per_expert_list == [align(int(c), alignment) for c in counts]
            assert handle.psum_num_recv_tokens_per_expert.tolist() == torch.cumsum(
                torch.tensor(handle.num_recv_tokens_per_expert_list), 0).tolist()
            assert handle.topk_idx is not idx and torch.equal(handle.topk_idx, idx)

            ex_recv, ex_idx, ex_w, ex_handle, _ = buf.dispatch(
                xin, topk_idx=idx, topk_weights=w, num_experts=EXPERTS, expert_alignment=alignment,
                do_expand=True, use_tma_aligned_col_major_sf=True, do_handle_copy=False)
            assert ex_idx is None and ex_handle.topk_idx is idx
            if use_fp8:
                assert ex_recv[1].stride(0) == 1  # column-major scales
            check_expand(ex_recv, ex_w, ex_handle, ref, alignment, use_fp8, zero_padding=True)

            c_recv, c_idx, c_w, c_handle, _ = buf.dispatch(xin, handle=handle)
            assert c_handle is handle and c_w is None
            for a, b in zip(list(c_recv) if use_fp8 else [c_recv], list(recv) if use_fp8 else [recv], strict=True):
                assert torch.equal(a.view(torch.uint8), b.view(torch.uint8))
            assert torch.equal(c_idx, recv_idx)
            ce_recv, _, ce_w, _, _ = buf.dispatch(xin, handle=ex_handle, topk_weights=w, do_expand=True,
                                                  do_zero_padding=True)
            for a, b in zip(list(ce_recv) if use_fp8 else [ce_recv], list(ex_recv) if use_fp8 else [ex_recv],
                            strict=True):
                assert torch.equal(a.contiguous().view(torch.uint8), b.contiguous().view(torch.uint8))
            assert torch.equal(ce_w, ex_w)

            my_gidx = rank * M + torch.arange(x.shape[0])
            for num_bias in (0, 1, 2):
                bias = None
                if num_bias == 1:
                    bias = torch.randn((x.shape[0], HIDDEN)).to(torch.bfloat16)
                elif num_bias == 2:
                    bias = tuple(torch.randn((x.shape[0], HIDDEN)).to(torch.bfloat16) for _ in range(2))
                want = reference_combine(my_gidx, idx, bias, per_rank_first=True)
                combined, cw, _ = buf.combine(expert_output_rows(handle, recv_idx), handle, topk_weights=recv_w,
                                              bias=bias)
                assert torch.equal(cw, w.masked_fill(idx < 0, 0))
                reduced, rw, _ = buf.combine(expanded_input(ex_handle, ex_recv[0].shape[0] if use_fp8
                                                            else ex_recv.shape[0]),
                                             ex_handle, topk_weights=ex_w, bias=bias)
                assert torch.equal(rw, w.masked_fill(idx < 0, 0))
                for name, got in (("combine", combined), ("expand combine", reduced)):
                    d = calc_diff(got, want)
                    # the per-rank partials round as the reference's; only the f32 sum order differs, so at
                    # most one BF16 rounding step of the result apart
                    off = ((got.float() - want.float()).abs() - want.float().abs() * 2 ** -7).max().item()
                    assert d < 1e-5 and off <= 1e-6, (name, d, off)
                    out["diffs"][(use_fp8, alignment, num_bias, name)] = d
                    out["max_abs"] = max(out.get("max_abs", 0.0), (got.float() - want.float()).abs().max().item())
                out["cases"] += 1
    # one reduction at the source (allow_multiple_reduction=False): bit-equal to V2's reference recipe
    for num_bias in (0, 2):
        bias = None if num_bias == 0 else tuple(torch.randn((x.shape[0], HIDDEN)).to(torch.bfloat16)
                                                for _ in range(2))
        ex_recv, _, ex_w, ex_handle, _ = single.dispatch(x, topk_idx=idx, topk_weights=w, num_experts=EXPERTS,
                                                         expert_alignment=4, do_expand=True)
        got, gw, _ = single.combine(expanded_input(ex_handle, ex_recv.shape[0]), ex_handle, topk_weights=ex_w,
                                    bias=bias)
        want = reference_combine(rank * M + torch.arange(x.shape[0]), idx, bias, per_rank_first=False)
        out["exact_single_reduction"].append(bool(torch.equal(got, want)))
    # without CPU sync: V2's worst-case sizes, the real rows first
    recv, recv_idx, _, handle, _ = buf.dispatch(x, topk_idx=idx, topk_weights=w, num_experts=EXPERTS,
                                                do_cpu_sync=False)
    n = handle.psum_num_recv_tokens_per_scaleup_rank[-1].item()
    out["no_sync"] = (recv.shape[0], handle.num_recv_tokens, handle.num_recv_tokens_per_expert_list,
                      bool((recv_idx[n:] == -1).all()), bool((handle.recv_src_metadata[n:] == -1).all()))
    xs = torch.zeros((recv.shape[0], HIDDEN), dtype=torch.bfloat16)
    xs[:n] = expert_output_rows(handle, recv_idx)
    got, _, _ = buf.combine(xs, handle)
    out["no_sync_diff"] = calc_diff(got, reference_combine(rank * M + torch.arange(x.shape[0]), idx, None, True))
    # two nodes of two ranks (hybrid: scale-out 2 x scale-up 2), rank 3 without tokens
    nodes = deep_ep.ElasticBuffer(group, num_max_tokens_per_rank=M, num_ranks_per_node=2, num_cpu_timeout_secs=30)
    x2, idx2, w2 = (t[:0] if rank == 3 else t for t in (x, idx, w))
    inputs2 = [tuple(t[:0] if r == 3 else t for t in inputs[r]) for r in range(world)]
    ref2 = reference_dispatch(rank, [(xx,) for xx, _, _ in inputs2], [i for _, i, _ in inputs2],
                              [ww for _, _, ww in inputs2])
    recv, recv_idx, recv_w, handle, _ = nodes.dispatch(x2, topk_idx=idx2, topk_weights=w2, num_experts=EXPERTS)
    gidx = ref2[0]
    assert torch.equal(handle.recv_src_metadata[:, 0].to(torch.int64), gidx)
    assert torch.equal(recv, ref2[1][0]) and torch.equal(recv_idx, ref2[2])
    per_scaleup = torch.bincount(gidx // M % 2, minlength=2)
    assert handle.psum_num_recv_tokens_per_scaleup_rank.tolist() == torch.cumsum(per_scaleup, 0).tolist()
    ex_recv, _, ex_w, ex_handle, _ = nodes.dispatch(x2, topk_idx=idx2, topk_weights=w2, num_experts=EXPERTS,
                                                    do_expand=True, expert_alignment=4)
    check_expand(ex_recv, ex_w, ex_handle, ref2, 4, False, zero_padding=False)
    my2 = rank * M + torch.arange(x2.shape[0])
    want = reference_combine(my2, idx2, None, per_rank_first=True)
    got, cw, _ = nodes.combine(expert_output_rows(handle, recv_idx), handle, topk_weights=recv_w)
    got_ex, _, _ = nodes.combine(expanded_input(ex_handle, ex_recv.shape[0]), ex_handle)
    out["nodes"] = dict(domains=(nodes.get_physical_domain_size(), nodes.get_logical_domain_size()),
                        rows=x2.shape[0], combined=got.shape[0],
                        diff=max(calc_diff(got, want), calc_diff(got_ex, want)) if x2.shape[0] else 0.0,
                        weights=bool(torch.equal(cw, w2.masked_fill(idx2 < 0, 0))))
    # the small API
    out["api"] = dict(
        physical=buf.get_physical_domain_size(), logical=buf.get_logical_domain_size(),
        single_logical=single.get_logical_domain_size(),
        sms=buf.get_theoretical_num_sms(EXPERTS, TOPK), sms_256=buf.get_theoretical_num_sms(256, 8),
        qps=buf.get_theoretical_num_qps(20), single_qps=single.get_theoretical_num_qps(20),
        hint=deep_ep.ElasticBuffer.get_buffer_size_hint(group, 4096, 7168, 8, True), num_bytes=buf.num_bytes)
    buf.barrier()
    buf.destroy()
    try:
        buf.dispatch(x, topk_idx=idx, num_experts=EXPERTS)
        out["after_destroy"] = ""
    except RuntimeError as e:
        out["after_destroy"] = str(e)
    return out


BAD_CASES = {
    "too many tokens": ("num_max_tokens_per_rank=24", 1),
    "expert out of range": ("is not an expert id", 2),
    "zero padding without expand": ("do_zero_padding needs do_expand", 3),
    "fp8 hidden": ("not a multiple of 128", 0),
    "foreign handle": ("not one that a dispatch of this ElasticBuffer returned", 1),
    "num_bytes below the hint": ("is smaller than this dispatch needs", 0),
    "cached with topk_idx": ("takes no topk_idx", 2),
}


def bad_input_suite(rank: int, world: int, case: str):
    group = dist.new_group(list(range(world)))
    buf = deep_ep.ElasticBuffer(group, 2 << 20, num_max_tokens_per_rank=M, num_cpu_timeout_secs=20)
    other = deep_ep.ElasticBuffer(group, num_max_tokens_per_rank=M, num_cpu_timeout_secs=20)
    x, idx, w = make_inputs(rank)
    _, bad_rank = BAD_CASES[case]
    kw: dict = dict(topk_idx=idx, topk_weights=w, num_experts=EXPERTS)
    if rank == bad_rank:
        if case == "too many tokens":
            x, kw["topk_idx"], kw["topk_weights"] = (torch.cat([x, x]), torch.cat([idx, idx]), torch.cat([w, w]))
        elif case == "expert out of range":
            kw["topk_idx"] = idx.clone()
            kw["topk_idx"][0, 0] = EXPERTS
        elif case == "zero padding without expand":
            kw["do_zero_padding"] = True
        elif case == "num_bytes below the hint":
            kw["num_max_tokens_per_rank"] = 100_000
        elif case == "fp8 hidden":
            x = (torch.zeros((x.shape[0], 200), dtype=torch.float8_e4m3fn), torch.ones((x.shape[0], 2)))
    if case == "cached with topk_idx":
        _, _, _, h, _ = buf.dispatch(x, **kw)
        kw = dict(handle=h, topk_idx=idx) if rank == bad_rank else dict(handle=h)
    if case == "foreign handle":
        _, _, _, h, _ = other.dispatch(x, **kw)
        recv, _, _, mine, _ = buf.dispatch(x, **kw)
        try:
            buf.combine(torch.zeros((mine.num_recv_tokens, HIDDEN), dtype=torch.bfloat16),
                        h if rank == bad_rank else mine)
        except deep_ep.EPInputError as e:
            return str(e)
        return ""
    try:
        buf.dispatch(x, **kw)
    except deep_ep.EPInputError as e:
        return str(e)
    return ""


@pytest.fixture(scope="module")
def elastic_results():
    return run_ranks(elastic_suite, WORLD, timeout_s=240)


def test_dispatch_combine_contract(elastic_results):
    for r in elastic_results:
        assert r["cases"] == 2 * 2 * 3
        assert max(r["diffs"].values()) < 1e-5
        assert r["exact_single_reduction"] == [True, True]


def test_dispatch_without_cpu_sync_uses_worst_case_sizes(elastic_results):
    for r in elastic_results:
        rows, num_recv, per_expert, ids_blank, meta_blank = r["no_sync"]
        assert rows == WORLD * M == num_recv and per_expert == [] and ids_blank and meta_blank
        assert r["no_sync_diff"] < 1e-5


def test_two_nodes_hybrid_and_an_empty_rank(elastic_results):
    for rank, r in enumerate(elastic_results):
        n = r["nodes"]
        assert n["domains"] == ((2, 2), (2, 2))
        assert n["rows"] == n["combined"] == (0 if rank == 3 else M - rank)
        assert n["diff"] < 1e-5 and n["weights"]


def test_small_api(elastic_results):
    api = elastic_results[0]["api"]
    assert api["physical"] == (1, WORLD) and api["logical"] == (1, WORLD) and api["single_logical"] == (1, WORLD)
    # V2's closed form through the planner's one implementation; at least 4, even, at most 132
    assert api["sms"] == v2_num_sms(EXPERTS, TOPK, 1, WORLD, 50.0, 160.0, 132).sms
    assert api["sms_256"] == v2_num_sms(256, 8, 1, WORLD, 50.0, 160.0, 132).sms
    assert api["sms"] % 2 == 0 and 4 <= api["sms"] <= 132
    assert api["qps"] == min(20 * 16 + 1, 129) and api["single_qps"] == 9
    # the size hint: worst-case rows (4096 x min(8, 4) sent + 4096 x 4 received) x the larger row, 2 MiB-aligned
    row = max(7168 + 4 * 56 + 12 * 8 + 8, 2 * 7168 + 4 * 8)
    assert api["hint"] == buffer_size_hint(WORLD, 4096, 7168, 8, True) == \
        math.ceil((4096 * 4 + 4096 * 4) * row / (2 << 20)) * (2 << 20)
    assert api["num_bytes"] % (2 << 20) == 0 and api["num_bytes"] > 0
    for r in elastic_results:
        assert "destroyed" in r["after_destroy"]


@pytest.mark.parametrize("case", sorted(BAD_CASES))
def test_bad_input_on_one_rank_raises_on_all(case):
    words, bad_rank = BAD_CASES[case]
    msgs = run_ranks(bad_input_suite, WORLD, case, timeout_s=120)
    for m in msgs:
        assert words in m and f"rank {bad_rank}" in m, m


def test_constructor_refuses_unaligned_num_bytes():
    with pytest.raises(ValueError, match="2 MiB"):
        deep_ep.ElasticBuffer(None, num_bytes=12345)
