"""The native tier's warp-as-a-vector execution against the interpreter: shared atomics in lane order, a
faulting warp storing nothing, diverged paths under their masks. Hand-written PTX, bit-exact comparisons."""

from __future__ import annotations

import re

import numpy as np
import pytest
from emu_corpus import corpus_module

import ptxforge as pf
from ptxforge.emu.errors import EmulatorError, MemoryFault
from ptxforge.runtime.buffers import to_device
from ptxforge.runtime.launch_config import EmulatorOptions

pytest.importorskip("llvmlite")

# One warp: every lane hits one of 8 words of each op's group (4 lanes a word), so the old values depend on
# lane order; each lane records the old value of each op, and the shared words are copied out at the end.
SHARED_ATOMICS = """
.version 7.0
.target sm_80
.address_size 64
.visible .entry satom(.param .u64 out, .param .u64 olds)
{
    .reg .pred %p<2>;
    .reg .b32 %r<40>;
    .reg .b64 %rd<8>;
    .shared .align 4 .b32 sh[96];
    ld.param.u64 %rd1, [out];
    ld.param.u64 %rd2, [olds];
    mov.u32 %r1, %tid.x;
    mov.u32 %r2, sh;
    shl.b32 %r3, %r1, 2;
    add.u32 %r4, %r2, %r3;
    mul.lo.u32 %r5, %r1, -1640531535;
    st.shared.u32 [%r4], %r5;
    xor.b32 %r6, %r5, 12345;
    st.shared.u32 [%r4+128], %r6;
    add.u32 %r7, %r5, 777;
    st.shared.u32 [%r4+256], %r7;
    bar.sync 0;
    and.b32 %r8, %r1, 7;
    shl.b32 %r9, %r8, 2;
    add.u32 %r10, %r2, %r9;
    mul.lo.u32 %r11, %r1, -7;
    atom.shared.add.u32 %r20, [%r10], %r11;
    atom.shared.min.s32 %r21, [%r10+32], %r11;
    atom.shared.max.s32 %r22, [%r10+64], %r11;
    atom.shared.min.u32 %r23, [%r10+96], %r11;
    atom.shared.max.u32 %r24, [%r10+128], %r11;
    atom.shared.exch.b32 %r25, [%r10+160], %r11;
    and.b32 %r12, %r1, 1;
    atom.shared.cas.b32 %r26, [%r10+192], %r12, %r11;
    atom.shared.and.b32 %r27, [%r10+224], %r11;
    atom.shared.or.b32 %r28, [%r10+256], %r11;
    atom.shared.xor.b32 %r29, [%r10+288], %r11;
    setp.gt.u32 %p1, %r1, 20;
    @%p1 red.shared.add.u32 [%r10+320], %r1;
    bar.sync 0;
    mul.wide.u32 %rd3, %r1, 48;
    add.s64 %rd4, %rd2, %rd3;
    st.global.v4.u32 [%rd4], {%r20, %r21, %r22, %r23};
    st.global.v4.u32 [%rd4+16], {%r24, %r25, %r26, %r27};
    st.global.v2.u32 [%rd4+32], {%r28, %r29};
    mul.wide.u32 %rd5, %r1, 12;
    add.s64 %rd6, %rd1, %rd5;
    ld.shared.u32 %r30, [%r4];
    ld.shared.u32 %r31, [%r4+128];
    ld.shared.u32 %r32, [%r4+256];
    st.global.u32 [%rd6], %r30;
    st.global.u32 [%rd6+4], %r31;
    st.global.u32 [%rd6+8], %r32;
    ret;
}
"""


def _launch(kernel, grid, block, args, tier, level=None):
    r = kernel.launch(grid=grid, block=block, args=args, options=EmulatorOptions(tier=tier, level=level))
    assert r.tier == tier, r.tier_note
    return r


