"""Layers whose backward splits into backward-for-input (B) and backward-for-weights (W), so zero-bubble
schedules can defer W through `WeightGradStore`."""

from __future__ import annotations

import torch
import torch.nn as nn
import torch.nn.functional as F

from ptxforge.pipeline.weight_grad import WeightGradStore


class _SplitLinearFn(torch.autograd.Function):
    """y = x W^T + b. Backward returns dx (and db) at once; dW is accumulated by a closure that runs now or,
    while WeightGradStore.enabled, when the schedule's W op pops it."""

    @staticmethod
    def forward(ctx, x, weight, bias):
        ctx.save_for_backward(x, weight)
        ctx.has_bias = bias is not None
        return F.linear(x, weight, bias)

    @staticmethod
    def backward(ctx, grad_out):
        x, weight = ctx.saved_tensors

        def weight_grad() -> None:
            gw = grad_out.reshape(-1, grad_out.shape[-1]).T @ x.reshape(-1, x.shape[-1])
            weight.grad = gw if weight.grad is None else weight.grad + gw

        if WeightGradStore.enabled:
            WeightGradStore.put(weight_grad)
        else:
            weight_grad()
        grad_bias = grad_out.reshape(-1, grad_out.shape[-1]).sum(0) if ctx.has_bias else None
        return grad_out @ weight, None, grad_bias


class SplitGradLinear(nn.Linear):
    """nn.Linear whose weight gradient is deferred to W while `WeightGradStore.enabled` (bias grads stay in B)."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return _SplitLinearFn.apply(x, self.weight, self.bias)
