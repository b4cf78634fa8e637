// Memory spaces and module-scope state: dynamic extern __shared__, __constant__ tables, __device__
// globals with initializers, local-memory arrays, and a struct passed by value as a kernel parameter.
// archs: all (sm_80 sm_89 sm_90a sm_100a)

// Dynamic shared memory: reverse each block's slice. Launch with dynamic smem = blockDim.x * 8 bytes
// (a float and an int per thread, carved out of one buffer). out[b*B + i] = in[b*B + B-1-i], idx likewise.
extern "C" __global__ void dynamic_smem_reverse(const float* in, float* out, int* idx, int n) {
    extern __shared__ __align__(16) unsigned char smem[];
    float* sf = reinterpret_cast<float*>(smem);
    int* si = reinterpret_cast<int*>(smem + blockDim.x * sizeof(float));
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    sf[threadIdx.x] = i < n ? in[i] : 0.0f;
    si[threadIdx.x] = i;
    __syncthreads();
    int r = blockDim.x - 1 - threadIdx.x;
    if (i < n) { out[i] = sf[r]; idx[i] = si[r]; }
}

// Constant memory: a polynomial whose coefficients live in __constant__ memory (set by the host with
// cudaMemcpyToSymbol or the module global "poly_coeffs"; defaults below), and a lookup table.
__constant__ float poly_coeffs[8] = {1.0f, -0.5f, 0.25f, -0.125f, 0.0625f, 0.0f, 0.0f, 0.0f};
__constant__ unsigned char popcount_lut[16] = {0, 1, 1, 2, 1, 2, 2, 3, 1, 2, 2, 3, 2, 3, 3, 4};

// y[i] = sum_k poly_coeffs[k] * x[i]^k (Horner); bits[i] = popcount of the low 8 bits of u[i] via the LUT.
extern "C" __global__ void constant_poly_lut(const float* x, float* y, const unsigned* u, int* bits, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= n) return;
    float v = x[i], acc = 0.0f;
#pragma unroll
    for (int k = 7; k >= 0; --k) acc = fmaf(acc, v, poly_coeffs[k]);
    y[i] = acc;
    unsigned w = u[i];
    bits[i] = popcount_lut[w & 15] + popcount_lut[(w >> 4) & 15];
}

// __device__ globals with initializers, read and updated by kernels.
__device__ int device_counter = 42;
__device__ float device_table[4] = {0.5f, 1.5f, 2.5f, 3.5f};
__device__ unsigned long long device_u64 = 0x0123456789abcdefull;
struct Config { int scale; float bias; short tag; char flag; };
__device__ Config device_config = {3, 0.25f, -7, 'y'};
__device__ const char* device_message = "hello";

// out[i] = device_table[i % 4] * device_config.scale + device_config.bias; counter incremented once per
// thread (final value 42 + total threads); misc[0..3] = {low word of device_u64, tag, flag, message[1]}.
extern "C" __global__ void device_globals(float* out, int* misc, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) out[i] = device_table[i & 3] * device_config.scale + device_config.bias;
    atomicAdd(&device_counter, 1);
    if (i == 0) {
        misc[0] = (int)(device_u64 & 0xffffffffu);
        misc[1] = device_config.tag;
        misc[2] = device_config.flag;
        misc[3] = device_message[1];
    }
}

// Struct parameter by value (param space, mixed alignment) including a nested array.
struct Affine {
    float m[2][2];
    float t[2];
    int n;
    unsigned char mode;   // 0: apply, 1: apply transpose
    double weight;
};

// p is [n, 2] points; q[i] = (M or M^T) @ p[i] + t, then scaled by weight.
extern "C" __global__ void struct_param_affine(Affine A, const float2* p, float2* q) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= A.n) return;
    float2 v = p[i];
    float a = A.mode ? A.m[1][0] : A.m[0][1];
    float b = A.mode ? A.m[0][1] : A.m[1][0];
    float x = A.m[0][0] * v.x + a * v.y + A.t[0];
    float y = b * v.x + A.m[1][1] * v.y + A.t[1];
    q[i] = make_float2((float)(x * A.weight), (float)(y * A.weight));
}

// Local-memory array indexed dynamically (forces .local stack usage): out[i] = sorted(in[i*8 .. +8])[k].
extern "C" __global__ void local_array_select(const int* in, int* out, int k, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= n) return;
    int a[8];
    for (int j = 0; j < 8; ++j) a[j] = in[i * 8 + j];
    for (int j = 1; j < 8; ++j) {   // insertion sort
        int v = a[j], m = j - 1;
        while (m >= 0 && a[m] > v) { a[m + 1] = a[m]; --m; }
        a[m + 1] = v;
    }
    out[i] = a[k & 7];
}
