"""mma.sync fragments and numerics; ldmatrix / stmatrix / movmatrix element mappings.

Layouts are checked against a second source: the CuTe (thread, value) -> coordinate layouts NVIDIA
publishes in CUTLASS (include/cute/atom/mma_traits_sm80.hpp, mma_traits_sm89.hpp), evaluated here by a
small independent layout function.
"""

from __future__ import annotations

from fractions import Fraction

import ml_dtypes
import numpy as np
import pytest

from ptxforge.emu.semantics import mma

pytestmark = pytest.mark.filterwarnings("ignore::RuntimeWarning")


def cute(shape, stride, thread_shape=(4, 8), thread_stride=None):
    """A CuTe layout ((4,8),(v...)):((ts...),(vs...)) -> flat index table [32, nvalues]."""
    def colex(idx, shp):
        out = []
        for s in shp:
            out.append(idx % s)
            idx //= s
        return out
    nv = int(np.prod(shape))
    tab = np.zeros((32, nv), np.int64)
    for lane in range(32):
        tc = colex(lane, thread_shape)
        for v in range(nv):
            vc = colex(v, shape)
            tab[lane, v] = (sum(c * s for c, s in zip(tc, thread_stride, strict=True))
                            + sum(c * s for c, s in zip(vc, stride, strict=True)))
    return tab


# (shape, operand, type) -> (CuTe value shape, value stride, thread stride, rows of the flat column-major matrix)
CUTE = {
    ("m16n8k16", "a", "f16"): ((2, 2, 2), (16, 8, 128), (32, 1), 16),
    ("m16n8k16", "b", "f16"): ((2, 2), (8, 64), (16, 1), 8),
    ("m16n8k8", "a", "f16"): ((2, 2), (16, 8), (32, 1), 16),
    ("m16n8k8", "b", "f16"): ((2,), (8,), (16, 1), 8),
    ("m16n8k8", "a", "tf32"): ((2, 2), (8, 64), (16, 1), 16),
    ("m16n8k8", "b", "tf32"): ((2,), (32,), (8, 1), 8),
    ("m16n8k4", "a", "tf32"): ((2,), (8,), (16, 1), 16),
    ("m16n8k4", "b", "tf32"): ((1,), (0,), (8, 1), 8),
    ("m16n8k16", "a", "s8"): ((4, 2), (16, 8), (64, 1), 16),
    ("m16n8k16", "b", "s8"): ((4,), (8,), (32, 1), 8),
    ("m16n8k32", "a", "s8"): ((4, 2, 2), (16, 8, 256), (64, 1), 16),
    ("m16n8k32", "b", "s8"): ((4, 2), (8, 128), (32, 1), 8),
    ("m16n8k32", "a", "e4m3"): ((4, 2, 2), (16, 8, 256), (64, 1), 16),
    ("m16n8k32", "b", "e4m3"): ((4, 2), (8, 128), (32, 1), 8),
    ("m8n8k4", "a", "f64"): ((1,), (0,), (8, 1), 8),
    ("m8n8k4", "b", "f64"): ((1,), (0,), (8, 1), 8),
    ("m16n8k16", "c", "f32"): ((2, 2), (16, 8), (32, 1), 16),
    ("m8n8k4", "c", "f64"): ((2,), (8,), (16, 1), 8),
    ("m8n8k16", "a", "s8"): ((4,), (8,), (32, 1), 8),
    ("m8n8k16", "b", "s8"): ((4,), (8,), (32, 1), 8),
    ("m8n8k16", "c", "s32"): ((2,), (8,), (16, 1), 8),
}


@pytest.mark.parametrize("key", list(CUTE))
def test_fragment_layout_matches_cute(key):
    shape, operand, ty = key
    vshape, vstride, tstride, nrows = CUTE[key]
    flat = cute(vshape, vstride, thread_stride=tstride)
    r, c = mma.fragment_coords(shape, operand, ty)
    # CuTe indexes A as (M, K), B as (N, K), C as (M, N), all column-major
    if operand == "b":
        k, n = r, c
        assert np.array_equal(flat, n + nrows * k)
    else:
        assert np.array_equal(flat, r + nrows * c)


