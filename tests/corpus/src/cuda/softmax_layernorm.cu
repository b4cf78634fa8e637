// Row softmax and layer norm, one block per row. archs: all (sm_80 sm_89 sm_90a sm_100a)
// Launch: grid = rows, blockDim.x = 256 (multiple of 32). x is [rows, cols] row-major.
// Reference: numpy softmax(x - max) along axis 1; layernorm (x - mean) / sqrt(var + eps) * gamma + beta
// with the biased variance. Compare with tolerances (expf / rsqrtf are approximate).

__device__ __forceinline__ float warp_max(float v) {
    for (int o = 16; o > 0; o >>= 1) v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, o));
    return v;
}
__device__ __forceinline__ float warp_sum(float v) {
    for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
    return v;
}
// Block-wide all-reduce through shared memory; every thread gets the result.
__device__ float block_sum(float v, float* scratch) {
    int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, nw = blockDim.x >> 5;
    v = warp_sum(v);
    __syncthreads();
    if (lane == 0) scratch[warp] = v;
    __syncthreads();
    v = lane < nw ? scratch[lane] : 0.0f;
    return warp_sum(v);
}
__device__ float block_max(float v, float* scratch) {
    int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, nw = blockDim.x >> 5;
    v = warp_max(v);
    __syncthreads();
    if (lane == 0) scratch[warp] = v;
    __syncthreads();
    v = lane < nw ? scratch[lane] : -INFINITY;
    return warp_max(v);
}

extern "C" __global__ void softmax_rows(const float* x, float* y, int cols) {
    __shared__ float scratch[32];
    const float* row = x + (size_t)blockIdx.x * cols;
    float* out = y + (size_t)blockIdx.x * cols;
    float m = -INFINITY;
    for (int c = threadIdx.x; c < cols; c += blockDim.x) m = fmaxf(m, row[c]);
    m = block_max(m, scratch);
    float s = 0.0f;
    for (int c = threadIdx.x; c < cols; c += blockDim.x) s += expf(row[c] - m);
    s = block_sum(s, scratch);
    float inv = 1.0f / s;
    for (int c = threadIdx.x; c < cols; c += blockDim.x) out[c] = expf(row[c] - m) * inv;
}

// Online (single pass) softmax: running max and rescaled sum per thread, merged across the block.
extern "C" __global__ void softmax_rows_online(const float* x, float* y, int cols) {
    __shared__ float smax[32], ssum[32];
    const float* row = x + (size_t)blockIdx.x * cols;
    float m = -INFINITY, s = 0.0f;
    for (int c = threadIdx.x; c < cols; c += blockDim.x) {
        float v = row[c];
        float nm = fmaxf(m, v);
        s = s * __expf(m - nm) + __expf(v - nm);
        m = nm;
    }
    for (int o = 16; o > 0; o >>= 1) {
        float om = __shfl_xor_sync(0xffffffffu, m, o), os = __shfl_xor_sync(0xffffffffu, s, o);
        float nm = fmaxf(m, om);
        s = (m == -INFINITY ? 0.0f : s * __expf(m - nm)) + (om == -INFINITY ? 0.0f : os * __expf(om - nm));
        m = nm;
    }
    int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    if (lane == 0) { smax[warp] = m; ssum[warp] = s; }
    __syncthreads();
    float gm = -INFINITY;
    for (int w = 0; w < (int)(blockDim.x >> 5); ++w) gm = fmaxf(gm, smax[w]);
    float gs = 0.0f;
    for (int w = 0; w < (int)(blockDim.x >> 5); ++w) gs += ssum[w] * __expf(smax[w] - gm);
    float* out = y + (size_t)blockIdx.x * cols;
    for (int c = threadIdx.x; c < cols; c += blockDim.x) out[c] = __expf(row[c] - gm) / gs;
}

extern "C" __global__ void layernorm_rows(const float* x, const float* gamma, const float* beta, float* y,
                                          float* mean_out, float* rstd_out, int cols, float eps) {
    __shared__ float scratch[32];
    const float* row = x + (size_t)blockIdx.x * cols;
    float s = 0.0f;
    for (int c = threadIdx.x; c < cols; c += blockDim.x) s += row[c];
    float mean = block_sum(s, scratch) / cols;
    float v = 0.0f;
    for (int c = threadIdx.x; c < cols; c += blockDim.x) { float d = row[c] - mean; v += d * d; }
    float var = block_sum(v, scratch) / cols;
    float rstd = rsqrtf(var + eps);
    float* out = y + (size_t)blockIdx.x * cols;
    for (int c = threadIdx.x; c < cols; c += blockDim.x) out[c] = (row[c] - mean) * rstd * gamma[c] + beta[c];
    if (threadIdx.x == 0) { mean_out[blockIdx.x] = mean; rstd_out[blockIdx.x] = rstd; }
}

// RMSNorm with bf16-free float IO: y = x / sqrt(mean(x^2) + eps) * w
extern "C" __global__ void rmsnorm_rows(const float* x, const float* w, float* y, int cols, float eps) {
    __shared__ float scratch[32];
    const float* row = x + (size_t)blockIdx.x * cols;
    float s = 0.0f;
    for (int c = threadIdx.x; c < cols; c += blockDim.x) s = fmaf(row[c], row[c], s);
    float r = rsqrtf(block_sum(s, scratch) / cols + eps);
    float* out = y + (size_t)blockIdx.x * cols;
    for (int c = threadIdx.x; c < cols; c += blockDim.x) out[c] = row[c] * r * w[c];
}
