"""The FP8 kernels against their numpy references and against DeepGEMM's torch formulas, bit for bit."""

import ml_dtypes
import numpy as np
import pytest
import torch

from ptxforge.kernels import fp8, ops
from ptxforge.runtime.kernel import cuda_available

DEVICES = ["emu", "cuda"] if cuda_available() else ["emu"]
BF16_MAX = float(ml_dtypes.finfo(ml_dtypes.bfloat16).max)
rng = np.random.default_rng(11)


@pytest.fixture(params=DEVICES)
def device(request):
    return request.param


def _bf16(a) -> torch.Tensor:
    return torch.from_numpy(np.asarray(a, np.float32)).to(torch.bfloat16)


def adversarial(rows: int, hidden: int) -> torch.Tensor:
    """Random rows plus groups that are all zero, at bf16's maximum, subnormal, mixed extremes, ties."""
    x = rng.standard_normal((rows, hidden)).astype(np.float32) * 3
    x[0, :128] = 0.0
    x[0, 128:256] = -0.0
    x[1, :128] = BF16_MAX
    x[1, 128:256] = -BF16_MAX
    x[1, 300] = BF16_MAX  # one huge value among ordinary ones
    x[2, :128] = 9.2e-41  # bf16 subnormals
    x[2, 128:256] = np.linspace(-1e-38, 1e-38, 128)
    x[3, :128] = 1e-30  # below the amax clamp
    x[3, 128:256] = 448.0
    x[3, 256:384] = np.float32(2.0) ** np.arange(-64, 64)  # every power of two in a range
    return _bf16(x)


