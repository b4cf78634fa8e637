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


def calls(buf, rank: int, form: str, num_sms: int, empty: bool, full: bool) -> dict:
    """Layout, dispatch, combine with weights and two biases; `full`: also a cached dispatch and a plain
    combine (no weights, no bias); else the dispatch and combine run with async_finish=True, the combine
    ordered after the dispatch's event, and each event waited for."""
    from ptxforge.ep import Config

    x, idx, w, bias = inputs(rank, form, empty)
    cfg = Config(num_sms, 6, 16, 6, 16)
    ntr, ntrr, nte, in_rank, _ = buf.get_dispatch_layout(idx, E)
    recv, ridx, rw, counts, handle, ev = buf.dispatch(x, num_tokens_per_rank=ntr, num_tokens_per_rdma_rank=ntrr,
                                                      is_token_in_rank=in_rank, num_tokens_per_expert=nte,
                                                      topk_idx=idx, topk_weights=w, config=cfg, expert_alignment=4,
                                                      async_finish=not full)
    ev.current_stream_wait()
    y = _dequant(recv, rank)
    comb, comb_w, ev = buf.combine(y, handle, topk_weights=rw, bias=bias, config=cfg, async_finish=not full,
                                   previous_event=ev)
    ev.current_stream_wait()
    out = {"layout": (ntr, ntrr, nte, in_rank), "recv": recv, "idx": ridx, "w": rw, "counts": counts,
           "handle": tuple(handle), "combined": comb, "combined_w": comb_w}
    if full:
        out["cached"] = buf.dispatch(x, handle=handle, config=cfg)[0]
        out["plain"], out["none_w"], _ = buf.combine(y, handle, config=cfg)
    return out


def compare(rank: int, world: int, per_node: int, cases: list[tuple[str, int, int | None, bool]]) -> dict:
    """Each case (form, num_sms, empty rank or None, full) through both backends: the mismatches, each kernels
    call's measured link bytes and the case's CPU seconds on this rank."""
    import ptxforge.ep as deep_ep

    ref = deep_ep.Buffer(None, 0, 0, num_ranks_per_node=per_node, timeout_s=60)
    kern = deep_ep.Buffer(None, 0, 0, num_ranks_per_node=per_node, backend="kernels", timeout_s=120)
    out: dict = {"mismatch": [], "links": {}, "cpu_s": {}, "roles": None}
    for form, num_sms, empty, full in cases:
        c0 = time.process_time()
        want = calls(ref, rank, form, num_sms, empty == rank, full)
        got = calls(kern, rank, form, num_sms, empty == rank, full)
        for key in want:
            try:
                same(want[key], got[key], f"{form} num_sms={num_sms} {key}")
            except AssertionError as e:
                out["mismatch"].append(str(e))
        out["links"][form, num_sms] = [(s.call, s.links) for s in kern.stats(reset=True)]
        out["cpu_s"][form, num_sms] = round(time.process_time() - c0, 2)
    out["roles"] = sorted({(m["kernel"], m["role"]) for m in kern.sm_map()})
    kern.destroy()
    ref.destroy()
    return out


def warm(nodes: int = 2, gpus: int = 2, hidden: int = HIDDEN) -> None:
    """Trace, validate and compile the internode kernels the default cases specialize (BF16 with a cached
    dispatch and a plain combine, FP8 and its cached dispatch), in the parent before the fork: each rank inherits
    them instead of building its own."""
    from ptxforge.emu import cluster_procs
    from ptxforge.ep.internode_cluster import _special
    from ptxforge.kernels.comm import copy_unit
    from ptxforge.kernels.internode_combine import internode_combine
    from ptxforge.kernels.internode_dispatch import internode_dispatch
    from ptxforge.kernels.internode_notify import internode_notify
    from ptxforge.runtime.validation import problems_of

    def prepare(module) -> None:
        problems_of(module)
        cluster_procs.prepare(module)

    for exchange in (True, False):
        prepare(_special(internode_notify, N=nodes, G=gpus, EXCHANGE=exchange).module())
    for x_bytes, scales, topk in ((2 * hidden, False, True), (2 * hidden, False, False), (hidden, True, True),
                                  (hidden, True, False)):
        prepare(_special(internode_dispatch, N=nodes, G=gpus, UNIT=copy_unit(x_bytes), HAS_SCALES=scales,
                            HAS_TOPK=topk, HAS_W=topk, BUG="").module())
    for bias, w in ((2, True), (0, False)):
        prepare(_special(internode_combine, N=nodes, G=gpus, UNIT=copy_unit(2 * hidden), NUM_BIAS=bias, HAS_W=w,
                            BUG="").module())
