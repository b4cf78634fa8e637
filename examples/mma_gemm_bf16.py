"""A bf16 tensor-core GEMM tile with mma.sync (sm_80): C[M, N] (f32) = A[M, K] @ B[N, K]^T.

A is row-major and B is K-major (as a Linear layer's weight). Each 128-thread block computes a 32x32
tile of C; each of its 4 warps owns 16x16 of it (two m16n8k16 mma.sync per 16-wide K step). Tiles of
A and B are staged in shared memory with cp.async (16 bytes per thread) and fed to the tensor cores
with ldmatrix. M, N and K must be multiples of 32.
"""

from ptxforge.dsl import (
    bar_sync,
    bf16,
    cp_async,
    cp_async_commit,
    cp_async_wait,
    ctaid,
    f32,
    kernel,
    laneid,
    ldmatrix,
    mad,
    mma_sync,
    ptr,
    range_,
    reg,
    shared,
    st,
    tid,
    u32,
)

ARCHS = ("sm_80", "sm_90a")
TILE = 32  # block tile in M, N and K


@kernel(arch="sm_80")
def gemm_bf16(a: ptr(bf16, align=16), b: ptr(bf16, align=16), c: ptr(f32, align=8), M: u32, N: u32, K: u32):
    sa = shared(bf16, (TILE, TILE), name="sa")
    sb = shared(bf16, (TILE, TILE), name="sb")
    lane, warp = laneid, tid.x >> 5
    wm, wn = (warp >> 1) << 4, (warp & 1) << 4  # the warp's 16x16 corner in the block tile
    m0, n0 = ctaid.y * TILE, ctaid.x * TILE

    # cp.async: thread t copies 8 bf16 (16 bytes) of row t/4 of each tile, at column (t%4)*8
    row, col = tid.x >> 2, (tid.x & 3) << 3
    pa = (a + mad(m0 + row, K, col)).copy()
    pb = (b + mad(n0 + row, K, col)).copy()
    dst_a, dst_b = sa[row, col], sb[row, col]

    # ldmatrix row addresses: A as four 8x8 blocks (rows 0-15, k 0-7 then 8-15); B as n 0-7 / 8-15
    a_frag_row = sa[wm + (lane & 15), (lane >> 4) << 3]
    b_frag_row = sb[wn + ((lane >> 4) << 3) + (lane & 7), ((lane >> 3) & 1) << 3]

    acc0, acc1 = reg.f32[4].fill(0.0), reg.f32[4].fill(0.0)
    for _ in range_(0, K, TILE):
        cp_async(dst_a, pa)
        cp_async(dst_b, pb)
        cp_async_commit()
        pa += TILE
        pb += TILE
        cp_async_wait(0)
        bar_sync()
        for kk in (0, 16):
            af = ldmatrix(a_frag_row + kk, x=4)
            bf = ldmatrix(b_frag_row + kk, x=4)
            mma_sync(acc0, af, bf[0:2], acc0, shape="m16n8k16", atype=bf16)
            mma_sync(acc1, af, bf[2:4], acc1, shape="m16n8k16", atype=bf16)
        bar_sync()

    # accumulator layout: lane holds rows lane/4 and lane/4 + 8, columns 2*(lane%4) + {0, 1}
    r = m0 + wm + (lane >> 2)
    cc = n0 + wn + ((lane & 3) << 1)
    out = c + mad(r, N, cc)
    out8 = c + mad(r + 8, N, cc)
    st(out, (acc0[0], acc0[1]))
    st(out8, (acc0[2], acc0[3]))
    st(out + 8, (acc1[0], acc1[1]))
    st(out8 + 8, (acc1[2], acc1[3]))


def reference(A, B):
    import numpy as np

    return A.astype(np.float32) @ B.astype(np.float32).T


if __name__ == "__main__":
    print(gemm_bf16.ptx())
