"""Every integer intrinsic (nvcc lowers them to popc/clz/brev/prmt/shf/mul.hi/sad/dp4a/dp2a/bfe/bfi/lop3/
vabsdiff4 ...) against Python integer references, -O3 and -G."""

import numpy as np
import pytest
from emu_corpus import corpus_module

M32 = 0xFFFFFFFF


def s32(x):
    x &= M32
    return x - (1 << 32) if x >> 31 else x


def s8(x):
    x &= 0xFF
    return x - 256 if x >> 7 else x


def prmt(a, b, c):
    src = (b << 32) | a
    r = 0
    for i in range(4):
        sel = (c >> (4 * i)) & 0xF
        byte = (src >> (8 * (sel & 7))) & 0xFF
        if sel & 8:
            byte = 0xFF if byte & 0x80 else 0
        r |= byte << (8 * i)
    return r


def bytes4(x, signed):
    return [s8(x >> (8 * i)) if signed else (x >> (8 * i)) & 0xFF for i in range(4)]


def ref_row(a, b, c):
    o = {}
    o[0] = bin(a).count("1")
    o[1] = 32 - a.bit_length()
    o[2] = (a & -a).bit_length()
    o[3] = int(f"{a:032b}"[::-1], 2)
    o[4] = prmt(a, b, c & 0x7777)  # __byte_perm uses 3 selector bits per byte (no sign replication)
    sh = c & 31
    o[5] = ((((b << 32) | a) << sh) >> 32) & M32
    o[6] = (((b << 32) | a) >> sh) & M32
    shc = min(c, 32)
    o[7] = ((((b << 32) | a) << shc) >> 32) & M32
    o[8] = (((b << 32) | a) >> shc) & M32
    o[9] = ((s32(a) * s32(b)) >> 32) & M32
    o[10] = (a * b) >> 32
    o[11] = (abs(s32(a) - s32(b)) + c) & M32
    o[12] = (abs(a - b) + c) & M32
    o[13] = (sum(x * y for x, y in zip(bytes4(a, True), bytes4(b, True), strict=True)) + s32(c)) & M32
    o[14] = (sum(x * y for x, y in zip(bytes4(a, False), bytes4(b, False), strict=True)) + c) & M32
    ha = [s32(a << 16) >> 16, s32(a) >> 16]
    o[15] = (ha[0] * bytes4(b, True)[0] + ha[1] * bytes4(b, True)[1] + s32(c)) & M32
    h = [(a >> 16 * i) & 0xFFFF for i in range(2)], [(b >> 16 * i) & 0xFFFF for i in range(2)]
    o[16] = sum(((x + y) & 0xFFFF) << (16 * i) for i, (x, y) in enumerate(zip(*h, strict=True)))
    sh16 = [[v - 65536 if v >> 15 else v for v in hh] for hh in h]
    o[17] = sum((min(max(x + y, -32768), 32767) & 0xFFFF) << (16 * i)
                for i, (x, y) in enumerate(zip(*sh16, strict=True)))
    ba, bb = bytes4(a, False), bytes4(b, False)
    o[18] = sum(((x - y) & 0xFF) << (8 * i) for i, (x, y) in enumerate(zip(ba, bb, strict=True)))
    o[20] = sum(max(x, y) << (16 * i) for i, (x, y) in enumerate(zip(*h, strict=True)))
    o[21] = sum((0xFF if x == y else 0) << (8 * i) for i, (x, y) in enumerate(zip(ba, bb, strict=True)))
    o[22] = sum(((x + y + 1) >> 1) << (8 * i) for i, (x, y) in enumerate(zip(ba, bb, strict=True)))
    o[19] = sum(abs(x - y) << (8 * i) for i, (x, y) in enumerate(zip(bytes4(a, False), bytes4(b, False),
                                                                        strict=True)))
    pos, ln = b & 31, c & 31
    o[23] = (a >> pos) & ((1 << ln) - 1) if ln else 0
    if ln == 0:
        o[24] = 0
    else:
        v = (a >> pos) & ((1 << ln) - 1)
        top = min(pos + ln, 32) - 1 - pos  # the sign bit is the last extracted bit (or bit 31)
        o[24] = (v | (M32 << (top + 1))) & M32 if (a >> min(pos + ln - 1, 31)) & 1 else v
    p2, l2 = c & 31, (c >> 8) & 31
    mask = ((1 << l2) - 1) << p2 & M32
    o[25] = (b & ~mask | (a << p2) & mask) & M32
    o[26] = a ^ b ^ c
    o[27] = (a & b) | (a & c) | (b & c)
    o[28] = (a & b) | (~a & c) & M32
    o[29] = prmt(a, b, c)
    sa24 = s32(a << 8) >> 8
    sb24 = s32(b << 8) >> 8
    o[30] = (sa24 * sb24) & M32
    o[31] = (a + b) >> 1
    return o


