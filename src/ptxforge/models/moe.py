"""DeepSeek-V3's MoE block: a shared expert plus routed experts (SwiGLU MLPs) chosen by sigmoid, group-limited
routing with a per-expert bias that balances the load without an auxiliary loss.

`MoE.forward(x)` runs every expert in this process (the reference); `MoE.forward(x, buffer)` runs expert
parallelism over `buffer`'s group (a `ptxforge.ep.Buffer`): rank r holds experts [r*E/R, (r+1)*E/R), the tokens
travel to them as BF16 through `dispatch` and their weighted outputs come back through `combine`, both
differentiable (dispatch's backward is a combine of the gradients, combine's a cached dispatch).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch
from torch import nn

from ptxforge.kernels import ops
from ptxforge.models import grad64


@dataclass(frozen=True)
class MoEConfig:
    hidden: int = 256           # a multiple of 128 (the FP8 1x128 groups)
    inter: int = 64             # each expert's intermediate size
    num_experts: int = 8
    topk: int = 2
    n_group: int = 4
    topk_group: int = 2
    routed_scaling_factor: float = 2.5
    bias_rate: float = 1e-3     # the balancing bias's update speed (DeepSeek-V3's gamma)


def route(logits: torch.Tensor, bias: torch.Tensor, cfg: MoEConfig) -> tuple[torch.Tensor, torch.Tensor]:
    """(topk_idx, topk_weights): the choice is the routing kernel's (`ptxforge.kernels.ops.route`, biased scores,
    group-limited); the weights are the same formula in torch so that they carry gradients to the gate."""
    idx, _ = ops.route(logits.detach().float(), bias.float(), n_group=cfg.n_group, topk_group=cfg.topk_group,
                       topk=cfg.topk, routed_scaling_factor=cfg.routed_scaling_factor)
    s = torch.sigmoid(logits.float()).gather(1, idx)
    return idx, s / s.sum(-1, keepdim=True) * cfg.routed_scaling_factor


def balance_bias(bias: torch.Tensor, tokens_per_expert: torch.Tensor, rate: float) -> None:
    """DeepSeek-V3's auxiliary-loss-free balancing: raise the bias of under-loaded experts, lower the others'."""
    load = tokens_per_expert.float()
    bias.add_(rate * torch.sign(load.mean() - load))


class _Dispatch(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x, topk_idx, topk_weights, buffer, box, num_experts):
        ntr, _, nte, in_rank, _ = buffer.get_dispatch_layout(topk_idx, num_experts)
        recv_x, recv_idx, recv_w, _, handle, _ = buffer.dispatch(
            x.to(torch.bfloat16), num_tokens_per_rank=ntr, is_token_in_rank=in_rank, num_tokens_per_expert=nte,
            topk_idx=topk_idx, topk_weights=topk_weights)
        box["handle"] = handle  # for the combine (a handle is no tensor autograd could carry)
        ctx.buffer, ctx.handle, ctx.dtype, ctx.handle_k = buffer, handle, x.dtype, topk_idx.shape[1]
        ctx.mark_non_differentiable(recv_idx)
        return recv_x.to(x.dtype), recv_idx, recv_w

    @staticmethod
    def backward(ctx, grad_x, _grad_idx, grad_w):
        if grad_w is None:
            grad_w = torch.zeros((grad_x.shape[0], ctx.handle_k), dtype=torch.float32)
        gx, gw, _ = ctx.buffer.combine(grad_x.to(torch.bfloat16), ctx.handle, topk_weights=grad_w.float())
        return gx.to(ctx.dtype), None, gw, None, None, None


class _Combine(torch.autograd.Function):
    @staticmethod
    def forward(ctx, y, handle, buffer):
        out, _, _ = buffer.combine(y.to(torch.bfloat16), handle)
        ctx.buffer, ctx.handle, ctx.dtype = buffer, handle, y.dtype
        return out.to(y.dtype)

    @staticmethod
    def backward(ctx, grad):
        g, *_ = ctx.buffer.dispatch(grad.to(torch.bfloat16), handle=ctx.handle)
        return g.to(ctx.dtype), None, None


class _Experts(nn.Module):
    """`n` SwiGLU experts' weights, stacked."""

    def __init__(self, n: int, hidden: int, inter: int, gen: torch.Generator) -> None:
        super().__init__()
        self.w1 = nn.Parameter(torch.randn((n, inter, hidden), generator=gen) * hidden ** -0.5)
        self.w3 = nn.Parameter(torch.randn((n, inter, hidden), generator=gen) * hidden ** -0.5)
        self.w2 = nn.Parameter(torch.randn((n, hidden, inter), generator=gen) * inter ** -0.5)

    def one(self, e: int, x: torch.Tensor, weights: tuple | None = None) -> torch.Tensor:
        w1, w2, w3 = weights or self.used()
        return (nn.functional.silu(x @ w1[e].T) * (x @ w3[e].T)) @ w2[e].T

    def used(self) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """(w1, w2, w3) for one use (`ptxforge.models.grad64`)."""
        return grad64.use(self.w1), grad64.use(self.w2), grad64.use(self.w3)

    def mix(self, x: torch.Tensor, idx: torch.Tensor, w: torch.Tensor, first: int = 0,
            only: range | None = None) -> torch.Tensor:
        """sum_k w[t, k] * expert_{idx[t, k] - first}(x[t]) over the slots whose expert is one of these (or of
        the experts numbered in `only`)."""
        out = torch.zeros_like(x)
        weights = self.used()
        for e in (range(self.w1.shape[0]) if only is None else only):
            rows, slot = torch.nonzero(idx == first + e, as_tuple=True)
            if rows.numel():
                out = out.index_add(0, rows, self.one(e, x[rows], weights) * w[rows, slot].unsqueeze(1))
        return out

    def mix_per_source(self, x: torch.Tensor, idx: torch.Tensor, w: torch.Tensor,
                       rows_per_source: list[int]) -> torch.Tensor:
        """`mix` on each source rank's rows apart (they arrive grouped by source): each expert multiplies the
        rows of one source's micro-batch, as the single-process reference does (a float32 matmul's rows depend
        on how many rows it has), and its weights' gradient is one use per source (`grad64`). Rows after the
        sources' (a dispatch's padding to num_worst_tokens) get zeros."""
        split = [*rows_per_source, x.shape[0] - sum(rows_per_source)]  # and the padding rows (ids -1)
        parts = [self.mix(*t) for t in zip(x.split(split), idx.split(split), w.split(split), strict=True)]
        return torch.cat(parts) if parts else torch.zeros_like(x)


