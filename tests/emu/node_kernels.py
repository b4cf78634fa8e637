"""Hand-written PTX kernels for the Node tests: flags between GPUs and between kernels of one GPU."""

import ptxforge as pf

HEAD = ".version 8.0\n.target sm_90\n.address_size 64\n"
REGS = """
    .reg .pred %p<8>;
    .reg .b32 %r<32>;
    .reg .b64 %rd<16>;
"""


def kernel(name: str, params: str, body: str):
    text = HEAD + f".visible .entry {name}({params})\n{{{REGS}{body}\n}}\n"
    return pf.parse(text, filename=f"{name}.ptx").kernel(name)


def ring(flag_store: str = "st.release.sys.global.u32", flag_load: str = "ld.acquire.sys.global.u32",
         after_wait: str = ""):
    """GPU r writes rank*1000+i into the next GPU's `recv`, raises the next GPU's flag with `flag_store`,
    waits (`flag_load`) for its own flag, runs `after_wait` (a fence), then copies its `recv` to `out`."""
    return kernel("ring", ".param .u64 dst, .param .u64 dst_flag, .param .u64 recv, .param .u64 flag, "
                          ".param .u64 out, .param .u32 rank, .param .u32 n", f"""
    ld.param.u64 %rd1, [dst];
    ld.param.u64 %rd2, [dst_flag];
    ld.param.u64 %rd3, [recv];
    ld.param.u64 %rd4, [flag];
    ld.param.u64 %rd5, [out];
    ld.param.u32 %r1, [rank];
    ld.param.u32 %r2, [n];
    mov.u32 %r3, %tid.x;
    mov.u32 %r4, %ntid.x;
    mov.u32 %r5, %r3;
SEND:
    setp.ge.u32 %p1, %r5, %r2;
    @%p1 bra SENT;
    mad.lo.u32 %r6, %r1, 1000, %r5;
    mul.wide.u32 %rd6, %r5, 4;
    add.s64 %rd7, %rd1, %rd6;
    st.global.u32 [%rd7], %r6;
    add.u32 %r5, %r5, %r4;
    bra SEND;
SENT:
    bar.sync 0;
    setp.ne.u32 %p2, %r3, 0;
    @%p2 bra WAIT;
    mov.u32 %r8, 1;
    {flag_store} [%rd2], %r8;
SPIN:
    {flag_load} %r7, [%rd4];
    setp.eq.u32 %p3, %r7, 0;
    @%p3 bra SPIN;
    {after_wait}
WAIT:
    bar.sync 0;
    mov.u32 %r5, %r3;
COPY:
    setp.ge.u32 %p1, %r5, %r2;
    @%p1 bra DONE;
    mul.wide.u32 %rd6, %r5, 4;
    add.s64 %rd7, %rd3, %rd6;
    ld.global.u32 %r9, [%rd7];
    add.s64 %rd8, %rd5, %rd6;
    st.global.u32 [%rd8], %r9;
    add.u32 %r5, %r5, %r4;
    bra COPY;
DONE:
    ret;""")


def persistent():
    """Each block's thread 0 spins until *counter reaches `target`; then out[block] = %smid."""
    return kernel("persistent", ".param .u64 counter, .param .u64 out, .param .u32 target", """
    ld.param.u64 %rd1, [counter];
    ld.param.u64 %rd2, [out];
    ld.param.u32 %r1, [target];
    mov.u32 %r2, %tid.x;
    setp.ne.u32 %p1, %r2, 0;
    @%p1 bra DONE;
SPIN:
    ld.acquire.gpu.global.u32 %r3, [%rd1];
    setp.lt.u32 %p2, %r3, %r1;
    @%p2 bra SPIN;
    mov.u32 %r4, %ctaid.x;
    mov.u32 %r5, %smid;
    mul.wide.u32 %rd3, %r4, 4;
    add.s64 %rd4, %rd2, %rd3;
    st.global.u32 [%rd4], %r5;
DONE:
    ret;""")


