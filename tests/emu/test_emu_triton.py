"""Triton-generated sm_80 PTX (vector add, fused softmax, layer norm, mma.sync matmul) against numpy.

Triton appends two scratch-pointer parameters (global and profile scratch); they get None. Its kernels
take their shared memory as dynamic (`global_smem`), so launches pass shared_mem as Triton's launcher would.
"""

import ml_dtypes
import numpy as np
import pytest
from emu_corpus import corpus_module

rng = np.random.default_rng(5)


def tri(name):
    return corpus_module(name, "sm_80", kind="triton")


def test_vector_add():
    k = tri("vector_add_f32").kernel("add_kernel")
    n = 5000  # BLOCK 1024, not a multiple: the masked tail
    x, y = rng.standard_normal(n).astype(np.float32), rng.standard_normal(n).astype(np.float32)
    out = np.zeros(n, np.float32)
    k.launch(grid=(-(-n // 1024),), block=(128,), args=[x, y, out, np.int32(n), None, None])
    np.testing.assert_array_equal(out, x + y)


def test_fused_softmax():
    k = tri("fused_softmax").kernel("softmax_kernel")
    rows, cols = 6, 781
    x = rng.standard_normal((rows, cols)).astype(np.float32) * 3
    out = np.zeros_like(x)
    k.launch(grid=(rows,), block=(256,), args=[out, x, np.int32(cols), np.int32(cols), np.int32(cols),
                                                None, None], shared_mem=4096)
    e = np.exp(x.astype(np.float64) - x.max(1, keepdims=True))
    np.testing.assert_allclose(out, e / e.sum(1, keepdims=True), rtol=2e-6, atol=1e-9)


def test_layer_norm():
    k = tri("layer_norm_fwd_f16").kernel("layer_norm_fwd")
    rows, cols = 5, 700
    x = rng.standard_normal((rows, cols)).astype(np.float16)
    w, b = rng.standard_normal(cols).astype(np.float32), rng.standard_normal(cols).astype(np.float32)
    y = np.zeros_like(x)
    mean, rstd = np.zeros(rows, np.float32), np.zeros(rows, np.float32)
    k.launch(grid=(rows,), block=(256,), args=[x, y, w, b, mean, rstd, np.int32(cols), np.int32(cols),
                                                np.float32(1e-5), None, None], shared_mem=4096)
    xf = x.astype(np.float64)
    mu = xf.mean(1, keepdims=True)
    rs = 1 / np.sqrt(((xf - mu) ** 2).mean(1, keepdims=True) + 1e-5)
    np.testing.assert_allclose(mean, mu[:, 0], rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(rstd, rs[:, 0], rtol=1e-5)
    np.testing.assert_allclose(y.astype(np.float64), (xf - mu) * rs * w + b, rtol=2e-3, atol=2e-3)


def test_matmul_mma_sync():
    k = tri("matmul_bf16_fp32out").kernel("matmul_kernel")
    M, N, K = 64, 128, 96  # BLOCK 64x64x32: 2 programs along N, 3 K steps
    a = rng.standard_normal((M, K)).astype(ml_dtypes.bfloat16)
    b = rng.standard_normal((K, N)).astype(ml_dtypes.bfloat16)
    c = np.zeros((M, N), np.float32)
    r = k.launch(grid=(2,), block=(128,), args=[a, b, c, np.int32(M), np.int32(N), np.int32(K), np.int32(K),
                                                 np.int32(N), np.int32(N), None, None], shared_mem=49152)
    ref = a.astype(np.float64) @ b.astype(np.float64)
    np.testing.assert_allclose(c, ref, rtol=1e-5, atol=1e-4)
    assert r.thread_instructions > 0 or r.device == "cuda"  # counts exist on the emulator only


def test_row_sum_max_and_atomics():
    k = tri("row_sum_max").kernel("row_sum_max")
    rows, cols = 3, 1300
    x = rng.integers(-100, 100, (rows, cols)).astype(np.float32)  # integer values: any order is exact
    s, mx = np.zeros(rows, np.float32), np.zeros(rows, np.float32)
    k.launch(grid=(rows,), block=(128,), args=[x, s, mx, np.int32(cols), np.int32(cols), None, None],
             shared_mem=4096)
    np.testing.assert_array_equal(s, x.sum(1))
    np.testing.assert_array_equal(mx, x.max(1))
    k = tri("atomic_total_i32").kernel("atomic_total")
    n = 5000
    xi = rng.integers(-1000, 1000, n).astype(np.int32)
    total, mxi = np.zeros(1, np.int32), np.full(1, -2**31, np.int32)
    k.launch(grid=(-(-n // 1024),), block=(128,), args=[xi, total, mxi, np.int32(n), None, None], shared_mem=4096)
    assert total[0] == xi.sum() and mxi[0] == max(xi.max(), 0)  # masked lanes load 0


def test_activations_and_fp8_quant():
    k = tri("gelu_bias_f32").kernel("gelu_bias_kernel")
    n, d = 3000, 96
    x = rng.standard_normal(n).astype(np.float32)
    bias = rng.standard_normal(d).astype(np.float32)
    out = np.zeros_like(x)
    k.launch(grid=(-(-n // 1024),), block=(128,), args=[x, bias, out, np.int32(n), np.int32(d), None, None])
    v = x.astype(np.float64) + bias[np.arange(n) % d]
    ref = 0.5 * v * (1 + np.tanh(0.7978845608028654 * (v + 0.044715 * v ** 3)))
    np.testing.assert_allclose(out, ref, rtol=1e-5, atol=1e-6)
    k = tri("silu_and_mul_bf16").kernel("silu_and_mul_kernel")
    t, dd = 4, 320  # the kernel was specialised for d % 16 == 0
    xb = rng.standard_normal((t, 2 * dd)).astype(ml_dtypes.bfloat16)
    ob = np.zeros((t, dd), ml_dtypes.bfloat16)
    k.launch(grid=(t, 1), block=(128,), args=[xb, ob, np.int32(dd), None, None])
    g, u = xb[:, :dd].astype(np.float64), xb[:, dd:].astype(np.float64)
    np.testing.assert_allclose(ob.astype(np.float64), g / (1 + np.exp(-g)) * u, rtol=1e-2, atol=1e-2)
    k = tri("group_quant_fp8_e5m2").kernel("group_quant_fp8")
    hidden = 256
    xq = rng.standard_normal((2, hidden)).astype(np.float32) * 10
    q = np.zeros((2, hidden), np.uint8)
    sc = np.zeros((2, hidden // 128), np.float32)
    k.launch(grid=(2, hidden // 128), block=(128,), args=[xq, q, sc, np.int32(hidden), np.float32(1e-10),
                                                          None, None], shared_mem=4096)
    amax = np.abs(xq.reshape(2, -1, 128)).max(2)
    np.testing.assert_allclose(sc, amax / np.float32(57344), rtol=3e-7)  # div.full.f32: within 2 ulp
    deq = q.view(ml_dtypes.float8_e5m2).astype(np.float32).reshape(2, -1, 128) * sc[:, :, None]
    np.testing.assert_allclose(deq.reshape(2, hidden), xq, rtol=0.13, atol=1e-6)  # e5m2: 2 mantissa bits


def test_flash_attention_causal():
    k = tri("attention_fwd_causal").kernel("attn_fwd")
    bh, n, d = 2, 128, 64
    q, kk, v = (rng.standard_normal((bh, n, d)).astype(np.float16) for _ in range(3))
    o = np.zeros_like(q)
    scale = 1 / np.sqrt(d)
    r = k.launch(grid=(n // 64, bh), block=(128,), args=[q, kk, v, o, np.float32(scale), np.int32(n), None, None],
                 shared_mem=65536)
    s = q.astype(np.float64) @ kk.astype(np.float64).transpose(0, 2, 1) * scale
    s = np.where(np.tril(np.ones((n, n), bool)), s, -np.inf)
    p = np.exp(s - s.max(-1, keepdims=True))
    ref = (p / p.sum(-1, keepdims=True)) @ v.astype(np.float64)
    np.testing.assert_allclose(o.astype(np.float64), ref, rtol=2e-2, atol=2e-2)  # p is rounded to f16
    assert r.thread_instructions > 0 or r.device == "cuda"  # counts exist on the emulator only


@pytest.mark.parametrize("name, in_dt, out_dt, shape, tol", [
    ("matmul_f16", np.float16, np.float16, (128, 256, 96), 1e-2),
    ("matmul_bf16_fp32out", ml_dtypes.bfloat16, np.float32, (64, 128, 64), 1e-4),
    ("matmul_fp8e4m3_f32out", ml_dtypes.float8_e4m3fn, np.float32, (128, 64, 128), 4e-3),  # 13-bit sums
])
def test_sm90_wgmma_matmuls(name, in_dt, out_dt, shape, tol):
    """sm_90a Triton matmuls: cp.async/TMA-free pipelines feeding wgmma from swizzled shared memory."""
    k = corpus_module(name, "sm_90a", kind="triton").kernel("matmul_kernel")
    M, N, K = shape
    a = rng.standard_normal((M, K)).astype(in_dt)
    b = rng.standard_normal((K, N)).astype(in_dt)
    c = np.zeros((M, N), out_dt)
    bm, bn = {"matmul_f16": (128, 128), "matmul_bf16_fp32out": (64, 64), "matmul_fp8e4m3_f32out": (128, 64)}[name]
    k.launch(grid=((M // bm) * (N // bn),), block=(128,), args=[a, b, c, np.int32(M), np.int32(N), np.int32(K),
                                                                 np.int32(K), np.int32(N), np.int32(N), None, None],
             shared_mem=200 * 1024)
    ref = a.astype(np.float64) @ b.astype(np.float64)
    np.testing.assert_allclose(c.astype(np.float64), ref, rtol=tol, atol=tol * 40)
