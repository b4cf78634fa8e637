"""Warp specialization on sm_90a: a producer warpgroup streams chunks of x into a ring of shared-memory
buffers while a consumer warpgroup computes y = alpha * x from them, synchronised by mbarriers.

    warpgroup 0 (threads 0-127)   setmaxnreg.dec 40   for each chunk: wait `empty[s]`, copy x -> buf[s]
                                                       (cp.async 16 B per thread + cp.async.mbarrier.arrive,
                                                       or with tma=True one cp.async.bulk + expect_tx)
    warpgroup 1 (threads 128-255) setmaxnreg.inc 232  for each chunk: wait `full[s]`, read buf[s],
                                                       arrive on `empty[s]`, write y

This is the structure of DeepGEMM's kernels (a TMA producer warpgroup with few registers feeding math
warpgroups with many). Launch with 256 threads per block; x and y hold nchunks * 512 floats.
"""

from ptxforge.dsl import (
    bar_sync,
    cp_async,
    cp_async_bulk,
    cp_async_mbarrier_arrive,
    else_,
    f32,
    fence_mbarrier_init,
    if_,
    kernel,
    ld,
    mad,
    mbarrier_arrive,
    mbarrier_arrive_expect_tx,
    mbarrier_init,
    mbarrier_wait,
    mbarriers,
    ptr,
    range_,
    setmaxnreg,
    shared,
    st,
    tid,
    u32,
)

ARCHS = ("sm_90a",)
STAGES = 2
CHUNK = 512  # floats per chunk: 128 producer threads x 16 bytes
PRODUCER_REGS, CONSUMER_REGS = 40, 232


def mad_index(chunk, t):
    """Element index of thread t's 4 floats in `chunk`."""
    return mad(chunk, CHUNK, t << 2)


@kernel(arch="sm_90a", maxntid=256, minnctapersm=1)
def scale_pipeline(x: ptr(f32, align=16), y: ptr(f32, align=16), alpha: f32, nchunks: u32, tma=False):
    buf = shared(f32, (STAGES, CHUNK), align=128, name="buf")
    full, empty = mbarriers(STAGES, name="full"), mbarriers(STAGES, name="empty")
    t = tid.x & 127
    with if_(tid.x == 0):
        for s in range(STAGES):
            mbarrier_init(full[s], 1 if tma else 128)
            mbarrier_init(empty[s], 128)
        fence_mbarrier_init()
    bar_sync()
    with if_(tid.x < 128):  # producer warpgroup
        setmaxnreg(PRODUCER_REGS, inc=False)
        for c in range_(0, nchunks):
            s, phase = c & (STAGES - 1), (c >> 1) & 1
            mbarrier_wait(empty[s], phase ^ 1)  # a fresh barrier counts as having completed phase "1"
            if tma:
                with if_(t == 0):
                    mbarrier_arrive_expect_tx(full[s], CHUNK * 4)
                    cp_async_bulk(buf[s, 0], x + c * CHUNK, CHUNK * 4, full[s])
            else:
                cp_async(buf[s, t << 2], x + mad_index(c, t))
                cp_async_mbarrier_arrive(full[s], noinc=True)
    with else_():  # consumer warpgroup
        setmaxnreg(CONSUMER_REGS, inc=True)
        for c in range_(0, nchunks):
            s, phase = c & (STAGES - 1), (c >> 1) & 1
            mbarrier_wait(full[s], phase)
            v = ld(buf[s, t << 2], v=4)
            mbarrier_arrive(empty[s])
            st(y + mad_index(c, t), tuple(vi * alpha for vi in v))


scale_pipeline_tma = scale_pipeline.specialize(tma=True)

if __name__ == "__main__":
    print(scale_pipeline.ptx())
