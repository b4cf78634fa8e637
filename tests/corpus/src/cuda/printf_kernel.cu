// Device printf (vprintf calls with a packed argument buffer). archs: all (sm_80 sm_89 sm_90a sm_100a)
// Launch: one block of 4 threads. Expected stdout lines (order across threads unspecified):
//   "thread %d of %d: x=%.3f i=%lld c=%c s=%s" for each thread; plus out[t] = 2*t + 1.
#include <cstdio>

extern "C" __global__ void printf_basic(const float* x, int* out) {
    int t = threadIdx.x;
    long long big = 1ll << 40;
    printf("thread %d of %d: x=%.3f i=%lld c=%c s=%s\n", t, blockDim.x, x[t], big + t, 'a' + t, "ok");
    if (t == 0) printf("no-arg line\n");
    out[t] = 2 * t + 1;
}

// printf from a divergent branch with double and unsigned hex arguments
extern "C" __global__ void printf_divergent(const double* d, unsigned mask) {
    int t = threadIdx.x;
    if ((mask >> t) & 1) printf("lane %d: %g 0x%08x\n", t, d[t], (unsigned)t * 0x01010101u);
    else printf("lane %d idle\n", t);
}