def compute():
    """c[i] = 3 * a[i] + i over the grid; out_sm[block] = %smid; then each block's thread 0 bumps
    *counter with a release atomic (after a barrier)."""
    return kernel("compute", ".param .u64 a, .param .u64 c, .param .u64 out_sm, .param .u64 counter", """
    ld.param.u64 %rd1, [a];
    ld.param.u64 %rd2, [c];
    ld.param.u64 %rd3, [out_sm];
    ld.param.u64 %rd4, [counter];
    mov.u32 %r1, %tid.x;
    mov.u32 %r2, %ctaid.x;
    mov.u32 %r3, %ntid.x;
    mad.lo.u32 %r4, %r2, %r3, %r1;
    mul.wide.u32 %rd5, %r4, 4;
    add.s64 %rd6, %rd1, %rd5;
    ld.global.nc.L1::no_allocate.L2::256B.u32 %r5, [%rd6];
    mad.lo.u32 %r6, %r5, 3, %r4;
    add.s64 %rd7, %rd2, %rd5;
    st.global.u32 [%rd7], %r6;
    bar.sync 0;
    setp.ne.u32 %p1, %r1, 0;
    @%p1 bra DONE;
    mov.u32 %r7, %smid;
    mul.wide.u32 %rd8, %r2, 4;
    add.s64 %rd9, %rd3, %rd8;
    st.global.u32 [%rd9], %r7;
    atom.release.gpu.global.add.u32 %r8, [%rd4], 1;
DONE:
    ret;""")


def counter_atomics():
    """Every thread adds 1 (atom.sys), its rank (red.sys.u64) and its rank into a CAS loop (atom.cas)."""
    return kernel("count", ".param .u64 counter, .param .u64 total, .param .u64 cas, .param .u32 rank", """
    ld.param.u64 %rd1, [counter];
    ld.param.u64 %rd2, [total];
    ld.param.u64 %rd3, [cas];
    ld.param.u32 %r1, [rank];
    atom.relaxed.sys.global.add.u32 %r2, [%rd1], 1;
    cvt.u64.u32 %rd4, %r1;
    add.u64 %rd4, %rd4, 1;
    red.relaxed.sys.global.add.u64 [%rd2], %rd4;
    ld.relaxed.sys.global.u32 %r3, [%rd3];
RETRY:
    add.u32 %r4, %r3, %r1;
    add.u32 %r4, %r4, 1;
    atom.sys.global.cas.b32 %r5, [%rd3], %r3, %r4;
    setp.ne.u32 %p1, %r5, %r3;
    mov.u32 %r3, %r5;
    @%p1 bra RETRY;
    ret;""")


def wait_then_raise():
    """Thread 0 waits until *wait_on != 0 (ld.acquire.sys), then sets *raise_ = 1 (st.release.sys)."""
    return kernel("wait_then_raise", ".param .u64 wait_on, .param .u64 raise_", """
    ld.param.u64 %rd1, [wait_on];
    ld.param.u64 %rd2, [raise_];
    mov.u32 %r1, %tid.x;
    setp.ne.u32 %p1, %r1, 0;
    @%p1 bra DONE;
SPIN:
    ld.acquire.sys.global.u32 %r2, [%rd1];
    setp.eq.u32 %p2, %r2, 0;
    @%p2 bra SPIN;
    mov.u32 %r3, 1;
    st.release.sys.global.u32 [%rd2], %r3;
DONE:
    ret;""")


def store_one():
    """out[tid] = tid + 1 (a plain store through whatever pointer it is given)."""
    return kernel("store_one", ".param .u64 out", """
    ld.param.u64 %rd1, [out];
    mov.u32 %r1, %tid.x;
    add.u32 %r2, %r1, 1;
    mul.wide.u32 %rd2, %r1, 4;
    add.s64 %rd3, %rd1, %rd2;
    st.global.u32 [%rd3], %r2;
    ret;""")


def clocks():
    """out[2*tid] = %clock64, out[2*tid+1] = %globaltimer; plus %smid / %nsmid into sm[2*tid..]."""
    return kernel("clocks", ".param .u64 out, .param .u64 sm", """
    ld.param.u64 %rd1, [out];
    ld.param.u64 %rd2, [sm];
    mov.u32 %r1, %tid.x;
    mov.u32 %r9, %ctaid.x;
    mov.u32 %r8, %ntid.x;
    mad.lo.u32 %r1, %r9, %r8, %r1;
    mov.u64 %rd3, %clock64;
    mov.u64 %rd4, %globaltimer;
    mul.wide.u32 %rd5, %r1, 16;
    add.s64 %rd6, %rd1, %rd5;
    st.global.v2.u64 [%rd6], {%rd3, %rd4};
    mov.u32 %r2, %smid;
    mov.u32 %r3, %nsmid;
    mul.wide.u32 %rd7, %r1, 8;
    add.s64 %rd8, %rd2, %rd7;
    st.global.v2.u32 [%rd8], {%r2, %r3};
    ret;""")


