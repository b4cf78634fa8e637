// Atomics of every kind. archs: all (sm_80 sm_89 sm_90a sm_100a)
// Launch: 1D, any shape, T threads in total. Every kernel's final state is order-independent (integer
// ops, or float adds of small integers that sum exactly), so a numpy reference can check it.
#include <cuda_fp16.h>
#include <cuda_bf16.h>

// c32[0..12] receive, from each thread t with value v = in[t]:
// 0 add 1 | 1 sub 1 | 2 min v (signed) | 3 max v (signed) | 4 min (unsigned) | 5 max (unsigned) | 6 and ~(1<<t%32)
// 7 or 1<<t%32 | 8 xor v | 9 inc with limit 100 (wraps to 0 after 100) | 10 dec with limit 100
// 11 exch (last writer wins: check it is one of the inputs; old_exch[t] gets the previous values)
// 12 CAS loop: max of v*3. c64: 0 add v (as u64) | 1 max v (signed) | 2 min (unsigned)v | 3 CAS increment
// (ends at T + initial value).
extern "C" __global__ void atomics_int(const int* in, int* c32, unsigned long long* c64, int* old_exch, int T) {
    int t = blockIdx.x * blockDim.x + threadIdx.x;
    if (t >= T) return;
    int v = in[t];
    atomicAdd(&c32[0], 1);
    atomicSub(&c32[1], 1);
    atomicMin(&c32[2], v);
    atomicMax(&c32[3], v);
    atomicMin((unsigned*)&c32[4], (unsigned)v);
    atomicMax((unsigned*)&c32[5], (unsigned)v);
    atomicAnd(&c32[6], ~(1 << (t & 31)));
    atomicOr(&c32[7], 1 << (t & 31));
    atomicXor(&c32[8], v);
    atomicInc((unsigned*)&c32[9], 100u);
    atomicDec((unsigned*)&c32[10], 100u);
    old_exch[t] = atomicExch(&c32[11], v);
    atomicAdd(&c64[0], (unsigned long long)(long long)v);
    atomicMax((long long*)&c64[1], (long long)v);
    atomicMin(&c64[2], (unsigned long long)(unsigned)v);
    // CAS loop: c32[12] = max(v * 3)
    int* p = &c32[12];
    int old = *p, assumed;
    do {
        assumed = old;
        if (assumed >= v * 3) break;
        old = atomicCAS(p, assumed, v * 3);
    } while (old != assumed);
    // 64-bit CAS: c64[3] ends as the number of threads (increment via CAS)
    unsigned long long o64 = c64[3], a64;
    do { a64 = o64; o64 = atomicCAS(&c64[3], a64, a64 + 1); } while (o64 != a64);
}

// Floating-point atomics: f32/f64 add, half2/bf162 add, f32 max via CAS on the int bits, exch on float.
extern "C" __global__ void atomics_float(const float* in, float* f32, double* f64, __half2* h2, __nv_bfloat162* b2,
                                         __nv_bfloat16* b1, __half* h1, int T) {
    int t = blockIdx.x * blockDim.x + threadIdx.x;
    if (t >= T) return;
    float v = in[t];          // small integers so every order gives the same sum
    atomicAdd(&f32[0], v);
    atomicAdd(&f64[0], (double)v * 0.5);
    atomicAdd(h2, __floats2half2_rn(1.0f, v));
    atomicAdd(b2, __floats2bfloat162_rn(v, 2.0f));
    atomicAdd(b1, __float2bfloat16(1.0f));
    atomicAdd(h1, __float2half(0.5f));
    // float max through CAS on the bit pattern (valid for non-negative floats)
    unsigned* p = (unsigned*)&f32[1];
    unsigned old = *p, assumed;
    do {
        assumed = old;
        if (__uint_as_float(assumed) >= v) break;
        old = atomicCAS(p, assumed, __float_as_uint(v));
    } while (old != assumed);
    atomicExch(&f32[2], 7.0f);
}

// Scoped atomics (block, system) and shared-memory atomics; result per block in out[blockIdx.x].
extern "C" __global__ void atomics_scoped_shared(const int* in, int* out, int* sys_counter, int T) {
    __shared__ int s_sum;
    __shared__ unsigned s_max;
    if (threadIdx.x == 0) { s_sum = 0; s_max = 0; }
    __syncthreads();
    int t = blockIdx.x * blockDim.x + threadIdx.x;
    int v = t < T ? in[t] : 0;
    atomicAdd_block(&s_sum, v);
    atomicMax_block(&s_max, (unsigned)v);
    atomicAdd_system(sys_counter, 1);
    __syncthreads();
    if (threadIdx.x == 0) {
        out[2 * blockIdx.x] = s_sum;
        out[2 * blockIdx.x + 1] = (int)s_max;
    }
}

// Explicit-order atomics via inline PTX: atom.acq_rel.gpu, red.release.gpu, ld.acquire.
extern "C" __global__ void atomics_ordered(int* flag, int* data, int* result, int T) {
    int t = blockIdx.x * blockDim.x + threadIdx.x;
    if (t >= T) return;
    int old;
    asm volatile("atom.acq_rel.gpu.global.add.s32 %0, [%1], %2;" : "=r"(old) : "l"(data), "r"(t) : "memory");
    asm volatile("red.release.gpu.global.add.s32 [%0], %1;" :: "l"(flag), "r"(1) : "memory");
    int seen;
    asm volatile("ld.acquire.gpu.global.s32 %0, [%1];" : "=r"(seen) : "l"(flag) : "memory");
    result[t] = seen >= 1 ? 1 : 0;   // always 1: this thread's own red is visible to it
    (void)old;
}