def _frag(shape, op, ty, codes):
    return mma.pack_fragment(shape, op, ty, codes)


CASES = [
    ("m16n8k16", "f16", "f32", np.float16), ("m16n8k16", "bf16", "f32", ml_dtypes.bfloat16),
    ("m16n8k8", "f16", "f32", np.float16), ("m16n8k8", "bf16", "f32", ml_dtypes.bfloat16),
    ("m16n8k16", "f16", "f16", np.float16), ("m16n8k8", "tf32", "f32", np.float32),
    ("m16n8k4", "tf32", "f32", np.float32), ("m16n8k32", "e4m3", "f32", ml_dtypes.float8_e4m3fn),
    ("m16n8k32", "e5m2", "f32", ml_dtypes.float8_e5m2),
]


@pytest.mark.parametrize("shape,ab,acc,dt", CASES)
def test_mma_float_matches_matmul(shape, ab, acc, dt):
    m, n, k = {"m16n8k16": (16, 8, 16), "m16n8k8": (16, 8, 8), "m16n8k4": (16, 8, 4),
               "m16n8k32": (16, 8, 32)}[shape]
    rng = np.random.default_rng(0)
    A = (rng.standard_normal((m, k)) * 2).astype(dt)
    B = (rng.standard_normal((k, n)) * 2).astype(dt)
    C = rng.standard_normal((m, n)).astype(np.float32 if acc == "f32" else np.float16)
    ub = {1: np.uint8, 2: np.uint16, 4: np.uint32}
    a = _frag(shape, "a", ab, A.view(ub[A.itemsize]))
    b = _frag(shape, "b", ab, B.view(ub[B.itemsize]))
    c = _frag(shape, "c", acc, C.view(ub[C.itemsize]))
    assert a.shape[0] == 32 and a.dtype == np.uint32
    d = mma.mma_sync(shape, a, b, c, ab, ab, acc, acc)
    D = mma.unpack_fragment(shape, "d", acc, d)
    Af, Bf = A.astype(np.float64), B.astype(np.float64)
    if ab == "tf32":  # the tensor core reads the upper 19 bits of the registers
        Af = (A.view(np.uint32) & np.uint32(0xFFFFE000)).view(np.float32).astype(np.float64)
        Bf = (B.view(np.uint32) & np.uint32(0xFFFFE000)).view(np.float32).astype(np.float64)
    exact = Af @ Bf + C.astype(np.float64)
    if acc == "f32" and ab in ("f16", "bf16", "tf32"):  # the tensor cores' summation, fitted to an H200
        ref = mma.dot_tensor_core(Af, Bf, C.astype(np.float64)).astype(np.uint32).view(np.float32)
        terms = np.abs(Af) @ np.abs(Bf) + np.abs(C.astype(np.float64))
        assert np.all(np.abs(ref - exact) <= 2.0**-21 * terms)  # truncation error: relative to the terms
    else:
        ref = exact.astype(np.float32 if acc == "f32" else np.float16)
    assert np.array_equal(D.astype(ref.dtype), ref)