class MoE(nn.Module):
    """The MoE block (see the module docstring). `rank`/`world` pick this process's routed experts; every
    rank builds the full set from `seed` and keeps its slice, so an EP run and the reference share weights."""

    def __init__(self, cfg: MoEConfig, seed: int = 0, rank: int = 0, world: int = 1) -> None:
        super().__init__()
        if cfg.num_experts % world:
            raise ValueError(f"MoE: {cfg.num_experts} experts cannot be split over {world} ranks")
        self.cfg, self.rank, self.world = cfg, rank, world
        gen = torch.Generator().manual_seed(seed)
        self.gate = nn.Parameter(torch.randn((cfg.num_experts, cfg.hidden), generator=gen) * cfg.hidden ** -0.5)
        self.bias: torch.Tensor
        self.register_buffer("bias", torch.zeros(cfg.num_experts))
        self.shared = _Experts(1, cfg.hidden, cfg.inter, gen)
        full = _Experts(cfg.num_experts, cfg.hidden, cfg.inter, gen)
        per = cfg.num_experts // world
        self.experts = _Experts(per, cfg.hidden, cfg.inter, gen)
        with torch.no_grad():
            for name in ("w1", "w2", "w3"):
                getattr(self.experts, name).copy_(getattr(full, name)[rank * per:(rank + 1) * per])
        self.last_load: torch.Tensor | None = None

    def forward(self, x: torch.Tensor, buffer: Any = None) -> torch.Tensor:
        idx, w = route(x @ self.gate.T, self.bias, self.cfg)
        self.last_load = torch.bincount(idx.flatten(), minlength=self.cfg.num_experts)
        shared = self.shared.one(0, x)
        if buffer is None:
            return shared + self.experts.mix(x, idx, w)
        box: dict = {}
        recv_x, recv_idx, recv_w = _Dispatch.apply(x, idx, w, buffer, box, self.cfg.num_experts)
        y = self.experts.mix(recv_x, recv_idx, recv_w)
        return shared + _Combine.apply(y, box["handle"], buffer)
