// Synchronization patterns for the sanitizer's release/acquire checks (tests/sanitizer/test_sync_*.py).
// Correct kernels first; each BUG line is a planted race the sanitizer must report.
#include <cooperative_groups.h>
#include <cuda/barrier>
#include <cuda/pipeline>
namespace cg = cooperative_groups;

__device__ __forceinline__ void st_release_gpu(unsigned* p, unsigned v) {
    asm volatile("st.release.gpu.global.u32 [%0], %1;" :: "l"(p), "r"(v) : "memory");
}
__device__ __forceinline__ unsigned ld_acquire_gpu(const unsigned* p) {
    unsigned v;
    asm volatile("ld.acquire.gpu.global.u32 %0, [%1];" : "=r"(v) : "l"(p) : "memory");
    return v;
}
__device__ __forceinline__ void st_release_cta(unsigned* p, unsigned v) {
    asm volatile("st.release.cta.global.u32 [%0], %1;" :: "l"(p), "r"(v) : "memory");
}
__device__ __forceinline__ unsigned ld_acquire_cta(const unsigned* p) {
    unsigned v;
    asm volatile("ld.acquire.cta.global.u32 %0, [%1];" : "=r"(v) : "l"(p) : "memory");
    return v;
}

// ---- a grid-wide barrier as cooperative groups' grid.sync() compiles it (bar.sync; one thread per block
// adds to a global word with atom.add.release.gpu and spins with ld.acquire.gpu until the top bit flips;
// bar.sync). The emulator has no cooperative-launch workspace (%envreg1/2), so the word is an argument.
__device__ __forceinline__ void grid_barrier(unsigned* word) {
    __syncthreads();
    if (threadIdx.x == 0) {
        unsigned inc = blockIdx.x == 0 ? 0x80000000u - (gridDim.x - 1) : 1u;
        unsigned old;
        asm volatile("atom.add.release.gpu.u32 %0, [%1], %2;" : "=r"(old) : "l"(word), "r"(inc) : "memory");
        while (((old ^ ld_acquire_gpu(word)) & 0x80000000u) == 0) {}
    }
    __syncthreads();
}
extern "C" __global__ void grid_barrier_exchange(const float* in, float* mid, float* out, unsigned* word) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    int n = gridDim.x * blockDim.x;
    mid[i] = 2.0f * in[i];
    grid_barrier(word);
    out[i] = mid[(i + blockDim.x) % n] + 1.0f;
    grid_barrier(word);
    mid[i] = out[(i + n - blockDim.x) % n];          // rewritten after everyone read it: ordered again
}
// the same with an acq_rel atomic ticket and a relaxed spin closed by fence.acq_rel.gpu
extern "C" __global__ void ticket_barrier_exchange(const float* in, float* mid, float* out, unsigned* ticket) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    int n = gridDim.x * blockDim.x;
    mid[i] = 2.0f * in[i];
    __syncthreads();
    if (threadIdx.x == 0) {
        unsigned old;
        asm volatile("atom.acq_rel.gpu.or.b32 %0, [%1], %2;" : "=r"(old) : "l"(ticket + 1 + blockIdx.x), "r"(1u) : "memory");
        asm volatile("red.release.gpu.global.add.u32 [%0], %1;" :: "l"(ticket), "r"(1u) : "memory");
        unsigned seen = 0;
        while (seen < gridDim.x)
            asm volatile("ld.relaxed.gpu.global.u32 %0, [%1];" : "=r"(seen) : "l"(ticket) : "memory");
        asm volatile("fence.acq_rel.gpu;" ::: "memory");
    }
    __syncthreads();
    out[i] = mid[(i + blockDim.x) % n] + 1.0f;
}
// BUG twin: the spin is not followed by a fence (a relaxed read alone does not acquire)
extern "C" __global__ void ticket_barrier_no_fence(const float* in, float* mid, float* out, unsigned* ticket) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    int n = gridDim.x * blockDim.x;
    mid[i] = 2.0f * in[i];
    __syncthreads();
    if (threadIdx.x == 0) {
        asm volatile("red.release.gpu.global.add.u32 [%0], %1;" :: "l"(ticket), "r"(1u) : "memory");
        unsigned seen = 0;
        while (seen < gridDim.x)
            asm volatile("ld.relaxed.gpu.global.u32 %0, [%1];" : "=r"(seen) : "l"(ticket) : "memory");
    }
    __syncthreads();
    out[i] = mid[(i + blockDim.x) % n] + 1.0f;       // REPORT: unordered read of another block's write
}
// BUG twin: thread 0 acquires, but the other threads read without a __syncthreads after it
extern "C" __global__ void handoff_missing_block_sync(const float* in, float* data, unsigned* flag, float* out) {
    int t = threadIdx.x;
    if (blockIdx.x == 0) {
        data[t] = 3.0f * in[t];
        __syncthreads();
        if (t == 0) st_release_gpu(flag, 1);
    } else {
        if (t == 0) { while (ld_acquire_gpu(flag) == 0) {} }
        __syncwarp();
        if (t >= 32) out[t] = data[t];               // REPORT: warp 1 never synchronized with thread 0
    }
}

