"""cp.async with src-size 0 reads nothing: the source address may lie past the end of its buffer (Triton's
masked, pipelined loads do this; its fused-softmax tutorial on sm_90a faulted here before)."""

import numpy as np
import pytest

import ptxforge as pf

PTX = """.version 8.0
.target sm_80
.address_size 64
.visible .entry k(.param .u64 src, .param .u64 out, .param .u32 n)
{
    .reg .pred %p<2>;
    .reg .b32 %r<8>;
    .reg .b64 %rd<6>;
    .shared .align 4 .b32 stage[32];
    mov.u32 %r1, %tid.x;
    ld.param.u32 %r2, [n];
    ld.param.u64 %rd1, [src];
    mul.wide.u32 %rd2, %r1, 4;
    add.u64 %rd3, %rd1, %rd2;
    setp.lt.u32 %p1, %r1, %r2;
    selp.u32 %r3, 4, 0, %p1;
    mov.u32 %r4, stage;
    shl.b32 %r5, %r1, 2;
    add.u32 %r4, %r4, %r5;
    cp.async.ca.shared.global [%r4], [%rd3], 4, %r3;
    cp.async.wait_all;
    bar.sync 0;
    ld.shared.u32 %r6, [%r4];
    ld.param.u64 %rd4, [out];
    add.u64 %rd5, %rd4, %rd2;
    st.global.u32 [%rd5], %r6;
    ret;
}
"""


@pytest.mark.parametrize("sanitize", [False, True])
def test_src_size_zero_lanes_past_the_end_read_nothing_and_zero_fill(sanitize):
    src = np.arange(1, 21, dtype=np.uint32)  # 20 elements; lanes 20..31 point past the end with src-size 0
    out = np.full(32, 7, np.uint32)
    pf.parse(PTX).kernel("k").launch((1,), (32,), [src, out, np.uint32(20)], device="emu",
                                     options={"sanitize": sanitize})
    np.testing.assert_array_equal(out, np.concatenate([src, np.zeros(12, np.uint32)]))
