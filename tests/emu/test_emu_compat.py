"""The compatibility corpus (CUTLASS/CuTe-style templates, cooperative groups, libcu++ pipeline / barrier /
atomics, wmma, DeepEP- and DeepGEMM-style inline asm, warpSize code, JIT templates through NVRTC) on the
emulator against numpy references. Known gaps are strict xfails from tests/corpus/known_gaps.py."""

from __future__ import annotations

import numpy as np
import pytest
from corpus.known_gaps import xfail_marks
from emu_corpus import CORPUS, corpus_module

rng = np.random.default_rng(10)
WATCHDOG_S = 6.0  # a kernel that hangs (a known gap) fails fast instead of stalling the suite


def _f32(*shape):
    return rng.standard_normal(shape).astype(np.float32)


def _i32(n, lo=-100, hi=100):
    return rng.integers(lo, hi, n).astype(np.int32)


# ----------------------------------------------------------------------------- CuTe / CUTLASS style
def cute_transpose_32x32(k):
    rows, cols = 64, 96
    x, out = _f32(rows, cols), np.zeros((cols, rows), np.float32)
    k.launch(grid=(cols // 32, rows // 32), block=(256,), args=[x, out, np.int32(rows), np.int32(cols)])
    np.testing.assert_array_equal(out, x.T)


def cute_layout_copy_16x16(k):
    x = _f32(3, 16, 16)
    out, out_t = np.zeros_like(x), np.zeros_like(x)
    k.launch(grid=(3,), block=(64,), args=[x, out, out_t])
    np.testing.assert_array_equal(out, x)
    np.testing.assert_array_equal(out_t, x.transpose(0, 2, 1))


def cute_swizzled_copy_u16(k):
    x = rng.integers(0, 2**16, (2, 64, 64)).astype(np.uint16)
    out = np.zeros_like(x)
    k.launch(grid=(2,), block=(128,), args=[x, out])
    np.testing.assert_array_equal(out, x)


def cute_cluster_barrier_two_waits(k):
    x = _i32(2 * 128)
    out = np.zeros_like(x)
    k.launch(grid=(2,), block=(128,), args=[x, out], options={"watchdog_s": WATCHDOG_S})
    t = (x + 1).reshape(2, 128)
    np.testing.assert_array_equal(out.reshape(2, 128), 2 * np.roll(t, -2, axis=1))


# ----------------------------------------------------------------------------- cooperative groups
def cg_tile_reduce(k):
    nb, bs = 3, 128
    x = _i32(nb * bs)
    sums, t16, r8 = np.zeros(nb, np.int32), np.zeros(nb * bs, np.int32), np.zeros(nb * bs, np.int32)
    k.launch(grid=(nb,), block=(bs,), args=[x, sums, t16, r8])
    np.testing.assert_array_equal(sums, x.reshape(nb, bs).sum(1))
    np.testing.assert_array_equal(t16, np.repeat(x.reshape(-1, 16).sum(1), 16))
    tid = np.tile(np.arange(bs), nb)
    np.testing.assert_array_equal(r8, (tid // 8) * 100 + tid % 8)


def cg_tile_votes(k):
    x = _i32(128, 0, 100)
    out = np.zeros(128 * 5, np.uint32)
    k.launch(grid=(2,), block=(64,), args=[x, out])
    o = out.reshape(-1, 32, 5)
    for w, xw in enumerate(x.reshape(-1, 32)):
        bits = lambda m: int(sum(1 << i for i in range(32) if m[i]))  # noqa: E731
        assert (o[w, :, 0] == bits(xw & 1)).all()
        assert (o[w, :, 1] == int((xw > 90).any())).all()
        assert (o[w, :, 2] == 1).all()
        for lane in range(32):
            assert o[w, lane, 3] == bits((xw & 3) == (xw[lane] & 3))
        assert (o[w, :, 4] == xw.max()).all()


def cg_coalesced_compact(k):
    n = 300
    x = _i32(n)
    out, count = np.zeros(512, np.int32), np.zeros(1, np.int32)
    k.launch(grid=(3,), block=(128,), args=[x, out, count, np.int32(n)])
    pos = x[x > 0]
    assert count[0] == pos.size
    np.testing.assert_array_equal(np.sort(out[:pos.size]), np.sort(pos))


def cg_coalesced_reduce(k):
    x = _i32(128)
    out = np.zeros(256, np.int32)
    k.launch(grid=(2,), block=(64,), args=[x, out])
    o = out.reshape(-1, 32, 2)
    for w, xw in enumerate(x.reshape(-1, 32)):
        even = xw % 2 == 0
        np.testing.assert_array_equal(o[w, even, 0], xw[even].sum())
        np.testing.assert_array_equal(o[w, even, 1], even.sum())
        assert (o[w, ~even] == -1).all()


def cg_grid_sync_shift(k):
    nb, n = 2, 256
    x = _i32(n)
    tmp, out = np.zeros(n, np.int32), np.zeros(n, np.int32)
    k.launch(grid=(nb,), block=(128,), args=[x, tmp, out, np.int32(n)],
             options={"watchdog_s": WATCHDOG_S}, cooperative=True)
    np.testing.assert_array_equal(out, np.roll(2 * x, -128))


# ----------------------------------------------------------------------------- libcu++ pipeline / barrier
def pipe_thread_double_buffer(k):
    steps, nb = 3, 2
    x = _f32(nb * 256 * steps)
    out = np.zeros_like(x)
    k.launch(grid=(nb,), block=(64,), args=[x, out, np.int32(steps)])
    np.testing.assert_array_equal(out, 2 * x + 1)


def pipe_block_stages(k):
    tiles, nb = 4, 2
    x = _f32(nb, tiles, 256)
    out = np.zeros_like(x)
    k.launch(grid=(nb,), block=(128,), args=[x, out, np.int32(tiles)])
    np.testing.assert_array_equal(out, x * np.arange(1, tiles + 1, dtype=np.float32)[None, :, None])


def barrier_memcpy_reverse(k):
    x = _i32(2 * 512)
    out = np.zeros_like(x)
    k.launch(grid=(2,), block=(128,), args=[x, out])
    np.testing.assert_array_equal(out.reshape(2, 512), x.reshape(2, 512)[:, ::-1])


def barrier_split_arrive(k):
    x = _i32(2 * 64)
    out = np.zeros_like(x)
    k.launch(grid=(2,), block=(64,), args=[x, out])
    a = (x + 1).reshape(2, 64)
    np.testing.assert_array_equal(out.reshape(2, 64), np.roll(a, -1, 1) * 3 + np.roll(a, 1, 1))


# ----------------------------------------------------------------------------- libcu++ atomics
def atomic_ref_mix(k):
    n = 300
    x = _i32(n, -1000, 1000)
    counters = np.array([0, np.iinfo(np.int32).min, np.iinfo(np.int32).max, 0], np.int32)
    bits = np.array([0, 0xFFFFFFFF], np.uint32)
    fmax, bor = np.array([-np.inf], np.float32), np.zeros(3, np.uint32)
    k.launch(grid=(3,), block=(128,), args=[x, counters, bits, fmax, bor, np.int32(n)])
    np.testing.assert_array_equal(counters, [n, x.max(), x.min(), (x > 0).sum()])
    u = x.view(np.uint32)
    assert bits[0] == np.bitwise_or.reduce(np.uint32(1) << (u & 31))
    assert bits[1] == np.bitwise_and.reduce(~(np.uint32(1) << (u & 15)))
    assert fmax[0] == np.float32(x.max())
    pad = np.concatenate([u, np.zeros(3 * 128 - n, np.uint32)]).reshape(3, 128)
    np.testing.assert_array_equal(bor, np.bitwise_or.reduce(pad, axis=1))


def atomic_last_block_sum(k):
    nb = 5
    x = _i32(nb * 128)
    partial, ticket, total = np.zeros(nb, np.int32), np.zeros(1, np.uint32), np.zeros(1, np.int32)
    k.launch(grid=(nb,), block=(128,), args=[x, partial, ticket, total])
    np.testing.assert_array_equal(partial, x.reshape(nb, 128).sum(1))
    assert ticket[0] == nb and total[0] == x.sum()


def atomic_flag_handoff(k):
    nb = 3
    x = _i32(nb * 32)
    payload, flags, out = np.zeros(nb * 32, np.int32), np.zeros(nb, np.int32), np.zeros(nb * 32, np.int32)
    k.launch(grid=(nb,), block=(64,), args=[x, payload, flags, out], options={"watchdog_s": WATCHDOG_S})
    np.testing.assert_array_equal(out, x * 3 + np.tile(np.arange(32), nb))
    assert (flags == 1).all()


def atomic_cas_u64(k):
    x = _i32(128, 0, 1000)
    slots, last, swaps = np.zeros(8, np.int64), np.zeros(1, np.uint64), np.zeros(1, np.int32)
    k.launch(grid=(1,), block=(128,), args=[x, slots, last, swaps])
    ref = [max([i for i in range(128) if x[i] % 8 == s], default=-1) for s in range(8)]
    np.testing.assert_array_equal(slots, ref)
    assert last[0] == 127 << 33 and swaps[0] == 1


# ----------------------------------------------------------------------------- wmma
def _f16(*shape):
    return rng.integers(-8, 9, shape).astype(np.float16) / np.float16(4)  # exact products and sums


def wmma_f16_f32_16x16x16(k):
    a, b, c = _f16(16, 16), _f16(16, 16), _f32(16, 16)
    d = np.zeros((16, 16), np.float32)
    k.launch(grid=(1,), block=(32,), args=[a, b.T.copy(), c, d])  # b is stored column-major
    np.testing.assert_allclose(d, a.astype(np.float32) @ b.astype(np.float32) + c, rtol=1e-6, atol=1e-6)


def wmma_f16_f16_32x8x16(k):
    a, b = _f16(32, 16), _f16(16, 8)
    d = np.zeros(32 * 8, np.float16)
    k.launch(grid=(1,), block=(32,), args=[a, b, d])
    ref = (0.5 * (a.astype(np.float32) @ b.astype(np.float32))).astype(np.float16)
    np.testing.assert_array_equal(d.reshape(8, 32).T, ref)  # stored column-major


def _bf16(x):
    """float32 -> bfloat16 bits (round to nearest even) and the float32 values they hold."""
    u = np.asarray(x, np.float32).view(np.uint32)
    bits = ((u + 0x7FFF + ((u >> 16) & 1)) >> 16).astype(np.uint16)
    return bits, (bits.astype(np.uint32) << 16).view(np.float32)


def wmma_bf16_8x32x16(k):
    (ab, af), (bb, bf) = _bf16(_f32(8, 16)), _bf16(_f32(16, 32))
    d = np.zeros((8, 32), np.float32)
    k.launch(grid=(1,), block=(32,), args=[ab, bb.T.copy(), d])
    np.testing.assert_allclose(d, af.astype(np.float64) @ bf, rtol=1e-5, atol=1e-5)


def _tf32(x):
    u = np.asarray(x, np.float32).view(np.uint32)
    return ((u + 0x1000) & 0xFFFFE000).view(np.float32)  # round half away from zero to 10 mantissa bits


def wmma_tf32_16x16x8(k):
    K = 32
    a, b = _f32(16, K), _f32(K, 16)
    d = np.zeros((16, 16), np.float32)
    k.launch(grid=(1,), block=(32,), args=[a, b, d, np.int32(K)])
    np.testing.assert_allclose(d, _tf32(a).astype(np.float64) @ _tf32(b), rtol=1e-4, atol=1e-4)


def wmma_u8_s32_16x16x16(k):
    a, b = rng.integers(0, 256, (16, 16)).astype(np.uint8), rng.integers(0, 256, (16, 16)).astype(np.uint8)
    d = np.zeros((16, 16), np.int32)
    k.launch(grid=(1,), block=(32,), args=[a, b.T.copy(), d])
    np.testing.assert_array_equal(d, a.astype(np.int64) @ b.astype(np.int64) + 1000)


def wmma_gemm_4warps(k):
    M, N, K = 64, 32, 48
    a, b = _f16(M, K), _f16(K, N)
    c = np.zeros((M, N), np.float32)
    k.launch(grid=(N // 32, M // 32), block=(128,), args=[a, b, c, np.int32(M), np.int32(N), np.int32(K)])
    np.testing.assert_allclose(c, a.astype(np.float32) @ b.astype(np.float32), rtol=1e-6, atol=1e-6)


# ----------------------------------------------------------------------------- DeepEP-style asm
def ep_copy_nc(k):
    n = 1000
    x = rng.integers(-2**31, 2**31, (n, 4)).astype(np.int32)
    out, sin, sout = np.zeros_like(x), _i32(100), np.zeros(100, np.int32)
    k.launch(grid=(3,), block=(128,), args=[x, out, np.int32(n), sin, sout, np.int32(100)])
    np.testing.assert_array_equal(out, x)
    np.testing.assert_array_equal(sout, sin)


def ep_channel_handoff(k):
    nb = 2
    x = _i32(nb * 32 * 4).reshape(nb * 32, 4)
    buf = np.zeros_like(x)
    tail, head, ack = (np.zeros(nb, np.int32) for _ in range(3))
    out, second = np.zeros(nb * 32, np.int32), np.zeros(nb * 32, np.int32)
    k.launch(grid=(nb,), block=(64,), args=[x, buf, tail, head, ack, out, second], options={"watchdog_s": WATCHDOG_S})
    np.testing.assert_array_equal(out, x.sum(1) + np.tile(np.arange(32), nb))
    np.testing.assert_array_equal(second, x[:, 0] * 2)
    assert (tail == 32).all() and (head == 1).all() and (ack == 7).all()


def ep_ticket_lock(k):
    nb, bs = 2, 128
    nw = nb * bs // 32
    counter, lock, count = (np.zeros(1, np.int32) for _ in range(3))
    log, tickets, seen = np.full(nw, -1, np.int32), np.full(nw, -1, np.int32), np.zeros(nb * bs, np.int32)
    k.launch(grid=(nb,), block=(bs,), args=[counter, lock, log, count, tickets, seen],
             options={"watchdog_s": WATCHDOG_S})
    assert counter[0] == nw and count[0] == nw and lock[0] == 0
    np.testing.assert_array_equal(np.sort(log), np.arange(nw))
    np.testing.assert_array_equal(np.sort(tickets), np.arange(nw))
    assert (seen == 5).all()


# ----------------------------------------------------------------------------- DeepGEMM-style sm_90a sync
def _gemm_sync(k):
    ntiles = 6
    x, scale = _f32(ntiles * 256), _f32(ntiles)
    out = np.zeros_like(x)
    k.launch(grid=(2,), block=(96,), args=[x, scale, out, np.int32(x.size)], options={"watchdog_s": WATCHDOG_S})
    # -O3 contracts x * scale + 1 into one fma: compare within a rounding
    np.testing.assert_allclose(out, x * np.repeat(scale, 256) + np.float32(1), rtol=2e-7, atol=2e-7)


def gemm_sync_labeled_wait(k):
    _gemm_sync(k)


def gemm_sync_loop_wait(k):
    _gemm_sync(k)


# ----------------------------------------------------------------------------- warpSize
def _softmax(x):
    e = np.exp(x - x.max(1, keepdims=True))
    return e / e.sum(1, keepdims=True)


def warp_online_softmax(k):
    rows, cols = 6, 100
    x, out = _f32(rows, cols), np.zeros((rows, cols), np.float32)
    k.launch(grid=(2,), block=(128,), args=[x, out, np.int32(rows), np.int32(cols)])
    np.testing.assert_allclose(out, _softmax(x.astype(np.float64)), rtol=1e-5, atol=1e-7)


def warp_rmsnorm(k):
    rows, cols = 5, 70
    x, w, out = _f32(rows, cols), _f32(cols), np.zeros((rows, cols), np.float32)
    k.launch(grid=(3,), block=(64,), args=[x, w, out, np.int32(rows), np.int32(cols), np.float32(1e-5)])
    ref = x / np.sqrt((x.astype(np.float64) ** 2).mean(1, keepdims=True) + 1e-5) * w
    np.testing.assert_allclose(out, ref, rtol=1e-5, atol=1e-6)


def warp_ids_from_warpsize(k):
    ids, wsz = np.zeros(2 * 96, np.int32), np.zeros(1, np.int32)
    k.launch(grid=(2,), block=(96,), args=[ids, wsz])
    t = np.tile(np.arange(96), 2)
    np.testing.assert_array_equal(ids, (t // 32) * 1000 + t % 32)
    assert wsz[0] == 32


# ----------------------------------------------------------------------------- JIT templates (NVRTC)
def jit_gemv_f32_relu(k):
    rows, cols = 10, 300
    W, x, y = _f32(rows, cols), _f32(cols), np.zeros(rows, np.float32)
    k.launch(grid=(3,), block=(128,), args=[W, x, y, np.int32(rows), np.int32(cols)])
    np.testing.assert_allclose(y, np.maximum(W.astype(np.float64) @ x, 0), rtol=1e-5, atol=1e-5)


def jit_gemv_f64_bias(k):
    rows, cols = 9, 130
    W, x, bias = rng.standard_normal((rows, cols)), rng.standard_normal(cols), rng.standard_normal(rows)
    y = np.zeros(rows)
    k.launch(grid=(2,), block=(256,), args=[W, x, bias, y, np.int32(rows), np.int32(cols)])
    np.testing.assert_allclose(y, W @ x + bias, rtol=1e-12, atol=1e-12)


def _mix64(a, b, c, shift):
    h = a ^ (b.astype(np.uint64) << np.uint64(shift))
    h = h * np.uint64(0x9E3779B97F4A7C15)
    return h ^ (h >> np.uint64(29)) ^ c.astype(np.int64).astype(np.uint64)


def jit_hash_calls(k):
    n = 200
    x = rng.integers(0, 2**63, n, dtype=np.uint64)
    out = np.zeros(n, np.uint64)
    k.launch(grid=(2,), block=(128,), args=[x, out, np.int32(n)])
    i = np.arange(n)
    with np.errstate(over="ignore"):
        ref = _mix64(x, i.astype(np.uint32), -i, 7) ^ _mix64(x + np.uint64(1), (2 * i).astype(np.uint32), i, 13)
    np.testing.assert_array_equal(out, ref)


def jit_tile_sum_64(k):
    x = _i32(3 * 64)
    out = np.zeros_like(x)
    k.launch(grid=(3,), block=(64,), args=[x, out])
    np.testing.assert_array_equal(out, np.repeat(x.reshape(3, 64).sum(1), 64))


# ----------------------------------------------------------------------------- CUB
def cub_block_reduce_scan(k):
    nb = 3
    x = _i32(nb * 512)
    sums, maxs, totals = (np.zeros(nb, np.int32) for _ in range(3))
    excl, incl = np.zeros_like(x), np.zeros_like(x)
    k.launch(grid=(nb,), block=(128,), args=[x, sums, maxs, excl, incl, totals])
    xb = x.reshape(nb, 512)
    np.testing.assert_array_equal(sums, xb.sum(1))
    np.testing.assert_array_equal(maxs, xb.max(1))
    np.testing.assert_array_equal(totals, xb.sum(1))
    np.testing.assert_array_equal(incl.reshape(nb, 512), np.cumsum(xb, 1))
    np.testing.assert_array_equal(excl.reshape(nb, 512), np.cumsum(xb, 1) - xb)


def cub_warp_reduce_scan(k):
    xf, xi = _f32(128), _i32(128)
    wsum, wmin = np.zeros(4, np.float32), np.zeros(4, np.float32)
    wscan, wexcl = np.zeros(128, np.int32), np.zeros(128, np.int32)
    k.launch(grid=(2,), block=(64,), args=[xf, xi, wsum, wmin, wscan, wexcl])
    np.testing.assert_allclose(wsum, xf.reshape(4, 32).sum(1), rtol=1e-5, atol=1e-5)
    np.testing.assert_array_equal(wmin, xf.reshape(4, 32).min(1))
    c = np.cumsum(xi.reshape(4, 32), 1)
    np.testing.assert_array_equal(wscan, c.reshape(-1))
    np.testing.assert_array_equal(wexcl, (c - xi.reshape(4, 32)).reshape(-1))


def cub_block_radix_sort(k):
    nb = 2
    keys = rng.permutation(2**20)[: nb * 256].astype(np.uint32)
    vals = (keys.astype(np.int64) * 3 - 7).astype(np.int32)
    desc = np.zeros_like(keys)
    k.launch(grid=(nb,), block=(64,), args=[keys0 := keys.copy(), vals, desc])
    ref = np.sort(keys.reshape(nb, 256), 1)
    np.testing.assert_array_equal(keys0.reshape(nb, 256), ref)
    np.testing.assert_array_equal(vals, (keys0.astype(np.int64) * 3 - 7).astype(np.int32))
    np.testing.assert_array_equal(desc.reshape(nb, 256), ref[:, ::-1])


# ----------------------------------------------------------------------------- the table
SM80 = ("sm_80.O3", "sm_80.G")  # sm_90a -O3 builds differ little from sm_80's: run where they do (libcu++)
FILES = {  # corpus stem -> (flavors, kernels)
    "cute_style_tiles": (SM80, [cute_transpose_32x32, cute_layout_copy_16x16, cute_swizzled_copy_u16,
                                cute_cluster_barrier_two_waits]),
    "coop_groups": ((*SM80, "nvrtc:sm_80"), [cg_tile_reduce, cg_tile_votes, cg_coalesced_compact,
                                             cg_coalesced_reduce, cg_grid_sync_shift]),
    "libcu_pipeline_barrier": (("sm_80.O3", "sm_90a.O3", "nvrtc:sm_80"),
                               [pipe_thread_double_buffer, pipe_block_stages, barrier_memcpy_reverse,
                                barrier_split_arrive]),
    "libcu_atomics": (("sm_80.O3", "sm_90a.O3", "nvrtc:sm_80"),
                      [atomic_ref_mix, atomic_last_block_sum, atomic_flag_handoff, atomic_cas_u64]),
    "wmma_fragments": (SM80, [wmma_f16_f32_16x16x16, wmma_f16_f16_32x8x16, wmma_bf16_8x32x16, wmma_tf32_16x16x8,
                              wmma_u8_s32_16x16x16, wmma_gemm_4warps]),
    "ep_style_asm": ((*SM80, "sm_80.lineinfo", "nvrtc:sm_90a"), [ep_copy_nc, ep_channel_handoff, ep_ticket_lock]),
    "gemm_style_sync_sm90a": (("sm_90a.O3", "sm_90a.G", "nvrtc:sm_90a"),
                              [gemm_sync_labeled_wait, gemm_sync_loop_wait]),
    "warp_softmax_warpsize": ((*SM80, "sm_90a.O3"), [warp_online_softmax, warp_rmsnorm, warp_ids_from_warpsize]),
    "cub_block_ops": (("sm_80.O3", "sm_90a.O3"), [cub_block_reduce_scan, cub_warp_reduce_scan,
                                                   cub_block_radix_sort]),
    "jit_templates": ((*SM80, "sm_80.lineinfo", "nvrtc:sm_80", "nvrtc:sm_90a"),
                      [jit_gemv_f32_relu, jit_gemv_f64_bias, jit_hash_calls, jit_tile_sum_64]),
}


def corpus_path(stem: str, flavor: str) -> str:
    """The corpus file (relative to tests/corpus/) of a stem and flavor."""
    if flavor.startswith("nvrtc:"):
        return f"ptx/nvrtc/{stem}.{flavor.split(':', 1)[1]}.ptx"
    return f"ptx/cuda/{stem}.{flavor}.ptx"


CASES = []
for _stem, (_flavors, _fns) in FILES.items():
    for _flavor in _flavors:
        _path = corpus_path(_stem, _flavor)
        if not (CORPUS / _path).exists():  # -G builds over 400 KB are left out of the corpus
            continue
        for _fn in _fns:  # each check is named after the kernel it launches
            CASES.append(pytest.param(_stem, _flavor, _fn.__name__, _fn, id=f"{_stem}.{_flavor}.{_fn.__name__}",
                                      marks=xfail_marks(_path, "emulate", _fn.__name__)))


@pytest.mark.parametrize(("stem", "flavor", "kernel", "check"), CASES)
def test_compat_kernel_matches_numpy(stem, flavor, kernel, check):
    check(corpus_module(stem, flavor).kernel(kernel))


def test_every_compat_kernel_is_covered():
    """Each kernel of each compatibility source has a reference check here."""
    import json

    manifest = json.loads((CORPUS / "manifest.json").read_text())["files"]
    for stem in FILES:
        kernels = {k for e in manifest if e["source"] == f"src/cuda/{stem}.cu" for k in e["kernels"]}
        checked = {c.values[2] for c in CASES if c.values[0] == stem}
        assert kernels and kernels == checked, (stem, kernels ^ checked)