// ---- cooperative groups: block and tile sync
extern "C" __global__ void cg_block_reverse(const float* in, float* out) {
    __shared__ float s[256];
    cg::thread_block block = cg::this_thread_block();
    int t = block.thread_rank();
    s[t] = in[blockIdx.x * 256 + t];
    block.sync();
    out[blockIdx.x * 256 + t] = s[255 - t];
}

// ---- cuda::barrier at block scope (mbarrier arrive/wait)
extern "C" __global__ void cuda_barrier_reverse(const float* in, float* out) {
    __shared__ float s[128];
#pragma nv_diag_suppress static_var_with_dynamic_init
    __shared__ cuda::barrier<cuda::thread_scope_block> bar;
    int t = threadIdx.x;
    if (t == 0) init(&bar, blockDim.x);
    __syncthreads();
    s[t] = in[blockIdx.x * 128 + t];
    bar.arrive_and_wait();
    out[blockIdx.x * 128 + t] = s[127 - t];
}

// ---- cuda::pipeline: a block-wide two-stage copy pipeline, torn down at the end
extern "C" __global__ void pipeline_sum(const float* in, float* out, int chunks) {
    constexpr int stages = 2;
    __shared__ float buf[stages][128];
#pragma nv_diag_suppress static_var_with_dynamic_init
    __shared__ cuda::pipeline_shared_state<cuda::thread_scope_block, stages> state;
    auto block = cg::this_thread_block();
    auto pipe = cuda::make_pipeline(block, &state);
    int t = threadIdx.x;
    float acc = 0.0f;
    for (int c = 0; c < stages && c < chunks; ++c) {
        pipe.producer_acquire();
        cuda::memcpy_async(block, buf[c % stages], in + (size_t)(blockIdx.x * chunks + c) * 128,
                           sizeof(float) * 128, pipe);
        pipe.producer_commit();
    }
    for (int c = 0; c < chunks; ++c) {
        pipe.consumer_wait();
        acc += buf[c % stages][(t + 1) % 128];
        pipe.consumer_release();
        int nxt = c + stages;
        if (nxt < chunks) {
            pipe.producer_acquire();
            cuda::memcpy_async(block, buf[nxt % stages], in + (size_t)(blockIdx.x * chunks + nxt) * 128,
                               sizeof(float) * 128, pipe);
            pipe.producer_commit();
        }
    }
    out[blockIdx.x * 128 + t] = acc;
}

