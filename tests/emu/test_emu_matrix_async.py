"""mma.sync tiles, ldmatrix, cp.async pipelines and mbarriers from real nvcc PTX against numpy."""

import ml_dtypes
import numpy as np
import pytest
from emu_corpus import corpus_module

from ptxforge.emu.semantics.mma import dot_tensor_core

rng = np.random.default_rng(4)


def tensor_core(A, B, C=None):
    """A @ B + C as the tensor cores sum f16/bf16/tf32 into f32 (fitted bit for bit to an H200)."""
    A, B = A.astype(np.float64), B.astype(np.float64)
    C = np.zeros((A.shape[0], B.shape[1])) if C is None else C.astype(np.float64)
    return dot_tensor_core(A, B, C).astype(np.uint32).view(np.float32)


def mod(name):
    return corpus_module(name, "sm_80.O3")


def test_mma_f16_bf16_tf32():
    m = mod("mma_sync")
    A = rng.standard_normal((16, 16)).astype(np.float16)
    B = rng.standard_normal((16, 8)).astype(np.float16)
    C = rng.standard_normal((16, 8)).astype(np.float32)
    D = np.zeros((16, 8), np.float32)
    m.kernel("mma_m16n8k16_f16_f32").launch(grid=1, block=32, args=[A, B, C, D])
    np.testing.assert_array_equal(D, tensor_core(A, B, C))
    Ab, Bb = A.astype(ml_dtypes.bfloat16), B.astype(ml_dtypes.bfloat16)
    m.kernel("mma_m16n8k16_bf16_f32").launch(grid=1, block=32, args=[Ab, Bb, C, D])
    np.testing.assert_array_equal(D, tensor_core(Ab, Bb, C))
    C16 = rng.standard_normal((16, 8)).astype(np.float16)
    D16 = np.zeros((16, 8), np.float16)
    m.kernel("mma_m16n8k16_f16_f16").launch(grid=1, block=32, args=[A, B, C16, D16])
    np.testing.assert_array_equal(D16, (A.astype(np.float64) @ B.astype(np.float64) + C16).astype(np.float16))
    At = rng.standard_normal((16, 8)).astype(np.float32)
    Bt = rng.standard_normal((8, 8)).astype(np.float32)
    m.kernel("mma_m16n8k8_tf32").launch(grid=1, block=32, args=[At, Bt, C, D])
    ref = At.astype(np.float64) @ Bt.astype(np.float64) + C
    np.testing.assert_allclose(D, ref, rtol=2e-3, atol=2e-3)  # tf32 inputs keep 10 mantissa bits


def test_mma_s8_f64_and_kloop():
    m = mod("mma_sync")
    A = rng.integers(-128, 128, (16, 32)).astype(np.int8)
    B = rng.integers(-128, 128, (32, 8)).astype(np.int8)
    C = rng.integers(-2**31, 2**31, (16, 8)).astype(np.int32)
    D, Ds = np.zeros((16, 8), np.int32), np.zeros((16, 8), np.int32)
    m.kernel("mma_m16n8k32_s8").launch(grid=1, block=32, args=[A, B, C, D, Ds])
    exact = A.astype(np.int64) @ B.astype(np.int64) + C
    np.testing.assert_array_equal(D, exact.astype(np.uint64).astype(np.uint32).view(np.int32))
    np.testing.assert_array_equal(Ds, np.clip(exact, -2**31, 2**31 - 1))
    Ad, Bd, Cd = rng.standard_normal((8, 4)), rng.standard_normal((4, 8)), rng.standard_normal((8, 8))
    Dd = np.zeros((8, 8))
    m.kernel("mma_m8n8k4_f64").launch(grid=1, block=32, args=[Ad, Bd, Cd, Dd])
    np.testing.assert_allclose(Dd, Ad @ Bd + Cd, rtol=1e-14)
    kt = 4
    Ak = rng.standard_normal((16, 16 * kt)).astype(np.float16)
    Bk = rng.standard_normal((16 * kt, 8)).astype(np.float16)
    Dk = np.zeros((16, 8), np.float32)
    m.kernel("mma_m16n8k16_f16_kloop").launch(grid=1, block=32, args=[Ak, Bk, Dk, np.int32(kt)])
    np.testing.assert_allclose(Dk, Ak.astype(np.float32) @ Bk.astype(np.float32), rtol=1e-5, atol=1e-5)


