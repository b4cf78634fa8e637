// Planted bugs for the sanitizer, each next to a correct twin (suffix _ok) that must give no report.
// PTX: generate.py next to this file (nvcc -O3 -lineinfo -arch=sm_80).
#include <cstdint>

// ---- out-of-bounds global read / write (one past the end)
extern "C" __global__ void oob_global_read(const float* in, float* out, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) out[i] = in[i] + in[i + 1];             // BUG: in[n] when i == n-1
}
extern "C" __global__ void oob_global_read_ok(const float* in, float* out, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i + 1 < n) out[i] = in[i] + in[i + 1];
}
extern "C" __global__ void oob_global_write(const float* in, float* out, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) out[i + 1] = 2.0f * in[i];             // BUG: out[n] when i == n-1
}
extern "C" __global__ void oob_global_write_ok(const float* in, float* out, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i + 1 < n) out[i + 1] = 2.0f * in[i];
}

// ---- out-of-bounds shared read / write (the block has 128 threads, the array 128 floats)
extern "C" __global__ void oob_shared_read(const float* in, float* out) {
    __shared__ float s[128];
    int t = threadIdx.x, i = blockIdx.x * blockDim.x + t;
    s[t] = in[i];
    __syncthreads();
    out[i] = s[t + 1];                                 // BUG: s[128] for t == 127
}
extern "C" __global__ void oob_shared_read_ok(const float* in, float* out) {
    __shared__ float s[128];
    int t = threadIdx.x, i = blockIdx.x * blockDim.x + t;
    s[t] = in[i];
    __syncthreads();
    out[i] = s[(t + 1) & 127];
}
extern "C" __global__ void oob_shared_write(const float* in, float* out) {
    __shared__ float s[128];
    int t = threadIdx.x, i = blockIdx.x * blockDim.x + t;
    s[t] = in[i];
    if (t == 127) s[t + 1] = 0.0f;                     // BUG: writes s[128]
    __syncthreads();
    out[i] = s[127 - t];
}
extern "C" __global__ void oob_shared_write_ok(const float* in, float* out) {
    __shared__ float s[128];
    int t = threadIdx.x, i = blockIdx.x * blockDim.x + t;
    s[t] = in[i];
    if (t == 127) s[t] += 1.0f;
    __syncthreads();
    out[i] = s[127 - t];
}

// ---- misaligned vector access: a float4 load from a pointer 4 bytes past 16-byte alignment
extern "C" __global__ void misaligned_vec(const float* in, float* out, int offset) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    float4 v = reinterpret_cast<const float4*>(in + offset)[i];   // BUG when offset % 4 != 0
    out[i] = v.x + v.y + v.z + v.w;
}

// ---- uninitialized shared read: only half of the array is written
extern "C" __global__ void uninit_shared(const float* in, float* out) {
    __shared__ float s[256];
    int t = threadIdx.x, i = blockIdx.x * blockDim.x + t;
    if (t < 128) s[t] = in[i];                         // BUG: s[128..255] never written
    __syncthreads();
    out[i] = s[255 - t];                               // REPORT: uninitialized read
}
extern "C" __global__ void uninit_shared_ok(const float* in, float* out) {
    __shared__ float s[256];
    int t = threadIdx.x, i = blockIdx.x * blockDim.x + t;
    s[t] = in[i];
    __syncthreads();
    out[i] = s[255 - t];
}

// ---- uninitialized global read: memory from device malloc that nothing wrote
extern "C" __global__ void uninit_malloc(int* out) {
    int* p = static_cast<int*>(malloc(64 * sizeof(int)));
    int t = threadIdx.x;
    if (t < 32) p[t] = t;                              // BUG: p[32..63] never written
    out[t] = p[63 - t];                                // REPORT: uninitialized global read
    free(p);
}
extern "C" __global__ void uninit_malloc_ok(int* out) {
    int* p = static_cast<int*>(malloc(64 * sizeof(int)));
    int t = threadIdx.x;
    p[t] = t;
    out[t] = p[t];
    free(p);
}

// ---- missing __syncthreads between a shared write and another thread's read
extern "C" __global__ void missing_sync(const float* in, float* out) {
    __shared__ float s[256];
    int t = threadIdx.x, i = blockIdx.x * blockDim.x + t;
    s[t] = in[i];
    out[i] = s[(t + 1) % 256];                         // BUG: no barrier before reading a neighbour
}
extern "C" __global__ void missing_sync_ok(const float* in, float* out) {
    __shared__ float s[256];
    int t = threadIdx.x, i = blockIdx.x * blockDim.x + t;
    s[t] = in[i];
    __syncthreads();
    out[i] = s[(t + 1) % 256];
}

