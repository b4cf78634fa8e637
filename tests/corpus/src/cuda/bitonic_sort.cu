// Bitonic sort of each block's slice in shared memory. archs: all (sm_80 sm_89 sm_90a sm_100a)
// Launch: blockDim.x = 512 threads, each block sorts 1024 elements (two per thread) in place, ascending.
// Reference: numpy.sort on each 1024-element slice (key/value variant: argsort(kind="stable") is NOT the
// reference since bitonic is unstable; use distinct keys).

#define N 1024

__device__ __forceinline__ void cmp_swap(float& a, float& b, bool up) {
    if ((a > b) == up) { float t = a; a = b; b = t; }
}

extern "C" __global__ void bitonic_sort_f32(float* data) {
    __shared__ float s[N];
    float* base = data + blockIdx.x * N;
    unsigned t = threadIdx.x;
    s[t] = base[t];
    s[t + N / 2] = base[t + N / 2];
    __syncthreads();
    for (unsigned k = 2; k <= N; k <<= 1) {
        for (unsigned j = k >> 1; j > 0; j >>= 1) {
            // thread t handles the pair (i, i ^ j) where i has bit j clear
            unsigned i = 2 * t - (t & (j - 1));
            unsigned p = i ^ j;
            bool up = (i & k) == 0;
            float a = s[i], b = s[p];
            cmp_swap(a, b, up);
            s[i] = a;
            s[p] = b;
            __syncthreads();
        }
    }
    base[t] = s[t];
    base[t + N / 2] = s[t + N / 2];
}

// Key/value variant on unsigned keys, descending order; values follow their keys.
extern "C" __global__ void bitonic_sort_kv_desc(unsigned* keys, int* vals) {
    __shared__ unsigned sk[N];
    __shared__ int sv[N];
    unsigned off = blockIdx.x * N;
    for (unsigned t = threadIdx.x; t < N; t += blockDim.x) { sk[t] = keys[off + t]; sv[t] = vals[off + t]; }
    __syncthreads();
    for (unsigned k = 2; k <= N; k <<= 1) {
        for (unsigned j = k >> 1; j > 0; j >>= 1) {
            for (unsigned t = threadIdx.x; t < N / 2; t += blockDim.x) {
                unsigned i = 2 * t - (t & (j - 1));
                unsigned p = i ^ j;
                bool desc = (i & k) == 0;
                if ((sk[i] < sk[p]) == desc) {
                    unsigned tk = sk[i]; sk[i] = sk[p]; sk[p] = tk;
                    int tv = sv[i]; sv[i] = sv[p]; sv[p] = tv;
                }
            }
            __syncthreads();
        }
    }
    for (unsigned t = threadIdx.x; t < N; t += blockDim.x) { keys[off + t] = sk[t]; vals[off + t] = sv[t]; }
}