def deepgemm_formula(x: torch.Tensor, use_ue8m0: bool):
    """DeepGEMM's per-token cast, transcribed in torch: amax clamp, sf = amax / 448 (ue8m0: exponent up),
    x * (1 / sf) cast to e4m3."""
    m, n = x.shape
    xv = x.view(m, n // 128, 128)
    sf = xv.abs().float().amax(dim=2).clamp(1e-4) / 448.0
    if use_ue8m0:
        bits = sf.view(torch.int32)
        exp = ((bits >> 23) & 0xFF) + (bits & 0x7FFFFF).bool().int()
        sf = (exp.clamp(1, 254) << 23).view(torch.float32)
    return (xv * (1.0 / sf.unsqueeze(2))).to(torch.float8_e4m3fn).view(m, n), sf


@pytest.mark.parametrize("round_scale", [False, True])
@pytest.mark.parametrize("inputs", ["random", "adversarial"])
def test_per_token_quant_bit_exact(round_scale, inputs, device):
    x = _bf16(rng.standard_normal((4, 7168)) * 2) if inputs == "random" else adversarial(4, 512)
    q, sf = ops.per_token_cast_to_fp8(x, round_scale=round_scale, device=device)
    ref_q, ref_sf, _ = fp8.per_token_quant_ref(ops._np(x), round_scale)
    np.testing.assert_array_equal(q.view(torch.uint8).numpy(), ref_q)
    np.testing.assert_array_equal(sf.numpy().view(np.uint32), ref_sf.view(np.uint32))
    tq, tsf = deepgemm_formula(x, round_scale)
    assert torch.equal(q.view(torch.uint8), tq.view(torch.uint8))
    assert torch.equal(sf, tsf)
    if round_scale:
        assert torch.all((sf.view(torch.int32) & 0x7FFFFF) == 0)


def test_ue8m0_bytes_and_packing(device):
    x = adversarial(4, 1024)
    q, packed = ops.per_token_cast_to_fp8(x, packed_ue8m0=True, device=device)
    assert packed.dtype == torch.int32 and tuple(packed.shape) == (4, 2)
    _, ref_sf, ref_e = fp8.per_token_quant_ref(ops._np(x), True)
    np.testing.assert_array_equal(packed.numpy().view(np.uint8), ref_e)
    # DeepGEMM's pack: the f32 scale's exponent byte, 4 per int32, little-endian (byte i = group 4j + i)
    manual = (ref_e[:, 0::4].astype(np.int64) | ref_e[:, 1::4].astype(np.int64) << 8
              | ref_e[:, 2::4].astype(np.int64) << 16 | ref_e[:, 3::4].astype(np.int64) << 24)
    np.testing.assert_array_equal(packed.numpy().view(np.uint32).astype(np.int64), manual)
    np.testing.assert_array_equal(fp8.ue8m0_to_f32(ref_e), ref_sf)
    np.testing.assert_array_equal(fp8.unpack_ue8m0(fp8.pack_ue8m0(ref_e)), ref_e)


def test_ceil_to_ue8m0_edges():
    sf = np.array([1.0, 1.0000001, 0.75, 2.0 ** -126, 2.0 ** -140, 3e38, 2.0 ** 127], np.float32)
    np.testing.assert_array_equal(fp8.ceil_to_ue8m0_bits(sf), [127, 128, 127, 1, 1, 254, 254])


def test_packing_needs_whole_words():
    with pytest.raises(ValueError, match="multiple of 4"):
        fp8.pack_ue8m0(np.zeros((2, 3), np.uint8))


@pytest.mark.parametrize("packed", [False, True])
def test_dequant_bit_exact(packed, device):
    x = adversarial(4, 1024)
    q, scales = ops.per_token_cast_to_fp8(x, packed_ue8m0=packed, device=device)
    back = ops.per_token_cast_back(q, scales, device=device)
    _, ref_sf, _ = fp8.per_token_quant_ref(ops._np(x), packed)
    ref = fp8.dequant_ref(q.view(torch.uint8).numpy(), ref_sf)
    np.testing.assert_array_equal(ops._np(back).view(np.uint16), ref.view(np.uint16))
    # DeepEP's cast back, in torch: f32(q) * scale -> bf16
    sf = torch.from_numpy(ref_sf)
    torch_back = (q.float().view(4, -1, 128) * sf.unsqueeze(2)).view(4, -1).to(torch.bfloat16)
    assert torch.equal(back.view(torch.int16), torch_back.view(torch.int16))


def test_every_e4m3_code_dequantizes(device):
    codes = np.arange(256, dtype=np.uint8)
    codes = codes[(codes & 0x7F) != 0x7F]  # no NaNs
    q = torch.from_numpy(np.resize(codes, 2 * 128).reshape(2, 128).copy()).view(torch.float8_e4m3fn)
    sf = torch.tensor([[1.0], [2.0 ** -10]], dtype=torch.float32)
    back = ops.per_token_cast_back(q, sf, device=device)
    ref = fp8.dequant_ref(q.view(torch.uint8).numpy(), sf.numpy())
    np.testing.assert_array_equal(ops._np(back).view(np.uint16), ref.view(np.uint16))


def test_fp8_roundtrip_error_is_small():
    x = _bf16(rng.standard_normal((4, 512)))
    back = ops.per_token_cast_back(*ops.per_token_cast_to_fp8(x)).float()
    assert torch.max(torch.abs(back - x.float()) / (x.float().abs() + 1e-2)) < 0.07


def test_hidden_not_a_multiple_of_128_is_padded():
    x = _bf16(rng.standard_normal((3, 200)))
    q, sf = ops.per_token_cast_to_fp8(x)
    assert tuple(q.shape) == (3, 200) and tuple(sf.shape) == (3, 2)
    padded = torch.zeros((3, 256), dtype=torch.bfloat16)
    padded[:, :200] = x
    ref_q, ref_sf, _ = fp8.per_token_quant_ref(ops._np(padded))
    np.testing.assert_array_equal(q.view(torch.uint8).numpy(), ref_q[:, :200])
    np.testing.assert_array_equal(sf.numpy(), ref_sf)


@pytest.mark.parametrize("round_scale", [False, True])
def test_block_quant_bit_exact(round_scale, device):
    w = rng.standard_normal((256, 384)).astype(np.float32)
    w[:128, :128] = 0.0
    w[128:, 128:256] *= 1e-39  # a subnormal block
    w[0, 300] = BF16_MAX
    wt = _bf16(w)
    q, sf = ops.per_block_cast_to_fp8(wt, round_scale, device=device)
    ref_q, ref_sf = fp8.block_quant_ref(ops._np(wt), round_scale)
    np.testing.assert_array_equal(q.view(torch.uint8).numpy(), ref_q)
    np.testing.assert_array_equal(sf.numpy(), ref_sf)


def test_block_quant_pads_ragged_shapes():
    w = _bf16(rng.standard_normal((130, 200)))
    q, sf = ops.per_block_cast_to_fp8(w)
    assert tuple(q.shape) == (130, 200) and tuple(sf.shape) == (2, 2)
    padded = np.zeros((256, 256), ml_dtypes.bfloat16)
    padded[:130, :200] = ops._np(w)
    ref_q, ref_sf = fp8.block_quant_ref(padded)
    np.testing.assert_array_equal(q.view(torch.uint8).numpy(), ref_q[:130, :200])
    np.testing.assert_array_equal(sf.numpy(), ref_sf)


def test_wrong_dtype_is_named():
    with pytest.raises(TypeError, match="x must be torch.bfloat16"):
        ops.per_token_cast_to_fp8(torch.zeros((2, 128)))
    q, sf = ops.per_token_cast_to_fp8(torch.zeros((2, 256), dtype=torch.bfloat16))
    with pytest.raises(ValueError, match=r"scales must have shape \[2, 2\]"):
        ops.per_token_cast_back(q, sf[:, :1])
