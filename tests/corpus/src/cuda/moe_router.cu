// MoE top-k router and fused SiLU-and-mul. archs: all (sm_80 sm_89 sm_90a sm_100a)

// Top-k over expert logits with softmax weights renormalized over the chosen k.
// logits is [tokens, E] (E <= 256, k <= 8). One warp per token; ties broken by the lower expert index.
// ids is [tokens, k] i32 in descending score order, weights [tokens, k] f32:
//   p = softmax(logits[t]); ids = top-k indices of p; weights = p[ids] / sum(p[ids]).
// Launch: blockDim.x = 128 (4 tokens per block), grid = ceil(tokens / 4).
extern "C" __global__ void topk_softmax_router(const float* logits, int* ids, float* weights, int tokens, int E, int k) {
    int token = (blockIdx.x * blockDim.x + threadIdx.x) >> 5;
    int lane = threadIdx.x & 31;
    if (token >= tokens) return;   // whole warps exit together
    const float* row = logits + (size_t)token * E;
    float vals[8];                 // each lane holds experts lane, lane + 32, ... (E <= 256)
    float m = -INFINITY;
    for (int j = 0; j < 8; ++j) {
        int e = lane + 32 * j;
        vals[j] = e < E ? row[e] : -INFINITY;
        m = fmaxf(m, vals[j]);
    }
    for (int o = 16; o > 0; o >>= 1) m = fmaxf(m, __shfl_xor_sync(0xffffffffu, m, o));
    float s = 0.f;
    for (int j = 0; j < 8; ++j) {
        vals[j] = (lane + 32 * j) < E ? expf(vals[j] - m) : -1.0f;   // probabilities are >= 0, pads are -1
        s += vals[j] > 0.f ? vals[j] : 0.f;
    }
    for (int o = 16; o > 0; o >>= 1) s += __shfl_xor_sync(0xffffffffu, s, o);
    float picked_sum = 0.f;
    float picked[8];
    int picked_id[8];
    for (int r = 0; r < k; ++r) {
        // lane-local best, then warp argmax (max value, then min index)
        float bv = -2.0f;
        int bi = 0x7fffffff;
        for (int j = 0; j < 8; ++j) {
            int e = lane + 32 * j;
            if (vals[j] > bv) { bv = vals[j]; bi = e; }
        }
        for (int o = 16; o > 0; o >>= 1) {
            float ov = __shfl_xor_sync(0xffffffffu, bv, o);
            int oi = __shfl_xor_sync(0xffffffffu, bi, o);
            if (ov > bv || (ov == bv && oi < bi)) { bv = ov; bi = oi; }
        }
        picked[r] = bv / s;
        picked_id[r] = bi;
        picked_sum += bv / s;
        if ((bi & 31) == lane) vals[bi >> 5] = -2.0f;   // remove the winner
    }
    if (lane == 0) {
        for (int r = 0; r < k; ++r) {
            ids[token * k + r] = picked_id[r];
            weights[token * k + r] = picked[r] / picked_sum;
        }
    }
}

// Count tokens per expert (for dispatch layouts): counts[e] = number of (token, slot) with ids == e.
extern "C" __global__ void expert_token_counts(const int* ids, int* counts, int n_ids) {
    __shared__ int local[256];
    for (int e = threadIdx.x; e < 256; e += blockDim.x) local[e] = 0;
    __syncthreads();
    for (int i = blockIdx.x * blockDim.x + threadIdx.x; i < n_ids; i += blockDim.x * gridDim.x)
        atomicAdd(&local[ids[i] & 255], 1);
    __syncthreads();
    for (int e = threadIdx.x; e < 256; e += blockDim.x)
        if (local[e]) atomicAdd(&counts[e], local[e]);
}

// Fused SiLU-and-mul: x is [tokens, 2d] = [gate | up]; y[t, j] = silu(gate[t, j]) * up[t, j],
// silu(v) = v / (1 + exp(-v)). Launch: 1D over tokens * d.
extern "C" __global__ void silu_and_mul(const float* x, float* y, int tokens, int d) {
    size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= (size_t)tokens * d) return;
    size_t t = i / d, j = i % d;
    float gate = x[t * 2 * d + j], up = x[t * 2 * d + d + j];
    y[i] = gate / (1.0f + __expf(-gate)) * up;
}

// Same with half2 vector IO and float math. x is [tokens, 2d] halves, d even; Launch: 1D over tokens*d/2.
#include <cuda_fp16.h>
extern "C" __global__ void silu_and_mul_half2(const __half2* x, __half2* y, int tokens, int d) {
    size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    int d2 = d / 2;
    if (i >= (size_t)tokens * d2) return;
    size_t t = i / d2, j = i % d2;
    float2 g = __half22float2(x[t * d + j]), u = __half22float2(x[t * d + d2 + j]);
    float2 r = make_float2(g.x / (1.0f + expf(-g.x)) * u.x, g.y / (1.0f + expf(-g.y)) * u.y);
    y[i] = __float22half2_rn(r);
}
