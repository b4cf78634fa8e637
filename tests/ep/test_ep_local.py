"""ptxforge.ep parts that need no process group: the torch layout against the DSL kernel, row packing,
Config, the handle's bit packing."""

import pytest
import torch

import ptxforge.ep as deep_ep
from ptxforge.ep import layout
from ptxforge.ep.buffer import _rank_bits, _rank_unbits
from ptxforge.ep.rows import Field, RowFormat
from ptxforge.kernels import ops


@pytest.mark.parametrize("tokens,experts,k,ranks,per_node", [(40, 64, 8, 8, 8), (33, 32, 4, 8, 4), (7, 16, 2, 4, 2),
                                                             (0, 16, 2, 4, 4)])
def test_torch_layout_is_bit_identical_to_the_kernel(tokens, experts, k, ranks, per_node):
    g = torch.Generator().manual_seed(tokens)
    idx = torch.stack([torch.randperm(experts, generator=g)[:k] for _ in range(tokens)]) if tokens else \
        torch.zeros((0, k), dtype=torch.int64)
    if tokens > 3:
        idx[1, : k // 2] = -1
        idx[3, :] = -1
    got = layout.dispatch_layout(idx, experts, ranks, per_node)
    want = ops.get_dispatch_layout(idx, experts, ranks, per_node, device="emu")
    for a, b in zip(got, want, strict=True):
        assert (a is None and b is None) or (a.dtype == b.dtype and a.equal(b))


def test_rows_pack_and_unpack_bit_exact():
    x = torch.randn((5, 256)).to(torch.bfloat16)
    q = torch.randint(0, 256, (5, 128), dtype=torch.uint8).view(torch.float8_e4m3fn)
    idx = torch.randint(-1, 9, (5, 3))
    fmt = RowFormat([Field("x", torch.bfloat16, 256, "payload"), Field("q", torch.float8_e4m3fn, 128, "payload"),
                     Field("idx", torch.int64, 3, "meta"), Field("none", torch.float32, 0, "meta")])
    rows = fmt.pack({"x": x, "q": q, "idx": idx}, 5, "cpu")
    assert rows.dtype == torch.uint8 and rows.shape == (5, 512 + 128 + 24)
    out = fmt.unpack(rows)
    assert out["x"].view(torch.int16).equal(x.view(torch.int16))
    assert out["q"].view(torch.uint8).equal(q.view(torch.uint8)) and out["idx"].equal(idx)
    assert fmt.bytes_of("payload") == 640 and fmt.bytes_of("meta") == 24 and "none" not in out


@pytest.mark.parametrize("ranks", [4, 8, 33, 64])
def test_rank_bits_round_trip(ranks):
    m = torch.rand((6, ranks)) > 0.5
    assert _rank_unbits(_rank_bits(m), ranks).equal(m)


def test_config_and_num_sms():
    assert deep_ep.Buffer.get_dispatch_config(8) == deep_ep.Config(deep_ep.Buffer.num_sms, 6, 256, 6, 128)
    assert deep_ep.Buffer.get_combine_config(64).num_max_nvl_chunked_send_tokens == 1
    assert deep_ep.Config(24).num_channels == 12
    with pytest.raises(ValueError, match="even"):
        deep_ep.Config(21)
    with pytest.raises(ValueError, match="even"):
        deep_ep.Buffer.set_num_sms(7)
    with deep_ep.Buffer.capture() as ev:
        ev.current_stream_wait()
    assert deep_ep.topk_idx_t == torch.int64


def test_buffer_needs_a_process_group():
    with pytest.raises(RuntimeError, match="init_process_group"):
        deep_ep.Buffer(None, 0, 0)
    with pytest.raises(RuntimeError, match="init_process_group"):
        deep_ep.Buffer(None, 0, 0, low_latency_mode=True)
    with pytest.raises(RuntimeError, match="init_process_group"):  # the kernels backend has low-latency mode
        deep_ep.Buffer(None, 0, 0, low_latency_mode=True, backend="kernels")
