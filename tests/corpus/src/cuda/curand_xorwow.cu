// curand's device API (XORWOW, the default curandState): curand_init with a subsequence per thread and an
// offset, curand(), curand_uniform(). archs: sm_90a (one arch: the headers' skip-ahead and MRG32k3a tables
// make the PTX about 1 MB of .global initializers, plus a .const table; -G is over the size limit).
// Headers: the nvidia-curand wheel (generate.py --include <site-packages>/nvidia/cu13/include).
// Launch: 1D, one thread per subsequence (tid). xorwow_raw: out[tid * per_thread + i] = the i-th curand() after
// curand_init(seed, tid, offset); xorwow_uniform: the same with offset 0 through curand_uniform().
// Reference: XORWOW written in numpy (tests/emu/test_emu_curand.py): subsequence s starts 2^67 * s steps in,
// the offset skips that many more steps and adds offset * 362437 to the Weyl counter.
#include <curand_kernel.h>

extern "C" __global__ void xorwow_raw(unsigned* out, unsigned long long seed, unsigned long long offset,
                                      int per_thread) {
    int tid = blockIdx.x * blockDim.x + threadIdx.x;
    curandState state;
    curand_init(seed, tid, offset, &state);
    for (int i = 0; i < per_thread; ++i) out[tid * per_thread + i] = curand(&state);
}

extern "C" __global__ void xorwow_uniform(float* out, unsigned long long seed, int per_thread) {
    int tid = blockIdx.x * blockDim.x + threadIdx.x;
    curandState state;
    curand_init(seed, tid, 0, &state);
    for (int i = 0; i < per_thread; ++i) out[tid * per_thread + i] = curand_uniform(&state);
}
