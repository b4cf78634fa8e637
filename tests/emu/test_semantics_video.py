"""Video instructions against per-lane Python readings of the manual's pseudocode and the CUDA SIMD
intrinsics they implement (__vabsdiffu4, __vsadu4, __vadd2, __vcmpgeu4, ...)."""

from __future__ import annotations

import numpy as np

from ptxforge.emu.semantics import video


def _vals(n=200, seed=0):
    rng = np.random.default_rng(seed)
    v = rng.integers(0, 1 << 32, n, dtype=np.int64).astype(np.uint32)
    return np.concatenate([v, np.array([0, 0xFFFFFFFF, 0x80808080, 0x7F7F7F7F, 0x00FF00FF], np.uint32)])


def _bytes(x, signed=False):
    out = [(int(x) >> (8 * i)) & 0xFF for i in range(4)]
    return [b - 256 if signed and b >= 128 else b for b in out]


def _halves(x, signed=False):
    out = [(int(x) >> (16 * i)) & 0xFFFF for i in range(2)]
    return [h - 65536 if signed and h >= 32768 else h for h in out]


def test_vabsdiff4_is_vabsdiffu4_and_vsadu4():
    a, b = _vals(), _vals(seed=1)[::-1].copy()
    c = _vals(seed=2)
    got = video.simd("vabsdiff", a, b, c, 4)
    sad = video.simd("vabsdiff", a, b, np.zeros_like(a), 4, add=True)
    for x, y, g, s in zip(a, b, got, sad, strict=True):
        diffs = [abs(p - q) for p, q in zip(_bytes(x), _bytes(y), strict=True)]
        assert int(g) == sum(d << (8 * i) for i, d in enumerate(diffs))
        assert int(s) == sum(diffs)


def test_simd_ops_all_types_and_sat():
    a, b, c = _vals(seed=3), _vals(seed=4), _vals(seed=5)
    for n, split in ((4, _bytes), (2, _halves)):
        width = 32 // n
        for op in ("vadd", "vsub", "vavrg", "vabsdiff", "vmin", "vmax"):
            for ty in ("u32", "s32"):
                sg = ty == "s32"
                for sat in (False, True):
                    got = video.simd(op, a, b, c, n, dtype=ty, atype=ty, btype=ty, sat=sat)
                    for x, y, g in zip(a, b, got, strict=True):
                        exp = 0
                        for i, (p, q) in enumerate(zip(split(x, sg), split(y, sg), strict=True)):
                            t = {"vadd": p + q, "vsub": p - q, "vabsdiff": abs(p - q), "vmin": min(p, q),
                                 "vmax": max(p, q),
                                 "vavrg": (p + q + 1) >> 1 if p + q >= 0 else (p + q) >> 1}[op]
                            if sat:
                                lo, hi = (-(1 << (width - 1)), (1 << (width - 1)) - 1) if sg else (0, (1 << width) - 1)
                                t = max(lo, min(hi, t))
                            exp |= (t & ((1 << width) - 1)) << (width * i)
                        assert int(g) == exp, (op, n, ty, sat, hex(int(x)), hex(int(y)))


def test_simd_mask_selectors_and_vset():
    a = np.array([0x44332211], np.uint32)
    b = np.array([0x88776655], np.uint32)
    c = np.array([0xDDCCBBAA], np.uint32)
    # merge: only byte 0 and 2 come from the result, bytes 1 and 3 from c
    got = video.simd("vadd", a, b, c, 4, mask="b20")
    assert int(got[0]) == (0xDD << 24) | (((0x33 + 0x77) & 0xFF) << 16) | (0xBB << 8) | ((0x11 + 0x55) & 0xFF)
    # asel b0123 reverses a's bytes; bsel b4444 replicates b's byte 4 (b.byte0)
    got = video.simd("vsub", a, b, c, 4, asel="b0123", bsel="b4444", dtype="s32", atype="s32", btype="s32")
    exp = 0
    for i, p in enumerate([0x44, 0x33, 0x22, 0x11]):
        exp |= ((p - 0x55) & 0xFF) << (8 * i)
    assert int(got[0]) == exp
    ge = video.simd("vset", a, b, np.zeros_like(a), 4, cmp="lt")
    assert int(ge[0]) == 0x01010101  # the CUDA __vcmplt-style 0/1 bytes
    cnt = video.simd("vset", a, b, np.array([10], np.uint32), 4, cmp="lt", add=True)
    assert int(cnt[0]) == 14
    h = video.simd("vmax", np.array([0x8000FFFF], np.uint32), np.array([0x7FFF0001], np.uint32),
                   np.zeros(1, np.uint32), 2, dtype="s32", atype="s32", btype="s32", bsel="h32")
    assert int(h[0]) == 0x7FFF0001


