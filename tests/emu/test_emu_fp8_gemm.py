"""A DeepGEMM-shaped FP8 GEMM (tests/corpus/src/cuda/fp8_gemm_sm90a.cu: two math warpgroups, wgmma
m64n128k32 e4m3 from shared memory, FP32 promotion every 128 elements of K with 1x128 and 128x128 scales)
on the emulator against a float64 reference."""

import ml_dtypes
import numpy as np
import pytest
from emu_corpus import corpus_module

rng = np.random.default_rng(0)


def _problem(m, n, k):
    a = rng.standard_normal((m, k)).astype(ml_dtypes.float8_e4m3fn)
    b = rng.standard_normal((n, k)).astype(ml_dtypes.float8_e4m3fn)
    sa = rng.uniform(0.5, 2, (m, k // 128)).astype(np.float32)
    sb = rng.uniform(0.5, 2, (n // 128, k // 128)).astype(np.float32)
    return a, sa, b, sb


def _reference(a, sa, b, sb):
    A, B = a.astype(np.float64), b.astype(np.float64)
    ref = np.zeros((A.shape[0], B.shape[0]))
    for kb in range(A.shape[1] // 128):
        s = slice(kb * 128, kb * 128 + 128)
        ref += (A[:, s] @ B[:, s].T) * sa[:, kb][:, None] * np.repeat(sb[:, kb], 128)[None, :]
    return ref


def calc_diff(x, y):
    """DeepGEMM's measure: 1 - 2 sum(x y) / sum(x^2 + y^2)."""
    x, y = x.astype(np.float64), y.astype(np.float64)
    return 1 - 2 * (x * y).sum() / (x * x + y * y).sum()


@pytest.mark.parametrize("flavor", ["sm_90a.O3", "sm_90a.G"])
def test_fp8_gemm_matches_reference(flavor):
    m, n, k = 128, 256, 256
    a, sa, b, sb = _problem(m, n, k)
    d = np.full((m, n), np.nan, np.float32)
    kern = corpus_module("fp8_gemm_sm90a", flavor).kernel("fp8_gemm_1d2d")
    kern.launch(grid=(n // 128, m // 128), block=(256,), device="emu",
                args=[a.view(np.uint8), sa, b.view(np.uint8), sb, d, np.int32(m), np.int32(n), np.int32(k)])
    ref = _reference(a, sa, b, sb)
    assert np.isfinite(d).all()
    # the tensor cores keep 13 bits of each 32-product partial sum; promotion to FP32 every 128 keeps the
    # whole GEMM close to the exact product (DeepGEMM accepts calc_diff < 1e-3)
    assert calc_diff(d, ref) < 1e-6
    assert np.abs(d - ref).max() < 1e-2 * np.abs(ref).max()


def test_fp8_gemm_is_clean_under_the_sanitizer():
    """Staging, fence.proxy.async, wgmma from shared memory and the re-staging after bar.sync: no reports."""
    m, n, k = 128, 128, 256
    a, sa, b, sb = _problem(m, n, k)
    d = np.zeros((m, n), np.float32)
    kern = corpus_module("fp8_gemm_sm90a", "sm_90a.O3").kernel("fp8_gemm_1d2d")
    kern.launch(grid=(1, 1), block=(256,), device="emu", options={"sanitize": True},
                args=[a.view(np.uint8), sa, b.view(np.uint8), sb, d, np.int32(m), np.int32(n), np.int32(k)])
    assert calc_diff(d, _reference(a, sa, b, sb)) < 1e-6
