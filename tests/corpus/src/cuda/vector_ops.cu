// Elementwise vector kernels. archs: all (sm_80 sm_89 sm_90a sm_100a)
// Launch: 1D grid, any block size; n elements. Reference: plain numpy elementwise ops.

extern "C" __global__ void vadd_f32(const float* a, const float* b, float* c, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) c[i] = a[i] + b[i];
}

// y = alpha * x + y
extern "C" __global__ void saxpy(float alpha, const float* __restrict__ x, float* __restrict__ y, int n) {
    for (int i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += blockDim.x * gridDim.x)
        y[i] = alpha * x[i] + y[i];
}

// y = alpha * x + y in double precision
extern "C" __global__ void daxpy(double alpha, const double* x, double* y, long long n) {
    long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) y[i] = fma(alpha, x[i], y[i]);
}

// out[i] = a*b - c with 32-bit wrap-around, plus bitwise mix; out2 = 64-bit sum
extern "C" __global__ void int_ops_i32(const int* a, const int* b, int* out, long long* out64, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= n) return;
    int x = a[i], y = b[i];
    unsigned ux = (unsigned)x, uy = (unsigned)y;
    int r = x * y - (x ^ y);
    r += (int)((ux >> (uy & 31)) | (ux << ((uy + 3) & 31)));
    r ^= (x >> (y & 31));            // arithmetic shift
    r += min(x, y) - max(x, y) + abs(x - y);
    out[i] = r;
    out64[i] = (long long)x * (long long)y + ((long long)x << 20);
}

// unsigned char/short widening: out[i] = sum of the 4 bytes of in[i] + high half
extern "C" __global__ void int_ops_narrow(const unsigned* in, unsigned short* out16, signed char* out8, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= n) return;
    unsigned v = in[i];
    unsigned s = (v & 0xff) + ((v >> 8) & 0xff) + ((v >> 16) & 0xff) + (v >> 24);
    out16[i] = (unsigned short)(s + (v >> 16));
    out8[i] = (signed char)(v ^ (v >> 7));
}

// select / predication: out[i] = a[i] > b[i] ? a[i] - b[i] : (a[i] == b[i] ? 0 : -1)
extern "C" __global__ void select_i32(const int* a, const int* b, int* out, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) out[i] = a[i] > b[i] ? a[i] - b[i] : (a[i] == b[i] ? 0 : -1);
}

// float4 vectorized copy-scale: out[i] = in[i] * s (n4 = number of float4)
extern "C" __global__ void scale_f32x4(const float4* in, float4* out, float s, int n4) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n4) {
        float4 v = in[i];
        out[i] = make_float4(v.x * s, v.y * s, v.z * s, v.w * s);
    }
}
