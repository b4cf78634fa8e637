"""Block sum with warp shuffles: each block adds up its blockDim.x elements of x into out[blockIdx.x].

Lanes reduce in registers with shfl.sync.down (5 steps), warp 0 then reduces the per-warp sums it
reads back from shared memory.
"""

from ptxforge.dsl import (
    bar_sync,
    ctaid,
    f32,
    guard,
    if_,
    kernel,
    ld,
    mad,
    ntid,
    ptr,
    reg,
    shared,
    shfl_down,
    st,
    tid,
    u32,
)

ARCHS = ("sm_80", "sm_90a")


def warp_sum(v):
    """v summed over the 32 lanes of the warp (the total ends up in lane 0)."""
    for offset in (16, 8, 4, 2, 1):  # Python loop: unrolled into five shuffles
        v += shfl_down(v, offset)
    return v


@kernel(arch="sm_80")
def block_sum(x: ptr(f32), out: ptr(f32), n: u32):
    warp_sums = shared(f32, 32)
    i = mad(ctaid.x, ntid.x, tid.x)
    v = reg.f32(0.0)
    with guard(i < n):
        ld(x[i], out=v)
    warp_sum(v)
    lane, warp = tid.x & 31, tid.x >> 5
    with guard(lane == 0):
        st(warp_sums[warp], v)
    bar_sync()
    with if_(warp == 0):
        v.set(0.0)
        with guard(lane < (ntid.x >> 5)):
            ld(warp_sums[lane], out=v)
        warp_sum(v)
        with guard(lane == 0):
            st(out[ctaid.x], v)


if __name__ == "__main__":
    import numpy as np

    n = 1000
    x = np.random.rand(n).astype(np.float32)
    out = np.zeros(4, np.float32)
    block_sum.launch(grid=(4,), block=(256,), args=[x, out, np.uint32(n)], device="emu")
    print(block_sum.ptx())
    print(out, [x[k * 256:(k + 1) * 256].sum() for k in range(4)])
