// cp.async pipelines (global -> shared, bypassing registers) with commit_group / wait_group.
// archs: all (sm_80 sm_89 sm_90a sm_100a). Reference: out[i] = 2 * in[i] + 1 (float) for the pipelines.

#include <cuda_pipeline.h>

#define TILE 256      // floats per stage per block (one float4 per thread, blockDim.x = 64)
#define STAGES 3

__device__ __forceinline__ unsigned smem_addr(const void* p) { return (unsigned)__cvta_generic_to_shared(p); }

// Multi-stage ring: tile k is loaded STAGES-1 tiles ahead; after committing tile k+STAGES-1,
// cp.async.wait_group STAGES-1 guarantees tile k has landed.
// Launch: blockDim.x = 64, grid = any; n must be a multiple of TILE; each block walks tiles
// blockIdx.x, blockIdx.x + gridDim.x, ...
extern "C" __global__ void cp_async_pipeline(const float* in, float* out, int n) {
    __shared__ __align__(16) float buf[STAGES][TILE];
    int ntiles = n / TILE;
    int tid = threadIdx.x;
    int first = blockIdx.x, step = gridDim.x;
    int count = first < ntiles ? (ntiles - first + step - 1) / step : 0;
    // prologue
    for (int s = 0; s < STAGES - 1; ++s) {
        if (s < count) {
            const float* src = in + (size_t)(first + s * step) * TILE + tid * 4;
            asm volatile("cp.async.cg.shared.global [%0], [%1], 16;" :: "r"(smem_addr(&buf[s][tid * 4])), "l"(src));
        }
        asm volatile("cp.async.commit_group;");
    }
    for (int k = 0; k < count; ++k) {
        int pre = k + STAGES - 1;
        if (pre < count) {
            const float* src = in + (size_t)(first + pre * step) * TILE + tid * 4;
            asm volatile("cp.async.cg.shared.global [%0], [%1], 16;"
                         :: "r"(smem_addr(&buf[pre % STAGES][tid * 4])), "l"(src));
        }
        asm volatile("cp.async.commit_group;");
        asm volatile("cp.async.wait_group %0;" :: "n"(STAGES - 1));
        __syncthreads();
        float* dst = out + (size_t)(first + k * step) * TILE;
        for (int j = tid; j < TILE; j += blockDim.x) dst[j] = 2.0f * buf[k % STAGES][j] + 1.0f;
        __syncthreads();
    }
    asm volatile("cp.async.wait_all;");
}

// 4- and 8-byte cp.async.ca with src-size zero fill: copies only `valid` bytes of each 16-byte chunk
// (the rest of the destination is zeroed). out[i] = in[i] for i % 4 < valid_floats, else 0.
// Launch: blockDim.x = 64, one float4 chunk per thread, n a multiple of 256.
extern "C" __global__ void cp_async_zfill(const float* in, float* out, int valid_floats, int n) {
    __shared__ __align__(16) float s[256];
    __shared__ __align__(8) float s8[128];
    int tid = threadIdx.x;
    size_t base = (size_t)blockIdx.x * 256;
    if (base >= (size_t)n) return;
    unsigned bytes = (unsigned)valid_floats * 4u;
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;"
                 :: "r"(smem_addr(&s[tid * 4])), "l"(in + base + tid * 4), "r"(bytes));
    asm volatile("cp.async.ca.shared.global [%0], [%1], 8;" :: "r"(smem_addr(&s8[tid * 2])), "l"(in + base + tid * 2));
    asm volatile("cp.async.commit_group;");
    asm volatile("cp.async.wait_group 0;");
    __syncthreads();
    for (int j = tid; j < 256; j += blockDim.x) out[base + j] = s[j];
    // the second copy is checked through a checksum written by thread 0: sum of in[base .. base+128)
    if (tid == 0) {
        float acc = 0.0f;
        for (int j = 0; j < 128; ++j) acc += s8[j];
        out[(size_t)n + blockIdx.x] = acc;
    }
}

// The same double-buffered copy written with the __pipeline_* primitives of cuda_pipeline.h.
// Launch: blockDim.x = 256, n a multiple of 256. out[i] = in[i] * in[i].
extern "C" __global__ void cp_async_pipeline_primitives(const float* in, float* out, int n) {
    __shared__ __align__(16) float buf[2][256];
    int ntiles = n / 256;
    int tid = threadIdx.x;
    int t = blockIdx.x;
    if (t >= ntiles) return;
    __pipeline_memcpy_async(&buf[0][tid], in + (size_t)t * 256 + tid, sizeof(float));
    __pipeline_commit();
    int k = 0;
    for (; t < ntiles; t += gridDim.x, ++k) {
        int nt = t + gridDim.x;
        if (nt < ntiles) __pipeline_memcpy_async(&buf[(k + 1) & 1][tid], in + (size_t)nt * 256 + tid, sizeof(float));
        __pipeline_commit();
        __pipeline_wait_prior(1);
        __syncthreads();
        float v = buf[k & 1][tid];
        out[(size_t)t * 256 + tid] = v * v;
        __syncthreads();
    }
    __pipeline_wait_prior(0);
}
