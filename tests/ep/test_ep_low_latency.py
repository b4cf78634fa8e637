"""DeepEP's low-latency mode on 4 real gloo processes, checked as DeepEP's test_low_latency.py checks it (written
here from its description): x = rank - 128 with the last 128 columns the token index, 10 random -1 ids; per local
expert recv_count == cumulative stats == the layout's counts == an all-gathered recount; every received row is its
source rank and carries its token index; combine within calc_diff 9e-4 (FP8) / 1e-5 (BF16) of x times the weight
sum; zero_copy and out=; round_scale / use_ue8m0. Also bit-exact against a recount built from every rank's x."""

from __future__ import annotations

import random

import pytest
import torch
import torch.distributed as dist

import ptxforge.ep as deep_ep
from ptxforge.ep.low_latency import cast_to_fp8, ue8m0
from ptxforge.ep.spawn import run_ranks
from ptxforge.ep.testing import calc_diff

WORLD, TOKENS, HIDDEN, EXPERTS, TOPK = 4, 24, 256, 16, 4
N_MAX = 32  # num_max_dispatch_tokens_per_rank > TOKENS: rows past the counts stay unused


def make_inputs(rank: int):
    torch.manual_seed(rank)
    random.seed(rank)
    x = torch.full((TOKENS, HIDDEN), rank - 128.0).to(torch.bfloat16)
    x[:, -128:] = torch.arange(TOKENS).to(torch.bfloat16).view(-1, 1)
    scores = torch.randn((TOKENS, EXPERTS)).abs() + 1
    topk_idx = torch.topk(scores, TOPK, dim=-1).indices.to(torch.int64)
    for _ in range(10):
        topk_idx[random.randint(0, TOKENS - 1), random.randint(0, TOPK - 1)] = -1
    weights = torch.randn((TOKENS, TOPK)).abs()
    return x, topk_idx, weights


def bf16_bits(t: torch.Tensor):
    """A BF16 tensor's bits as a numpy int16 array."""
    return t.contiguous().view(torch.int16).numpy().copy()


