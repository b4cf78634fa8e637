"""Routing, dispatch layout and permutation kernels against their numpy references and plain torch."""

import numpy as np
import pytest
import torch

from ptxforge.kernels import layout, ops, routing
from ptxforge.runtime.kernel import cuda_available

DEVICES = ["emu", "cuda"] if cuda_available() else ["emu"]
rng = np.random.default_rng(5)


@pytest.fixture(params=DEVICES)
def device(request):
    return request.param


def deepseek_v3_gate(logits, bias, n_group, topk_group, topk, scale):
    """DeepSeek-V3's gate written plainly in torch (float64 sigmoid: the choice, not the last bit)."""
    s = torch.sigmoid(logits.double())
    b = s + bias.double()
    t_, e_ = s.shape
    gs = b.view(t_, n_group, -1).topk(2, dim=-1).values.sum(-1)
    keep = torch.zeros_like(gs, dtype=torch.bool).scatter_(1, gs.topk(topk_group, dim=-1).indices, True)
    b = b.masked_fill(~keep.repeat_interleave(e_ // n_group, dim=1), float("-inf"))
    idx = b.topk(topk, dim=-1).indices
    w = s.gather(1, idx)
    return idx, w / w.sum(-1, keepdim=True) * scale


@pytest.mark.parametrize("shape", [(8, 64, 8, 4, 6), (5, 256, 8, 4, 8)])
def test_route_bit_exact(shape, device):
    t_, e_, g, tg, k = shape
    logits = torch.from_numpy((rng.standard_normal((t_, e_)) * 2).astype(np.float32))
    bias = torch.from_numpy((rng.standard_normal(e_) * 0.05).astype(np.float32))
    idx, w = ops.route(logits, bias, g, tg, k, 2.5, device=device)
    ri, rw, _ = routing.route_ref(logits.numpy(), bias.numpy(), g, tg, k, 2.5)
    np.testing.assert_array_equal(idx.numpy(), ri)
    np.testing.assert_array_equal(w.numpy().view(np.uint32), rw.view(np.uint32))
    ti, tw = deepseek_v3_gate(logits, bias, g, tg, k, 2.5)
    assert torch.equal(torch.sort(idx, 1).values, torch.sort(ti, 1).values)
    torch.testing.assert_close(w.double(), _aligned(tw, ti, idx), rtol=1e-6, atol=1e-6)
    for row in idx:  # at most topk_group groups (nodes) a token
        assert len(set((row // (e_ // g)).tolist())) <= tg


def _aligned(tw, ti, idx):
    """torch's weights reordered to the kernel's expert order."""
    out = torch.empty(idx.shape, dtype=torch.float64)
    for r in range(idx.shape[0]):
        where = {int(e): i for i, e in enumerate(ti[r])}
        out[r] = torch.stack([tw[r, where[int(e)]] for e in idx[r]])
    return out


def test_route_bias_selects_but_does_not_weigh(device):
    logits = torch.zeros((2, 64), dtype=torch.float32)
    bias = torch.zeros(64)
    bias[40:46] = 1.0  # a large bias wins the choice; the weights stay equal (all scores are sigmoid(0))
    idx, w = ops.route(logits, bias, 8, 4, 6, 2.5, device=device)
    assert idx[0].tolist() == list(range(40, 46))  # ties go to the lower index
    ri, rw, _ = routing.route_ref(logits.numpy(), bias.numpy(), 8, 4, 6, 2.5)
    np.testing.assert_array_equal(idx.numpy(), ri)
    np.testing.assert_array_equal(w.numpy(), rw)
    assert torch.all(w == w[0, 0]) and abs(w[0, 0].item() - 2.5 / 6) < 1e-6


def test_route_extreme_logits(device):
    logits = torch.from_numpy(np.array([[-200.0, 200.0, 0.0, 88.0] * 16, [1e-30] * 64], np.float32))
    bias = torch.zeros(64)
    idx, w = ops.route(logits, bias, 8, 4, 4, 1.0, device=device)
    ri, rw, _ = routing.route_ref(logits.numpy(), bias.numpy(), 8, 4, 4, 1.0)
    np.testing.assert_array_equal(idx.numpy(), ri)
    np.testing.assert_array_equal(w.numpy(), rw)
    assert torch.all(torch.isfinite(w))


def test_route_rejects_impossible_shapes():
    with pytest.raises(ValueError, match="cannot give top-9"):
        ops.route(torch.zeros((1, 16)), torch.zeros(16), n_group=4, topk_group=2, topk=9)


def random_topk(t_, e_, k, holes=True):
    idx = np.stack([rng.permutation(e_)[:k] for _ in range(t_)]).astype(np.int64)
    if holes:
        idx[1, 0] = -1
        idx[2, :] = -1
    return torch.from_numpy(idx)


@pytest.mark.parametrize("ranks,per_node", [(4, None), (8, 4)])
def test_dispatch_layout_equals_recount(ranks, per_node, device):
    e_ = 32
    idx = random_topk(24, e_, 6)
    pr, pn, pe, ir = ops.get_dispatch_layout(idx, e_, ranks, per_node, device=device)
    rpr, rpn, rpe, rir = layout.dispatch_layout_ref(idx.numpy(), e_, ranks, per_node)
    np.testing.assert_array_equal(pr.numpy(), rpr)
    np.testing.assert_array_equal(pe.numpy(), rpe)
    np.testing.assert_array_equal(ir.numpy(), rir)
    assert (pn is None) == (per_node is None)
    if pn is not None:
        np.testing.assert_array_equal(pn.numpy(), rpn)
    # an independent recount, as DeepEP's test does it
    rank_of = torch.where(idx >= 0, idx // (e_ // ranks), -1)
    for r in range(ranks):
        assert pr[r] == (rank_of == r).any(1).sum()
    for e in range(e_):
        assert pe[e] == (idx == e).sum()
    assert pr.dtype == torch.int32 and ir.dtype == torch.bool


def test_permute_and_unpermute(device):
    t_, e_, k, h = 12, 16, 4, 256
    idx = random_topk(t_, e_, k)
    pos, first = ops.expert_positions(idx, e_, device=device)
    rpos, rfirst = layout.expert_positions_ref(idx.numpy(), e_)
    np.testing.assert_array_equal(pos.numpy(), rpos)
    np.testing.assert_array_equal(first.numpy(), rfirst)
    x = torch.randn((t_, h)).to(torch.bfloat16)
    y = ops.permute(x, pos, device=device)
    for e in range(e_):  # the rows of expert e are its tokens, in token order
        tokens = (idx == e).any(1).nonzero().flatten()
        assert torch.equal(y[first[e]:first[e + 1]], x[tokens])
    w = torch.rand((t_, k))
    out = ops.unpermute(y, pos, w, device=device)
    ref = layout.unpermute_ref(ops._np(y), pos.numpy(), w.numpy())
    np.testing.assert_array_equal(ops._np(out).view(np.uint16), ref.view(np.uint16))
    plain = ops.unpermute(y, pos, device=device)
    ref_plain = layout.unpermute_ref(ops._np(y), pos.numpy())
    np.testing.assert_array_equal(ops._np(plain).view(np.uint16), ref_plain.view(np.uint16))
    counts = (idx >= 0).sum(1, keepdim=True)
    assert torch.equal(plain, (x.float() * counts).to(torch.bfloat16))  # each copy of a token summed


def test_permute_fp8_rows_with_scales(device):
    idx = random_topk(8, 8, 2, holes=False)
    pos, _ = ops.expert_positions(idx, 8, device=device)
    q = torch.randint(0, 255, (8, 256), dtype=torch.uint8)
    s = torch.rand((8, 2))
    for rows in (q, s):
        ref = torch.from_numpy(layout.gather_rows_ref(rows.numpy(), pos.numpy()))
        assert torch.equal(ops.permute(rows, pos, device=device), ref)
