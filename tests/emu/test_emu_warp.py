"""Warp vote, shuffle (all modes and widths), match, redux, activemask with full and partial masks."""

import numpy as np
import pytest
from emu_corpus import corpus_module

FLAVORS = ["sm_80.O3", "sm_80.G", "sm_90a.O3"]
WARP_OPS = [*FLAVORS, "nvrtc:sm_80", "nvrtc:sm_90a"]  # warp_ops.cu also has NVRTC builds
rng = np.random.default_rng(3)


def shfl(v, src, lane, width):
    """CUDA __shfl_*_sync reference on one warp: src lane index per lane (None -> own value)."""
    return np.array([v[s] if s is not None else v[i] for i, s in enumerate(src)], np.uint32)


def ref_vote_shuffle(v):
    out = np.zeros((32, 16), np.uint32)
    lane = np.arange(32)
    bits = lambda p: np.uint32(sum(1 << i for i in range(32) if p[i]))  # noqa: E731
    out[:, 0] = bits(v & 1)
    out[:, 1] = np.all(v != 0)
    out[:, 2] = np.any(v > 1000)
    out[:, 3] = v[0]
    out[:, 4] = v[(lane * 7) & 31]
    out[:, 5] = [v[i - 3] if i >= 3 else v[i] for i in lane]
    out[:, 6] = [v[i + 5] if i + 5 < 32 else v[i] for i in lane]
    out[:, 7] = v[lane ^ 9]
    out[:, 8] = [v[(i // 8) * 8 + ((i + 1) % 8)] for i in lane]
    out[:, 9] = [v[i - 2] if i % 16 >= 2 else v[i] for i in lane]
    out[:, 10] = [v[i + 1] if i % 4 + 1 < 4 else v[i] for i in lane]
    out[:, 11] = v[lane ^ 3]
    f = (v.view(np.float32) * np.float32(2)).view(np.uint32)
    out[:, 12] = f[31 - lane]
    src = [i + 16 if i + 16 < 32 else i for i in lane]
    out[:, 13] = [((int(v[s]) << 32 | s) >> 16) & 0xFFFFFFFF for s in src]
    out[:, 14] = 0xFFFFFFFF
    out[:, 15] = bits(lane < (v & 31))
    return out


@pytest.mark.parametrize("flavor", WARP_OPS)
def test_vote_shuffle(flavor):
    m = corpus_module("warp_ops", flavor)
    n = 128
    v = rng.integers(0, 2000, n).astype(np.uint32)
    v[32:64] = rng.integers(1, 500, 32)  # a warp where all are non-zero and none > 1000
    out = np.zeros((n, 16), np.uint32)
    m.kernel("warp_vote_shuffle").launch(grid=(2,), block=(64,), args=[v, out])
    for w in range(n // 32):
        np.testing.assert_array_equal(out[32 * w: 32 * w + 32], ref_vote_shuffle(v[32 * w: 32 * w + 32]),
                                      err_msg=f"warp {w}")


@pytest.mark.parametrize("flavor", WARP_OPS)
def test_match_redux(flavor):
    m = corpus_module("warp_ops", flavor)
    n = 64
    v = rng.integers(0, 2**32, n, dtype=np.uint64).astype(np.uint32)
    v[32:] &= 0x7FFFFFFF  # second warp: all top bits equal -> match.all succeeds
    out = np.zeros((n, 10), np.uint32)
    m.kernel("warp_match_redux").launch(grid=(1,), block=(64,), args=[v, out])
    for w in range(2):
        x = v[32 * w: 32 * w + 32]
        o = out[32 * w: 32 * w + 32]
        lanes = np.arange(32)
        for i in range(32):
            assert o[i, 0] == sum(1 << j for j in lanes if x[j] & 7 == x[i] & 7)
            assert o[i, 3] == sum(1 << j for j in lanes if x[j] % 3 == x[i] % 3)
        same = np.all((x >> 31) == (x[0] >> 31))
        assert (o[:, 1] == (0xFFFFFFFF if same else 0)).all() and (o[:, 2] == int(same)).all()
        assert (o[:, 4] == np.uint32(x.astype(np.uint64).sum() & 0xFFFFFFFF)).all()
        assert (o[:, 5] == x.min()).all() and (o[:, 6] == x.max()).all()
        assert (o[:, 7] == x.view(np.int32).min().view(np.uint32)).all()
        assert (o[:, 8] == (np.bitwise_and.reduce(x) ^ np.bitwise_or.reduce(x))).all()
        assert (o[:, 9] == np.bitwise_xor.reduce(x)).all()


@pytest.mark.parametrize("flavor", WARP_OPS)
def test_divergent_and_partial(flavor):
    m = corpus_module("warp_ops", flavor)
    v = rng.integers(0, 20, 32).astype(np.uint32)
    out = np.zeros((32, 4), np.uint32)
    m.kernel("warp_divergent").launch(grid=1, block=32, args=[v, out])
    odd, even = np.arange(1, 32, 2), np.arange(0, 32, 2)
    assert (out[odd, 0] == 0xAAAAAAAA).all() and (out[even, 0] == 0x55555555).all()
    assert (out[odd, 1] == v[1]).all() and (out[odd, 2] == v[odd].sum()).all()
    np.testing.assert_array_equal(out[even, 1], v[even ^ 2])
    assert (out[even, 2] == sum(1 << int(i) for i in even if v[i] > 10)).all()
    assert (out[:, 3] == 0xFFFFFFFF).all()
    x = rng.integers(-5, 5, 64).astype(np.int32)
    o2 = np.zeros(128, np.uint32)
    m.kernel("warp_partial_exit").launch(grid=1, block=64, args=[x, o2, np.int32(45)])
    mask = (1 << 13) - 1  # lanes 32..44 of warp 1 stay
    assert (o2[0:64:2] == 0xFFFFFFFF).all() and (o2[64:90:2] == mask).all()
    assert o2[1] == sum(1 << i for i in range(32) if x[i] < 0)
    assert o2[65] == sum(1 << (i - 32) for i in range(32, 45) if x[i] < 0)


@pytest.mark.parametrize("flavor", FLAVORS)
def test_cooperative_groups_tiles(flavor):
    """cooperative_groups tiles of 8/16/32 (-G builds read %reserved_smem_offset_1 for the tile metadata)."""
    m = corpus_module("memory_ordering", flavor)
    v = rng.integers(-100, 100, 2 * 128).astype(np.int32)
    out = np.zeros((256, 3), np.int32)
    m.kernel("cooperative_tiles").launch(grid=(2,), block=(128,), args=[v, out])
    x = v.reshape(2, 128)
    s8 = np.repeat(x.reshape(2, 16, 8).sum(2), 8, axis=1)
    m16 = np.repeat(x.reshape(2, 8, 16).max(2), 16, axis=1)
    inc = np.cumsum(x, axis=1)  # warp scans plus the totals of earlier warps = block inclusive scan
    np.testing.assert_array_equal(out[:, 0], s8.reshape(-1))
    np.testing.assert_array_equal(out[:, 1], m16.reshape(-1))
    np.testing.assert_array_equal(out[:, 2], inc.reshape(-1))


def test_movmatrix_transposes_the_warp_matrix():
    import ptxforge as pf

    src = """.version 8.0
.target sm_90a
.address_size 64
.visible .entry k(.param .u64 p)
{
    .reg .b32 %r<3>;
    .reg .b64 %rd<3>;
    ld.param.u64 %rd1, [p];
    mov.u32 %r1, %tid.x;
    mul.wide.u32 %rd2, %r1, 4;
    add.s64 %rd1, %rd1, %rd2;
    ld.global.b32 %r2, [%rd1];
    movmatrix.sync.aligned.m8n8.trans.b16 %r2, %r2;
    st.global.b32 [%rd1], %r2;
    ret;
}
"""
    A = np.arange(64, dtype=np.uint16).reshape(8, 8) * 3 + 1  # row r, column c
    regs = A.reshape(8, 4, 2).reshape(32, 2)  # lane l: row l >> 2, columns 2 * (l % 4) + {0, 1}
    data = (regs[:, 0].astype(np.uint32) | (regs[:, 1].astype(np.uint32) << 16)).astype(np.uint32)
    pf.parse(src).kernel("k").launch(grid=(1,), block=(32,), args=[data], device="emu")
    got = np.stack([data & 0xFFFF, data >> 16], 1).astype(np.uint16).reshape(8, 8)
    np.testing.assert_array_equal(got, A.T)


def test_createpolicy_gives_the_cutlass_hint_values():
    import ptxforge as pf

    src = """.version 8.0
.target sm_90a
.address_size 64
.visible .entry k(.param .u64 p)
{
    .reg .b64 %rd<5>;
    ld.param.u64 %rd1, [p];
    createpolicy.fractional.L2::evict_last.b64 %rd2, 1.0;
    createpolicy.fractional.L2::evict_first.b64 %rd3;
    ld.global.L2::cache_hint.b64 %rd4, [%rd1], %rd2;
    st.global.v2.b64 [%rd1+16], {%rd2, %rd3};
    ret;
}
"""
    out = np.zeros(4, np.uint64)
    pf.parse(src).kernel("k").launch(grid=(1,), block=(1,), args=[out], device="emu")
    assert out[2:].tolist() == [0x14F0000000000000, 0x12F0000000000000]
