"""Elementwise kernels from nvcc -O3 and -G PTX against numpy."""

import numpy as np
import pytest
from emu_corpus import corpus_module

FLAVORS = ["sm_80.O3", "sm_80.G", "sm_90a.O3", "nvrtc:sm_80", "nvrtc:sm_90a"]
rng = np.random.default_rng(0)


@pytest.mark.parametrize("flavor", FLAVORS)
def test_vadd_f32(flavor):
    m = corpus_module("vector_ops", flavor)
    n = 1000  # not a multiple of the block: the tail threads take the bounds check
    a, b = rng.standard_normal(n, np.float32), rng.standard_normal(n, np.float32)
    c = np.zeros(n, np.float32)
    r = m.kernel("vadd_f32").launch(grid=(4,), block=(256,), args=[a, b, c, np.int32(n)], device="emu")
    np.testing.assert_array_equal(c, a + b)
    assert r.thread_instructions > n


@pytest.mark.parametrize("flavor", FLAVORS)
def test_saxpy_daxpy(flavor):
    m = corpus_module("vector_ops", flavor)
    n = 3000
    x, y = rng.standard_normal(n, np.float32), rng.standard_normal(n, np.float32)
    y0 = y.copy()
    m.kernel("saxpy").launch(grid=(3,), block=(128,), args=[np.float32(1.5), x, y, np.int32(n)])
    ref = (np.float32(1.5) * x).astype(np.float32) + y0  # nvcc may contract to fma; allow 1 ulp
    np.testing.assert_allclose(y, ref, rtol=2e-7, atol=1e-6)
    xd, yd = rng.standard_normal(n), rng.standard_normal(n)
    yd0 = yd.copy()
    m.kernel("daxpy").launch(grid=(12,), block=(256,), args=[0.25, xd, yd, np.int64(n)])
    np.testing.assert_array_equal(yd, 0.25 * xd + yd0)  # exact: 0.25*x is exact, one rounding


@pytest.mark.parametrize("flavor", FLAVORS)
def test_int_ops(flavor):
    m = corpus_module("vector_ops", flavor)
    n = 512
    a = rng.integers(-2**31, 2**31, n).astype(np.int32)
    b = rng.integers(-2**31, 2**31, n).astype(np.int32)
    b[:8] = [0, 1, 31, 32, -1, 2**31 - 1, -2**31, 5]
    out, out64 = np.zeros(n, np.int32), np.zeros(n, np.int64)
    m.kernel("int_ops_i32").launch(grid=(2,), block=(256,), args=[a, b, out, out64, np.int32(n)])
    x, y = a.astype(np.int64), b.astype(np.int64)
    ux, uy = a.view(np.uint32).astype(np.int64), b.view(np.uint32).astype(np.int64)
    m32 = 0xFFFFFFFF
    r = (x * y - (x ^ y)) & m32
    rot = ((ux >> (uy & 31)) | (ux << ((uy + 3) & 31))) & m32
    r = (r + rot) & m32
    r ^= (x >> (y & 31)) & m32
    d = ((x - y) & m32).astype(np.uint32).view(np.int32).astype(np.int64)  # x - y wraps in 32 bits
    r = (r + (np.minimum(x, y) - np.maximum(x, y) + np.abs(d))) & m32
    np.testing.assert_array_equal(out, r.astype(np.uint32).view(np.int32))
    np.testing.assert_array_equal(out64, x * y + (x << 20))


@pytest.mark.parametrize("flavor", FLAVORS)
def test_select_and_vector_loads(flavor):
    m = corpus_module("vector_ops", flavor)
    n = 700
    a, b = rng.integers(-5, 5, n).astype(np.int32), rng.integers(-5, 5, n).astype(np.int32)
    out = np.zeros(n, np.int32)
    m.kernel("select_i32").launch(grid=(3,), block=(256,), args=[a, b, out, np.int32(n)])
    np.testing.assert_array_equal(out, np.where(a > b, a - b, np.where(a == b, 0, -1)))
    x = rng.standard_normal(4 * 100, np.float32)
    y = np.zeros_like(x)
    m.kernel("scale_f32x4").launch(grid=(1,), block=(128,), args=[x, y, np.float32(3.0), np.int32(100)])
    np.testing.assert_array_equal(y, x * np.float32(3.0))
