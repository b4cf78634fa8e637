"""TMA multicast, TMA tensor reductions and im2col loads (corpus tma_multicast_reduce_sm90) on a real GPU, with driver
tensor maps: the same numpy references as tests/emu/test_emu_tma_multicast_reduce.py, and the same bits as
the emulator."""

import sys
from pathlib import Path

import numpy as np
import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "emu"))
import test_emu_tma_multicast_reduce as E  # noqa: E402  (the emulator tests' kernels and references)
from emu_corpus import corpus_module  # noqa: E402

from ptxforge.runtime import tensor_map, tensor_map_im2col, to_device  # noqa: E402

DEVICE = "cuda"
rng = np.random.default_rng(5)


@pytest.mark.parametrize("n", [2, 4])
def test_tensor_multicast_band(n):
    m = corpus_module(E.NAME, "sm_90a.O3")
    k = 2
    H = 8 * n * k - 5
    x = rng.integers(-1000, 1000, (H, 32)).astype(np.float32)
    tmap = tensor_map(to_device(x, device=DEVICE), np.float32, (32, H), (32 * 4,), (32, 8))
    out = np.full((n * k, 2048), -1, np.float32)
    m.kernel("tma_multicast_band").launch(grid=(n * k,), block=(128,), args=[tmap, out], cluster=(n, 1, 1),
                                          device=DEVICE)
    padded = np.zeros((8 * n * k, 32), np.float32)
    padded[:H] = x
    for b in range(n * k):
        rank, cid = b % n, b // n
        want = padded[8 * n * cid: 8 * n * (cid + 1)].reshape(-1) * (rank + 1)
        np.testing.assert_array_equal(out[b, : 256 * n], want)
        assert (out[b, 256 * n:] == -1).all()


@pytest.mark.parametrize("mask", [0b1010, 0b0111])
def test_bulk_multicast_mask(mask):
    m = corpus_module(E.NAME, "sm_90a.O3")
    n, k = 4, 2
    inp = rng.standard_normal(1024 * k).astype(np.float32)
    out = np.full((n * k, 1024), -5, np.float32)
    m.kernel("bulk_multicast_mask").launch(grid=(n * k,), block=(128,), args=[inp, out, np.uint32(mask)],
                                           cluster=(n, 1, 1), device=DEVICE)
    for b in range(n * k):
        rank, cid = b % n, b // n
        want = inp[1024 * cid: 1024 * (cid + 1)] + np.float32(rank) if mask >> rank & 1 else np.full(1024, -5)
        np.testing.assert_array_equal(out[b], want)


# On an H200 (2026-11-29) these kernels stopped with CUDA_ERROR_ILLEGAL_INSTRUCTION, which ends the process's
# CUDA context; the cause is not found yet. They are not run, so that the other GPU tests keep a context.
NOT_ON_H200 = pytest.mark.xfail(run=False, reason="CUDA_ERROR_ILLEGAL_INSTRUCTION on an H200, cause not found")


@NOT_ON_H200
@pytest.mark.parametrize("op, type_name", E.REDUCE_CASES)
def test_tensor_reduce(op, type_name):
    """The GPU's result equals numpy's and the emulator's, bit for bit."""
    dt = E._dtype(type_name)
    init = E._values(op, dt, (E.H, E.W))
    src = E._values(op, dt, (E.K, E.BOX[1], E.BOX[0]))
    m = corpus_module(E.NAME, "sm_90a.O3")
    got = {}
    for device in ("emu", DEVICE):
        buf = to_device(init, device=device)
        tmap = tensor_map(buf, dt, (E.W, E.H), (E.W * dt.itemsize,), E.BOX)
        nbytes = E.BOX[0] * E.BOX[1] * dt.itemsize
        args = [tmap, src.view(np.uint8).reshape(-1)] + [E._u32(v) for v in (nbytes, E.X0, E.Y0, E.DX, E.DY)]
        m.kernel(f"tma_reduce_{op}").launch(grid=(E.K,), block=(128,), args=args, device=device)
        got[device] = buf.to_host().view(f"u{dt.itemsize}")
    want = E._reference(op, init, src).view(f"u{dt.itemsize}")
    np.testing.assert_array_equal(got[DEVICE], want)
    np.testing.assert_array_equal(got["emu"], got[DEVICE])


@NOT_ON_H200
@pytest.mark.parametrize("shape, s", [((2, 7, 9), 1), ((1, 10, 12), 2)])
def test_im2col_conv_patches(shape, s):
    """The driver's im2col map and the GPU's traversal give numpy's convolution patches, as the emulator does."""
    m = corpus_module(E.NAME, "sm_90a.O3")
    N, H, W = shape
    C = 16
    x = rng.integers(-99, 99, (N, H, W, C)).astype(np.float32)
    OH, OW = (H - 1) // s + 1, (W - 1) // s + 1
    blocks = -(-N * OH * OW // 32)
    got = {}
    for device in ("emu", DEVICE):
        tmap = tensor_map_im2col(to_device(x, device=device), np.float32, (C, W, H, N),
                                 (C * 4, W * C * 4, H * W * C * 4), (-1, -1), (-1, -1), C, 32,
                                 element_strides=(1, s, s, 1))
        out = np.full((blocks, 9, 32, C), np.nan, np.float32)
        m.kernel("tma_im2col_conv3x3").launch(grid=(blocks,), block=(128,),
                                              args=[tmap, out, np.uint32(OH), np.uint32(OW), np.uint32(s)],
                                              device=device)
        got[device] = out
    np.testing.assert_array_equal(got[DEVICE], E._conv_patches(x, OH, OW, s, blocks))
    np.testing.assert_array_equal(got["emu"], got[DEVICE])


def test_bulk_copy_and_reduce_into_other_ctas():
    m = corpus_module(E.NAME, "sm_90a.O3")
    n, k = 4, 2
    inp = rng.integers(0, 1 << 32, (n * k, 256), dtype=np.uint64).astype(np.uint32)
    out = np.zeros((n * k, 512), np.uint32)
    m.kernel("dsmem_bulk_ring").launch(grid=(n * k,), block=(128,), args=[inp, out], cluster=(n, 1, 1),
                                       device=DEVICE)
    for b in range(n * k):
        rank, first = b % n, b - b % n
        np.testing.assert_array_equal(out[b, :256], inp[first + (rank - 1) % n])
        total = inp[first: first + n].sum(0, dtype=np.uint32) if rank == 0 else np.zeros(256, np.uint32)
        np.testing.assert_array_equal(out[b, 256:], total)
