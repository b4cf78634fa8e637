"""Checks of one rank's arguments to get_dispatch_layout, dispatch and combine.

They never raise: they return the complaint (empty when the input is fine) and the facts every rank must
agree on, so that `Transport.agree` can raise the same error on every rank before any data moves.
"""

from __future__ import annotations

import numbers
from dataclasses import dataclass, field
from typing import Any, Protocol

import torch

FORMS = {"bf16": 0, "fp8": 1, "fp8-ue8m0": 2}


class BufferFacts(Protocol):
    """What the checks read of a `Buffer` (its group, its id, the last layout's expert count)."""

    id: int
    group_size: int
    num_nodes: int


@dataclass
class Checked:
    complaint: str = ""
    form: str = "bf16"
    facts: dict = field(default_factory=dict)


def _shape(t) -> str:
    return str(list(t.shape)) if isinstance(t, torch.Tensor) else type(t).__name__


def _expect(name: str, t, dtype, shape) -> str:
    """'' or what is wrong with tensor `name` (dtype one of a tuple; shape with None for any size)."""
    if not isinstance(t, torch.Tensor):
        return f"{name} must be a torch.Tensor, got {type(t).__name__}"
    dtypes = dtype if isinstance(dtype, tuple) else (dtype,)
    if t.dtype not in dtypes:
        return f"{name} must be {' or '.join(map(str, dtypes))}, got {t.dtype}"
    if t.dim() != len(shape) or any(w is not None and s != w for s, w in zip(t.shape, shape, strict=False)):
        want = "[" + ", ".join("*" if w is None else str(w) for w in shape) + "]"
        return f"{name} must have shape {want}, got {_shape(t)}"
    return ""


# The checks take what a user passed, of any type (Any), and say what is wrong with it.
def check_topk(topk_idx: Any, num_experts: int, num_tokens: int | None = None) -> str:
    if not isinstance(num_experts, numbers.Integral) or isinstance(num_experts, bool) or num_experts <= 0:
        return f"num_experts must be a positive int, got {num_experts!r}"
    bad = _expect("topk_idx", topk_idx, torch.int64, (num_tokens, None))
    if bad:
        return bad
    out = (topk_idx < -1) | (topk_idx >= num_experts)
    if bool(out.any()):
        t, k = (int(v) for v in torch.nonzero(out)[0])
        return (f"topk_idx[{t}, {k}] = {int(topk_idx[t, k])} is not an expert id: ids are -1 (none) or "
                f"0..{num_experts - 1}")
    return ""


def check_layout(topk_idx: Any, num_experts: Any, num_ranks: int) -> str:
    bad = check_topk(topk_idx, num_experts)
    if bad:
        return bad
    if num_experts % num_ranks:
        return f"num_experts={num_experts} is not a multiple of the group's {num_ranks} ranks"
    return ""


