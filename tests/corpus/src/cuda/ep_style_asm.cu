// Inline-asm memory helpers in the style expert-parallel communication kernels (DeepEP) write them:
// non-coherent 128-bit loads with L1::no_allocate and an L2::256B prefetch hint, no-allocate stores,
// st.release / ld.acquire at system and gpu scope, red.release.sys.global.add, ld.volatile, atom.cas
// locks, fence.acq_rel.sys, and warp-level channel handoffs built from them.
// archs: sm_80 sm_90a (variants: lineinfo, i.e. -O3 -lineinfo too). Launch: 1D; references below.

__device__ __forceinline__ int4 ld_nc_global(const int4* p) {
    int4 v;
    asm volatile("ld.global.nc.L1::no_allocate.L2::256B.v4.s32 {%0, %1, %2, %3}, [%4];"
                 : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w) : "l"(p));
    return v;
}
__device__ __forceinline__ void st_na_global(int4* p, int4 v) {
    asm volatile("st.global.L1::no_allocate.v4.s32 [%0], {%1, %2, %3, %4};"
                 ::"l"(p), "r"(v.x), "r"(v.y), "r"(v.z), "r"(v.w));
}
__device__ __forceinline__ int ld_nc_s32(const int* p) {
    int v;
    asm volatile("ld.global.nc.L1::no_allocate.L2::128B.s32 %0, [%1];" : "=r"(v) : "l"(p));
    return v;
}
__device__ __forceinline__ void st_release_sys(int* p, int v) {
    asm volatile("st.release.sys.global.s32 [%0], %1;" ::"l"(p), "r"(v) : "memory");
}
__device__ __forceinline__ int ld_acquire_sys(const int* p) {
    int v;
    asm volatile("ld.acquire.sys.global.s32 %0, [%1];" : "=r"(v) : "l"(p) : "memory");
    return v;
}
__device__ __forceinline__ void st_release_gpu(int* p, int v) {
    asm volatile("st.release.gpu.global.s32 [%0], %1;" ::"l"(p), "r"(v) : "memory");
}
__device__ __forceinline__ int ld_acquire_gpu(const int* p) {
    int v;
    asm volatile("ld.acquire.gpu.global.s32 %0, [%1];" : "=r"(v) : "l"(p) : "memory");
    return v;
}
__device__ __forceinline__ void red_add_release_sys(int* p, int v) {
    asm volatile("red.release.sys.global.add.s32 [%0], %1;" ::"l"(p), "r"(v) : "memory");
}
__device__ __forceinline__ int ld_volatile(const int* p) {
    int v;
    asm volatile("ld.volatile.global.s32 %0, [%1];" : "=r"(v) : "l"(p));
    return v;
}
__device__ __forceinline__ int atomic_add_release_gpu(int* p, int v) {
    int old;
    asm volatile("atom.add.release.gpu.global.s32 %0, [%1], %2;" : "=r"(old) : "l"(p), "r"(v) : "memory");
    return old;
}
__device__ __forceinline__ int ld_acquire_cta_shared(const int* p) {
    int v;
    asm volatile("ld.acquire.cta.shared.s32 %0, [%1];" : "=r"(v) : "r"((unsigned)__cvta_generic_to_shared(p)));
    return v;
}
__device__ __forceinline__ void acquire_lock(int* lock) {
    while (atomicCAS(lock, 0, 1) != 0) {
    }
    asm volatile("fence.acq_rel.gpu;" ::: "memory");
}
__device__ __forceinline__ void release_lock(int* lock) {
    asm volatile("fence.acq_rel.gpu;" ::: "memory");
    atomicExch(lock, 0);
}

// A warp-strided copy of int4 chunks with ld.nc / st.na, unrolled by 4 as communication kernels copy
// token payloads; block 0 also copies n_scalars ints with a 32-bit ld.nc (L2::128B hint).
// Launch: block 128, grid any; n_chunks int4 values, n_scalars <= 128. Reference: out == in, sout == sin.
extern "C" __global__ void ep_copy_nc(const int4* in, int4* out, int n_chunks, const int* sin, int* sout,
                                      int n_scalars) {
    if (blockIdx.x == 0 && (int)threadIdx.x < n_scalars) sout[threadIdx.x] = ld_nc_s32(sin + threadIdx.x);
    int lane = threadIdx.x & 31;
    int warp = (blockIdx.x * blockDim.x + threadIdx.x) >> 5;
    int nwarps = (gridDim.x * blockDim.x) >> 5;
    int per = (n_chunks + nwarps - 1) / nwarps;
    int lo = warp * per, hi = min(lo + per, n_chunks);
    int j = lo + lane;
#pragma unroll 4
    for (; j < hi; j += 32) st_na_global(out + j, ld_nc_global(in + j));
}

