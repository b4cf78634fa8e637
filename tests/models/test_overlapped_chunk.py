"""DualPipe's overlapped forward-and-backward chunk (`Stage.overlapped_forward_backward`) on 2 real EP ranks: with
the overlap on, micro-batch A's exchanges are in flight while micro-batch B's backward computes and the other
way round (the recorded spans show it, whatever the timing: the interleaving is by construction), and the
results equal the chunk run with every call synchronous bit for bit."""

from __future__ import annotations

import torch

import ptxforge.ep as deep_ep
from ptxforge.ep.spawn import run_ranks
from ptxforge.models.moe import MoEConfig
from ptxforge.models.train import criterion
from ptxforge.models.transformer import ModelConfig, Stage
from ptxforge.pipeline import trace

CFG = ModelConfig(layers=2, seq=8, moe=MoEConfig(hidden=128, inter=32), dtype="float64")


def _chunk(rank: int, world: int, buf, overlap: bool) -> dict:
    st = Stage(CFG, 0, CFG.layers, ep_rank=rank, ep_world=world, buffer=buf, overlap=overlap)
    rec = trace.Recorder(rank)
    st.recorder = rec
    g = torch.Generator().manual_seed(7 + rank)
    a, b = (torch.randint(0, CFG.vocab, (2, CFG.seq + 1), generator=g) for _ in range(2))
    loss_b = criterion(st(b[:, :-1]), b[:, 1:])  # micro-batch 0
    rec.clear()
    outs, loss_a = Stage.overlapped_forward_backward(st, [a[:, :-1]], criterion, [a[:, 1:]], st, loss_b, [], [])
    spans = rec.spans
    loss_a.backward()
    return {"loss_a": loss_a.detach(), "loss_b": loss_b.detach(), "out": outs[0].detach(),
            "grads": [p.grad.clone() for p in st.parameters()], "spans": spans}


def _world(rank: int, world: int) -> dict:
    buf = deep_ep.Buffer(None, timeout_s=60)
    on, off = _chunk(rank, world, buf, True), _chunk(rank, world, buf, False)
    buf.destroy()
    same = all(torch.equal(on[k], off[k]) for k in ("loss_a", "loss_b", "out"))
    same &= all(torch.equal(x, y) for x, y in zip(on["grads"], off["grads"], strict=True))
    return {"same": same, "on": on["spans"], "off": off["spans"]}


def _inside(inner, outer) -> bool:
    return outer.start <= inner.start and inner.end <= outer.end


def test_the_overlapped_chunk_interleaves_and_equals_the_synchronous_one():
    for res in run_ranks(_world, 2, timeout_s=180):
        assert res["same"]
        on, off = res["on"], res["off"]
        # with the overlap: micro-batch 1's (A's) dispatch of layer 0 is in flight while micro-batch 0's (B's)
        # backward computes, and B's first backward exchange while A's attention computes
        a_dispatch = next(s for s in on if s.name == "dispatch 0" and s.mb == 1)
        assert any(_inside(s, a_dispatch) for s in on if s.kind == "compute" and s.mb == 0
                   and s.attrs["phase"] == "backward"), on
        b_first = next(s for s in on if s.name == "combine 1 backward" and s.mb == 0)
        assert any(_inside(s, b_first) for s in on if s.name == "attention 0" and s.mb == 1), on
        assert trace.overlap_fraction(on) > 0
        # synchronous: no computation inside any exchange
        assert trace.overlap_fraction(off) == 0
        assert not any(_inside(c, x) for x in off if x.kind == "comm" for c in off if c.kind == "compute")