def test_shared_atomics_go_in_lane_order_as_the_interpreter():
    """(at the optimized level: the other tests of this file run at the quick level, a cold kernel's)"""
    k = pf.parse(SHARED_ATOMICS, filename="satom.ptx").kernel("satom")
    got = {}
    for tier in ("interp", "native"):
        out, olds = np.zeros(96, np.uint32), np.zeros(32 * 12, np.uint32)
        r = _launch(k, (1,), (32,), [out, olds], tier, "opt" if tier == "native" else None)
        assert r.level == ("opt" if tier == "native" else "")
        got[tier] = (out.tobytes(), olds.tobytes(), r.thread_instructions)
    assert got["native"] == got["interp"]
    olds = np.frombuffer(got["native"][1], np.uint32).reshape(32, 12)
    lanes = np.arange(32, dtype=np.uint32)
    word = lanes * np.uint32(2654435761)  # (the initial shared words; -1640531535 as a u32)
    add = lanes * np.uint32(2**32 - 7)
    want = [(int(word[lane % 8]) + int(add[:lane][lanes[:lane] % 8 == lane % 8].sum(dtype=np.uint64))) % 2**32
            for lane in range(32)]
    assert (olds[:, 0] == np.array(want, np.uint32)).all()  # the add's old values, lane after lane


def test_a_faulting_warp_stores_nothing():
    """Lanes 192..199 of warp 6 are in bounds, lane 200 is not: no lane of that warp stores (its addresses are
    checked before any lane stores, as the interpreter checks a wave's). The warps before it may have stored on
    the native tier (it runs a block's warps one after another; the interpreter stores nothing of the wave)."""
    k = corpus_module("vector_ops").kernel("vadd_f32")
    mem = {}
    for tier in ("interp", "native"):
        a, b = to_device(np.ones(256, np.float32)), to_device(np.full(256, 2, np.float32))
        c = to_device(np.zeros(200, np.float32))
        with pytest.raises(MemoryFault, match=r"by thread \(200,0,0\) block \(0,0,0\)$"):
            k.launch(grid=(1,), block=(256,), args=[a, b, c, np.int32(256)], options=EmulatorOptions(tier=tier))
        mem[tier] = c.to_host().copy()
        for x in (a, b, c):
            x.free()
    assert (mem["interp"] == 0).all()
    assert (mem["native"][192:] == 0).all() and (mem["native"][:192] == 3).all()


@pytest.mark.parametrize("start, size, lane", [(8, 40, None), (8, 39, 31), (0, 31, 31), (13, 44, 31),
                                               (16, 40, 24)])
def test_a_warp_on_consecutive_words_is_checked_as_lane_by_lane(start, size, lane):
    """A warp whose lanes read consecutive words takes the warp-wide check (one look per 64-byte granule of the
    validity map); it must pass and fault exactly where the lane-by-lane check does, which it falls back to:
    the warp ending on the allocation's last byte (mid-granule), one word short, starting past a granule."""
    k = corpus_module("vector_ops").kernel("vadd_f32")
    found = {}
    for tier in ("interp", "native"):
        a = to_device(np.arange(size, dtype=np.float32))  # (allocations start on 256-byte boundaries)
        c = to_device(np.zeros(32, np.float32))
        args = [a.address + 4 * start, a.address + 4 * start, c, np.int32(32)]
        try:
            k.launch(grid=(1,), block=(32,), args=args, options=EmulatorOptions(tier=tier))
            found[tier] = ("ok", c.to_host().tobytes())
        except MemoryFault as e:
            found[tier] = ("fault", e.thread, e.address - a.address)
        a.free()
        c.free()
    assert found["interp"] == found["native"]
    if lane is None:
        assert found["native"][0] == "ok"
        assert found["native"][1] == (2 * np.arange(start, start + 32, dtype=np.float32)).tobytes()
    else:
        assert found["native"] == ("fault", (lane, 0, 0), 4 * (start + lane))