// ---- write-write race on global memory between blocks
extern "C" __global__ void global_waw(const float* in, float* out) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    out[threadIdx.x] = in[i];                          // BUG: every block writes out[0..blockDim)
}
extern "C" __global__ void global_waw_ok(const float* in, float* out) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    atomicAdd(&out[threadIdx.x], in[i]);
}

// ---- bar.sync in divergent code: half of warp 0 waits at another barrier (docs/sanitizer-rulings.md)
extern "C" __global__ void divergent_barrier(const float* in, float* out) {
    __shared__ float s[256];
    int t = threadIdx.x, i = blockIdx.x * blockDim.x + t;
    s[t] = in[i];
    if (t < 16) {
        __syncthreads();                               // BUG: only half of warp 0 reaches this barrier
        s[t] += 1.0f;
    }
    __syncthreads();
    out[i] = s[255 - t];
}
extern "C" __global__ void divergent_barrier_ok(const float* in, float* out) {
    __shared__ float s[256];
    int t = threadIdx.x, i = blockIdx.x * blockDim.x + t;
    s[t] = in[i];
    __syncthreads();
    if (t < 32) s[t] += 1.0f;
    __syncthreads();
    out[i] = s[255 - t];
}
// ---- invalid shuffle member mask: the mask names lanes that do not take part
extern "C" __global__ void bad_shfl_mask(const int* in, int* out) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    int v = in[i];
    if ((threadIdx.x & 31) < 16)
        v += __shfl_xor_sync(0xffffffffu, v, 8);       // BUG: lanes 16..31 are named but absent
    out[i] = v;
}
extern "C" __global__ void bad_shfl_mask_ok(const int* in, int* out) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    int v = in[i];
    if ((threadIdx.x & 31) < 16)
        v += __shfl_xor_sync(0x0000ffffu, v, 8);
    out[i] = v;
}

// a lane that is not in its own member mask
extern "C" __global__ void shfl_mask_without_self(const int* in, int* out) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    out[i] = __shfl_sync(0xfffffffeu, in[i], 1);       // BUG: lane 0 executes but is not in the mask
}

// ---- uninitialized local memory: a per-thread array only half written
extern "C" __global__ void uninit_local(const int* in, int* out, int k) {
    int a[8];
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    for (int j = 0; j < 4; ++j) a[j] = in[i] + j;     // BUG: a[4..7] never written
    out[i] = a[(k + threadIdx.x) & 7];                 // REPORT: uninitialized local read
}
extern "C" __global__ void uninit_local_ok(const int* in, int* out, int k) {
    int a[8];
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    for (int j = 0; j < 8; ++j) a[j] = in[i] + j;
    out[i] = a[(k + threadIdx.x) & 7];
}

// ---- cp.async destination read before its wait
__device__ __forceinline__ void cp_async4(float* smem, const float* gmem) {
    unsigned s = static_cast<unsigned>(__cvta_generic_to_shared(smem));
    asm volatile("cp.async.ca.shared.global [%0], [%1], 4;\n" :: "r"(s), "l"(gmem));
}
extern "C" __global__ void async_early_read(const float* in, float* out) {
    __shared__ float s[128];
    int t = threadIdx.x, i = blockIdx.x * blockDim.x + t;
    cp_async4(&s[t], &in[i]);
    asm volatile("cp.async.commit_group;\n" ::);
    float early = s[t];                                // BUG: read before cp.async.wait_group
    asm volatile("cp.async.wait_group 0;\n" ::);
    __syncthreads();
    out[i] = early + s[127 - t];
}
extern "C" __global__ void async_early_read_ok(const float* in, float* out) {
    __shared__ float s[128];
    int t = threadIdx.x, i = blockIdx.x * blockDim.x + t;
    cp_async4(&s[t], &in[i]);
    asm volatile("cp.async.commit_group;\n" ::);
    asm volatile("cp.async.wait_group 0;\n" ::);
    __syncthreads();
    out[i] = s[t] + s[127 - t];
}

