"""Helpers for checking expert-parallel results (as DeepEP's tests use them)."""

from __future__ import annotations

import torch


def calc_diff(a: torch.Tensor, b: torch.Tensor) -> float:
    """DeepEP's similarity measure: 1 - 2 sum(ab) / sum(a^2 + b^2), on a + 1 and b + 1, in float64."""
    a, b = a.double() + 1, b.double() + 1
    return float(1 - 2 * (a * b).sum() / (a * a + b * b).sum())


def moe_reference(x: torch.Tensor, topk_idx: torch.Tensor, topk_weights: torch.Tensor,
                  experts: torch.Tensor) -> torch.Tensor:
    """MoE with linear experts: bf16(sum_k w[t, k] * (x[t] @ experts[idx[t, k]])), in f32, expert by expert
    (ids of -1 select nothing)."""
    out = torch.zeros((x.shape[0], experts.shape[2]), dtype=torch.float32)
    for e in torch.unique(topk_idx[topk_idx >= 0]).tolist():
        rows, ks = torch.nonzero(topk_idx == e, as_tuple=True)
        out.index_add_(0, rows, topk_weights[rows, ks].unsqueeze(1) * (x[rows].float() @ experts[e].float()))
    return out.to(torch.bfloat16)
