"""numba-cuda block reduction in shared memory (tree) and a warp-shuffle reduction; one partial per block."""

from numba import cuda, float32, int64

BLOCK = 256


def block_sum(x, partial):
    s = cuda.shared.array(BLOCK, dtype=float32)
    tid = cuda.threadIdx.x
    i = cuda.grid(1)
    s[tid] = x[i] if i < x.size else float32(0.0)
    cuda.syncthreads()
    stride = BLOCK // 2
    while stride > 0:
        if tid < stride:
            s[tid] += s[tid + stride]
        cuda.syncthreads()
        stride //= 2
    if tid == 0:
        partial[cuda.blockIdx.x] = s[0]


def warp_sum_i64(x, partial):
    i = cuda.grid(1)
    v = x[i] if i < x.size else int64(0)
    offset = 16
    while offset > 0:
        v += cuda.shfl_down_sync(0xFFFFFFFF, v, offset)
        offset //= 2
    if cuda.laneid == 0:
        cuda.atomic.add(partial, cuda.blockIdx.x, v)


CORPUS = [
    dict(name="block_sum_shared", fn=block_sum, sig=(float32[:], float32[:])),
    dict(name="warp_sum_shfl_i64", fn=warp_sum_i64, sig=(int64[:], int64[:])),
]
