"""Warps polling an mbarrier must not starve the lanes that complete it.

A warp-specialized kernel (DeepGEMM's GEMMs: math warp groups wait on a full barrier that one TMA lane
fills) has its pollers at a lower pc than the producer. Min-pc scheduling runs the lowest pc first and let
the others in only at its periodic rotation, one step in 64: the producer moved one instruction per ~60
polls. A try_wait that finds the phase incomplete for every lane it ran now hands the next step to the
rotation (on hardware a failed try_wait suspends the thread).
"""

import numpy as np

import ptxforge as pf

ITERATIONS = 200

SRC = f"""
.version 8.0
.target sm_90a
.address_size 64
.visible .entry k(.param .u64 k_out)
{{
    .shared .align 8 .b64 bar;
    .reg .pred %p<4>;
    .reg .b32 %r<8>;
    .reg .b64 %rd<4>;
    mov.u32 %r1, %tid.x;
    setp.eq.u32 %p1, %r1, 0;
    @!%p1 bra SKIP;
    mbarrier.init.shared::cta.b64 [bar], 1;
SKIP:
    bar.sync 0;
    setp.ge.u32 %p2, %r1, 32;
    @%p2 bra PRODUCER;
WAIT:
    mbarrier.try_wait.parity.shared::cta.b64 %p3, [bar], 0;
    @!%p3 bra WAIT;
    ld.param.u64 %rd1, [k_out];
    mul.wide.u32 %rd2, %r1, 4;
    add.s64 %rd3, %rd1, %rd2;
    st.global.u32 [%rd3], %r1;
    ret;
PRODUCER:
    setp.ne.u32 %p1, %r1, 32;
    @%p1 bra DONE;
    mov.u32 %r2, 0;
LOOP:
    add.u32 %r2, %r2, 1;
    setp.lt.u32 %p1, %r2, {ITERATIONS};
    @%p1 bra LOOP;
    mbarrier.arrive.shared::cta.b64 _, [bar];
DONE:
    ret;
}}
"""


def test_pollers_at_a_lower_pc_let_the_producer_run():
    out = np.zeros(32, np.uint32)
    res = pf.parse(SRC, filename="spin.ptx").kernel("k").launch(grid=(1,), block=(64,), args=[out],
                                                                 device="emu", options={"watchdog_s": 30})
    np.testing.assert_array_equal(out, np.arange(32))
    producer = 3 * ITERATIONS + 16  # the producing lane's instructions, about
    # a warp of pollers runs its 2-3 instruction loop at most a few times per producer step (before: 2.0M
    # thread-instructions in all, ~60 polls a producer step; now ~66K)
    assert res.thread_instructions < 32 * 8 * producer, res.thread_instructions
