// Double-precision libm calls (inlined libdevice code: long straight-line PTX with many constants).
// archs: all (sm_80 sm_89 sm_90a sm_100a). Launch: 1D, n threads. out is [n, 8] f64.
// Reference: numpy float64 within a few ulp.

extern "C" __global__ void f64_libm(const double* x, const double* y, double* out, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= n) return;
    double a = x[i], b = y[i];
    double* o = out + 8 * i;
    o[0] = exp(a);
    o[1] = log(fabs(a) + 1e-300);
    o[2] = sin(a);
    o[3] = cos(b);
    o[4] = pow(fabs(a), b);
    o[5] = atan2(a, b);
    o[6] = tanh(a);
    o[7] = cbrt(b) + hypot(a, b);
}

// Single-precision libm (precise versions, not the __ intrinsics): expf, logf, sinf, powf, erff, lgammaf.
extern "C" __global__ void f32_libm(const float* x, const float* y, float* out, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= n) return;
    float a = x[i], b = y[i];
    float* o = out + 8 * i;
    o[0] = expf(a);
    o[1] = logf(fabsf(a) + 1e-30f);
    o[2] = sinf(a);
    o[3] = powf(fabsf(a), b);
    o[4] = erff(a);
    o[5] = lgammaf(fabsf(b) + 0.5f);
    o[6] = fmodf(a, b);
    o[7] = remainderf(a, b);
}