@pytest.mark.parametrize("shape", ["m16n8k16", "m16n8k32", "m8n8k16"])
@pytest.mark.parametrize("atype,btype", [("s8", "s8"), ("u8", "s8"), ("u8", "u8")])
def test_mma_int8(shape, atype, btype):
    m, n, k = int(shape[1:].split("n")[0]), 8, int(shape.split("k")[1])
    rng = np.random.default_rng(1)
    lo = lambda t: -128 if t == "s8" else 0  # noqa: E731
    hi = lambda t: 128 if t == "s8" else 256  # noqa: E731
    A = rng.integers(lo(atype), hi(atype), (m, k))
    B = rng.integers(lo(btype), hi(btype), (k, n))
    C = rng.integers(-(2**31), 2**31, (m, n))
    C[0, 0] = 2**31 - 1  # overflows: wraps, or saturates with .satfinite
    a = _frag(shape, "a", atype, (A & 0xFF).astype(np.uint64))
    b = _frag(shape, "b", btype, (B & 0xFF).astype(np.uint64))
    c = _frag(shape, "c", "s32", (C & 0xFFFFFFFF).astype(np.uint64))
    exact = A @ B + C
    for sat in (False, True):
        d = mma.mma_sync(shape, a, b, c, atype, btype, "s32", "s32", satfinite=sat)
        D = mma.unpack_fragment(shape, "d", "s32", d)
        want = np.clip(exact, -(2**31), 2**31 - 1) if sat else ((exact + 2**31) % 2**32) - 2**31
        assert np.array_equal(D, want)


@pytest.mark.parametrize("shape", ["m8n8k4", "m16n8k4", "m16n8k8", "m16n8k16"])
def test_mma_f64_is_fma_chain(shape):
    m, n, k = int(shape[1:].split("n")[0]), 8, int(shape.split("k")[1])
    rng = np.random.default_rng(2)
    A, B, C = rng.standard_normal((m, k)), rng.standard_normal((k, n)), rng.standard_normal((m, n))
    a = mma.pack_fragment(shape, "a", "f64", A.view(np.uint64))
    b = mma.pack_fragment(shape, "b", "f64", B.view(np.uint64))
    c = mma.pack_fragment(shape, "c", "f64", C.view(np.uint64))
    assert a.dtype == np.uint64 and c.shape == (32, 2 if m == 8 else 4)
    assert a.shape[1] == m * k // 32
    # every element appears exactly once in the fragments
    ra, ca = mma.fragment_coords(shape, "a", "f64")
    assert len(set(zip(ra.ravel().tolist(), ca.ravel().tolist(), strict=True))) == m * k
    D = mma.unpack_fragment(shape, "d", "f64", mma.mma_sync(shape, a, b, c, "f64", "f64", "f64"))
    for i in range(m):
        for j in range(n):
            acc = C[i, j]
            for kk in range(k):  # one correctly rounded fma per k step
                acc = float(Fraction(A[i, kk]) * Fraction(B[kk, j]) + Fraction(acc))
            assert D[i, j] == acc


def test_ldmatrix_stmatrix_movmatrix():
    rng = np.random.default_rng(3)
    for num in (1, 2, 4):
        mats = rng.integers(0, 1 << 16, (num, 8, 8)).astype(np.uint16)
        lanes = mma.ldmatrix_address_lanes(num)
        assert lanes.shape == (num, 8) and lanes[num - 1, 7] == 8 * num - 1
        for trans in (False, True):
            regs = mma.ldmatrix(mats, trans)
            assert regs.shape == (32, num)
            for lane in range(32):
                for j in range(num):
                    lo, hi = int(regs[lane, j]) & 0xFFFF, int(regs[lane, j]) >> 16
                    r, c = lane // 4, 2 * (lane % 4)
                    src = mats[j].T if trans else mats[j]
                    assert (lo, hi) == (src[r, c], src[r, c + 1])
            assert np.array_equal(mma.stmatrix(regs, trans), mats)
    m = rng.integers(0, 1 << 16, (1, 8, 8)).astype(np.uint16)
    frag = mma.ldmatrix(m)[:, 0]
    assert np.array_equal(mma.movmatrix(frag), mma.ldmatrix(m[:, :, :].transpose(0, 2, 1).copy())[:, 0])


