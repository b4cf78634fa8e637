"""The native tier's warp-as-a-vector execution against the interpreter: shared atomics in lane order, a
faulting warp storing nothing, diverged paths under their masks. Hand-written PTX, bit-exact comparisons."""

from __future__ import annotations

import numpy as np
import pytest
from emu_corpus import corpus_module

import ptxforge as pf
from ptxforge.emu.errors import MemoryFault
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


def _launch(kernel, grid, block, args, tier):
    r = kernel.launch(grid=grid, block=block, args=args, options=EmulatorOptions(tier=tier))
    assert r.tier == tier, r.tier_note
    return r


def test_shared_atomics_go_in_lane_order_as_the_interpreter():
    k = pf.parse(SHARED_ATOMICS, filename="satom.ptx").kernel("satom")
    got = {}
    for tier in ("interp", "native"):
        out, olds = np.zeros(96, np.uint32), np.zeros(32 * 12, np.uint32)
        r = _launch(k, (1,), (32,), [out, olds], tier)
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
