// f16 / bf16 / fp8 / fp6 / fp4 / e8m0 conversions and packed half arithmetic.
// archs: all (sm_80 sm_89 sm_90a sm_100a). On sm_80 the fp8 conversions are software sequences from
// cuda_fp8.hpp; on sm_89+ they are cvt.rn.satfinite.{e4m3x2,e5m2x2}.f32; fp4/fp6/e8m0 are native cvt
// only on sm_100a. Launch: 1D, n threads (n even for the x2 kernels). Reference: ml_dtypes
// (float16, bfloat16, float8_e4m3fn, float8_e5m2, float6_e2m3fn, float6_e3m2fn, float4_e2m1fn, float8_e8m0fnu).
#include <cuda_fp16.h>
#include <cuda_bf16.h>
#include <cuda_fp8.h>
#include <cuda_fp6.h>
#include <cuda_fp4.h>

// h[i] = f16 bits of x[i] (round to nearest even), back[i] = float(h), and the other rounding modes.
extern "C" __global__ void cvt_f32_to_f16(const float* x, unsigned short* h_rn, unsigned short* h_rz,
                                          unsigned short* h_ru, unsigned short* h_rd, float* back, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= n) return;
    float v = x[i];
    __half hr = __float2half_rn(v);
    h_rn[i] = __half_as_ushort(hr);
    h_rz[i] = __half_as_ushort(__float2half_rz(v));
    h_ru[i] = __half_as_ushort(__float2half_ru(v));
    h_rd[i] = __half_as_ushort(__float2half_rd(v));
    back[i] = __half2float(hr);
}

extern "C" __global__ void cvt_f32_to_bf16(const float* x, unsigned short* b_rn, unsigned short* b_rz,
                                           float* back, double* back_d, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= n) return;
    float v = x[i];
    __nv_bfloat16 b = __float2bfloat16_rn(v);
    b_rn[i] = __bfloat16_as_ushort(b);
    b_rz[i] = __bfloat16_as_ushort(__float2bfloat16_rz(v));
    back[i] = __bfloat162float(b);
    back_d[i] = (double)__double2bfloat16((double)v * 3.0);   // f64 -> bf16 -> f64 (via float)
}

// Pairs (x[2k], x[2k+1]) -> one fp8x2 word, with and without satfinite, for e4m3 and e5m2.
// out16 is [n/2, 4] u16: e4m3 sat, e4m3 nosat, e5m2 sat, e5m2 nosat. back is [n/2, 4] f32 (e4m3 sat
// decoded through half2, e5m2 sat decoded likewise).
extern "C" __global__ void cvt_f32x2_to_fp8x2(const float* x, unsigned short* out16, float* back, int npairs) {
    int k = blockIdx.x * blockDim.x + threadIdx.x;
    if (k >= npairs) return;
    float2 v = make_float2(x[2 * k], x[2 * k + 1]);
    __nv_fp8x2_storage_t e4s = __nv_cvt_float2_to_fp8x2(v, __NV_SATFINITE, __NV_E4M3);
    __nv_fp8x2_storage_t e4n = __nv_cvt_float2_to_fp8x2(v, __NV_NOSAT, __NV_E4M3);
    __nv_fp8x2_storage_t e5s = __nv_cvt_float2_to_fp8x2(v, __NV_SATFINITE, __NV_E5M2);
    __nv_fp8x2_storage_t e5n = __nv_cvt_float2_to_fp8x2(v, __NV_NOSAT, __NV_E5M2);
    out16[4 * k + 0] = e4s;
    out16[4 * k + 1] = e4n;
    out16[4 * k + 2] = e5s;
    out16[4 * k + 3] = e5n;
    __half2_raw h4 = __nv_cvt_fp8x2_to_halfraw2(e4s, __NV_E4M3);
    __half2_raw h5 = __nv_cvt_fp8x2_to_halfraw2(e5s, __NV_E5M2);
    __half2 a = *reinterpret_cast<__half2*>(&h4), b = *reinterpret_cast<__half2*>(&h5);
    back[4 * k + 0] = __low2float(a);
    back[4 * k + 1] = __high2float(a);
    back[4 * k + 2] = __low2float(b);
    back[4 * k + 3] = __high2float(b);
}