// ---- cp.async completed through an mbarrier: the data may be read only after the phase completes
__device__ __forceinline__ void mbar_wait_phase0(unsigned long long* bar) {
    unsigned ok = 0;
    while (!ok)
        asm volatile("{ .reg .pred p; mbarrier.test_wait.parity.shared.b64 p, [%1], 0; selp.u32 %0, 1, 0, p; }"
                     : "=r"(ok) : "r"(static_cast<unsigned>(__cvta_generic_to_shared(bar))));
}
extern "C" __global__ void mbarrier_early_read(const float* in, float* out) {
    __shared__ __align__(8) unsigned long long bar;
    __shared__ float s[64];
    int t = threadIdx.x, i = blockIdx.x * blockDim.x + t;
    unsigned b = static_cast<unsigned>(__cvta_generic_to_shared(&bar));
    if (t == 0) asm volatile("mbarrier.init.shared.b64 [%0], %1;" :: "r"(b), "r"(64));
    __syncthreads();
    cp_async4(&s[t], &in[i]);
    asm volatile("cp.async.mbarrier.arrive.noinc.shared.b64 [%0];" :: "r"(b));
    float early = s[(t + 1) % 64];                     // BUG: read before the mbarrier phase completes
    mbar_wait_phase0(&bar);
    out[i] = early + s[(t + 1) % 64];
}
extern "C" __global__ void mbarrier_early_read_ok(const float* in, float* out) {
    __shared__ __align__(8) unsigned long long bar;
    __shared__ float s[64];
    int t = threadIdx.x, i = blockIdx.x * blockDim.x + t;
    unsigned b = static_cast<unsigned>(__cvta_generic_to_shared(&bar));
    if (t == 0) asm volatile("mbarrier.init.shared.b64 [%0], %1;" :: "r"(b), "r"(64));
    __syncthreads();
    cp_async4(&s[t], &in[i]);
    asm volatile("cp.async.mbarrier.arrive.noinc.shared.b64 [%0];" :: "r"(b));
    mbar_wait_phase0(&bar);
    out[i] = 2.0f * s[(t + 1) % 64];
}

// ---- the last-block pattern: partial results are published with a fence before the ticket atomic
extern "C" __global__ void last_block_sum(const float* in, float* partial, unsigned* ticket, float* out) {
    if (threadIdx.x == 0) {
        partial[blockIdx.x] = 2.0f * in[blockIdx.x];
        __threadfence();
        unsigned t = atomicAdd(ticket, 1u);
        if (t == gridDim.x - 1) {
            float s = 0.0f;
            for (int b = 0; b < gridDim.x; ++b) s += partial[b];
            *out = s;
        }
    }
}
extern "C" __global__ void last_block_sum_nofence(const float* in, float* partial, unsigned* ticket, float* out) {
    if (threadIdx.x == 0) {
        partial[blockIdx.x] = 2.0f * in[blockIdx.x];
        unsigned t = atomicAdd(ticket, 1u);            // BUG: no __threadfence before the ticket
        if (t == gridDim.x - 1) {
            float s = 0.0f;
            for (int b = 0; b < gridDim.x; ++b) s += partial[b];   // REPORT: unordered read
            *out = s;
        }
    }
}

// ---- a block reduction (the benchmark kernel and a no-false-positive check)
extern "C" __global__ void block_reduce(const float* in, float* out) {
    __shared__ float s[256];
    int t = threadIdx.x, i = blockIdx.x * blockDim.x + t;
    s[t] = in[i];
    __syncthreads();
    for (int k = blockDim.x / 2; k > 32; k >>= 1) {
        if (t < k) s[t] += s[t + k];
        __syncthreads();
    }
    if (t < 32) {
        float v = s[t] + s[t + 32];
        for (int o = 16; o > 0; o >>= 1) v += __shfl_down_sync(0xffffffffu, v, o);
        if (t == 0) out[blockIdx.x] = v;
    }
}

// ---- bar.sync reached by half of a warp while the other half exits instead
extern "C" __global__ void exit_divergent_barrier(const float* in, float* out) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    out[i] = in[i] * 2.0f;
    if (threadIdx.x < 16) __syncthreads();             // BUG: threads 16.. of every warp exit instead
}
extern "C" __global__ void exit_warp_aligned_ok(const float* in, float* out, int n) {
    __shared__ float s[256];
    int t = threadIdx.x, i = blockIdx.x * blockDim.x + t;
    if (i >= n) return;                                // whole warps leave before the barrier: fine
    s[t] = in[i];
    __syncthreads();
    out[i] = s[t ^ 1];
}

// ---- a race between two inlined call chains: the report shows each side's .loc inlined_at chain
__device__ __forceinline__ void inl_put(float* s, int i, float v) {
    s[i] = v;                                          // BUG: the write side, three calls deep
}
__device__ __forceinline__ void inl_scale_put(float* s, int i, float v) { inl_put(s, i, 2.0f * v); }
__device__ __forceinline__ void inl_fill(float* s, int t, float v) { inl_scale_put(s, t + 1, v); }
__device__ __forceinline__ float inl_get(const float* s, int i) {
    return s[i];                                       // BUG: the read side, one call deep
}
extern "C" __global__ void inlined_race(const float* in, float* out) {
    __shared__ float s[257];
    int t = threadIdx.x;
    inl_fill(s, t, in[t]);
    out[t] = inl_get(s, (t + 7) & 255);                // no __syncthreads() between the two
}