# One lane per input pair: f32/f64 arithmetic, division, square roots, conversions, min/max and bit fields on
# raw bit patterns (NaNs with payloads, infinities, subnormals, zeros of both signs among them).
OPS = """
.version 7.8
.target sm_80
.address_size 64
.visible .entry ops(.param .u64 a, .param .u64 b, .param .u64 out)
{
    .reg .pred %p<4>;
    .reg .b16 %h<3>;
    .reg .b32 %r<40>;
    .reg .f32 %f<20>;
    .reg .b64 %rd<40>;
    .reg .f64 %fd<20>;
    ld.param.u64 %rd1, [a];
    ld.param.u64 %rd2, [b];
    ld.param.u64 %rd3, [out];
    mov.u32 %r1, %tid.x;
    mov.u32 %r2, %ctaid.x;
    mad.lo.u32 %r3, %r2, 128, %r1;
    mul.wide.u32 %rd4, %r3, 8;
    add.s64 %rd5, %rd1, %rd4;
    add.s64 %rd6, %rd2, %rd4;
    ld.global.u64 %rd7, [%rd5];
    ld.global.u64 %rd8, [%rd6];
    mov.b64 {%r4, %r5}, %rd7;
    mov.b64 {%r6, %r7}, %rd8;
    mov.b32 %f1, %r4;
    mov.b32 %f2, %r6;
    mov.b64 %fd1, %rd7;
    mov.b64 %fd2, %rd8;
    div.rn.f32 %f3, %f1, %f2;
    div.approx.f32 %f4, %f1, %f2;
    sqrt.rn.f32 %f5, %f1;
    rcp.rn.f32 %f6, %f2;
    min.f32 %f7, %f1, %f2;
    max.f32 %f8, %f1, %f2;
    add.f64 %fd3, %fd1, %fd2;
    sub.f64 %fd4, %fd1, %fd2;
    mul.f64 %fd5, %fd1, %fd2;
    fma.rn.f64 %fd6, %fd1, %fd2, %fd1;
    div.rn.f64 %fd7, %fd1, %fd2;
    sqrt.rn.f64 %fd8, %fd2;
    cvt.rzi.s32.f32 %r8, %f1;
    cvt.rni.u32.f32 %r9, %f2;
    cvt.rmi.s64.f64 %rd9, %fd1;
    cvt.rpi.s32.f64 %r10, %fd2;
    cvt.rn.f32.s32 %f9, %r5;
    cvt.rn.f64.u64 %fd9, %rd8;
    cvt.rn.f32.f64 %f10, %fd1;
    cvt.f64.f32 %fd10, %f2;
    bfe.s32 %r11, %r4, %r5, %r7;
    bfe.u64 %rd10, %rd7, %r6, %r7;
    bfi.b32 %r12, %r4, %r6, %r5, %r7;
    prmt.b32 %r13, %r4, %r6, %r5;
    popc.b64 %r14, %rd7;
    clz.b32 %r15, %r4;
    mul.hi.s32 %r16, %r4, %r6;
    setp.ltu.f64 %p1, %fd1, %fd2;
    selp.u32 %r17, 1, 0, %p1;
    mov.b32 {%h1, %h2}, %r4;
    mov.b32 %r18, {%h2, %h1};
    mul.wide.u32 %rd11, %r3, 192;
    add.s64 %rd12, %rd3, %rd11;
    mov.b32 %r20, %f3;
    mov.b32 %r21, %f4;
    st.global.v4.u32 [%rd12], {%r20, %r21, %r8, %r9};
    mov.b32 %r22, %f5;
    mov.b32 %r23, %f6;
    mov.b32 %r24, %f7;
    mov.b32 %r25, %f8;
    st.global.v4.u32 [%rd12+16], {%r22, %r23, %r24, %r25};
    st.global.v2.f64 [%rd12+32], {%fd3, %fd4};
    st.global.v2.f64 [%rd12+48], {%fd5, %fd6};
    st.global.v2.f64 [%rd12+64], {%fd7, %fd8};
    st.global.v2.u64 [%rd12+80], {%rd9, %rd10};
    st.global.v2.f64 [%rd12+96], {%fd9, %fd10};
    mov.b32 %r26, %f9;
    mov.b32 %r27, %f10;
    st.global.v4.u32 [%rd12+112], {%r26, %r27, %r10, %r11};
    st.global.v4.u32 [%rd12+128], {%r12, %r13, %r14, %r15};
    st.global.v4.u32 [%rd12+144], {%r16, %r17, %r18, %r18};
    ret;
}
"""


