"""A small DeepSeek-V3-shaped transformer cut into pipeline stages: token and position embedding, N blocks of
(RMSNorm, causal multi-head attention, RMSNorm, MoE) with residuals, a final RMSNorm and the output head. The
attention is plain multi-head attention (not MLA: no low-rank compression of keys and values, no decoupled
RoPE; positions are learnt embeddings). The MoE is `ptxforge.models.moe`'s: a shared expert and routed experts,
sigmoid group-limited routing with the bias balancing.

A `Stage` holds layers [first, last) (the embedding if first == 0, the head if last == the model's depth) and
runs a micro-batch as pieces (`ptxforge.models.pieces`): attention, dispatch, experts, combine per block. With a
`buffer` (a `ptxforge.ep.Buffer` over the EP group) the routed experts are this EP rank's share and the tokens
travel through the buffer; without one, every expert is local and `wire.emulated_moe` applies the roundings the
EP ranks' traffic would (the single-process reference). `Stage.overlapped_forward_backward` is DualPipe's hook:
one micro-batch's forward interleaved with another's backward, exchange by exchange.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import torch
from torch import nn

from ptxforge.errors import Error
from ptxforge.models import grad64, wire
from ptxforge.models.exchange import Combine, Dispatch, rows_per_source
from ptxforge.models.moe import MoE, MoEConfig, route
from ptxforge.models.pieces import (
    NO_RECORDER,
    Compute,
    Env,
    Run,
    Tape,
    drain,
    interleave,
    run_backward_pieces,
    run_forward,
)
from ptxforge.pipeline.weight_grad import run_backward


@dataclass(frozen=True)
class ModelConfig:
    vocab: int = 128
    hidden: int = 128            # a multiple of 128 (FP8 1x128 groups) and of `heads`
    heads: int = 4
    seq: int = 16
    layers: int = 2
    moe: MoEConfig = field(default_factory=lambda: MoEConfig(hidden=128, inter=64))
    seed: int = 0
    dtype: str = "float32"       # the computation's ("float64" also; a PP x EP run equals one process's bit
    # for bit in either: docs/models.md)

    @property
    def torch_dtype(self) -> torch.dtype:
        return getattr(torch, self.dtype)

    def __post_init__(self) -> None:
        if self.hidden % 128 or self.hidden % self.heads:
            raise ValueError(f"ModelConfig: hidden={self.hidden} must be a multiple of 128 (the FP8 groups) and "
                             f"of heads={self.heads}")
        if self.dtype not in ("float32", "float64"):
            raise ValueError(f"ModelConfig: dtype must be 'float32' or 'float64', got {self.dtype!r}")
        if self.moe.hidden != self.hidden:
            raise ValueError(f"ModelConfig: moe.hidden={self.moe.hidden} differs from hidden={self.hidden}")


def _rms_norm(x: torch.Tensor, weight: torch.Tensor) -> torch.Tensor:
    return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + 1e-6) * weight


class Block(nn.Module):
    """Attention and MoE of one layer; `moe` holds this EP rank's routed experts."""

    def __init__(self, cfg: ModelConfig, layer: int, ep_rank: int, ep_world: int) -> None:
        super().__init__()
        h = cfg.hidden
        gen = torch.Generator().manual_seed(cfg.seed * 1000 + layer)
        self.cfg, self.layer = cfg, layer
        self.norm1 = nn.Parameter(torch.ones(h))
        self.norm2 = nn.Parameter(torch.ones(h))
        self.qkv = nn.Parameter(torch.randn((3 * h, h), generator=gen) * h ** -0.5)
        self.out = nn.Parameter(torch.randn((h, h), generator=gen) * h ** -0.5 / cfg.layers ** 0.5)
        self.moe = MoE(cfg.moe, seed=cfg.seed * 1000 + layer + 500, rank=ep_rank, world=ep_world)
        self.to(cfg.torch_dtype)
        self.step_load = torch.zeros(cfg.moe.num_experts, dtype=torch.int64)

    def attention(self, h: torch.Tensor) -> dict[str, torch.Tensor]:
        """h [B, S, H] -> h2 = h + attention, the tokens u = norm(h2) [B*S, H], their routing and shared expert."""
        b, s, d = h.shape
        nh = self.cfg.heads
        use = grad64.use
        q, k, v = (_rms_norm(h, use(self.norm1)) @ use(self.qkv).T).view(b, s, 3, nh, d // nh).permute(2, 0, 3, 1, 4)
        a = nn.functional.scaled_dot_product_attention(q, k, v, is_causal=True)
        h2 = h + a.transpose(1, 2).reshape(b, s, d) @ use(self.out).T
        u = _rms_norm(h2, use(self.norm2)).reshape(b * s, d)
        idx, w = route(u @ use(self.moe.gate).T, self.moe.bias, self.cfg.moe)
        self.step_load += torch.bincount(idx.flatten(), minlength=self.cfg.moe.num_experts)
        n = self.layer
        return {f"h2{n}": h2, f"shared{n}": self.moe.shared.one(0, u), f"u{n}": u, f"idx{n}": idx, f"w{n}": w}


class InjectedFault(Error, RuntimeError):
    """The failure `Stage.fault` plants in the overlapped chunk (for fault tests and `ptxforge train --fail-rank`)."""


def _failing(run: Run, message: str) -> Run:
    """`run` until its first exchange is in flight, then InjectedFault (the calls so far are the healthy ones')."""
    next(run, None)
    yield
    raise InjectedFault(message)


class _Bridge(torch.autograd.Function):
    """Joins a stage's output to its input for autograd: its backward is the stage's piece-by-piece backward."""

    @staticmethod
    def forward(ctx: Any, run: StageRun, x: torch.Tensor, out: torch.Tensor) -> torch.Tensor:
        ctx.run = run
        return out.clone()

    @staticmethod
    def backward(ctx: Any, grad: torch.Tensor) -> tuple[None, torch.Tensor | None, None]:
        run, ctx.run = ctx.run, None
        return None, run.backward(grad), None


class StageRun:
    """One micro-batch through one stage: the forward `run` (a generator), then the backward."""

    def __init__(self, stage: Stage, x: torch.Tensor) -> None:
        self.stage, self.x = stage, x
        self.env: Env = {"x": x}
        self.tape = Tape(stage.calls, f"layers {stage.first}-{stage.last - 1}")
        stage.calls += 1
        self.grad = torch.is_grad_enabled()
        self.run = run_forward(stage.pieces, self.env, self.tape, stage.recorder, self.grad)

    def output(self) -> torch.Tensor:
        out = self.env.pop("out")
        if not self.grad:
            return out
        x = self.x if self.x.is_floating_point() else torch.zeros((), requires_grad=True)  # an anchor
        return _Bridge.apply(self, x, out)

    def backward(self, grad: torch.Tensor) -> torch.Tensor | None:
        grads: Env = {"out": grad}
        back = run_backward_pieces(self.tape, grads, self.stage.recorder)
        partner, self.stage.partner = self.stage.partner, None
        if partner is None:
            drain(back)
        else:
            interleave(back, partner)
        self.env.clear()
        return grads.get("x")


class Stage(nn.Module):
    """Layers [first, last) of the model for one EP rank (see the module docstring)."""

    def __init__(self, cfg: ModelConfig, first: int, last: int, ep_rank: int = 0, ep_world: int = 1,
                 buffer: Any = None, fp8: bool = False, overlap: bool = True) -> None:
        super().__init__()
        if not 0 <= first < last <= cfg.layers:
            raise ValueError(f"Stage: layers [{first}, {last}) are not a part of the model's {cfg.layers}")
        self.cfg, self.first, self.last = cfg, first, last
        self.ep_rank, self.ep_world, self.fp8, self.overlap = ep_rank, ep_world, fp8, overlap
        gen = torch.Generator().manual_seed(cfg.seed * 1000 + 999)
        embed = torch.randn((cfg.vocab, cfg.hidden), generator=gen)
        pos = torch.randn((cfg.seq, cfg.hidden), generator=gen) * 0.1
        head = torch.randn((cfg.vocab, cfg.hidden), generator=gen) * cfg.hidden ** -0.5
        self.embed = nn.Parameter(embed) if first == 0 else None
        self.pos = nn.Parameter(pos) if first == 0 else None
        held = (ep_rank, ep_world) if buffer is not None else (0, 1)  # without a buffer: every expert here
        self.blocks = nn.ModuleList(Block(cfg, n, *held) for n in range(first, last))
        self.norm = nn.Parameter(torch.ones(cfg.hidden)) if last == cfg.layers else None
        self.head = nn.Parameter(head) if last == cfg.layers else None
        self.to(cfg.torch_dtype)
        self.recorder: Any = NO_RECORDER
        self.calls = 0
        self.partner: Any = None  # a forward run to interleave with the next backward (the overlap hook's)
        self.fault: str | None = None  # fault injection: the next overlapped chunk raises InjectedFault(fault)
        self.pieces = self._pieces(buffer)

    @property
    def block_list(self) -> list[Block]:
        return [b for b in self.blocks if isinstance(b, Block)]

    def _pieces(self, buffer: Any) -> list:
        blocks = self.block_list
        out: list = [Compute(f"attention {self.first}", ("x",), self._enter)]
        for b in blocks:
            n = b.layer
            if buffer is None:
                out.append(Compute(f"moe {n} (one process)", (f"u{n}", f"idx{n}", f"w{n}"), self._emulated(b)))
            else:
                out += [Dispatch(n, buffer, self.cfg.moe.num_experts, self.fp8, self.overlap),
                        Compute(f"experts {n}", (f"rx{n}", f"ridx{n}", f"rw{n}", f"handle{n}"), self._experts(b)),
                        Combine(n, buffer, self.overlap)]
            nxt = f"attention {n + 1}" if n + 1 < self.last else "head" if self.head is not None else "output"
            out.append(Compute(nxt, (f"h2{n}", f"shared{n}", f"comb{n}"), self._merge(n)))
        return out

    def _enter(self, t: Env) -> Env:
        x = t["x"]
        if self.embed is None or self.pos is None:
            return self.block_list[0].attention(x)
        h = grad64.use(self.embed)[x] + grad64.use(self.pos)[:x.shape[1]]
        return self.block_list[0].attention(h)

    def _emulated(self, b: Block):
        def fn(t: Env) -> Env:
            n = b.layer
            comb = wire.emulated_moe(t[f"u{n}"], t[f"idx{n}"], t[f"w{n}"], b.moe.experts, self.ep_world, self.fp8)
            return {f"comb{n}": comb}
        return fn

    def _experts(self, b: Block):
        def fn(t: Env) -> Env:
            n = b.layer
            sources = rows_per_source(t[f"handle{n}"], self.ep_rank)
            return {f"y{n}": b.moe.experts.mix_per_source(t[f"rx{n}"], t[f"ridx{n}"], t[f"rw{n}"], sources)}
        return fn

    def _merge(self, n: int):
        def fn(t: Env) -> Env:
            h2 = t[f"h2{n}"]
            h = h2 + (t[f"shared{n}"] + t[f"comb{n}"]).view_as(h2)
            if n + 1 < self.last:
                return self.block_list[n + 1 - self.first].attention(h)
            if self.head is not None and self.norm is not None:
                return {"out": _rms_norm(h, grad64.use(self.norm)) @ grad64.use(self.head).T}
            return {"out": h}
        return fn

    def start(self, x: torch.Tensor) -> StageRun:
        return StageRun(self, x)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        r = self.start(x)
        drain(r.run)
        return r.output()

    @classmethod
    def overlapped_forward_backward(cls, module0: Stage, inputs0: list, criterion0: Any, labels0: list,
                                    module1: Stage, loss1: torch.Tensor | None, outputs1: list,
                                    output_grads1: list) -> tuple[list[torch.Tensor], torch.Tensor | None]:
        """DualPipe's hook: forward of one micro-batch on module0 and backward of another on module1, their
        pieces interleaved (with `overlap` off: the forward, then the backward, every call synchronous)."""
        r0 = module0.start(*inputs0)
        run0 = r0.run if module0.fault is None else _failing(r0.run, module0.fault)
        if module0.overlap:
            module1.partner = run0
        else:
            drain(run0)
        if loss1 is not None:
            loss1.backward()
            loss1.detach_()
        elif outputs1:
            run_backward(outputs1, output_grads1)
        if module1.partner is not None:  # no backward ran through module1's pieces
            module1.partner = None
            drain(run0)
        outputs0 = r0.output()
        loss0 = criterion0(outputs0, *labels0) if criterion0 is not None else None
        return [outputs0], loss0