@pytest.mark.parametrize("flavor", ["sm_80.O3", "sm_80.G"])
def test_int_intrinsics(flavor):
    m = corpus_module("int_intrinsics", flavor)
    rng = np.random.default_rng(7)
    n = 96
    A = rng.integers(0, 2**32, n, dtype=np.uint64).astype(np.uint32)
    B = rng.integers(0, 2**32, n, dtype=np.uint64).astype(np.uint32)
    C = rng.integers(0, 2**32, n, dtype=np.uint64).astype(np.uint32)
    A[:4] = [0, 0xFFFFFFFF, 0x80000000, 1]
    C[4:8] = [0, 31, 32, 0x1F1F]
    A64 = rng.integers(0, 2**64, n, dtype=np.uint64)
    B64 = rng.integers(0, 2**64, n, dtype=np.uint64)
    A64[0] = 0
    out, out64 = np.zeros((n, 32), np.uint32), np.zeros((n, 4), np.uint64)
    m.kernel("int_intrinsics").launch(grid=(2,), block=(64,), args=[A, B, C, A64, B64, out, out64, np.int32(n)])
    for i in range(n):
        a, b, c = int(A[i]), int(B[i]), int(C[i])
        for col, v in ref_row(a, b, c).items():
            assert int(out[i, col]) == v, f"row {i} column {col}: a={a:#x} b={b:#x} c={c:#x}"
        a64, b64 = int(A64[i]), int(B64[i])
        sa = a64 - (1 << 64) if a64 >> 63 else a64
        sb = b64 - (1 << 64) if b64 >> 63 else b64
        assert int(out64[i, 0]) == (a64 * b64) >> 64
        assert int(out64[i, 1]) == ((sa * sb) >> 64) & (2**64 - 1)
        ffs = (a64 & -a64).bit_length()
        assert int(out64[i, 2]) == bin(a64).count("1") | ((64 - a64.bit_length()) << 8) | (ffs << 16)
        assert int(out64[i, 3]) == int(f"{a64:064b}"[::-1], 2)


def test_fns_bmsk_szext_run_as_instructions():
    """The manual's own examples of fns, bmsk and szext, through the emulator's instruction path."""
    import ptxforge as pf

    src = """.version 8.0
.target sm_90a
.address_size 64
.visible .entry k(.param .u64 out)
{
    .reg .b32 %r<12>;
    .reg .b64 %rd<2>;
    ld.param.u64 %rd1, [out];
    mov.b32 %r1, 0xaaaaaaaa;
    fns.b32 %r2, %r1, 3, 1;
    fns.b32 %r3, %r1, 3, -1;
    fns.b32 %r4, %r1, 2, 1;
    fns.b32 %r5, %r1, 2, -1;
    fns.b32 %r6, %r1, 30, 2;
    bmsk.wrap.b32 %r7, 1, 2;
    bmsk.clamp.b32 %r8, 40, 2;
    mov.b32 %r9, 0xffffffff;
    szext.wrap.u32 %r10, %r9, 0;
    szext.clamp.s32 %r11, 0x80, 8;
    st.global.v4.b32 [%rd1], {%r2, %r3, %r4, %r5};
    st.global.v4.b32 [%rd1+16], {%r6, %r7, %r8, %r10};
    st.global.b32 [%rd1+32], %r11;
    ret;
}
"""
    out = np.zeros(9, np.uint32)
    pf.parse(src).kernel("k").launch(grid=(1,), block=(1,), args=[out], device="emu")
    assert out.tolist() == [3, 3, 3, 1, 0xFFFFFFFF, 6, 0, 0, 0xFFFFFF80]