def test_scalar_video():
    a = np.array([0x000000FF, 0xFFFFFF80, 0x7FFFFFFF], np.uint32)
    b = np.array([0x00000002, 0x00000001, 0x00000001], np.uint32)
    c = np.array([0x11223344] * 3, np.uint32)
    assert list(video.scalar("vadd", a, b)) == [0x101, 0xFFFFFF81, 0x80000000]
    assert list(video.scalar("vadd", a, b, dtype="s32", atype="s32", btype="s32", sat=True)) == \
        [0x101, 0xFFFFFF81, 0x7FFFFFFF]
    # byte selector on a (signed byte 0x80 = -128), saturating merge into byte 1 of c
    # (an H200 clamps the result read as unsigned, so the negative results saturate to 127)
    got = video.scalar("vsub", a, b, c, dtype="s32", atype="s32", btype="s32", sat=True, asel="b0", dsel="b1")
    assert [int(v) for v in got] == [0x11227F44, 0x11227F44, 0x11227F44]
    got = video.scalar("vadd", a, b, c, dtype="s32", atype="s32", btype="s32", asel="b0", dsel="b1")
    assert [int(v) for v in got] == [0x11220144, 0x11228144, 0x11220044]  # low byte moved into byte 1
    got = video.scalar("vadd", a, b, c, dsel="h1")
    assert [int(v) for v in got] == [0x00003344, 0xFFFF3344, 0x80003344]  # h1 keeps bits 31..16 in place
    got = video.scalar("vabsdiff", a, b, c, secop="add")
    assert [int(v) for v in got] == [(0xFD + 0x11223344) & 0xFFFFFFFF, (0xFFFFFF7F + 0x11223344) & 0xFFFFFFFF,
                                     (0x7FFFFFFE + 0x11223344) & 0xFFFFFFFF]
    assert list(video.scalar("vmin", a, b, c, secop="max", dtype="u32")) == [0x11223344] * 3
    assert list(video.vset(a, b, "gt")) == [1, 1, 1]
    assert list(video.vset(a, b, "gt", atype="s32", btype="s32")) == [1, 0, 1]
    sh = video.shift("vshl", a, np.array([4, 40, 1], np.uint32), mode="clamp", sat=True)
    assert list(sh) == [0xFF0, 0xFFFFFFFF, 0xFFFFFFFE]
    sh = video.shift("vshr", a, np.array([4, 36, 1], np.uint32), atype="s32", dtype="s32", mode="wrap")
    assert list(sh) == [0xF, 0xFFFFFFF8, 0x3FFFFFFF]
    m = video.vmad(np.array([3], np.uint32), np.array([5], np.uint32), np.array([7], np.uint32))
    assert int(m[0]) == 22
    m = video.vmad(np.array([3], np.uint32), np.array([5], np.uint32), np.array([7], np.uint32), neg_ab=True)
    assert int(m[0]) == (7 - 15) & 0xFFFFFFFF
    m = video.vmad(np.array([3], np.uint32), np.array([5], np.uint32), np.array([7], np.uint32), po=True,
                   scale="shr7")
    assert int(m[0]) == 0
    m = video.vmad(np.array([0xFFFF], np.uint32), np.array([0xFFFF], np.uint32), np.array([0], np.uint32),
                   asel="h0", bsel="h0", dtype="s32", atype="s32", btype="s32", sat=True)
    assert int(m[0]) == 1  # (-1) * (-1)
