// Warp-level kernels written against CUDA's `warpSize` (nvcc emits the PTX constant WARP_SZ): an online
// softmax with one warp per row (running max and rescaled sum merged across lanes with shfl_xor), a
// warp-per-row RMS norm, and a lane/warp index computed from warpSize. archs: sm_80 sm_90a.
// Launch: block a multiple of 32, rows spread over warps; references below (numpy, float32 tolerances).

#include <cfloat>

__device__ __forceinline__ float warp_sum(float v) {
    for (int o = warpSize / 2; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
    return v;
}

// out[r, :] = softmax(x[r, :]) for r < rows; one warp per row, each lane walks columns lane, lane + 32, ...
// keeping (m, s) = (running max, sum of exp(x - m)); the lanes' pairs are merged by
// (m, s) (+) (m', s') = (max, s * exp(m - max) + s' * exp(m' - max)). Launch: block 128, grid
// ceil(rows / 4); cols any. Reference: numpy softmax, rtol 1e-5.
extern "C" __global__ void warp_online_softmax(const float* x, float* out, int rows, int cols) {
    int lane = threadIdx.x % warpSize;
    int row = (blockIdx.x * blockDim.x + threadIdx.x) / warpSize;
    if (row >= rows) return;
    const float* xr = x + (size_t)row * cols;
    float m = -FLT_MAX, s = 0.0f;
    for (int j = lane; j < cols; j += warpSize) {
        float v = xr[j];
        float nm = fmaxf(m, v);
        s = s * __expf(m - nm) + __expf(v - nm);
        m = nm;
    }
    for (int o = warpSize / 2; o > 0; o >>= 1) {
        float om = __shfl_xor_sync(0xffffffffu, m, o);
        float os = __shfl_xor_sync(0xffffffffu, s, o);
        float nm = fmaxf(m, om);
        s = s * __expf(m - nm) + os * __expf(om - nm);
        m = nm;
    }
    float inv = 1.0f / s;
    for (int j = lane; j < cols; j += warpSize) out[(size_t)row * cols + j] = __expf(xr[j] - m) * inv;
}

// out[r, :] = x[r, :] / sqrt(mean(x[r, :]^2) + eps) * w; one warp per row. Launch: block 64, grid
// ceil(rows / 2). Reference: numpy, rtol 1e-5.
extern "C" __global__ void warp_rmsnorm(const float* x, const float* w, float* out, int rows, int cols,
                                        float eps) {
    int lane = threadIdx.x & (warpSize - 1);
    int row = blockIdx.x * (blockDim.x / warpSize) + threadIdx.x / warpSize;
    if (row >= rows) return;
    const float* xr = x + (size_t)row * cols;
    float ss = 0.0f;
    for (int j = lane; j < cols; j += warpSize) ss += xr[j] * xr[j];
    ss = warp_sum(ss);
    float r = rsqrtf(ss / cols + eps);
    for (int j = lane; j < cols; j += warpSize) out[(size_t)row * cols + j] = xr[j] * r * w[j];
}

// ids[i] = (warp index within the block) * 1000 + lane, computed from warpSize; wsz[0] = warpSize.
// Launch: block 96, grid any.
extern "C" __global__ void warp_ids_from_warpsize(int* ids, int* wsz) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    ids[i] = (threadIdx.x / warpSize) * 1000 + threadIdx.x % warpSize;
    if (i == 0) wsz[0] = warpSize;
}
