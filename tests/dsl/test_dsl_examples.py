"""The DSL examples: each against numpy on the emulator (and on the GPU when there is one), and assembled by
ptxas for every arch it claims."""

import importlib

import ml_dtypes
import numpy as np
import pytest
from dsl_helpers import assemble_ok, needs_ptxas

from ptxforge.runtime.kernel import cuda_available

rng = np.random.default_rng(5)

EXAMPLES = {
    "vector_add": ["vadd"],
    "block_reduce": ["block_sum"],
    "tiled_matmul": ["matmul"],
    "row_softmax": ["softmax"],
    "fp8_quant": ["act_quant", "act_quant_pow2"],
    "mma_gemm_bf16": ["gemm_bf16"],
    "warp_specialized": ["scale_pipeline", "scale_pipeline_tma"],
}


DEVICES = ["emu", "cuda"] if cuda_available() else ["emu"]


@pytest.fixture(params=DEVICES)
def device(request):
    return request.param


def run(device, kernel, **kw):
    """Launch on `device`. Every example runs on the emulator: one that cannot (an instruction it lacks)
    fails here, unless it is declared up front as a strict xfail with its reason."""
    return kernel.launch(device=device, **kw)


@needs_ptxas
@pytest.mark.parametrize("module,kernel", [(m, k) for m, ks in EXAMPLES.items() for k in ks])
def test_example_assembles_for_every_arch(module, kernel):
    mod = importlib.import_module(module)
    k = getattr(mod, kernel)
    for arch in mod.ARCHS:
        assemble_ok(k.ptx(arch), arch)


def test_vector_add(device):
    from vector_add import vadd

    n = 1000  # not a multiple of the block: the tail threads take the bounds check
    a, b = rng.standard_normal(n, np.float32), rng.standard_normal(n, np.float32)
    c = np.zeros(n, np.float32)
    run(device, vadd, grid=(4,), block=(256,), args=[a, b, c, np.uint32(n)])
    np.testing.assert_array_equal(c, a + b)


def test_block_reduce(device):
    from block_reduce import block_sum

    n = 1000
    x = rng.integers(-50, 50, n).astype(np.float32)  # small integers: every summation order is exact
    out = np.full(4, np.nan, np.float32)
    run(device, block_sum, grid=(4,), block=(256,), args=[x, out, np.uint32(n)])
    np.testing.assert_array_equal(out, [x[k * 256:(k + 1) * 256].sum() for k in range(4)])
    y = rng.standard_normal(n).astype(np.float32)
    out8 = np.zeros(8, np.float32)
    run(device, block_sum, grid=(8,), block=(128,), args=[y, out8, np.uint32(n)])  # last block is partial
    ref = [y[k * 128:(k + 1) * 128].astype(np.float64).sum() for k in range(8)]
    np.testing.assert_allclose(out8, ref, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("M,N,K", [(32, 48, 32), (40, 24, 50)])
def test_tiled_matmul(M, N, K, device):
    from tiled_matmul import matmul

    A, B = rng.standard_normal((M, K), np.float32), rng.standard_normal((K, N), np.float32)
    C = np.zeros((M, N), np.float32)
    run(device, matmul, grid=((N + 15) // 16, (M + 15) // 16), block=(16, 16),
            args=[A, B, C, np.uint32(M), np.uint32(N), np.uint32(K)])
    np.testing.assert_allclose(C, A.astype(np.float64) @ B, rtol=1e-5, atol=1e-5)


def test_row_softmax(device):
    from row_softmax import softmax

    rows, cols = 7, 100
    x = (rng.standard_normal((rows, cols)) * 4).astype(np.float32)
    y = np.zeros_like(x)
    run(device, softmax, grid=(2,), block=(128,), args=[x, y, np.uint32(rows), np.uint32(cols)])
    e = np.exp(x.astype(np.float64) - x.max(1, keepdims=True))
    np.testing.assert_allclose(y, e / e.sum(1, keepdims=True), rtol=2e-6, atol=1e-7)


@pytest.mark.parametrize("pow2", [False, True])
def test_fp8_quant(pow2, device):
    import fp8_quant

    k = fp8_quant.act_quant_pow2 if pow2 else fp8_quant.act_quant
    M, K = 3, 512
    x = (rng.standard_normal((M, K)) * 5).astype(ml_dtypes.bfloat16)
    x[1, 128:256] = 0  # an all-zero group takes the clamped scale
    x[2, 7] = 3000.0  # a large outlier dominates its group's scale
    y = np.zeros((M, K), ml_dtypes.float8_e4m3fn)  # fp8 travels as itself (a uint8 array is refused)
    s = np.zeros((M, K // 128), np.float32)
    groups = M * K // 128
    run(device, k, grid=((groups + 3) // 4,), block=(128,), args=[x, y, s, np.uint32(groups)])
    ref_y, ref_s = fp8_quant.reference(x, pow2_scale=pow2)
    np.testing.assert_array_equal(s, ref_s)
    np.testing.assert_array_equal(y.view(np.uint8), ref_y)
    if pow2:
        assert np.all(np.log2(s) == np.round(np.log2(s)))  # powers of two


def test_mma_gemm_bf16(device):
    from mma_gemm_bf16 import gemm_bf16, reference

    M, N, K = 64, 32, 96
    A = rng.standard_normal((M, K)).astype(ml_dtypes.bfloat16)
    B = rng.standard_normal((N, K)).astype(ml_dtypes.bfloat16)
    C = np.zeros((M, N), np.float32)
    run(device, gemm_bf16, grid=(N // 32, M // 32), block=(128,),
        args=[A, B, C, np.uint32(M), np.uint32(N), np.uint32(K)])
    np.testing.assert_allclose(C, reference(A, B), rtol=1e-5, atol=1e-4)


@pytest.mark.parametrize("tma", [False, True])
def test_warp_specialized(tma, device):
    import warp_specialized as ws

    k = ws.scale_pipeline_tma if tma else ws.scale_pipeline
    nchunks = 5  # more chunks than stages: the ring wraps and the phases flip
    x = rng.standard_normal(nchunks * ws.CHUNK).astype(np.float32)
    y = np.zeros_like(x)
    run(device, k, grid=(1,), block=(256,), args=[x, y, np.float32(1.5), np.uint32(nchunks)])
    np.testing.assert_array_equal(y, x * np.float32(1.5))