// A channel between two warps of a block: warp 0 (sender) writes 32 tokens of 4 ints each with st.na,
// then lane 0 bumps the tail counter with red.release.sys; warp 1 (receiver) polls the tail with
// ld.acquire.sys until it reaches 32, reads the tokens back with ld.nc, writes sum + lane and acks with
// st.release.sys (ack = 1). Only then the sender reuses the slots: round 2 doubles x, publishes through a
// head flag (st.release.gpu / ld.acquire.gpu); the receiver reads x with ld.volatile and acks 7, which the
// sender polls with ld.volatile followed by fence.acq_rel.sys. Launch: block 64, grid any; buf is
// [grid*32] int4, tail/head/ack [grid] i32 zeroed.
// Reference: out[b*32 + l] = sum(in[b*32 + l]) + l; second[b*32 + l] = in[b*32 + l].x * 2;
// tail[b] == 32, head[b] == 1, ack[b] == 7.
extern "C" __global__ void ep_channel_handoff(const int4* in, int4* buf, int* tail, int* head, int* ack,
                                              int* out, int* second) {
    int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    int b = blockIdx.x;
    int4* slot = buf + b * 32;
    if (warp == 0) {
        st_na_global(slot + lane, ld_nc_global(in + b * 32 + lane));
        __syncwarp();
        if (lane == 0) {
            red_add_release_sys(tail + b, 32);
            while (ld_acquire_sys(ack + b) != 1) {
            }
        }
        __syncwarp();
        int4 v = slot[lane];
        v.x *= 2;
        slot[lane] = v;
        __syncwarp();
        if (lane == 0) {
            st_release_gpu(head + b, 1);
            while (ld_volatile(ack + b) != 7) {
            }
            asm volatile("fence.acq_rel.sys;" ::: "memory");
        }
    } else if (warp == 1) {
        if (lane == 0) {
            while (ld_acquire_sys(tail + b) < 32) {
            }
        }
        __syncwarp();
        int4 t = ld_nc_global(slot + lane);
        out[b * 32 + lane] = t.x + t.y + t.z + t.w + lane;
        __syncwarp();
        if (lane == 0) {
            st_release_sys(ack + b, 1);
            while (ld_acquire_gpu(head + b) == 0) {
            }
        }
        __syncwarp();
        second[b * 32 + lane] = ld_volatile(&slot[lane].x);
        __syncwarp();
        if (lane == 0) st_release_sys(ack + b, 7);
    }
}

// Ticket counters and a spin lock over global memory: every warp's lane 0 takes a ticket with
// atom.add.release.gpu and, under the lock, appends its ticket to a log (order = lock order); a block-local
// shared flag is read with ld.acquire.cta. Launch: block 128, grid any; counter/lock i32[1] zeroed, log is
// [nwarps] i32, count i32[1] zeroed. Reference: sorted(log) == range(nwarps), *counter == nwarps,
// sorted(tickets) == range(nwarps), flag_seen all 5.
extern "C" __global__ void ep_ticket_lock(int* counter, int* lock, int* log, int* count, int* tickets,
                                          int* flag_seen) {
    __shared__ int sflag;
    int lane = threadIdx.x & 31;
    int gw = (blockIdx.x * blockDim.x + threadIdx.x) >> 5;
    if (threadIdx.x == 0) sflag = 5;
    __syncthreads();
    if (lane == 0) {
        int t = atomic_add_release_gpu(counter, 1);
        tickets[gw] = t;
        acquire_lock(lock);
        int c = *count;
        log[c] = t;
        *count = c + 1;
        release_lock(lock);
    }
    flag_seen[blockIdx.x * blockDim.x + threadIdx.x] = ld_acquire_cta_shared(&sflag);
}