def test_ldmatrix():
    m = mod("ldmatrix")
    M = np.arange(32 * 8, dtype=np.uint16).reshape(4, 8, 8)  # matrix j, row r, col c
    x4, x4t = np.zeros(128, np.uint32), np.zeros(128, np.uint32)
    x2, x1 = np.zeros(64, np.uint32), np.zeros(32, np.uint32)
    m.kernel("ldmatrix_variants").launch(grid=1, block=32, args=[M.reshape(-1), x4, x4t, x2, x1])
    lane = np.arange(32)
    g, t = lane // 4, lane % 4

    def pack(lo, hi):
        return lo.astype(np.uint32) | (hi.astype(np.uint32) << 16)
    for j in range(4):
        np.testing.assert_array_equal(x4[lane * 4 + j], pack(M[j, g, 2 * t], M[j, g, 2 * t + 1]))
        np.testing.assert_array_equal(x4t[lane * 4 + j], pack(M[j, 2 * t, g], M[j, 2 * t + 1, g]))
    for j in range(2):
        np.testing.assert_array_equal(x2[lane * 2 + j], pack(M[j, g, 2 * t], M[j, g, 2 * t + 1]))
    np.testing.assert_array_equal(x1, pack(M[0, 2 * t, g], M[0, 2 * t + 1, g]))
    A = rng.standard_normal((16, 16)).astype(np.float16)
    B = rng.standard_normal((16, 8)).astype(np.float16)
    D = np.zeros((16, 8), np.float32)
    m.kernel("ldmatrix_mma_f16").launch(grid=1, block=32, args=[A, B, D])
    np.testing.assert_array_equal(D, tensor_core(A, B))


def test_cp_async_pipelines():
    m = mod("cp_async_sm80")
    n = 256 * 10
    x = rng.standard_normal(n).astype(np.float32)
    out = np.zeros(n, np.float32)
    m.kernel("cp_async_pipeline").launch(grid=(3,), block=(64,), args=[x, out, np.int32(n)])
    np.testing.assert_array_equal(out, 2 * x + 1)
    out = np.zeros(n + n // 256, np.float32)
    m.kernel("cp_async_zfill").launch(grid=(n // 256,), block=(64,), args=[x, out, np.int32(3), np.int32(n)])
    keep = (np.arange(n) % 4) < 3
    np.testing.assert_array_equal(out[:n], np.where(keep, x, 0))
    sums = np.array([np.float32(0) + x[b * 256: b * 256 + 128].astype(np.float32).cumsum()[-1]
                     for b in range(n // 256)])
    np.testing.assert_allclose(out[n:], sums, rtol=1e-5, atol=1e-5)
    out = np.zeros(n, np.float32)
    m.kernel("cp_async_pipeline_primitives").launch(grid=(4,), block=(256,), args=[x, out, np.int32(n)])
    np.testing.assert_array_equal(out, x * x)


def test_mbarriers():
    m = mod("mbarrier_sm80")
    x = rng.integers(-100, 100, 3 * 128).astype(np.int32)
    out = np.zeros_like(x)
    m.kernel("mbarrier_block_sync").launch(grid=(3,), block=(128,), args=[x, out])
    np.testing.assert_array_equal(out.reshape(3, 128), x.reshape(3, 128).sum(1, keepdims=True) + np.arange(128))
    out = np.zeros_like(x)
    m.kernel("mbarrier_cp_async_phases").launch(grid=(3,), block=(64,), args=[x, out])
    xr, orr = x.reshape(3, 128), out.reshape(3, 128)
    np.testing.assert_array_equal(orr[:, :64], xr[:, :64] + 1)
    np.testing.assert_array_equal(orr[:, 64:], xr[:, 64:] * 2)


@pytest.mark.parametrize("flavor", ["sm_80.O3", "sm_80.G", "nvrtc:sm_80"])
def test_mma_debug_build(flavor):
    m = corpus_module("mma_sync", flavor)
    A = rng.standard_normal((16, 16)).astype(np.float16)
    B = rng.standard_normal((16, 8)).astype(np.float16)
    C = np.zeros((16, 8), np.float32)
    D = np.zeros((16, 8), np.float32)
    m.kernel("mma_m16n8k16_f16_f32").launch(grid=1, block=32, args=[A, B, C, D])
    np.testing.assert_array_equal(D, tensor_core(A, B))


def test_sm90_vector_atomics_and_bulk_reduce():
    m = corpus_module("hopper_misc_sm90", "sm_90a.O3")
    T = 200
    x = rng.integers(-50, 50, (T, 4)).astype(np.float32)  # integer values: every summation order is exact
    acc, acc2 = np.zeros(4, np.float32), np.zeros(2, np.float32)
    m.kernel("vector_float_atomics").launch(grid=(2,), block=(128,), args=[x, acc, acc2, np.int32(T)])
    np.testing.assert_array_equal(acc, x.sum(0))
    np.testing.assert_array_equal(acc2, x[:, :2].sum(0))
    inp = rng.integers(0, 1000, 3 * 256).astype(np.uint32)
    out = np.zeros(256, np.uint32)
    m.kernel("bulk_reduce_add").launch(grid=(3,), block=(256,), args=[inp, out])
    np.testing.assert_array_equal(out, (inp.reshape(3, 256) * 2).sum(0))


def test_sm90_bulk_copy_with_mbarrier_transactions():
    m = corpus_module("tma_bulk_sm90", "sm_90a.O3")
    n = 1024 * 5
    x = rng.standard_normal(n).astype(np.float32)
    out = np.zeros_like(x)
    m.kernel("bulk_copy_roundtrip").launch(grid=(2,), block=(128,), args=[x, out, np.int32(n)],
                                           options={"watchdog_s": 30})
    np.testing.assert_array_equal(out, x + np.float32(1))