def test_ldmatrix_fragment_feeds_mma_a():
    # four 8x8 b16 tiles loaded by ldmatrix.x4 form exactly the m16n8k16 A fragment (the usual nvcc/Triton
    # pattern: tiles (rows 0-7, k 0-7), (rows 8-15, k 0-7), (rows 0-7, k 8-15), (rows 8-15, k 8-15))
    rng = np.random.default_rng(4)
    A = rng.integers(0, 1 << 16, (16, 16)).astype(np.uint16)
    tiles = np.stack([A[0:8, 0:8], A[8:16, 0:8], A[0:8, 8:16], A[8:16, 8:16]])
    assert np.array_equal(mma.ldmatrix(tiles), mma.pack_fragment("m16n8k16", "a", "f16", A))


def test_batched_warps_match_single_warp_calls():
    rng = np.random.default_rng(6)
    w = 5
    A = rng.standard_normal((w, 16, 16)).astype(np.float16)
    B = rng.standard_normal((w, 16, 8)).astype(np.float16)
    C = rng.standard_normal((w, 16, 8)).astype(np.float32)
    a = mma.pack_fragment("m16n8k16", "a", "f16", A.view(np.uint16))
    b = mma.pack_fragment("m16n8k16", "b", "f16", B.view(np.uint16))
    c = mma.pack_fragment("m16n8k16", "c", "f32", C.view(np.uint32))
    assert a.shape == (w, 32, 4)
    d = mma.mma_sync("m16n8k16", a, b, c, "f16", "f16", "f32", "f32")
    for i in range(w):
        assert np.array_equal(d[i], mma.mma_sync("m16n8k16", a[i], b[i], c[i], "f16", "f16", "f32", "f32"))
    tiles = rng.integers(0, 1 << 16, (w, 4, 8, 8)).astype(np.uint16)
    regs = mma.ldmatrix(tiles, trans=True)
    assert regs.shape == (w, 32, 4)
    assert np.array_equal(regs[2], mma.ldmatrix(tiles[2], trans=True))
    assert np.array_equal(mma.stmatrix(regs, trans=True), tiles)
    assert np.array_equal(mma.movmatrix(regs[..., 0])[3], mma.movmatrix(regs[3, :, 0]))


def test_mma_accumulation_follows_the_tensor_cores():
    """f16 -> f32 mma.sync sums as an H200 does (fitted bit for bit to recorded results): terms are aligned
    to the largest exponent and truncated 25 bits below it, and the sum is rounded toward zero."""
    A = np.zeros((16, 16), np.float16)
    B = np.zeros((16, 8), np.float16)
    A[0, :3] = [2048.0, 2.0 ** -24, -2048.0]  # 2**22 + 2**-48 - 2**22: the middle term is truncated away
    B[:3, 0] = [2048.0, 2.0 ** -24, 2048.0]
    A[1, :3] = [2.0 ** -12] * 3  # 1 + 3 * 2**-24: toward zero 1 + 2**-23 (round-to-nearest gives 1 + 2**-22)
    B[:3, 1] = [2.0 ** -12] * 3
    C = np.zeros((16, 8), np.float32)
    C[1, 1] = 1.0
    a = mma.pack_fragment("m16n8k16", "a", "f16", A.view(np.uint16))
    b = mma.pack_fragment("m16n8k16", "b", "f16", B.view(np.uint16))
    c = mma.pack_fragment("m16n8k16", "c", "f32", C.view(np.uint32))
    D = mma.unpack_fragment("m16n8k16", "d", "f32", mma.mma_sync("m16n8k16", a, b, c, "f16", "f16", "f32"))
    assert D[0, 0] == 0.0
    assert D[1, 1] == np.float32(1 + 2.0 ** -23)
    assert D[2, 0] == 0.0 and not np.signbit(D[2, 0])
    # f16 accumulators are still the exact sum rounded once (not yet fitted to hardware)
    c16 = mma.pack_fragment("m16n8k16", "c", "f16", np.zeros((16, 8), np.float16).view(np.uint16))
    D16 = mma.unpack_fragment("m16n8k16", "d", "f16", mma.mma_sync("m16n8k16", a, b, c16, "f16", "f16", "f16"))
    assert D16.view(np.float16)[0, 0] == np.float16(2.0 ** -48)
