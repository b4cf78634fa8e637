"""What each rank of the internode Buffer tests runs: the same calls through a torch-backend Buffer and a
kernels-backend Buffer of one gloo world spanning nodes (num_ranks_per_node), compared bit for bit inside the
rank; DeepEP's test contract (rows encode source rank and token, the layout equals a recount, combine with
two biases). A rank gives back its mismatches (empty: bit-identical) and each call's measured link bytes."""

from __future__ import annotations

import time

import torch
from ep_checks import E, encoded_x, random_topk
from kernel_cases import expert_out, same

TOKENS, HIDDEN = 16, 256


def inputs(rank: int, form: str, empty: bool, tokens: int = TOKENS, hidden: int = HIDDEN):
    """(x, top-k ids, weights, two biases); `empty`: this rank sends nothing. form: bf16, fp8 (FP32 scales) or
    fp8-ue8m0 (packed UE8M0 scales)."""
    x = encoded_x(rank, tokens, hidden)
    idx, w = random_topk(rank, tokens, E)
    if empty:
        idx = torch.full_like(idx, -1)
    if form != "bf16":
        from ptxforge.kernels import ops

        x = ops.per_token_cast_to_fp8((x.float() * 0.37 + rank).to(torch.bfloat16), packed_ue8m0=form == "fp8-ue8m0")
    bias = (torch.full((tokens, hidden), 0.5, dtype=torch.bfloat16),
            (torch.arange(tokens * hidden) % 7 - 3).to(torch.bfloat16).view(tokens, hidden))
    return x, idx, w, bias


def _dequant(recv, rank: int):
    """expert_out for BF16 and FP32-scaled FP8; packed UE8M0 rows back through the DSL cast."""
    if isinstance(recv, tuple) and recv[1].dtype == torch.int32:
        from ptxforge.kernels import ops

        return (ops.per_token_cast_back(*recv).float() * 0.5 + rank).to(torch.bfloat16)
    return expert_out(recv, rank)


def calls(buf, rank: int, form: str, num_sms: int, empty: bool) -> dict:
    """Layout, dispatch, cached dispatch, combine with weights and two biases, plain combine."""
    from ptxforge.ep import Config

    x, idx, w, bias = inputs(rank, form, empty)
    cfg = Config(num_sms, 6, 16, 6, 16)
    ntr, ntrr, nte, in_rank, _ = buf.get_dispatch_layout(idx, E)
    recv, ridx, rw, counts, handle, _ = buf.dispatch(x, num_tokens_per_rank=ntr, num_tokens_per_rdma_rank=ntrr,
                                                     is_token_in_rank=in_rank, num_tokens_per_expert=nte,
                                                     topk_idx=idx, topk_weights=w, config=cfg, expert_alignment=4)
    cached = buf.dispatch(x, handle=handle, config=cfg)[0]
    y = _dequant(recv, rank)
    comb, comb_w, _ = buf.combine(y, handle, topk_weights=rw, bias=bias, config=cfg)
    plain, none_w, _ = buf.combine(y, handle, config=cfg)
    return {"layout": (ntr, ntrr, nte, in_rank), "recv": recv, "idx": ridx, "w": rw, "counts": counts,
            "handle": tuple(handle), "cached": cached, "combined": comb, "combined_w": comb_w, "plain": plain,
            "none_w": none_w}


def compare(rank: int, world: int, per_node: int, cases: list[tuple[str, int, int | None]]) -> dict:
    """Each case (form, num_sms, empty rank or None) through both backends; mismatches and measured links."""
    import ptxforge.ep as deep_ep

    ref = deep_ep.Buffer(None, 0, 0, num_ranks_per_node=per_node, timeout_s=60)
    kern = deep_ep.Buffer(None, 0, 0, num_ranks_per_node=per_node, backend="kernels", timeout_s=120)
    out: dict = {"mismatch": [], "links": {}, "cpu_s": {}}
    for form, num_sms, empty in cases:
        c0 = time.process_time()
        want = calls(ref, rank, form, num_sms, empty == rank)
        got = calls(kern, rank, form, num_sms, empty == rank)
        for key in want:
            try:
                same(want[key], got[key], f"{form} num_sms={num_sms} {key}")
            except AssertionError as e:
                out["mismatch"].append(str(e))
        out["links"][form, num_sms] = [s.links for s in kern.stats()[-4:]]
        out["cpu_s"][form, num_sms] = round(time.process_time() - c0, 2)
    kern.destroy()
    ref.destroy()
    return out