def scopes():
    """One of each scoped memory operation DeepEP's kernels use; out[tid] = the sum of what it read."""
    return kernel("scopes", ".param .u64 buf", """
    ld.param.u64 %rd1, [buf];
    mov.u32 %r1, %tid.x;
    mul.wide.u32 %rd2, %r1, 4;
    add.s64 %rd3, %rd1, %rd2;
    ld.relaxed.cta.global.u32 %r2, [%rd3];
    ld.relaxed.cluster.global.u32 %r3, [%rd3];
    ld.relaxed.gpu.global.u32 %r4, [%rd3];
    ld.relaxed.sys.global.u32 %r5, [%rd3];
    ld.acquire.gpu.global.u32 %r6, [%rd3];
    ld.volatile.global.u32 %r7, [%rd3];
    ld.global.nc.L1::no_allocate.L2::256B.u32 %r8, [%rd3];
    ld.global.nc.L1::no_allocate.v4.s32 {%r20, %r21, %r22, %r23}, [%rd1];
    add.u32 %r2, %r2, %r3;
    add.u32 %r2, %r2, %r4;
    add.u32 %r2, %r2, %r5;
    add.u32 %r2, %r2, %r6;
    add.u32 %r2, %r2, %r7;
    add.u32 %r2, %r2, %r8;
    fence.acq_rel.cta;
    fence.acq_rel.gpu;
    fence.acq_rel.sys;
    fence.sc.cta;
    fence.sc.gpu;
    fence.sc.sys;
    fence.acq_rel.cluster;
    membar.cta;
    membar.gl;
    membar.sys;
    st.relaxed.gpu.global.u32 [%rd3], %r2;
    st.release.cta.global.u32 [%rd3], %r2;
    st.release.gpu.global.u32 [%rd3], %r2;
    st.volatile.global.u32 [%rd3], %r2;
    st.relaxed.sys.global.u32 [%rd3], %r2;
    atom.acq_rel.gpu.global.add.u32 %r9, [%rd1+256], 1;
    atom.acquire.sys.global.or.b32 %r9, [%rd1+260], 1;
    atom.relaxed.cta.global.max.u32 %r9, [%rd1+264], %r1;
    red.release.sys.global.add.u32 [%rd1+268], 2;
    red.relaxed.gpu.global.min.u32 [%rd1+272], %r1;
    st.release.sys.global.u32 [%rd3], %r2;
    ret;""")


def bulk_copy():
    """Thread 0 moves 256 bytes src -> shared (cp.async.bulk + mbarrier) -> dst (cp.async.bulk bulk_group)."""
    return kernel("bulk_copy", ".param .u64 src, .param .u64 dst", """
    .shared .align 16 .b8 buf[256];
    .shared .align 8 .b64 bar;
    ld.param.u64 %rd1, [src];
    ld.param.u64 %rd2, [dst];
    mov.u32 %r1, %tid.x;
    setp.ne.u32 %p1, %r1, 0;
    @%p1 bra DONE;
    mov.u32 %r2, bar;
    mov.u32 %r3, buf;
    mbarrier.init.shared::cta.b64 [%r2], 1;
    mbarrier.arrive.expect_tx.shared::cta.b64 %rd3, [%r2], 256;
    cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes [%r3], [%rd1], 256, [%r2];
WAIT:
    mbarrier.try_wait.parity.shared::cta.b64 %p2, [%r2], 0;
    @!%p2 bra WAIT;
    cp.async.bulk.global.shared::cta.bulk_group [%rd2], [%r3], 256;
    cp.async.bulk.commit_group;
    cp.async.bulk.wait_group 0;
DONE:
    ret;""")


def store_then_raise():
    """out[tid] = tid + 1; a barrier; thread 0 sets *flag = 1 (st.release.sys)."""
    return kernel("store_then_raise", ".param .u64 out, .param .u64 flag", """
    ld.param.u64 %rd1, [out];
    ld.param.u64 %rd4, [flag];
    mov.u32 %r1, %tid.x;
    add.u32 %r2, %r1, 1;
    mul.wide.u32 %rd2, %r1, 4;
    add.s64 %rd3, %rd1, %rd2;
    st.global.u32 [%rd3], %r2;
    bar.sync 0;
    setp.ne.u32 %p1, %r1, 0;
    @%p1 bra DONE;
    mov.u32 %r3, 1;
    st.release.sys.global.u32 [%rd4], %r3;
DONE:
    ret;""")


