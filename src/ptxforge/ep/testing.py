"""Helpers for checking expert-parallel results (as DeepEP's tests use them)."""

from __future__ import annotations

import torch


def calc_diff(a: torch.Tensor, b: torch.Tensor) -> float:
    """DeepEP's similarity measure: 1 - 2 sum(ab) / sum(a^2 + b^2), on a + 1 and b + 1, in float64."""
    a, b = a.double() + 1, b.double() + 1
    return float(1 - 2 * (a * b).sum() / (a * a + b * b).sum())


def moe_reference(x: torch.Tensor, topk_idx: torch.Tensor, topk_weights: torch.Tensor,
                  experts: torch.Tensor) -> torch.Tensor:
    """Single-process MoE with linear experts: bf16(sum_k w[t, k] * (x[t] @ experts[idx[t, k]])), f32 inside."""
    out = torch.zeros((x.shape[0], experts.shape[2]), dtype=torch.float32)
    for k in range(topk_idx.shape[1]):
        sel = topk_idx[:, k] >= 0
        y = torch.bmm(x[sel].float().unsqueeze(1), experts[topk_idx[sel, k]].float()).squeeze(1)
        out[sel] += topk_weights[sel, k:k + 1] * y
    return out.to(torch.bfloat16)
