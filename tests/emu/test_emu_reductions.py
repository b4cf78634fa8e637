"""Reductions, scans, sort and histograms (shared memory, bar.sync, shuffles, atomics) against numpy."""

import numpy as np
import pytest
from emu_corpus import corpus_module

FLAVORS = ["sm_80.O3", "sm_80.G", "sm_90a.O3"]
rng = np.random.default_rng(1)


def tree_sum(x):
    """Sum in the order a shared-memory tree reduction adds (stride halving), in float32."""
    s = x.astype(np.float32).copy()
    while s.shape[-1] > 1:
        h = s.shape[-1] // 2
        s = s[..., :h] + s[..., h:]
    return s[..., 0]


@pytest.mark.parametrize("flavor", FLAVORS)
def test_block_reductions(flavor):
    m = corpus_module("reductions", flavor)
    n = 256 * 24
    x = rng.standard_normal(n).astype(np.float32)
    out = np.zeros(24, np.float32)
    m.kernel("reduce_sum_shared").launch(grid=(24,), block=(256,), args=[x, out, np.int32(n)])
    np.testing.assert_array_equal(out, tree_sum(x.reshape(24, 256)))
    out[:] = 0
    m.kernel("reduce_sum_warp").launch(grid=(24,), block=(256,), args=[x, out, np.int32(n)])
    np.testing.assert_allclose(out, x.reshape(24, 256).sum(1), rtol=1e-5, atol=1e-5)
    xi = rng.integers(-10**9, 10**9, n).astype(np.int32)
    oi = np.zeros(24, np.int32)
    m.kernel("reduce_max_i32").launch(grid=(24,), block=(256,), args=[xi, oi, np.int32(n - 100)])
    ref = np.where(np.arange(n) < n - 100, xi, np.iinfo(np.int32).min).reshape(24, 256).max(1)
    np.testing.assert_array_equal(oi, ref)
    xd = rng.integers(0, 1000, n).astype(np.float64)
    tot = np.zeros(1)
    m.kernel("reduce_sum_f64_atomic").launch(grid=(24,), block=(256,), args=[xd, tot, np.int32(n)])
    assert tot[0] == xd.sum()


@pytest.mark.parametrize("flavor", [*FLAVORS, "nvrtc:sm_80"])
def test_scans(flavor):
    m = corpus_module("scans", flavor)
    nb, n = 8, 8 * 256 - 37
    xi = rng.integers(-100, 100, nb * 256).astype(np.int32)
    out = np.zeros_like(xi)
    m.kernel("scan_inclusive_hillis_steele").launch(grid=(nb,), block=(256,), args=[xi, out, np.int32(n)])
    ref = np.cumsum(np.where(np.arange(nb * 256) < n, xi, 0).reshape(nb, 256), axis=1).reshape(-1)
    np.testing.assert_array_equal(out[:n], ref[:n])
    xu = rng.integers(0, 1000, nb * 256).astype(np.uint32)
    ou = np.zeros_like(xu)
    m.kernel("scan_inclusive_warp_shuffle").launch(grid=(nb,), block=(256,), args=[xu, ou, np.int32(nb * 256)])
    np.testing.assert_array_equal(ou, np.cumsum(xu.reshape(nb, 256), axis=1).reshape(-1).astype(np.uint32))
    xf = rng.integers(0, 16, nb * 256).astype(np.float32)  # small integers: every order is exact
    of = np.zeros_like(xf)
    m.kernel("scan_exclusive_blelloch").launch(grid=(nb,), block=(256,), args=[xf, of, np.int32(nb * 256)])
    c = np.cumsum(xf.reshape(nb, 256), axis=1)
    np.testing.assert_array_equal(of, (c - xf.reshape(nb, 256)).reshape(-1))
    ci = rng.integers(-5, 5, nb * 256).astype(np.int32)
    oc, cnt = np.zeros_like(ci), np.zeros(nb, np.int32)
    m.kernel("compact_positive").launch(grid=(nb,), block=(256,), args=[ci, oc, cnt, np.int32(nb * 256)])
    for b in range(nb):
        keep = ci[b * 256:(b + 1) * 256]
        keep = keep[keep > 0]
        assert cnt[b] == keep.size
        np.testing.assert_array_equal(oc[b * 256: b * 256 + keep.size], keep)


@pytest.mark.parametrize("flavor", FLAVORS)
def test_bitonic_sort(flavor):
    m = corpus_module("bitonic_sort", flavor)
    data = rng.standard_normal(3 * 1024).astype(np.float32)
    ref = np.sort(data.reshape(3, 1024), axis=1).reshape(-1)
    m.kernel("bitonic_sort_f32").launch(grid=(3,), block=(512,), args=[data])
    np.testing.assert_array_equal(data, ref)
    keys = rng.permutation(2 * 1024).astype(np.uint32)
    vals = (keys.astype(np.int64) * 7 - 3).astype(np.int32)
    m.kernel("bitonic_sort_kv_desc").launch(grid=(2,), block=(512,), args=[keys, vals])
    order = -np.sort(-keys.reshape(2, 1024).astype(np.int64), axis=1)
    np.testing.assert_array_equal(keys.reshape(2, 1024), order)
    np.testing.assert_array_equal(vals, (keys.astype(np.int64) * 7 - 3).astype(np.int32))


@pytest.mark.parametrize("flavor", FLAVORS)
def test_histograms(flavor):
    m = corpus_module("histogram", flavor)
    n, nbins = 20000, 37
    x = rng.integers(0, 2**32, n, dtype=np.uint64).astype(np.uint32)
    ref = np.bincount(x % nbins, minlength=nbins).astype(np.uint32)
    for name in ("histogram_global", "histogram_shared"):
        bins = np.zeros(nbins, np.uint32)
        m.kernel(name).launch(grid=(16,), block=(256,), args=[x, bins, np.int32(n), np.uint32(nbins)])
        np.testing.assert_array_equal(bins, ref, err_msg=name)
    b = rng.integers(0, 8, 4 * 3000).astype(np.uint8)  # few distinct bytes: match_any groups lanes
    bins = np.zeros(256, np.uint32)
    m.kernel("histogram_bytes_match").launch(grid=(4,), block=(256,), args=[b, bins, np.int32(3000)])
    np.testing.assert_array_equal(bins, np.bincount(b, minlength=256).astype(np.uint32))