def _special_bits(rng, n: int) -> np.ndarray:
    f32 = np.array([0, 0x80000000, 0x7F800000, 0xFF800000, 0x7FC00000, 0x7F800001, 0xFFC12345, 1, 0x807FFFFF,
                    0x3F800000, 0x7F7FFFFF, 0x4F000000, 0xCF000001], np.uint64)
    f64 = np.array([0, 1 << 63, 0x7FF0000000000000, 0x7FF8000000000001, 0xFFF0000000000123, 1,
                    0x3FF0000000000000, 0x43E0000000000000, 0xC3E0000000000001], np.uint64)
    x = rng.integers(0, 2**64, n, dtype=np.uint64)
    x[: n // 4] = (x[: n // 4] & np.uint64(0xFFFFFFFF00000000)) | rng.choice(f32, n // 4)
    x[n // 4: n // 2] = rng.choice(f64, n // 2 - n // 4)
    return x


def test_float_and_bit_instructions_are_bit_exact_with_the_interpreter():
    k = pf.parse(OPS, filename="ops.ptx").kernel("ops")
    rng = np.random.default_rng(5)
    n = 512
    a, b = _special_bits(rng, n), _special_bits(rng, n)
    got = {}
    for tier in ("interp", "native"):
        out = np.zeros(n * 48, np.uint32)
        r = _launch(k, (n // 128,), (128,), [a, b, out], tier)
        got[tier] = (out, r.thread_instructions)
    want, have = got["interp"][0].reshape(n, 48), got["native"][0].reshape(n, 48)
    bad = np.argwhere(want != have)
    assert bad.size == 0, f"{len(bad)} words differ, first (lane, word): {bad[:5].tolist()}"
    assert got["native"][1] == got["interp"][1]


# A chain of .f32 arithmetic in one segment: each result feeds the next (the native tier passes a result to
# the next arithmetic before its NaN is made canonical, which must not change a bit), some escape through a
# mov, a .ftz and a .sat step, a directed rounding and a guarded write among them.
CHAIN = """
.version 7.8
.target sm_80
.address_size 64
.visible .entry chain(.param .u64 a, .param .u64 out)
{
    .reg .pred %p<2>;
    .reg .b32 %r<12>;
    .reg .f32 %f<16>;
    .reg .b64 %rd<8>;
    ld.param.u64 %rd1, [a];
    ld.param.u64 %rd2, [out];
    mov.u32 %r1, %tid.x;
    mul.wide.u32 %rd3, %r1, 12;
    add.s64 %rd4, %rd1, %rd3;
    ld.global.f32 %f1, [%rd4];
    ld.global.f32 %f2, [%rd4+4];
    ld.global.f32 %f3, [%rd4+8];
    fma.rn.f32 %f4, %f1, %f2, %f3;
    add.f32 %f5, %f4, %f1;
    mov.b32 %r4, %f4;
    mul.f32 %f6, %f5, %f4;
    sub.f32 %f7, %f6, %f5;
    add.ftz.f32 %f8, %f7, %f2;
    fma.rn.sat.f32 %f9, %f8, %f7, %f6;
    add.rz.f32 %f10, %f9, %f7;
    and.b32 %r2, %r1, 1;
    setp.eq.u32 %p1, %r2, 0;
    @%p1 add.f32 %f7, %f7, %f1;
    add.f32 %f11, %f7, %f10;
    fma.rn.ftz.f32 %f12, %f11, %f5, %f3;
    mul.rm.f32 %f13, %f12, %f11;
    mul.wide.u32 %rd5, %r1, 48;
    add.s64 %rd6, %rd2, %rd5;
    mov.b32 %r5, %f13;
    st.global.v4.u32 [%rd6], {%r4, %r5, %r4, %r5};
    st.global.v4.f32 [%rd6+16], {%f5, %f6, %f7, %f8};
    st.global.v4.f32 [%rd6+32], {%f9, %f10, %f11, %f12};
    ret;
}
"""


@pytest.mark.parametrize("level", ["quick", "opt"])
def test_a_chain_of_float_arithmetic_is_bit_exact_with_the_interpreter(level):
    k = pf.parse(CHAIN, filename="chain.ptx").kernel("chain")
    rng = np.random.default_rng(11)
    n = 256
    f32 = np.array([0, 0x80000000, 0x7F800000, 0xFF800000, 0x7FC00000, 0x7F800001, 0xFFC12345, 0x7FA00000, 1,
                    0x807FFFFF, 0x3F800000, 0x7F7FFFFF, 0xBF800000, 0x00800000], np.uint32)
    a = rng.choice(f32, n * 3)
    a[::7] = rng.integers(0, 2**32, a[::7].size, dtype=np.uint32)
    got = {}
    for tier in ("interp", "native"):
        out = np.zeros(n * 12, np.uint32)
        r = _launch(k, (n // 64,), (64,), [a, out], tier, level if tier == "native" else None)
        got[tier] = (out.reshape(n, 12), r.thread_instructions)
    bad = np.argwhere(got["interp"][0] != got["native"][0])
    assert bad.size == 0, f"{len(bad)} words differ, first (lane, word): {bad[:5].tolist()}"
    assert got["native"][1] == got["interp"][1]
    nan = (got["interp"][0] & 0x7FFFFFFF) > 0x7F800000
    assert nan[:, 2:].any() and ((got["interp"][0][:, 2:] == 0x7FFFFFFF) | ~nan[:, 2:]).all()  # (NaNs occur)


# Two rows of 16 words (a block of 16 x 2): each half-warp reads a row of `x` (`ld` words apart), so the warp
# takes the per-half-warp check and load.
ROWS = """
.version 7.0
.target sm_80
.address_size 64
.visible .entry rows(.param .u64 x, .param .u64 out, .param .u32 ld)
{
    .reg .b32 %r<8>;
    .reg .b64 %rd<8>;
    ld.param.u64 %rd1, [x];
    ld.param.u64 %rd2, [out];
    ld.param.u32 %r1, [ld];
    mov.u32 %r2, %tid.x;
    mov.u32 %r3, %tid.y;
    mad.lo.u32 %r4, %r3, %r1, %r2;
    mul.wide.u32 %rd3, %r4, 4;
    add.s64 %rd4, %rd1, %rd3;
    ld.global.u32 %r5, [%rd4];
    mad.lo.u32 %r6, %r3, 16, %r2;
    mul.wide.u32 %rd5, %r6, 4;
    add.s64 %rd6, %rd2, %rd5;
    st.global.u32 [%rd6], %r5;
    ret;
}
"""


@pytest.mark.parametrize("start, size, ld, lane", [(0, 64, 40, None), (3, 59, 40, None), (0, 55, 40, 31),
                                                   (8, 60, 40, 28), (16, 64, 16, None), (5, 20, 3, 15),
                                                   (0, 29, 14, 31)])
def test_two_rows_of_a_warp_are_checked_as_lane_by_lane(start, size, ld, lane):
    """Each half-warp on consecutive words of its own row takes the per-half check (granules of the validity
    map); it must pass and fault exactly where the lane-by-lane check does: the second row ending on the
    allocation's last word, one word short, rows overlapping, rows narrower than a half (no half shape)."""
    k = pf.parse(ROWS, filename="rows.ptx").kernel("rows")
    found = {}
    for tier in ("interp", "native"):
        x = to_device(np.arange(size, dtype=np.uint32) * np.uint32(2654435761))
        out = to_device(np.zeros(32, np.uint32))
        try:
            _launch(k, (1,), (16, 2), [x.address + 4 * start, out, np.uint32(ld)], tier)
            found[tier] = ("ok", out.to_host().tobytes())
        except MemoryFault as e:
            found[tier] = ("fault", e.thread, e.address - x.address)
        x.free()
        out.free()
    assert found["interp"] == found["native"]
    if lane is None:
        assert found["native"][0] == "ok"
    else:
        assert found["native"][:2] == ("fault", (lane % 16, lane // 16, 0))


# Lanes 20..31 exit early holding r2 = tid * 1000; the others add 7 and shuffle r2 down by 8 (member lanes
# 0..19), so lanes 12..19 read exited lanes' registers, as they were when those lanes exited. The shift comes
# as an immediate (one vector shuffle) or from a register the launch sets (a gather).
SHFL_EXITED = """
.version 7.0
.target sm_80
.address_size 64
.visible .entry shfl_exited(.param .u64 out, .param .u32 delta)
{
    .reg .pred %p<4>;
    .reg .b32 %r<12>;
    .reg .b64 %rd<4>;
    ld.param.u64 %rd1, [out];
    ld.param.u32 %r9, [delta];
    mov.u32 %r1, %tid.x;
    mul.lo.u32 %r2, %r1, 1000;
    setp.ge.u32 %p1, %r1, 20;
    @%p1 bra DONE;
    add.u32 %r2, %r2, 7;
    shfl.sync.down.b32 %r3|%p2, %r2, 8, 31, 1048575;
    shfl.sync.down.b32 %r4|%p3, %r2, %r9, 31, 1048575;
    selp.u32 %r5, 1, 0, %p2;
    selp.u32 %r6, 1, 0, %p3;
    mul.wide.u32 %rd2, %r1, 16;
    add.s64 %rd3, %rd1, %rd2;
    st.global.v4.u32 [%rd3], {%r3, %r5, %r4, %r6};
DONE:
    ret;
}
"""


def test_a_shfl_reads_exited_lanes_registers_as_the_interpreter():
    k = pf.parse(SHFL_EXITED, filename="shfl_exited.ptx").kernel("shfl_exited")
    got = {}
    for tier in ("interp", "native"):
        out = np.zeros(32 * 4, np.uint32)
        r = _launch(k, (1,), (32,), [out, np.uint32(8)], tier)
        got[tier] = (out.reshape(32, 4), r.thread_instructions)
    assert (got["native"][0] == got["interp"][0]).all() and got["native"][1] == got["interp"][1]
    words = got["native"][0]
    assert words[12, 0] == 20 * 1000 and words[11, 0] == 19 * 1000 + 7  # (an exited lane's, a running lane's)
    assert (words[:20, 0] == words[:20, 2]).all()


# Odd lanes go round the loop twice, even ones once: the second time the shfl (member mask: every lane) finds
# the even lanes gone on. The native tier stops (it runs warp-wide instructions for converged lanes only).
SHFL_DIVERGED = """
.version 7.0
.target sm_80
.address_size 64
.visible .entry shfl_diverged(.param .u64 out)
{
    .reg .pred %p<2>;
    .reg .b32 %r<8>;
    .reg .b64 %rd<4>;
    ld.param.u64 %rd1, [out];
    mov.u32 %r1, %tid.x;
    and.b32 %r2, %r1, 1;
    mov.u32 %r3, 0;
LOOP:
    shfl.sync.bfly.b32 %r4, %r1, 1, 31, -1;
    add.u32 %r3, %r3, 1;
    setp.le.u32 %p1, %r3, %r2;
    @%p1 bra LOOP;
    mul.wide.u32 %rd2, %r1, 4;
    add.s64 %rd3, %rd1, %rd2;
    st.global.u32 [%rd3], %r4;
    ret;
}
"""


def test_a_shfl_some_member_lanes_never_reach_stops_the_native_tier():
    k = pf.parse(SHFL_DIVERGED, filename="shfl_diverged.ptx").kernel("shfl_diverged")
    out = np.zeros(32, np.uint32)
    with pytest.raises(EmulatorError, match=r"shfl_diverged\.ptx:\d+: shfl\.sync\.bfly.*converged member lanes only"):
        k.launch(grid=(1,), block=(32,), args=[out], options=EmulatorOptions(tier="native"))



# A parameter loaded, and a constant moved, on one path only: where the paths join, the lanes that skipped them
# read the registers' initial zeros (the native tier makes such registers where read only where every path
# has written them).
ONE_PATH = """
.version 7.0
.target sm_80
.address_size 64
.visible .entry one_path(.param .u64 out, .param .u32 val)
{
    .reg .pred %p<2>;
    .reg .b32 %r<8>;
    .reg .b64 %rd<4>;
    ld.param.u64 %rd1, [out];
    mov.u32 %r1, %tid.x;
    setp.lt.u32 %p1, %r1, 16;
    @%p1 bra SKIP;
    ld.param.u32 %r2, [val];
    mov.u32 %r5, 7;
SKIP:
    add.u32 %r3, %r2, %r1;
    add.u32 %r3, %r3, %r5;
    mul.wide.u32 %rd2, %r1, 4;
    add.s64 %rd3, %rd1, %rd2;
    st.global.u32 [%rd3], %r3;
    ret;
}
"""


# Shared-memory faults: thread t of one warp reads the word at byte 4 * t + `skew` of a 64-word array, at
# [%r + off]; the first bad lane names the fault (out of bounds, misaligned) on both tiers alike.
SHARED_FAULT = """
.version 7.0
.target sm_80
.address_size 64
.visible .entry sfault(.param .u64 out, .param .u32 skew, .param .u32 off)
{
    .reg .b32 %r<12>;
    .reg .b64 %rd<4>;
    .shared .align 4 .b32 sh[64];
    ld.param.u64 %rd1, [out];
    ld.param.u32 %r8, [skew];
    mov.u32 %r1, %tid.x;
    mov.u32 %r2, sh;
    shl.b32 %r3, %r1, 2;
    add.u32 %r4, %r2, %r3;
    add.u32 %r4, %r4, %r8;
    st.shared.u32 [%r4+OFF], %r1;
    ld.shared.u32 %r5, [%r4+OFF];
    cvta.to.global.u64 %rd2, %rd1;
    mul.wide.u32 %rd3, %r1, 4;
    add.s64 %rd2, %rd2, %rd3;
    st.global.u32 [%rd2], %r5;
    ret;
}
"""


def test_a_parameter_loaded_on_one_path_is_zero_on_the_other():
    k = pf.parse(ONE_PATH, filename="one_path.ptx").kernel("one_path")
    got = {}
    for tier in ("interp", "native"):
        out = np.zeros(32, np.uint32)
        r = _launch(k, (1,), (32,), [out, np.uint32(1000)], tier)
        got[tier] = (out.tobytes(), r.thread_instructions)
    assert got["native"] == got["interp"]
    lanes = np.arange(32, dtype=np.uint32)
    assert got["native"][0] == np.where(lanes < 16, lanes, lanes + 1007).astype(np.uint32).tobytes()


@pytest.mark.parametrize("skew, off, want", [
    (0, 0, None), (0, 128, None), (0, 132, r"out-of-bounds shared access of 4 bytes .*thread \(31,0,0\)"),
    (0, 4096, r"out-of-bounds shared access of 4 bytes .*thread \(0,0,0\)"),
    (2, 0, r"misaligned shared access of 4 bytes .*thread \(0,0,0\)"),
    (0, -4, r"out-of-bounds shared(::cluster)? access of 4 bytes .*thread \(0,0,0\)")])
def test_shared_memory_faults_on_both_tiers(skew, off, want):
    """In bounds up to the array's last word, out of bounds one word past it (the last lane), far past it, below
    it (a negative offset wraps to a huge address), misaligned: the same result or fault on both tiers."""
    k = pf.parse(SHARED_FAULT.replace("+OFF", f"+{off}"), filename="sfault.ptx").kernel("sfault")
    outs, errs = {}, {}
    for tier in ("interp", "native"):
        out = np.zeros(32, np.uint32)
        try:
            r = k.launch(grid=(1,), block=(32,), args=[out, np.uint32(skew), np.uint32(0)],
                         options=EmulatorOptions(tier=tier))
            assert r.tier == tier, r.tier_note
            outs[tier] = out.copy()
        except MemoryFault as e:
            errs[tier] = (str(e), e.address)
    if want is None:
        assert not errs and (outs["interp"] == outs["native"]).all() and (outs["native"] == np.arange(32)).all()
    else:
        assert not outs, outs  # (the messages' details differ: the interpreter adds the window or alignment)
        for tier in ("interp", "native"):
            assert re.search(f"st.shared.u32 .*: {want}", errs[tier][0]), errs[tier][0]


# A write to read-only (.const) memory: lane `lane` stores to its word of a .const array (every lane with 32).
READONLY_WRITE = """
.version 7.0
.target sm_80
.address_size 64
.const .align 4 .b32 cst[64];
.visible .entry k(.param .u32 lane)
{
    .reg .b32 %r<8>;
    .reg .b64 %rd<4>;
    .reg .pred %p<2>;
    mov.u32 %r1, %tid.x;
    ld.param.u32 %r2, [lane];
    mov.u64 %rd1, cst;
    cvta.const.u64 %rd1, %rd1;
    mul.wide.u32 %rd2, %r1, 4;
    add.s64 %rd1, %rd1, %rd2;
    setp.eq.u32 %p1, %r1, %r2;
    setp.eq.or.u32 %p1, %r2, 32, %p1;
    @%p1 st.global.u32 [%rd1], %r1;
    ret;
}
"""


@pytest.mark.parametrize("lane", [5, 31, 32])
def test_a_write_to_read_only_memory_faults_on_both_tiers(lane):
    """One lane's store, the last lane's, and a whole warp on consecutive words (the warp-wide check fails,
    then the lane-by-lane one names thread 0): the same fault on both tiers."""
    k = pf.parse(READONLY_WRITE, filename="ro.ptx").kernel("k")
    errs = {}
    for tier in ("interp", "native"):
        with pytest.raises(MemoryFault) as e:
            k.launch(grid=(1,), block=(32,), args=[np.uint32(lane)], options=EmulatorOptions(tier=tier))
        errs[tier] = (str(e.value), e.value.address)
    assert errs["interp"] == errs["native"], errs
    assert "write to read-only memory global access of 4 bytes" in errs["native"][0]
    assert f"(cst is read-only) by thread ({lane % 32},0,0)" in errs["native"][0]