// Scalar fp8 via the C++ classes and from half / bf16 sources; out8 is [n, 4] bytes.
extern "C" __global__ void cvt_fp8_scalar(const float* x, unsigned char* out8, float* back, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= n) return;
    float v = x[i];
    __nv_fp8_e4m3 a(v);                 // satfinite, round to nearest even
    __nv_fp8_e5m2 b(v);
    __nv_bfloat16_raw br = __float2bfloat16_rn(v);
    __half_raw hr = __float2half_rn(v);
    out8[4 * i + 0] = a.__x;
    out8[4 * i + 1] = b.__x;
    out8[4 * i + 2] = __nv_cvt_bfloat16raw_to_fp8(br, __NV_SATFINITE, __NV_E4M3);
    out8[4 * i + 3] = __nv_cvt_halfraw_to_fp8(hr, __NV_NOSAT, __NV_E5M2);
    back[i] = float(a) + float(b);
}

// fp6 (e2m3, e3m2), fp4 (e2m1) and e8m0 scale conversions; out8 is [n/2, 6] bytes.
extern "C" __global__ void cvt_f32_to_fp6_fp4_e8m0(const float* x, unsigned char* out8, float* back, int npairs) {
    int k = blockIdx.x * blockDim.x + threadIdx.x;
    if (k >= npairs) return;
    float2 v = make_float2(x[2 * k], x[2 * k + 1]);
    __nv_fp6x2_storage_t p23 = __nv_cvt_float2_to_fp6x2(v, __NV_E2M3, cudaRoundNearest);
    __nv_fp6x2_storage_t p32 = __nv_cvt_float2_to_fp6x2(v, __NV_E3M2, cudaRoundNearest);
    __nv_fp4x2_storage_t p4 = __nv_cvt_float2_to_fp4x2(v, __NV_E2M1, cudaRoundNearest);
    unsigned char* o = out8 + 6 * k;
    o[0] = (unsigned char)(p23 & 0xff);
    o[1] = (unsigned char)(p23 >> 8);
    o[2] = (unsigned char)(p32 & 0xff);
    o[3] = (unsigned char)(p32 >> 8);
    o[4] = p4;
    o[5] = __nv_cvt_float_to_e8m0(fabsf(v.x), __NV_SATFINITE, cudaRoundPosInf);
    __half_raw h = __nv_cvt_fp4_to_halfraw((__nv_fp4_storage_t)(p4 & 0xf), __NV_E2M1);
    back[k] = __half2float(__half(h));
}

// Packed half2 / bfloat162 arithmetic: out = a * b + c, plus max and relu, per 2-wide lane pair.
extern "C" __global__ void half2_bf162_math(const __half2* a, const __half2* b, const __half2* c, __half2* fma_h,
                                            __half2* max_h, const __nv_bfloat162* x, const __nv_bfloat162* y,
                                            __nv_bfloat162* fma_b, int n2) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= n2) return;
    fma_h[i] = __hfma2(a[i], b[i], c[i]);
    max_h[i] = __hmax2_nan(__hadd2(a[i], b[i]), __hmul2_sat(b[i], c[i]));
    fma_b[i] = __hfma2_relu(x[i], y[i], x[i]);
}

// half / bf16 scalar compare, conversion to int and sqrt/exp intrinsics.
extern "C" __global__ void half_scalar_misc(const __half* a, const __nv_bfloat16* b, int* oi, float* of, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= n) return;
    __half h = a[i];
    __nv_bfloat16 g = b[i];
    oi[3 * i + 0] = __half2int_rn(h);
    oi[3 * i + 1] = __hlt(h, __float2half(1.0f)) ? 1 : 0;
    oi[3 * i + 2] = __bfloat162int_rz(g);
    of[2 * i + 0] = __half2float(hsqrt(__habs(h)));
    of[2 * i + 1] = __bfloat162float(hexp2(g));
}
