"""Checks of one rank's arguments to low_latency_dispatch and low_latency_combine.

Like `validate`, they never raise: they return the complaint (empty when the input is fine) and the facts every
rank must agree on, so that `Transport.agree` raises the same error on every rank before any data moves.
"""

from __future__ import annotations

import numbers
from typing import Any

import torch

from ptxforge.ep.validate import _expect, check_topk


def _positive_int(name: str, v: Any) -> str:
    if not isinstance(v, numbers.Integral) or isinstance(v, bool) or v <= 0:
        return f"{name} must be a positive int, got {v!r}"
    return ""


def check_low_latency_dispatch(x: Any, topk_idx: Any, n_max: Any, num_experts: Any, num_ranks: int,
                               stats_out: Any, wait_stats: Any, use_fp8: Any, round_scale: Any,
                               use_ue8m0: Any) -> tuple[str, dict]:
    problems = [p for p in (_positive_int("num_max_dispatch_tokens_per_rank", n_max),
                            _positive_int("num_experts", num_experts),
                            _expect("x", x, torch.bfloat16, (None, None))) if p]
    t_, h = (x.shape[0], x.shape[1]) if isinstance(x, torch.Tensor) and x.dim() == 2 else (-1, -1)
    if not problems:
        if num_experts % num_ranks:
            problems.append(f"num_experts={num_experts} is not a multiple of the group's {num_ranks} ranks")
        if t_ > n_max:
            problems.append(f"x has {t_} tokens, more than num_max_dispatch_tokens_per_rank={n_max}")
        if h % 128:
            problems.append(f"hidden size {h} is not a multiple of 128 (one FP8 scale per 128 channels)")
        bad = check_topk(topk_idx, num_experts, t_)
        if bad:
            problems.append(bad)
    if use_ue8m0 and not round_scale:
        problems.append("use_ue8m0=True needs round_scale=True (UE8M0 keeps only a power of two)")
    if (use_ue8m0 or round_scale) and not use_fp8:
        problems.append("round_scale and use_ue8m0 apply to FP8 dispatch only (use_fp8=True)")
    el = num_experts // num_ranks if not problems else 0
    if stats_out is not None and not problems:
        bad = _expect("cumulative_local_expert_recv_stats", stats_out, torch.int32, (el,))
        if bad:
            problems.append(bad)
    if wait_stats is not None and not problems:
        bad = _expect("dispatch_wait_recv_cost_stats", wait_stats, torch.int64, (num_ranks,))
        if bad:
            problems.append(bad)
    facts = {"num_max": n_max if isinstance(n_max, int) else -1, "hidden": h,
             "num_experts": num_experts if isinstance(num_experts, int) else -1,
             "use_fp8": int(bool(use_fp8)), "round_scale": int(bool(round_scale)), "use_ue8m0": int(bool(use_ue8m0))}
    return "; ".join(problems), facts


def check_low_latency_combine(x: Any, topk_idx: Any, topk_weights: Any, handle: Any, use_logfmt: Any,
                              zero_copy: Any, out: Any, buffer_id: int, num_ranks: int) -> tuple[str, dict]:
    problems = []
    if use_logfmt:
        problems.append("use_logfmt=True: ptxforge has no LogFMT combine (DeepEP's 10-bit format); use BF16")
    if getattr(handle, "_buffer_id", None) != buffer_id:
        problems.append("handle is not one that low_latency_dispatch of this Buffer returned")
        return "; ".join(problems), {"hidden": -1, "handle_serial": -1}
    _, _, n_max, h, num_experts = handle
    if not handle._received:
        problems.append(f"the dispatch that made the handle (#{handle._serial}) has not received its data: "
                        "call its hook (or wait on its event) first")
    shape = (num_experts // num_ranks, n_max * num_ranks, h)
    bad = _expect("x", x, torch.bfloat16, shape)
    if bad and not zero_copy:
        problems.append(bad)
    t_, k = handle._topk_idx.shape
    bad = _expect("topk_idx", topk_idx, torch.int64, (t_, k)) or \
        _expect("topk_weights", topk_weights, torch.float32, (t_, k))
    if bad:
        problems.append(bad)
    elif not torch.equal(topk_idx.cpu(), handle._topk_idx.cpu()):
        problems.append("topk_idx differs from the one the dispatch that made the handle was given")
    if out is not None:
        bad = _expect("out", out, torch.bfloat16, (t_, h))
        if bad:
            problems.append(bad)
    return "; ".join(problems), {"hidden": h, "handle_serial": handle._serial, "zero_copy": int(bool(zero_copy))}
