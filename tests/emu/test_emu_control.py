"""Scheduling, barriers, watchdog, faults and special registers on small hand-written PTX."""

import numpy as np
import pytest

import ptxforge as pf
from ptxforge.emu import KernelTrap, MemoryFault, WatchdogTimeout

HEAD = ".version 8.0\n.target sm_80\n.address_size 64\n"


def kernel(body: str, params: str = ".param .u64 out", name: str = "k", regs: str = ""):
    text = HEAD + f""".visible .entry {name}({params})
{{
    .reg .pred %p<8>;
    .reg .b32 %r<32>;
    .reg .b64 %rd<16>;
    {regs}
{body}
}}
"""
    return pf.parse(text, filename="hand.ptx").kernel(name)


def test_special_registers_2d_grid():
    k = kernel("""
    ld.param.u64 %rd1, [out];
    mov.u32 %r1, %tid.x; mov.u32 %r2, %tid.y; mov.u32 %r3, %ntid.x; mov.u32 %r4, %ntid.y;
    mov.u32 %r5, %ctaid.x; mov.u32 %r6, %ctaid.y; mov.u32 %r7, %nctaid.x;
    mad.lo.s32 %r8, %r2, %r3, %r1;          // linear thread id in block
    mul.lo.s32 %r9, %r3, %r4;               // threads per block
    mad.lo.s32 %r10, %r6, %r7, %r5;         // linear block id
    mad.lo.s32 %r11, %r10, %r9, %r8;        // global linear id
    mul.wide.u32 %rd2, %r11, 16;
    add.s64 %rd3, %rd1, %rd2;
    mov.u32 %r12, %laneid; mov.u32 %r13, %warpid; mov.u32 %r14, %smid;
    st.global.v4.u32 [%rd3], {%r11, %r12, %r13, %r10};
    ret;""")
    out = np.zeros((3 * 2 * 8 * 6, 4), np.uint32)
    r = k.launch(grid=(3, 2), block=(8, 6), args=[out], options={"num_sms": 4})
    n = np.arange(out.shape[0])
    np.testing.assert_array_equal(out[:, 0], n)
    np.testing.assert_array_equal(out[:, 1], (n % 48) % 32)
    np.testing.assert_array_equal(out[:, 2], (n % 48) // 32)
    np.testing.assert_array_equal(out[:, 3], n // 48)
    assert r.per_sm.sum() == r.thread_instructions and r.per_sm.size == 4 and (r.per_sm > 0).all()


SPIN = """
    ld.param.u64 %rd1, [out];
    mov.u32 %r1, %ctaid.x;
    setp.ne.s32 %p1, %r1, 0;
    @%p1 bra $PRODUCER;
$SPIN:
    ld.volatile.global.u32 %r2, [%rd1+4];
    setp.eq.s32 %p2, %r2, 0;
    @%p2 bra $SPIN;
    add.s32 %r3, %r2, 1;
    st.global.u32 [%rd1], %r3;
    ret;
$PRODUCER:
    mov.u32 %r4, 0;
$WORK:
    add.s32 %r4, %r4, 1;
    setp.lt.s32 %p3, %r4, 200;
    @%p3 bra $WORK;
    st.volatile.global.u32 [%rd1+4], %r4;
    ret;"""


def test_block_spinning_on_flag_set_by_another_block_progresses():
    out = np.zeros(2, np.uint32)
    kernel(SPIN).launch(grid=(2,), block=(32,), args=[out], options={"watchdog_s": 20})
    assert out.tolist() == [201, 200]


def test_deadlock_names_waiting_warps():
    k = kernel("""
    mov.u32 %r1, %tid.x;
    setp.lt.u32 %p1, %r1, 32;
    @%p1 bra $A;
    bar.sync 1;
    ret;
$A:
    bar.sync 0;
    ret;""")
    with pytest.raises(WatchdogTimeout) as e:
        k.launch(grid=(1,), block=(64,), args=[None])
    msg = str(e.value)
    assert "deadlock" in msg and "barrier 0" in msg and "barrier 1" in msg and "hand.ptx" in msg


def test_barrier_with_exited_threads_and_counts():
    k = kernel("""
    ld.param.u64 %rd1, [out];
    mov.u32 %r1, %tid.x;
    setp.ge.u32 %p1, %r1, 40;
    @%p1 bra $DONE;                      // threads 40..63 exit before the barrier
    mul.wide.u32 %rd2, %r1, 4;
    add.s64 %rd3, %rd1, %rd2;
    st.global.u32 [%rd3], %r1;
    bar.sync 0;
    ld.global.u32 %r2, [%rd1+156];       // thread 39's value, written before the barrier
    st.global.u32 [%rd3+256], %r2;
$DONE:
    ret;""")
    out = np.zeros(128, np.uint32)
    k.launch(grid=(1,), block=(64,), args=[out])
    assert out[:40].tolist() == list(range(40)) and (out[64:104] == 39).all()


def test_producer_consumer_named_barriers():
    # warp 0 produces and arrives on barrier 1 (count 64); warp 1 syncs on it, then reads
    k = kernel("""
    ld.param.u64 %rd1, [out];
    mov.u32 %r1, %tid.x;
    mul.wide.u32 %rd2, %r1, 4;
    add.s64 %rd3, %rd1, %rd2;
    setp.ge.u32 %p1, %r1, 32;
    @%p1 bra $CONSUMER;
    add.s32 %r2, %r1, 1000;
    st.global.u32 [%rd3], %r2;
    bar.arrive 1, 64;
    ret;
$CONSUMER:
    bar.sync 1, 64;
    ld.global.u32 %r3, [%rd3+-128];
    st.global.u32 [%rd3], %r3;
    ret;""")
    out = np.zeros(64, np.uint32)
    k.launch(grid=(1,), block=(64,), args=[out])
    assert out[:32].tolist() == list(range(1000, 1032)) and out[32:].tolist() == list(range(1000, 1032))


def test_wild_pointer_is_a_clear_error():
    k = kernel("""
    ld.param.u64 %rd1, [out];
    mov.u32 %r5, %tid.x; mov.u32 %r6, %ctaid.x; mov.u32 %r7, %ntid.x;
    mad.lo.s32 %r1, %r6, %r7, %r5;
    mul.wide.u32 %rd2, %r1, 4;
    add.s64 %rd3, %rd1, %rd2;
    st.global.u32 [%rd3], %r1;
    ret;""")
    out = np.zeros(40, np.uint32)
    with pytest.raises(MemoryFault) as e:
        k.launch(grid=(2,), block=(32,), args=[out])
    err = e.value
    assert err.block == (1, 0, 0) and err.thread == (8, 0, 0) and err.ptx_line == 16
    assert "hand.ptx:16" in str(err) and "past the end" in str(err)
    with pytest.raises(MemoryFault, match="no allocation|out-of-bounds"):
        k.launch(grid=(1,), block=(1,), args=[None])  # null pointer


def test_shared_out_of_bounds_and_misaligned():
    k = kernel("""
    .shared .align 4 .b8 buf[128];
    mov.u32 %r1, %tid.x;
    shl.b32 %r2, %r1, 2;
    mov.u32 %r3, buf;
    add.s32 %r4, %r3, %r2;
    st.shared.u32 [%r4], %r1;
    ret;""")
    k.launch(grid=(1,), block=(32,), args=[None])
    with pytest.raises(MemoryFault, match="shared") as e:
        k.launch(grid=(1,), block=(33,), args=[None])
    assert e.value.thread == (32, 0, 0)
    k2 = kernel("""
    ld.param.u64 %rd1, [out];
    ld.global.u32 %r1, [%rd1+2];
    ret;""")
    with pytest.raises(MemoryFault, match="misaligned"):
        k2.launch(grid=(1,), block=(1,), args=[np.zeros(4, np.uint32)])


def test_trap_and_exit():
    k = kernel("""
    ld.param.u64 %rd1, [out];
    mov.u32 %r1, %tid.x;
    setp.eq.u32 %p1, %r1, 5;
    @%p1 trap;
    exit;""")
    with pytest.raises(KernelTrap, match=r"thread \(5,0,0\)"):
        k.launch(grid=(1,), block=(8,), args=[None])
    k.launch(grid=(1,), block=(4,), args=[None])


def test_watchdog_stops_an_endless_loop():
    k = kernel("""
$L: bra $L;""")
    with pytest.raises(WatchdogTimeout, match="no progress"):
        k.launch(grid=(1,), block=(32,), args=[None], options={"watchdog_s": 0.5})


def test_more_special_registers():
    k = kernel("""
    ld.param.u64 %rd1, [out];
    mov.u32 %r1, %tid.x;
    mul.wide.u32 %rd2, %r1, 32;
    add.s64 %rd3, %rd1, %rd2;
    mov.u32 %r2, %lanemask_lt; mov.u32 %r3, %lanemask_ge; mov.u32 %r4, %dynamic_smem_size;
    mov.u32 %r5, %nsmid; mov.u32 %r6, %lanemask_eq; mov.u32 %r7, %nwarpid;
    st.global.v4.u32 [%rd3], {%r2, %r3, %r4, %r5};
    mov.u64 %rd4, %clock64;
    mov.u64 %rd5, %globaltimer;
    add.s32 %r8, %r1, 1;
$SPIN:
    add.s32 %r8, %r8, -1;
    setp.gt.s32 %p1, %r8, 0;
    @%p1 bra $SPIN;
    mov.u64 %rd6, %clock64;
    sub.s64 %rd7, %rd6, %rd4;
    st.global.v2.u64 [%rd3+16], {%rd7, %rd5};
    ret;""")
    out = np.zeros((64, 8), np.uint32)
    k.launch(grid=(1,), block=(64,), args=[out], shared_mem=48, options={"num_sms": 7})
    lane = np.arange(64) % 32
    np.testing.assert_array_equal(out[:, 0], (1 << lane) - 1)
    np.testing.assert_array_equal(out[:, 1], (0xFFFFFFFF << lane) & 0xFFFFFFFF)
    assert (out[:, 2] == 48).all() and (out[:, 3] == 7).all()
    clocks = out[:, 4].astype(np.uint64) | (out[:, 5].astype(np.uint64) << 32)
    assert (clocks >= 4 * 32).all()  # the warp spins 32 times (lanes reconverge before the second read)
    timer = out[:, 6].astype(np.uint64) | (out[:, 7].astype(np.uint64) << 32)
    assert (timer > 10**18).all()  # nanoseconds since 1970-ish, monotonic within a launch