// ---- flag handoffs between blocks: block 0 produces, block 1 consumes
extern "C" __global__ void handoff_fence_volatile(const float* in, float* data, volatile unsigned* flag, float* out) {
    int t = threadIdx.x;
    if (blockIdx.x == 0) {
        data[t] = 3.0f * in[t];
        __syncthreads();
        if (t == 0) { __threadfence(); *flag = 1; }
    } else {
        if (t == 0) { while (*flag == 0) {} __threadfence(); }
        __syncthreads();
        out[t] = data[t];
    }
}
extern "C" __global__ void handoff_release_acquire(const float* in, float* data, unsigned* flag, float* out) {
    int t = threadIdx.x;
    if (blockIdx.x == 0) {
        data[t] = 3.0f * in[t];
        __syncthreads();
        if (t == 0) st_release_gpu(flag, 1);
    } else {
        if (t == 0) { while (ld_acquire_gpu(flag) == 0) {} }
        __syncthreads();
        out[t] = data[t];
    }
}
extern "C" __global__ void handoff_weak_flag(const float* in, float* data, unsigned* flag, float* out) {
    int t = threadIdx.x;
    if (blockIdx.x == 0) {
        data[t] = 3.0f * in[t];
        __syncthreads();
        if (t == 0) { __threadfence(); *flag = 1; }      // BUG: weak store used as a flag
    } else {
        if (t == 0) { while (ld_acquire_gpu(flag) == 0) {} }
        __syncthreads();
        out[t] = data[t];
    }
}
extern "C" __global__ void handoff_cta_scope(const float* in, float* data, unsigned* flag, float* out) {
    int t = threadIdx.x;
    if (blockIdx.x == 0) {
        data[t] = 3.0f * in[t];
        __syncthreads();
        if (t == 0) st_release_cta(flag, 1);             // BUG: .cta scope does not reach block 1
    } else {
        if (t == 0) { while (ld_acquire_cta(flag) == 0) {} }
        __syncthreads();
        out[t] = data[t];                                // REPORT: scope too narrow
    }
}
extern "C" __global__ void handoff_no_acquire_fence(const float* in, float* data, volatile unsigned* flag, float* out) {
    int t = threadIdx.x;
    if (blockIdx.x == 0) {
        data[t] = 3.0f * in[t];
        __syncthreads();
        if (t == 0) { __threadfence(); *flag = 1; }
    } else {
        if (t == 0) { while (*flag == 0) {} }            // BUG: no fence after the spin
        __syncthreads();
        out[t] = data[t];                                // REPORT: unordered read (acquire side)
    }
}
extern "C" __global__ void handoff_no_release_fence(const float* in, float* data, volatile unsigned* flag, float* out) {
    int t = threadIdx.x;
    if (blockIdx.x == 0) {
        data[t] = 3.0f * in[t];
        __syncthreads();
        if (t == 0) { *flag = 1; }                       // BUG: no fence before the flag
    } else {
        if (t == 0) { while (*flag == 0) {} __threadfence(); }
        __syncthreads();
        out[t] = data[t];                                // REPORT: unordered read (release side)
    }
}
// ---- a plain store and an atomic on the same word, unordered
extern "C" __global__ void plain_vs_atomic(unsigned* counter) {
    if (threadIdx.x == 0) {
        if (blockIdx.x == 0) *counter = 5;               // BUG: plain store beside other blocks' atomics
        else atomicAdd(counter, 1u);
    }
}
// ---- many blocks count with atomics: never a race
extern "C" __global__ void atomic_count(unsigned* counter) {
    atomicAdd(counter, 1u);
    atomicOr(counter + 1, 1u << (threadIdx.x & 31));
}
// ---- uninitialized shared memory: a loaded value that is never used, then one that is
extern "C" __global__ void uninit_unused(const float* in, float* out, const int* sel) {
    __shared__ float s[64];
    int t = threadIdx.x;
    if (t < 32) s[t] = in[t];
    __syncthreads();
    float a = s[t];                   // lanes 32..63 load uninitialized bytes
    float b = s[t & 31];
    out[t] = (t < 32 || sel[0] == 0) ? b : a;   // with sel[0] == 0 the undefined value is never used
}
extern "C" __global__ void uninit_used(const float* in, float* out) {
    __shared__ float s[64];
    int t = threadIdx.x;
    if (t < 32) s[t] = in[t];
    __syncthreads();
    float a = s[t] * 2.0f;
    out[t] = a;                                     // REPORT: the undefined value reaches global memory
}
extern "C" __global__ void uninit_branch(const float* in, float* out) {
    __shared__ int s[64];
    int t = threadIdx.x;
    if (t < 32) s[t] = (int)in[t];
    __syncthreads();
    int a = s[t];
    if (a > 3) out[t] = 1.0f;                       // REPORT: the undefined value decides a branch
}
extern "C" __global__ void uninit_address(const float* in, float* out) {
    __shared__ int s[64];
    int t = threadIdx.x;
    if (t < 32) s[t] = t;
    __syncthreads();
    int a = s[t];
    out[t] = in[a & 63];                            // REPORT: the undefined value is an address
}
extern "C" __global__ void uninit_store_back(const float* in, float* out) {
    __shared__ float s[64];
    int t = threadIdx.x;
    if (t < 32) s[t] = in[t];
    __syncthreads();
    volatile float* vs = s;
    float a = vs[t];
    vs[t] = a;                                      // copied back where it came from: not a use
    __syncthreads();
    out[t] = t < 32 ? s[t] : 0.0f;
}
extern "C" __global__ void uninit_shfl(const float* in, float* out) {
    __shared__ float s[64];
    int t = threadIdx.x;
    if (t < 32) s[t] = in[t];
    __syncthreads();
    float a = s[t];
    float b = __shfl_xor_sync(0xffffffffu, a, 1);   // REPORT: the undefined value enters a shuffle
    if (t < 32) out[t] = b;
}
// ---- cooperative groups: a 64-thread tile syncs through atom.or.acq_rel.cta on reserved shared memory
extern "C" __global__ void cg_tile64_rotate(const float* in, float* out) {
    __shared__ float s[256];
    auto tile = cg::tiled_partition<64>(cg::this_thread_block());
    int t = threadIdx.x;
    int base = t - tile.thread_rank();
    s[t] = in[blockIdx.x * 256 + t];
    tile.sync();
    out[blockIdx.x * 256 + t] = s[base + (tile.thread_rank() + 32) % 64];
}
// BUG twin: the producer's other warps are not ordered before thread 0's release (no __syncthreads)
extern "C" __global__ void handoff_no_sync_before_release(const float* in, float* data, unsigned* flag, float* out) {
    int t = threadIdx.x;
    if (blockIdx.x == 0) {
        data[t] = 3.0f * in[t];                      // BUG: warps 1.. are not covered by the release
        if (t == 0) st_release_gpu(flag, 1);
    } else {
        if (t == 0) { while (ld_acquire_gpu(flag) == 0) {} }
        __syncthreads();
        out[t] = data[t];                            // REPORT: unordered read (no block sync)
    }
}
// ---- warp 1 reads a slot and acks with a release; warp 0 acquires the ack, reads the slot too, rewrites it
extern "C" __global__ void reader_ack_rewrite(const float* in, float* slot, unsigned* ack, float* out) {
    int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    if (warp == 0) {
        slot[lane] = in[lane];
        __syncwarp();
        if (lane == 0) st_release_gpu(ack, 1);
        if (lane == 0) { while (ld_acquire_gpu(ack) != 2) {} }
        __syncwarp();
        float v = slot[lane];
        slot[lane] = 2.0f * v;
    } else {
        if (lane == 0) { while (ld_acquire_gpu(ack) != 1) {} }
        __syncwarp();
        out[lane] = slot[lane];
        __syncwarp();
        if (lane == 0) st_release_gpu(ack, 2);
    }
}
// ---- a shared histogram nobody zeroed: atomics add to undefined counters
extern "C" __global__ void uninit_histogram(const int* in, int* out) {
    __shared__ int h[16];
    int t = threadIdx.x;
    if (t < 8) h[t] = 0;                            // BUG: h[8..15] never zeroed
    __syncthreads();
    atomicAdd(&h[in[t] & 15], 1);                   // REPORT: an undefined counter
    __syncthreads();
    if (t < 16) out[t] = h[t];
}
