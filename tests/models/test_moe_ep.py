"""The DeepSeek-V3 MoE block (`ptxforge.models.moe`) with expert parallelism on 2 real gloo ranks against the
same block run in one process on every rank's tokens: routing, outputs, gradients and three SGD steps' losses
(with the bias balancing) agree within the tolerance that BF16 transport allows (inputs are BF16 values, so the
dispatch is exact; expert outputs and the gradients travel as BF16, 2^-8 relative per element: measured up to
5e-3 of the largest output or gradient, 4e-5 of the loss; checked at 2e-2 and 1e-3)."""

from __future__ import annotations

import torch
import torch.distributed as dist

import ptxforge.ep as deep_ep
from ptxforge.ep.spawn import run_ranks
from ptxforge.kernels import ops
from ptxforge.models import MoE, MoEConfig, balance_bias, route

CFG = MoEConfig()
T, STEPS, LR = 16, 3, 0.5


def _tokens(world: int, seed: int) -> torch.Tensor:
    g = torch.Generator().manual_seed(100 + seed)
    return torch.randn((world * T, CFG.hidden), generator=g).to(torch.bfloat16).float()


def _step(model, x, total, buffer=None):
    model.zero_grad()
    out = model(x, buffer)
    loss = ((out - x) ** 2).sum() / (total * x.shape[1])  # learn the identity
    loss.backward()
    return out.detach(), loss.detach()


def _rel(a: torch.Tensor, b: torch.Tensor) -> float:
    return float((a - b).abs().max() / b.abs().max().clamp_min(1e-30))


def ep_world(rank: int, world: int) -> dict:
    buf = deep_ep.Buffer(None, timeout_s=30)
    ref, ep = MoE(CFG, seed=1), MoE(CFG, seed=1, rank=rank, world=world)
    per = CFG.num_experts // world
    mine = slice(rank * T, (rank + 1) * T)
    res: dict = {"loss": [], "ref_loss": [], "out": [], "grad": []}
    x = _tokens(world, 0)  # one batch for every step, so the loss falls
    for _ in range(STEPS):
        ref_out, ref_loss = _step(ref, x, x.shape[0])
        out, loss = _step(ep, x[mine], x.shape[0], buf)
        dist.all_reduce(loss)
        res["loss"].append(float(loss))
        res["ref_loss"].append(float(ref_loss))
        res["out"].append(_rel(out, ref_out[mine]))
        for p in (ep.gate, *ep.shared.parameters()):  # replicated: their gradients are summed over the ranks
            dist.all_reduce(p.grad)
        pairs = [(ep.gate.grad, ref.gate.grad)]
        pairs += [(a.grad, b.grad) for a, b in zip(ep.shared.parameters(), ref.shared.parameters(), strict=True)]
        pairs += [(getattr(ep.experts, n).grad, getattr(ref.experts, n).grad[rank * per:(rank + 1) * per])
                  for n in ("w1", "w2", "w3")]
        res["grad"].append(max(_rel(a, b) for a, b in pairs))
        load = ep.last_load.clone()
        dist.all_reduce(load)
        with torch.no_grad():
            for m in (ref, ep):
                for p in m.parameters():
                    p -= LR * p.grad
            balance_bias(ref.bias, ref.last_load, CFG.bias_rate)
            balance_bias(ep.bias, load, CFG.bias_rate)
    res["bias_equal"] = bool(torch.equal(ep.bias, ref.bias))
    buf.destroy()
    return res


def test_moe_with_expert_parallelism_equals_the_single_process_block():
    for rank, res in enumerate(run_ranks(ep_world, 2, timeout_s=180)):
        for step in range(STEPS):
            assert abs(res["loss"][step] - res["ref_loss"][step]) <= 1e-3 * res["ref_loss"][step], (rank, res)
            assert res["out"][step] < 2e-2 and res["grad"][step] < 2e-2, (rank, step, res)
        assert res["loss"][-1] < res["loss"][0], res  # it trains
        assert res["bias_equal"], res


def test_route_weights_are_the_routing_kernels():
    g = torch.Generator().manual_seed(3)
    logits = torch.randn((40, CFG.num_experts), generator=g)
    bias = torch.randn(CFG.num_experts, generator=g) * 0.1
    idx, w = route(logits, bias, CFG)
    k_idx, k_w = ops.route(logits, bias, n_group=CFG.n_group, topk_group=CFG.topk_group, topk=CFG.topk,
                           routed_scaling_factor=CFG.routed_scaling_factor)
    assert torch.equal(idx, k_idx)
    torch.testing.assert_close(w, k_w, rtol=1e-6, atol=1e-6)


def test_balance_bias_raises_the_under_loaded_experts():
    bias = torch.zeros(4)
    balance_bias(bias, torch.tensor([10, 0, 5, 5]), 0.5)
    assert bias.tolist() == [-0.5, 0.5, 0.0, 0.0]
