"""The dispatch layout on the torch backend: vectorized torch, bit-identical to the layout kernel
(`ptxforge.kernels.layout.dispatch_layout`), which the tests check."""

from __future__ import annotations

import torch


def dispatch_layout(topk_idx: torch.Tensor, num_experts: int, num_ranks: int,
                    ranks_per_node: int) -> tuple[torch.Tensor, torch.Tensor | None, torch.Tensor, torch.Tensor]:
    """(per rank int32 [R], per node int32 [N] or None when N == 1, per expert int32 [E], in_rank bool [T, R])."""
    t_ = topk_idx.shape[0]
    idx = topk_idx.to(torch.int64)
    valid = idx >= 0
    per_expert = torch.bincount(idx[valid], minlength=num_experts).to(torch.int32)
    in_rank = torch.zeros((t_, num_ranks + 1), dtype=torch.bool, device=idx.device)
    rank_of = torch.where(valid, idx // (num_experts // num_ranks), num_ranks)  # invalid -> a spare column
    in_rank.scatter_(1, rank_of, True)
    in_rank = in_rank[:, :num_ranks].contiguous()
    per_rank = in_rank.sum(0, dtype=torch.int32)
    nodes = num_ranks // ranks_per_node
    per_node = None
    if nodes > 1:
        per_node = in_rank.view(t_, nodes, ranks_per_node).any(-1).sum(0, dtype=torch.int32)
    return per_rank, per_node, per_expert, in_rank
