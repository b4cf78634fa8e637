// Block and warp reductions. archs: all (sm_80 sm_89 sm_90a sm_100a)
// Launch: 1D, blockDim.x = 256 (power of two, <= 1024). out has gridDim.x entries (partial sums per block)
// unless noted. Reference: numpy sum/max over each block's slice.

#include <climits>

#define BLOCK 256

// Classic tree reduction in shared memory: out[blockIdx.x] = sum(in[block slice])
extern "C" __global__ void reduce_sum_shared(const float* in, float* out, int n) {
    __shared__ float s[BLOCK];
    unsigned tid = threadIdx.x;
    unsigned i = blockIdx.x * blockDim.x + tid;
    s[tid] = i < n ? in[i] : 0.0f;
    __syncthreads();
    for (unsigned stride = blockDim.x / 2; stride > 0; stride >>= 1) {
        if (tid < stride) s[tid] += s[tid + stride];
        __syncthreads();
    }
    if (tid == 0) out[blockIdx.x] = s[0];
}

__device__ __forceinline__ float warp_sum(float v) {
    for (int o = 16; o > 0; o >>= 1) v += __shfl_down_sync(0xffffffffu, v, o);
    return v;
}

// Warp-shuffle reduction: per-warp partials via shfl.down, then first warp reduces them.
extern "C" __global__ void reduce_sum_warp(const float* in, float* out, int n) {
    __shared__ float partial[32];
    float v = 0.0f;
    for (int i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += blockDim.x * gridDim.x) v += in[i];
    v = warp_sum(v);
    int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    if (lane == 0) partial[warp] = v;
    __syncthreads();
    if (warp == 0) {
        v = lane < (int)(blockDim.x >> 5) ? partial[lane] : 0.0f;
        v = warp_sum(v);
        if (lane == 0) out[blockIdx.x] = v;
    }
}

// Integer max with xor-butterfly shuffles; every lane ends with the max. out[blockIdx.x] = max.
extern "C" __global__ void reduce_max_i32(const int* in, int* out, int n) {
    __shared__ int partial[32];
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    int v = i < n ? in[i] : INT_MIN;
    for (int o = 16; o > 0; o >>= 1) v = max(v, __shfl_xor_sync(0xffffffffu, v, o));
    if ((threadIdx.x & 31) == 0) partial[threadIdx.x >> 5] = v;
    __syncthreads();
    if (threadIdx.x == 0) {
        int m = INT_MIN;
        for (int w = 0; w < (int)(blockDim.x >> 5); ++w) m = max(m, partial[w]);
        out[blockIdx.x] = m;
    }
}

// Double-precision sum, grid-wide via atomicAdd on one accumulator (exact for integer-valued inputs).
extern "C" __global__ void reduce_sum_f64_atomic(const double* in, double* total, int n) {
    __shared__ double s[BLOCK];
    unsigned tid = threadIdx.x;
    unsigned i = blockIdx.x * blockDim.x + tid;
    s[tid] = i < n ? in[i] : 0.0;
    __syncthreads();
    for (unsigned stride = blockDim.x / 2; stride > 0; stride >>= 1) {
        if (tid < stride) s[tid] += s[tid + stride];
        __syncthreads();
    }
    if (tid == 0) atomicAdd(total, s[0]);
}
