// FP8 per-token-group activation quantization (groups of 128 along the hidden dim), E4M3.
// archs: all (sm_80 sm_89 sm_90a sm_100a)
// x is [tokens, hidden] (hidden % 128 == 0). For each token t and group g:
//   amax = max(|x[t, 128g : 128g+128]|), scale = max(amax, 1e-4) / 448, q = e4m3(x / scale) (satfinite, RNE)
// q is [tokens, hidden] bytes, scales is [tokens, hidden/128] f32 (row-major), or column-major
// [hidden/128, tokens] in the _colmajor variant. Reference: numpy + ml_dtypes.float8_e4m3fn.
#include <cuda_fp8.h>
#include <cuda_bf16.h>

#define GROUP 128
#define FP8_MAX 448.0f

// One warp per group: each lane handles 4 consecutive elements. Launch: blockDim.x = 128 (4 groups per
// block), grid = tokens * hidden / 512.
extern "C" __global__ void fp8_group_quant_e4m3(const float* x, unsigned char* q, float* scales, int hidden) {
    int warp_global = (blockIdx.x * blockDim.x + threadIdx.x) >> 5;
    int lane = threadIdx.x & 31;
    int groups_per_row = hidden / GROUP;
    int t = warp_global / groups_per_row, g = warp_global % groups_per_row;
    const float4* src = reinterpret_cast<const float4*>(x + (size_t)t * hidden + g * GROUP) + lane;
    float4 v = *src;
    float amax = fmaxf(fmaxf(fabsf(v.x), fabsf(v.y)), fmaxf(fabsf(v.z), fabsf(v.w)));
    for (int o = 16; o > 0; o >>= 1) amax = fmaxf(amax, __shfl_xor_sync(0xffffffffu, amax, o));
    float scale = fmaxf(amax, 1e-4f) / FP8_MAX;
    float inv = 1.0f / scale;
    __nv_fp8x2_storage_t lo = __nv_cvt_float2_to_fp8x2(make_float2(v.x * inv, v.y * inv), __NV_SATFINITE, __NV_E4M3);
    __nv_fp8x2_storage_t hi = __nv_cvt_float2_to_fp8x2(make_float2(v.z * inv, v.w * inv), __NV_SATFINITE, __NV_E4M3);
    unsigned packed = (unsigned)lo | ((unsigned)hi << 16);
    reinterpret_cast<unsigned*>(q + (size_t)t * hidden + g * GROUP)[lane] = packed;
    if (lane == 0) scales[t * groups_per_row + g] = scale;
}

// bf16 input, column-major scales (the layout the DeepGEMM-style FP8 GEMMs consume), and scales rounded
// up to a power of two (UE8M0-style): scale = 2^ceil(log2(amax / 448)).
// Launch: blockDim.x = 128, grid = tokens * hidden / 512.
extern "C" __global__ void fp8_group_quant_bf16_colmajor_pow2(const __nv_bfloat16* x, unsigned char* q, float* scales,
                                                              int tokens, int hidden) {
    int warp_global = (blockIdx.x * blockDim.x + threadIdx.x) >> 5;
    int lane = threadIdx.x & 31;
    int groups_per_row = hidden / GROUP;
    int t = warp_global / groups_per_row, g = warp_global % groups_per_row;
    const __nv_bfloat162* src = reinterpret_cast<const __nv_bfloat162*>(x + (size_t)t * hidden + g * GROUP) + 2 * lane;
    float2 a = __bfloat1622float2(src[0]), b = __bfloat1622float2(src[1]);
    float amax = fmaxf(fmaxf(fabsf(a.x), fabsf(a.y)), fmaxf(fabsf(b.x), fabsf(b.y)));
    for (int o = 16; o > 0; o >>= 1) amax = fmaxf(amax, __shfl_xor_sync(0xffffffffu, amax, o));
    float scale = exp2f(ceilf(log2f(fmaxf(amax, 1e-4f) / FP8_MAX)));
    __nv_fp8x2_storage_t lo = __nv_cvt_float2_to_fp8x2(make_float2(a.x / scale, a.y / scale), __NV_SATFINITE, __NV_E4M3);
    __nv_fp8x2_storage_t hi = __nv_cvt_float2_to_fp8x2(make_float2(b.x / scale, b.y / scale), __NV_SATFINITE, __NV_E4M3);
    reinterpret_cast<unsigned*>(q + (size_t)t * hidden + g * GROUP)[lane] = (unsigned)lo | ((unsigned)hi << 16);
    if (lane == 0) scales[(size_t)g * tokens + t] = scale;
}

// Dequantize: y = float(e4m3(q)) * scale[t, g]. Launch: 1D over tokens * hidden.
extern "C" __global__ void fp8_group_dequant_e4m3(const unsigned char* q, const float* scales, float* y, int tokens,
                                                  int hidden) {
    size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= (size_t)tokens * hidden) return;
    int t = (int)(i / hidden), c = (int)(i % hidden);
    __half_raw h = __nv_cvt_fp8_to_halfraw(q[i], __NV_E4M3);
    y[i] = __half2float(__half(h)) * scales[t * (hidden / GROUP) + c / GROUP];
}
