"""numba-cuda atomics: add (i32, f32, f64), max/min, compare-and-swap and exchange, shared-memory histogram."""

from numba import cuda, float32, float64, int32, uint32


def atomic_counters(x, icount, fsum, dsum):
    i = cuda.grid(1)
    if i < x.size:
        v = x[i]
        cuda.atomic.add(icount, 0, 1)
        cuda.atomic.max(icount, 1, v)
        cuda.atomic.min(icount, 2, v)
        cuda.atomic.add(fsum, 0, float32(v))
        cuda.atomic.add(dsum, 0, float64(v) * 0.5)
        cuda.atomic.exch(icount, 3, v)
        cuda.atomic.compare_and_swap(icount[4:], 0, i + 1)   # first thread to arrive claims slot 4


def shared_histogram(x, bins):
    local = cuda.shared.array(64, dtype=uint32)
    tid = cuda.threadIdx.x
    if tid < 64:
        local[tid] = 0
    cuda.syncthreads()
    i = cuda.grid(1)
    if i < x.size:
        cuda.atomic.add(local, x[i] % 64, 1)
    cuda.syncthreads()
    if tid < 64:
        cuda.atomic.add(bins, tid, local[tid])


CORPUS = [
    dict(name="atomic_counters", fn=atomic_counters, sig=(int32[:], int32[:], float32[:], float64[:])),
    dict(name="shared_histogram_u32", fn=shared_histogram, sig=(uint32[:], uint32[:])),
]
