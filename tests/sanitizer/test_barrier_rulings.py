"""Named barriers reached from different instructions by different warps (docs/sanitizer-rulings.md): clean;
the threads of one warp at different instructions of one barrier: still a barrier error."""

from __future__ import annotations

import numpy as np
import pytest

import ptxforge as pf
from ptxforge.emu.sanitizer import SanitizerError

HEAD = ".version 8.0\n.target sm_90a\n.address_size 64\n"

# Two warpgroups: warpgroup 0 fills buf and meets warpgroup 1 at named barrier 10 (each from its own
# bar.sync); warpgroup 1 reads buf, then both meet at barrier 11 before warpgroup 0 refills it. The
# threads of each warp agree; the warpgroups do not.
PRODUCER_CONSUMER = HEAD + """
.visible .entry k(.param .u64 out)
{
    .reg .pred %p<2>;
    .reg .b32 %r<8>;
    .reg .b64 %rd<4>;
    .shared .align 4 .b32 buf[128];
    ld.param.u64 %rd1, [out];
    mov.u32 %r1, %tid.x;
    and.b32 %r2, %r1, 127;
    shl.b32 %r3, %r2, 2;
    mov.u32 %r4, buf;
    add.u32 %r4, %r4, %r3;
    setp.ge.u32 %p1, %r1, 128;
    @%p1 bra CONSUMER;
    st.shared.u32 [%r4], %r1;
    bar.sync 10, 256;
    bar.sync 11, 256;
    add.u32 %r5, %r1, 1000;
    st.shared.u32 [%r4], %r5;
    bar.sync 10, 256;
    ret;
CONSUMER:
    bar.sync 10, 256;
    ld.shared.u32 %r6, [%r4];
    bar.sync 11, 256;
    bar.sync 10, 256;
    ld.shared.u32 %r7, [%r4];
    add.u32 %r6, %r6, %r7;
    mul.wide.u32 %rd2, %r2, 4;
    add.s64 %rd3, %rd1, %rd2;
    st.global.u32 [%rd3], %r6;
    ret;
}
"""

# Every warp meets the others at barrier 0, warp 0 from its own bar.sync 0 (whole warps: allowed on sm_70+);
# SPLIT puts half of warp 0 there instead (its threads disagree: a barrier error).
WHOLE_WARPS = HEAD + """
.visible .entry k(.param .u64 out)
{
    .reg .pred %p<2>;
    .reg .b32 %r<6>;
    .reg .b64 %rd<4>;
    .shared .align 4 .b32 buf[128];
    ld.param.u64 %rd1, [out];
    mov.u32 %r1, %tid.x;
    shl.b32 %r2, %r1, 2;
    mov.u32 %r3, buf;
    add.u32 %r3, %r3, %r2;
    st.shared.u32 [%r3], %r1;
    setp.lt.u32 %p1, %r1, LIMIT;
    @%p1 bra FIRST;
    bar.sync 0;
    bra.uni DONE;
FIRST:
    bar.sync 0;
DONE:
    xor.b32 %r4, %r1, 64;
    shl.b32 %r4, %r4, 2;
    add.u32 %r4, %r4, buf;
    ld.shared.u32 %r5, [%r4];
    mul.wide.u32 %rd2, %r1, 4;
    add.s64 %rd3, %rd1, %rd2;
    st.global.u32 [%rd3], %r5;
    ret;
}
"""


def _run(text, nthreads, nout):
    out = np.zeros(nout, np.uint32)
    pf.parse(text, filename="bars.ptx").kernel("k").launch(grid=(2,), block=(nthreads,), args=[out],
                                                          options={"sanitize": True})
    return out


def test_named_barrier_producer_consumer_from_different_instructions_is_clean():
    out = _run(PRODUCER_CONSUMER, 256, 128)
    t = np.arange(128)
    np.testing.assert_array_equal(out, t + t + 1000)  # the first fill, then the refill


def test_whole_warps_at_different_bar_sync_0_instructions_are_clean():
    out = _run(WHOLE_WARPS.replace("LIMIT", "32"), 128, 128)
    np.testing.assert_array_equal(out, np.arange(128) ^ 64)


def test_a_warp_split_between_two_bar_sync_instructions_is_still_reported():
    with pytest.raises(SanitizerError) as e:
        _run(WHOLE_WARPS.replace("LIMIT", "16"), 128, 128)
    kinds = [r.kind for r in e.value.reports]
    assert kinds == ["barrier-divergence"]
    r = e.value.reports[0]
    assert "16 thread(s) of a warp wait at this barrier (id 0) while 16 thread(s) of the same warp" in r.message
    assert r.count == 2 and "Barrier error" in str(e.value)