def _check_x(x) -> tuple[str, str, int, int]:
    """(complaint, form, tokens, hidden)."""
    if isinstance(x, tuple | list):
        if len(x) != 2:
            return f"an FP8 x is a tuple (e4m3 [T, H], scales), got {len(x)} items", "fp8", -1, -1
        q, s = x
        bad = _expect("x[0]", q, torch.float8_e4m3fn, (None, None))
        if bad:
            return bad, "fp8", -1, -1
        t_, h = q.shape
        if h % 128:
            return f"FP8 hidden size {h} is not a multiple of 128 (one scale per 128 channels)", "fp8", t_, h
        if isinstance(s, torch.Tensor) and s.dtype == torch.int32:
            return _expect("x[1] (packed UE8M0 scales)", s, torch.int32, (t_, -(-h // 512))), "fp8-ue8m0", t_, h
        return _expect("x[1] (scales)", s, torch.float32, (t_, h // 128)), "fp8", t_, h
    bad = _expect("x", x, torch.bfloat16, (None, None))
    return bad, "bf16", (x.shape[0] if not bad else -1), (x.shape[1] if not bad else -1)


def check_dispatch(buf: BufferFacts, x: Any, handle: Any, num_tokens_per_rank: Any, num_tokens_per_rdma_rank: Any,
                   is_token_in_rank: Any, num_tokens_per_expert: Any, topk_idx: Any, topk_weights: Any,
                   expert_alignment: Any, num_worst_tokens: Any, config: Any) -> Checked:
    c = Checked()
    c.complaint, c.form, t_, h = _check_x(x)
    r_ = buf.group_size
    num_experts = -1
    k = topk_idx.shape[1] if isinstance(topk_idx, torch.Tensor) and topk_idx.dim() == 2 else -1
    problems = [c.complaint] if c.complaint else []
    if handle is not None:
        if getattr(handle, "_buffer_id", None) != buf.id:
            problems.append("handle does not come from a dispatch of this Buffer")
        else:
            num_experts = handle._num_experts
            if topk_idx is not None or topk_weights is not None:
                problems.append("a cached dispatch (handle=...) takes no topk_idx or topk_weights")
            if t_ >= 0 and t_ != handle._num_tokens:
                problems.append(f"x has {t_} tokens but the handle was made for {handle._num_tokens}")
    else:
        given = [v is not None for v in (num_tokens_per_rank, is_token_in_rank, num_tokens_per_expert)]
        if any(given) and not all(given):
            problems.append("pass num_tokens_per_rank, is_token_in_rank and num_tokens_per_expert together "
                            "(or none of them, with topk_idx, to have the layout computed)")
        elif not any(given) and topk_idx is None:
            problems.append("dispatch needs topk_idx or the layout (num_tokens_per_rank, is_token_in_rank, "
                            "num_tokens_per_expert)")
        if isinstance(num_tokens_per_expert, torch.Tensor):
            num_experts = num_tokens_per_expert.numel()
        elif isinstance(last := getattr(buf, "_last_num_experts", None), int):  # set by a layout call
            num_experts = last
        if num_tokens_per_rdma_rank is not None and buf.num_nodes > 1:
            bad = _expect("num_tokens_per_rdma_rank", num_tokens_per_rdma_rank, (torch.int32, torch.int64),
                          (buf.num_nodes,))
            if bad:
                problems.append(bad)
        if all(given) and not problems:
            problems += [p for p in (
                _expect("num_tokens_per_rank", num_tokens_per_rank, (torch.int32, torch.int64), (r_,)),
                _expect("is_token_in_rank", is_token_in_rank, torch.bool, (t_, r_)),
                _expect("num_tokens_per_expert", num_tokens_per_expert, (torch.int32, torch.int64), (None,))) if p]
            if not problems and num_experts % r_:
                problems.append(f"num_tokens_per_expert has {num_experts} experts, not a multiple of the "
                                f"group's {r_} ranks")
            if not problems and not torch.equal(is_token_in_rank.sum(0).to(torch.int64).cpu(),
                                                num_tokens_per_rank.to(torch.int64).cpu()):
                problems.append("num_tokens_per_rank does not equal is_token_in_rank.sum(0)")
        if topk_idx is not None and not problems:
            if num_experts < 0:
                problems.append("without num_tokens_per_expert the number of experts is unknown: call "
                                "get_dispatch_layout first or pass the layout")
            else:
                bad = check_topk(topk_idx, num_experts, t_)
                if bad:
                    problems.append(bad)
                elif num_experts % r_:
                    problems.append(f"{num_experts} experts are not a multiple of the group's {r_} ranks")
                elif is_token_in_rank is not None:
                    epr = num_experts // r_
                    rank_of = torch.where(topk_idx >= 0, topk_idx // epr, torch.zeros_like(topk_idx))
                    marked = torch.gather(is_token_in_rank, 1, rank_of) | (topk_idx < 0)
                    if not bool(marked.all()):
                        t, j = (int(v) for v in torch.nonzero(~marked)[0])
                        problems.append(f"topk_idx[{t}, {j}] = {int(topk_idx[t, j])} lives on rank "
                                        f"{int(topk_idx[t, j]) // epr}, which is_token_in_rank[{t}] does not mark")
        if topk_weights is not None and not problems:
            if topk_idx is None:
                problems.append("topk_weights needs topk_idx")
            else:
                bad = _expect("topk_weights", topk_weights, torch.float32, tuple(topk_idx.shape))
                if bad:
                    problems.append(bad)
    if not isinstance(expert_alignment, int) or expert_alignment < 1:
        problems.append(f"expert_alignment must be an int >= 1, got {expert_alignment!r}")
    if not isinstance(num_worst_tokens, int) or num_worst_tokens < 0:
        problems.append(f"num_worst_tokens must be an int >= 0, got {num_worst_tokens!r}")
    c.complaint = "; ".join(problems)
    c.facts = {"num_experts": num_experts, "hidden": h, "x_form": FORMS[c.form],
               "topk": k if handle is None and topk_idx is not None else -1,
               "with_weights": int(topk_weights is not None), "cached": int(handle is not None),
               "handle_serial": getattr(handle, "_serial", -1) if handle is not None else -1,
               "num_worst_tokens": num_worst_tokens if isinstance(num_worst_tokens, int) else -1}
    return c


def check_combine(buf: BufferFacts, x: Any, handle: Any, topk_weights: Any, bias: Any) -> tuple[str, dict]:
    problems = []
    h = -1
    if getattr(handle, "_buffer_id", None) != buf.id:
        problems.append("handle is not one that a dispatch of this Buffer returned")
        n = -1
    else:
        n = handle._num_recv
    bad = _expect("x", x, torch.bfloat16, (None, None))
    if bad:
        problems.append(bad)
    else:
        h = x.shape[1]
        if n >= 0 and x.shape[0] != n and not (handle._num_worst and x.shape[0] == handle._num_worst):
            problems.append(f"x has {x.shape[0]} rows but this rank received {n} tokens in the dispatch that "
                            f"made the handle (a handle from another call?)")
    if topk_weights is not None and not problems:
        bad = _expect("topk_weights", topk_weights, torch.float32, (x.shape[0], None))
        if bad:
            problems.append(bad)
    for b in (bias if isinstance(bias, tuple | list) else (bias,)):
        if b is not None and not problems and n >= 0:
            bad = _expect("bias", b, torch.bfloat16, (handle._num_tokens, h))
            if bad:
                problems.append(bad)
    facts = {"hidden": h, "handle_serial": getattr(handle, "_serial", -1),
             "with_weights": int(topk_weights is not None)}
    return "; ".join(problems), facts
