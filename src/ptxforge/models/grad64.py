"""Weight gradients summed in float64, one use of a parameter at a time, so that their sum does not depend on the
order of the uses.

A PP x EP run and the single-process reference compute the same per-use gradients (one micro-batch of one EP
rank through one piece; one source rank's rows through one expert group), but add them in different orders: a
DualPipe rank accumulates the micro-batches of its two stage copies in schedule order, then the copies and the
EP ranks are summed; the reference adds them one micro-batch after another. float32 sums in different orders
differ in the last bit, and training amplifies that (a flipped BF16 rounding of a dispatched activation, a
different expert choice). Each use's float32 gradient is exact in float64, and a sum of a few of them is exact
there too unless their exponents lie more than ~29 bits apart, so the float64 sums, rounded once to the
parameter's dtype, agree bit for bit whatever the order.

`use(p)` in the forward marks one use of `p`: its backward adds the use's gradient to `p.grad64` (float64)
and passes it on, so `p.grad` accumulates as usual.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

import torch


class _Use(torch.autograd.Function):
    @staticmethod
    def forward(ctx: Any, p: torch.Tensor) -> torch.Tensor:
        ctx.param = p
        return p.view_as(p)

    @staticmethod
    def backward(ctx: Any, g: torch.Tensor) -> torch.Tensor:
        p, ctx.param = ctx.param, None
        acc = getattr(p, "grad64", None)
        if acc is None:
            p.grad64 = g.to(torch.float64)
        else:
            acc.add_(g.to(torch.float64))
        return g


def use(p: torch.Tensor) -> torch.Tensor:
    """`p` for one use in a forward (see the module docstring); `p` itself when no gradient is recorded."""
    if torch.is_grad_enabled() and p.requires_grad:
        return _Use.apply(p)
    return p


def take(p: torch.Tensor) -> torch.Tensor:
    """`p`'s gradient summed in float64 since the last `clear` (zeros if no use had one)."""
    acc = getattr(p, "grad64", None)
    return acc if acc is not None else torch.zeros_like(p, dtype=torch.float64)


def clear(params: Iterable[torch.Tensor]) -> None:
    for p in params:
        p.grad64 = None  # type: ignore[attr-defined]