def reader():
    """Thread 0 waits for *flag != 0 (ld.acquire.sys); a barrier; out[tid] = data[tid]."""
    return kernel("reader", ".param .u64 flag, .param .u64 data, .param .u64 out", """
    ld.param.u64 %rd1, [flag];
    ld.param.u64 %rd2, [data];
    ld.param.u64 %rd3, [out];
    mov.u32 %r1, %tid.x;
    setp.ne.u32 %p1, %r1, 0;
    @%p1 bra WAIT;
SPIN:
    ld.acquire.sys.global.u32 %r2, [%rd1];
    setp.eq.u32 %p2, %r2, 0;
    @%p2 bra SPIN;
WAIT:
    bar.sync 0;
    mul.wide.u32 %rd4, %r1, 4;
    add.s64 %rd5, %rd2, %rd4;
    ld.global.u32 %r3, [%rd5];
    add.s64 %rd6, %rd3, %rd4;
    st.global.u32 [%rd6], %r3;
    ret;""")


def publisher():
    """Thread 0 raises *early (st.release.sys) before the data exists; then data[i] = i + 1 for i < n (all
    threads, through a peer pointer); a barrier; thread 0 raises *late with `late_store` (covers the data)."""
    return kernel("publisher", ".param .u64 data, .param .u64 early, .param .u64 late, .param .u32 n", """
    ld.param.u64 %rd1, [data];
    ld.param.u64 %rd2, [early];
    ld.param.u64 %rd3, [late];
    ld.param.u32 %r2, [n];
    mov.u32 %r1, %tid.x;
    mov.u32 %r4, %ntid.x;
    mov.u32 %r8, 1;
    setp.ne.u32 %p1, %r1, 0;
    @!%p1 st.release.sys.global.u32 [%rd2], %r8;
    bar.sync 0;
    mov.u32 %r5, %r1;
FILL:
    setp.ge.u32 %p2, %r5, %r2;
    @%p2 bra FILLED;
    add.u32 %r6, %r5, 1;
    mul.wide.u32 %rd4, %r5, 4;
    add.s64 %rd5, %rd1, %rd4;
    st.global.u32 [%rd5], %r6;
    add.u32 %r5, %r5, %r4;
    bra FILL;
FILLED:
    bar.sync 0;
    @!%p1 st.release.sys.global.u32 [%rd3], %r8;
    ret;""")


def consumer(wait: str):
    """Thread 0 runs `wait` (PTX with %rd1 = early, %rd2 = late; it may use %r2/%r3 and %p2-%p4); a
    barrier; out[i] = data[i] for i < n (all threads)."""
    return kernel("consumer", ".param .u64 early, .param .u64 late, .param .u64 data, .param .u64 out, "
                              ".param .u32 n", f"""
    ld.param.u64 %rd1, [early];
    ld.param.u64 %rd2, [late];
    ld.param.u64 %rd3, [data];
    ld.param.u64 %rd4, [out];
    ld.param.u32 %r9, [n];
    mov.u32 %r1, %tid.x;
    mov.u32 %r4, %ntid.x;
    setp.ne.u32 %p1, %r1, 0;
    @%p1 bra WAITED;
{wait}
WAITED:
    bar.sync 0;
    mov.u32 %r5, %r1;
COPY:
    setp.ge.u32 %p5, %r5, %r9;
    @%p5 bra DONE;
    mul.wide.u32 %rd5, %r5, 4;
    add.s64 %rd6, %rd3, %rd5;
    ld.global.u32 %r6, [%rd6];
    add.s64 %rd7, %rd4, %rd5;
    st.global.u32 [%rd7], %r6;
    add.u32 %r5, %r5, %r4;
    bra COPY;
DONE:
    ret;""")


def bumper(bump: str):
    """Thread 0 waits (ld.relaxed.sys) until *flag != 0, runs `bump` on [%rd1] (e.g. an atom.add), then sets
    *go = 1 (st.relaxed.sys: a plain strong store, which publishes nothing)."""
    return kernel("bumper", ".param .u64 flag, .param .u64 go", f"""
    ld.param.u64 %rd1, [flag];
    ld.param.u64 %rd2, [go];
    mov.u32 %r1, %tid.x;
    setp.ne.u32 %p1, %r1, 0;
    @%p1 bra DONE;
SPIN:
    ld.relaxed.sys.global.u32 %r2, [%rd1];
    setp.eq.u32 %p2, %r2, 0;
    @%p2 bra SPIN;
    mov.u32 %r3, 1;
    {bump}
    mov.u32 %r5, 1;
    st.relaxed.sys.global.u32 [%rd2], %r5;
DONE:
    ret;""")
