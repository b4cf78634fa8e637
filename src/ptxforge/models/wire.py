"""What expert-parallel traffic does to the numbers, in one place: the FP8 1x128 cast the dispatch sends (DeepEP's
per-token, per-128-channel E4M3 with f32 scales, `ptxforge.ep.low_latency.cast_to_fp8`), and the roundings a
single-process reference applies so that it computes what the EP ranks compute.

On the wire (`ptxforge.models.exchange`): tokens go out as BF16 or FP8 (their routing weights as f32) and arrive
in the model's dtype for the experts; each
rank's weighted expert outputs go back as BF16 and are summed over the ranks in f32, then rounded to BF16; in the
backward, the gradient of the combined output goes out as BF16 to every rank and the token gradients come back
as BF16 summed in f32 and rounded. `emulated_moe` applies exactly these roundings with the experts split into
the same per-rank groups, so a single-process run is the same model as the EP run.
"""

from __future__ import annotations

from typing import Any

import torch

from ptxforge.ep.low_latency import cast_to_fp8


def to_fp8(x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """(E4M3 [T, H], f32 scales [T, H/128]) of the BF16-rounded rows (what the FP8 dispatch sends)."""
    return cast_to_fp8(x.to(torch.bfloat16), round_scale=False)


def from_fp8(q: torch.Tensor, scales: torch.Tensor) -> torch.Tensor:
    """f32 rows from E4M3 rows and their per-128-channel scales."""
    t_, h = q.shape
    return (q.to(torch.float32).view(t_, h // 128, 128) * scales.unsqueeze(-1)).view(t_, h)


def sent(x: torch.Tensor, form: str | None) -> torch.Tensor:
    """Rows as they arrive (in x's dtype): `form` "fp8" (cast and scaled back), "bf16", "f32" or None (as is)."""
    if form == "fp8":
        return from_fp8(*to_fp8(x)).to(x.dtype)
    if form is None:
        return x.clone()
    return x.to(torch.bfloat16 if form == "bf16" else torch.float32).to(x.dtype)


class _Wire(torch.autograd.Function):
    """Forward: rows rounded as `fwd` says; backward: the gradient rounded as `bwd` says (see `sent`)."""

    @staticmethod
    def forward(ctx: Any, x: torch.Tensor, fwd: str | None, bwd: str | None) -> torch.Tensor:
        ctx.bwd = bwd
        return sent(x, fwd)

    @staticmethod
    def backward(ctx: Any, g: torch.Tensor) -> tuple[torch.Tensor, None, None]:
        return sent(g, ctx.bwd), None, None


def wire(x: torch.Tensor, fwd: str | None, bwd: str | None) -> torch.Tensor:
    """x as it travels: rounded as `fwd` says, its gradient as `bwd` says ("fp8", "bf16", "f32" or None)."""
    return _Wire.apply(x, fwd, bwd)


def emulated_moe(u: torch.Tensor, idx: torch.Tensor, w: torch.Tensor, experts: Any, ranks: int,
                 fp8: bool) -> torch.Tensor:
    """The routed experts' combined output for tokens `u` as `ranks` EP ranks compute it (see the module
    docstring): `experts.mix` over each rank's group of experts on that rank's copy of the tokens."""
    per = experts.w1.shape[0] // ranks
    into = wire(u, None, "bf16")  # the token gradients: summed over the ranks' copies, then BF16
    w = wire(w, "f32", "f32")  # the routing weights and their gradients travel as f32
    total = None
    for r in range(ranks):
        copy = wire(into, "fp8" if fp8 else "bf16", "bf16")  # what rank r receives; its gradient goes back as BF16
        part = wire(experts.mix(copy, idx, w, only=range(r * per, (r + 1) * per)), "bf16", None)
        total = part if total is None else total + part
    assert total is not None
    return wire(total, "bf16", "bf16")  # the combined rows; their gradient reaches every rank as BF16
