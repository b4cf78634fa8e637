// Prefix sums. archs: all (sm_80 sm_89 sm_90a sm_100a)
// Each block scans its own blockDim.x-element slice independently (blockDim.x = 256 unless noted).
// Reference: numpy.cumsum per slice (exclusive = cumsum shifted right with a leading 0).

#define BLOCK 256

// Hillis-Steele inclusive scan with double buffering in shared memory.
extern "C" __global__ void scan_inclusive_hillis_steele(const int* in, int* out, int n) {
    __shared__ int buf[2][BLOCK];
    int tid = threadIdx.x;
    int i = blockIdx.x * blockDim.x + tid;
    int cur = 0;
    buf[0][tid] = i < n ? in[i] : 0;
    __syncthreads();
    for (int off = 1; off < (int)blockDim.x; off <<= 1) {
        int v = buf[cur][tid];
        if (tid >= off) v += buf[cur][tid - off];
        buf[cur ^ 1][tid] = v;
        cur ^= 1;
        __syncthreads();
    }
    if (i < n) out[i] = buf[cur][tid];
}

// Blelloch work-efficient exclusive scan (up-sweep / down-sweep), float data.
extern "C" __global__ void scan_exclusive_blelloch(const float* in, float* out, int n) {
    __shared__ float s[BLOCK];
    int tid = threadIdx.x;
    int i = blockIdx.x * BLOCK + tid;
    s[tid] = i < n ? in[i] : 0.0f;
    int off = 1;
    for (int d = BLOCK >> 1; d > 0; d >>= 1) {
        __syncthreads();
        if (tid < d) {
            int a = off * (2 * tid + 1) - 1, b = off * (2 * tid + 2) - 1;
            s[b] += s[a];
        }
        off <<= 1;
    }
    if (tid == 0) s[BLOCK - 1] = 0.0f;
    for (int d = 1; d < BLOCK; d <<= 1) {
        off >>= 1;
        __syncthreads();
        if (tid < d) {
            int a = off * (2 * tid + 1) - 1, b = off * (2 * tid + 2) - 1;
            float t = s[a];
            s[a] = s[b];
            s[b] += t;
        }
    }
    __syncthreads();
    if (i < n) out[i] = s[tid];
}

// Warp-level inclusive scan with shfl.up, then a scan of the warp totals. Works for any blockDim.x
// that is a multiple of 32 (<= 1024).
extern "C" __global__ void scan_inclusive_warp_shuffle(const unsigned* in, unsigned* out, int n) {
    __shared__ unsigned warp_total[32];
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    unsigned v = i < n ? in[i] : 0u;
    for (int o = 1; o < 32; o <<= 1) {
        unsigned up = __shfl_up_sync(0xffffffffu, v, o);
        if (lane >= o) v += up;
    }
    if (lane == 31) warp_total[warp] = v;
    __syncthreads();
    if (warp == 0) {
        unsigned t = lane < (int)(blockDim.x >> 5) ? warp_total[lane] : 0u;
        for (int o = 1; o < 32; o <<= 1) {
            unsigned up = __shfl_up_sync(0xffffffffu, t, o);
            if (lane >= o) t += up;
        }
        warp_total[lane] = t;
    }
    __syncthreads();
    if (warp > 0) v += warp_total[warp - 1];
    if (i < n) out[i] = v;
}

// Stream compaction: keep the positive values of each block's slice, in order; count[blockIdx.x] = kept.
// out is laid out per block: out[blockIdx.x * blockDim.x + k], k < count.
extern "C" __global__ void compact_positive(const int* in, int* out, int* count, int n) {
    __shared__ unsigned warp_count[32];
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    int v = i < n ? in[i] : 0;
    bool keep = v > 0;
    unsigned ballot = __ballot_sync(0xffffffffu, keep);
    unsigned rank = __popc(ballot & ((1u << lane) - 1u));
    if (lane == 0) warp_count[warp] = __popc(ballot);
    __syncthreads();
    unsigned base = 0;
    for (int w = 0; w < warp; ++w) base += warp_count[w];
    if (keep) out[blockIdx.x * blockDim.x + base + rank] = v;
    if (threadIdx.x == blockDim.x - 1) count[blockIdx.x] = base + warp_count[warp];
}