def cast_back(q: torch.Tensor, scales: torch.Tensor) -> torch.Tensor:
    """FP8 rows times their per-128-channel scales, to BF16 (DeepEP's per_token_cast_back)."""
    n, h = q.shape
    return (q.to(torch.float32).view(n, h // 128, 128) * scales.unsqueeze(-1)).view(n, h).to(torch.bfloat16)


def expected_rows(all_x, all_idx, expert, use_fp8, round_scale):
    """The rows expert `expert` must hold: source rank order, then token order, as the payload each sent."""
    rows, tokens = [], []
    for x, idx in zip(all_x, all_idx, strict=True):
        toks = torch.nonzero((idx == expert).any(1)).flatten()
        payload = cast_to_fp8(x, round_scale) if use_fp8 else (x, None)
        rows.append((payload[0][toks], None if payload[1] is None else payload[1][toks]))
        tokens.append(toks)
    return rows, tokens


def exponent_bytes(packed: torch.Tensor) -> torch.Tensor:
    """UE8M0 words [..., packs] int32 -> their scale exponent bytes [..., hidden / 128] uint8."""
    dense = torch.empty(packed.shape, dtype=torch.int32).copy_(packed)  # standard strides, even for size-1 dims
    return dense.view(torch.uint8)[..., :HIDDEN // 128]


FORMS = [(False, False, False), (True, False, False), (True, True, False), (True, True, True)]


def simulated_gemm(recv, use_fp8: bool, use_ue8m0: bool) -> torch.Tensor:
    """What the combine sends back, as DeepEP's test makes it: what arrived, cast back to BF16 (its simulated
    GEMM is the identity)."""
    if not use_fp8:
        return recv.clone()
    q, scales = recv
    s = scales.contiguous()
    if use_ue8m0:
        s = (exponent_bytes(s).to(torch.int32) << 23).view(torch.float32)
    return cast_back(q.view(-1, HIDDEN), s.view(-1, HIDDEN // 128)).view(q.shape)


def valid_rows(recv, count, handle):
    """What a dispatch defines (rows past each expert's count are unspecified): per local expert its first
    recv_count rows of x (and scales), src_info, and the layout."""
    q, scales = recv if isinstance(recv, tuple) else (recv, None)
    out = {"count": count.numpy().copy(), "layout_range": handle[1].numpy().copy(),
           "src_info": handle[0].numpy().copy()}  # numpy: tensors would leave the rank's process by shared memory
    for i, n in enumerate(count.tolist()):
        out[f"x{i}"] = q[i, :n].contiguous().view(torch.uint8).numpy().copy()
        if scales is not None:
            dense = torch.empty(scales[i, :n].shape, dtype=scales.dtype).copy_(scales[i, :n])  # standard strides
            out[f"scales{i}"] = dense.view(torch.uint8).numpy().copy()
    return out


def ll_suite(rank: int, world: int, backend: str = "torch", ranks_per_node: int | None = None,
             hook_modes: tuple[bool, ...] = (False, True)):
    """Every check of the contract on this rank; returns {case: calc_diff of its combine} and {case: tensors}.
    `ranks_per_node` (None: one node) puts the ranks on several nodes; `hook_modes`: with the receive hook
    (True) and with async_finish (False)."""
    group = dist.new_group(list(range(world)))
    hint = deep_ep.Buffer.get_low_latency_rdma_size_hint(N_MAX, HIDDEN, world, EXPERTS)
    buf = deep_ep.Buffer(group, 0, hint, low_latency_mode=True, num_qps_per_rank=EXPERTS // world, timeout_s=20,
                         backend=backend, num_ranks_per_node=ranks_per_node or world)
    x, topk_idx, weights = make_inputs(rank)
    all_x = [make_inputs(r)[0] for r in range(world)]
    all_idx = [make_inputs(r)[1] for r in range(world)]
    el = EXPERTS // world
    out, tensors = {}, {}
    for hook_mode in hook_modes:
        for use_fp8, round_scale, use_ue8m0 in FORMS:
            stats = torch.zeros(el, dtype=torch.int32)
            recv, count, handle, event, hook = buf.low_latency_dispatch(
                x, topk_idx, N_MAX, EXPERTS, cumulative_local_expert_recv_stats=stats, use_fp8=use_fp8,
                round_scale=round_scale, use_ue8m0=use_ue8m0, async_finish=not hook_mode,
                return_recv_hook=hook_mode)
            hook() if hook_mode else event.current_stream_wait()
            tensors[(hook_mode, use_fp8, round_scale, use_ue8m0)] = valid_rows(recv, count, handle)
            src_info, layout_range = handle[0], handle[1]
            for i in range(el):
                expert = rank * el + i
                n = int(count[i])
                recount = sum(int((idx == expert).sum()) for idx in all_idx)
                assert n == int(stats[i]) == int((layout_range[i] & 0xFFFFFFFF).sum()) == recount
                rows, tokens = expected_rows(all_x, all_idx, expert, use_fp8, round_scale)
                for src in range(world):
                    begin, cnt = int(layout_range[i, src] >> 32), int(layout_range[i, src] & 0xFFFFFFFF)
                    assert cnt == len(tokens[src])
                    assert torch.equal(src_info[i, begin:begin + cnt], tokens[src].to(torch.int32))
                    if use_fp8:
                        q, scales = recv
                        got_q = q[i, begin:begin + cnt]
                        assert torch.equal(got_q.view(torch.uint8), rows[src][0].view(torch.uint8))
                        if use_ue8m0:  # packed exponent bytes, 4 a word, column-major
                            got = exponent_bytes(scales[i, begin:begin + cnt])
                            assert torch.equal(got, ue8m0(rows[src][1]))
                        else:
                            assert torch.equal(scales[i, begin:begin + cnt], rows[src][1])
                        back = cast_back(got_q, rows[src][1])
                    else:
                        back = recv[i, begin:begin + cnt]
                        assert torch.equal(back, rows[src][0])
                    if cnt and not round_scale:  # the sender's rank, and the token index in the last columns
                        assert bool((back[:, :-128] == src - 128).all())
                        assert torch.equal(back[:, -128:].float(), tokens[src].float().view(-1, 1).expand(-1, 128))
            gemm = simulated_gemm(recv, use_fp8, use_ue8m0)
            want = x.float() * weights.masked_fill(topk_idx == -1, 0).sum(1, keepdim=True)
            for zero_copy in (False, True):
                if zero_copy:
                    buf.get_next_low_latency_combine_buffer(handle)[:, :, :] = gemm
                target = torch.empty((TOKENS, HIDDEN), dtype=torch.bfloat16)
                combined, event, hook = buf.low_latency_combine(gemm, topk_idx, weights, handle,
                                                                zero_copy=zero_copy, async_finish=not hook_mode,
                                                                return_recv_hook=hook_mode, out=target)
                hook() if hook_mode else event.current_stream_wait()
                assert combined is target and not bool(combined.isnan().any())
                diff = calc_diff(want, combined)
                if not round_scale:
                    assert diff < (9e-4 if use_fp8 else 1e-5), (diff, use_fp8, zero_copy)
                out[(hook_mode, use_fp8, round_scale, use_ue8m0, zero_copy)] = diff
                tensors[(hook_mode, use_fp8, round_scale, use_ue8m0, zero_copy)] = bf16_bits(combined)
    buf.destroy()
    return out, tensors


@pytest.fixture(scope="module")
def ll_results():
    return run_ranks(ll_suite, WORLD, timeout_s=240)


def test_low_latency_contract(ll_results):
    assert len(ll_results) == WORLD
    for diffs, _ in ll_results:
        assert len(diffs) == 2 * len(FORMS) * 2
        assert diffs[(False, False, False, False, False)] < 1e-5


def test_combine_of_bf16_dispatch_is_exact(ll_results):
    """BF16 rows summed in f32 and rounded once: the combine equals the f32 weighted sum rounded to BF16."""
    for diffs, _ in ll_results:
        assert diffs[(True, False, False, False, True)] == diffs[(False, False, False, False, False)]


def warm_low_latency(rdma: bool = False) -> None:
    """Import the kernels backend and trace its 4-rank specializations once, before the ranks fork (each
    inherits them); `rdma`: the send kernels that reach other nodes by NVSHMEM puts."""
    import ptxforge.ep.kernel_backend  # noqa: F401  # the emulator and the DSL
    from ptxforge.ep.low_latency_rank import _special
    from ptxforge.kernels import low_latency as K

    for fp8, rnd in ((False, False), (True, False), (True, True)):
        _special(K.ll_dispatch_send, R=4, FP8=fp8, ROUND=rnd, RDMA=rdma, BUG="").module()
    for fp8, ue in ((False, False), (True, False), (True, True)):
        _special(K.ll_dispatch_recv, R=4, FP8=fp8, UE8M0=ue).module()
    _special(K.ll_combine_send, R=4, RDMA=rdma).module()
    K.ll_combine_recv.module()


def bad_input_suite(rank: int, world: int, case: str, backend: str = "torch"):
    hint = deep_ep.Buffer.get_low_latency_rdma_size_hint(N_MAX, HIDDEN, world, EXPERTS)
    buf = deep_ep.Buffer(None, 0, hint, low_latency_mode=True, timeout_s=10, backend=backend)
    x, topk_idx, weights = make_inputs(rank)
    if case == "too many tokens" and rank == 1:
        x = torch.cat([x, x])[:N_MAX + 1]
        topk_idx = torch.cat([topk_idx, topk_idx])[:N_MAX + 1]
    if case == "expert out of range" and rank == 2:
        topk_idx[3, 1] = EXPERTS
    if case == "hidden" and rank == 0:
        x = x[:, :200].contiguous()
    try:
        if case == "third pending":
            for _ in range(3):
                buf.low_latency_dispatch(x, topk_idx, N_MAX, EXPERTS, return_recv_hook=True)
        elif case == "logfmt":
            recv, _, handle, _, _ = buf.low_latency_dispatch(x, topk_idx, N_MAX, EXPERTS, use_fp8=False)
            buf.low_latency_combine(recv, topk_idx, weights, handle, use_logfmt=(rank == 3))
        else:
            buf.low_latency_dispatch(x, topk_idx, N_MAX, EXPERTS)
    except deep_ep.EPInputError as e:
        return str(e)
    return "no error"


@pytest.mark.parametrize("case, words", [
    ("too many tokens", "rank 1: x has 33 tokens, more than num_max_dispatch_tokens_per_rank=32"),
    ("expert out of range", "rank 2: topk_idx[3, 1] = 16 is not an expert id"),
    ("hidden", "rank 0: hidden size 200 is not a multiple of 128"),
    ("third pending", "low-latency buffer 0, which still holds the data of low_latency_dispatch #1"),
    ("logfmt", "rank 3: use_logfmt=True: ptxforge has no LogFMT combine"),
])
@pytest.mark.parametrize("backend", ["torch", "kernels"])
def test_bad_input_raises_on_every_rank(case, words, backend):
    if backend == "kernels":
        warm_low_latency()
    results = run_ranks(bad_input_suite, WORLD, case, backend, timeout_s=120)
    assert all(r != "no error" for r in results), results
    assert all(words in r for r in results), results
