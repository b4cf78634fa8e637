// Float corner cases: NaN/inf/subnormal propagation, explicit rounding modes, FTZ and approximate ops.
// archs: all (sm_80 sm_89 sm_90a sm_100a). Launch: 1D, n threads; a, b, c are f32 inputs (include NaN,
// +-inf, +-0, subnormals, FLT_MAX, values near 1). out is [n, 32] f32, out_d is [n, 8] f64.
// Reference: numpy with explicit rounding (e.g. via fractions / ml_dtypes) per column as commented.

__device__ __forceinline__ float add_ftz(float a, float b) {
    float r;
    asm("add.ftz.f32 %0, %1, %2;" : "=f"(r) : "f"(a), "f"(b));
    return r;
}
__device__ __forceinline__ float mul_ftz_sat(float a, float b) {
    float r;
    asm("mul.rn.ftz.sat.f32 %0, %1, %2;" : "=f"(r) : "f"(a), "f"(b));
    return r;
}
__device__ __forceinline__ float fma_rn_ftz(float a, float b, float c) {
    float r;
    asm("fma.rn.ftz.f32 %0, %1, %2, %3;" : "=f"(r) : "f"(a), "f"(b), "f"(c));
    return r;
}
__device__ __forceinline__ float min_nan(float a, float b) {
    float r;
    asm("min.NaN.f32 %0, %1, %2;" : "=f"(r) : "f"(a), "f"(b));
    return r;
}
__device__ __forceinline__ float sqrt_approx_ftz(float a) {
    float r;
    asm("sqrt.approx.ftz.f32 %0, %1;" : "=f"(r) : "f"(a));
    return r;
}
__device__ __forceinline__ float rcp_approx_ftz(float a) {
    float r;
    asm("rcp.approx.ftz.f32 %0, %1;" : "=f"(r) : "f"(a));
    return r;
}
__device__ __forceinline__ float testp_class(float a) {
    unsigned sub, fin;
    asm("{ .reg .pred p, q; testp.subnormal.f32 p, %2; testp.finite.f32 q, %2;"
        " selp.u32 %0, 1, 0, p; selp.u32 %1, 1, 0, q; }" : "=r"(sub), "=r"(fin) : "f"(a));
    return (float)(sub * 2 + fin);
}

extern "C" __global__ void float_rounding_f32(const float* A, const float* B, const float* C, float* out, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= n) return;
    float a = A[i], b = B[i], c = C[i];
    float* o = out + 32 * i;
    o[0] = __fadd_rn(a, b);
    o[1] = __fadd_rz(a, b);
    o[2] = __fadd_ru(a, b);
    o[3] = __fadd_rd(a, b);
    o[4] = __fmul_rn(a, b);
    o[5] = __fmul_rz(a, b);
    o[6] = __fmul_ru(a, b);
    o[7] = __fmul_rd(a, b);
    o[8] = __fmaf_rn(a, b, c);
    o[9] = __fmaf_rz(a, b, c);
    o[10] = __fmaf_ru(a, b, c);
    o[11] = __fmaf_rd(a, b, c);
    o[12] = __fdiv_rn(a, b);
    o[13] = __fdiv_rz(a, b);
    o[14] = __fdiv_ru(a, b);
    o[15] = __fdiv_rd(a, b);
    o[16] = __fsqrt_rn(a);
    o[17] = __fsqrt_rz(a);
    o[18] = __fsqrt_ru(a);
    o[19] = __fsqrt_rd(a);
    o[20] = __frcp_rn(a);
    o[21] = __frsqrt_rn(a);
    o[22] = __fsub_rn(a, b);
    o[23] = __fdividef(a, b);        // approximate division (div.full.f32)
    o[24] = add_ftz(a, b);           // subnormal inputs/outputs flushed to sign-preserving zero
    o[25] = mul_ftz_sat(a, b);       // result clamped to [0, 1], NaN -> 0
    o[26] = fma_rn_ftz(a, b, c);
    o[27] = fminf(a, b);             // NaN-ignoring min
    o[28] = min_nan(a, b);           // NaN-propagating min
    o[29] = sqrt_approx_ftz(a);
    o[30] = rcp_approx_ftz(a);
    o[31] = testp_class(a);          // 2*is_subnormal + is_finite
}

// Default (IEEE) operators: a/b and sqrtf compile to div.rn.f32 / sqrt.rn.f32; plus classification.
extern "C" __global__ void float_ieee_ops(const float* A, const float* B, float* out, int* cls, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= n) return;
    float a = A[i], b = B[i];
    float* o = out + 8 * i;
    o[0] = a / b;
    o[1] = sqrtf(a);
    o[2] = fmaxf(a, b);
    o[3] = copysignf(a, b);
    o[4] = fabsf(a) * -1.0f;
    o[5] = nextafterf(a, b);
    o[6] = truncf(a) + floorf(b);
    o[7] = rintf(a) - ceilf(b);
    cls[i] = (isnan(a) ? 1 : 0) | (isinf(a) ? 2 : 0) | (signbit(a) ? 4 : 0) | (isfinite(b) ? 8 : 0);
}

// Double-precision rounding intrinsics.
extern "C" __global__ void float_rounding_f64(const double* A, const double* B, const double* C, double* out,
                                              int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= n) return;
    double a = A[i], b = B[i], c = C[i];
    double* o = out + 8 * i;
    o[0] = __dadd_rz(a, b);
    o[1] = __dadd_ru(a, b);
    o[2] = __dmul_rd(a, b);
    o[3] = __fma_rz(a, b, c);
    o[4] = __ddiv_rn(a, b);
    o[5] = __ddiv_ru(a, b);
    o[6] = __dsqrt_rd(a);
    o[7] = __drcp_rn(a);
}

// Approximate transcendental intrinsics (ex2.approx, lg2.approx, sin.approx, cos.approx, tanh.approx).
// Reference: numpy within a relative tolerance of ~1e-6 (tanh: ~5e-4).
extern "C" __global__ void float_approx_math(const float* A, float* out, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= n) return;
    float a = A[i];
    float th;
    asm("tanh.approx.f32 %0, %1;" : "=f"(th) : "f"(a));
    float* o = out + 8 * i;
    o[0] = __expf(a);
    o[1] = exp2f(a);
    o[2] = __logf(fabsf(a) + 1.0f);
    o[3] = __log2f(fabsf(a) + 1.0f);
    o[4] = __sinf(a);
    o[5] = __cosf(a);
    o[6] = th;
    o[7] = __saturatef(a);
}
