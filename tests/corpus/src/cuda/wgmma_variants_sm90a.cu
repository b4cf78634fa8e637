// wgmma.mma_async forms beyond f16/bf16 -> f32: f16 accumulators, tf32, s8/u8 integer, 8-bit A in registers. archs: sm_90a
// Launch: one warpgroup (blockDim.x = 128), one block. Matrices in global memory are row-major raw element
// bits: A is [64][K], Bt is B transposed [N][K] (both K-major), C and D are [64][N]. K is 16 (f16), 8 (tf32) or
// 32 (8-bit), so every operand row is 32 bytes and the same no-swizzle K-major staging serves all types:
// 8-row x 16-byte core matrices, the K-neighbour at +128 bytes (leading byte offset), the M/N-neighbour at
// +256 bytes (stride byte offset). Accumulator element i of a thread (warp w, g = lane >> 2, t = lane & 3)
// is row 16w + g + 8*((i >> 1) & 1), col 8*(i >> 2) + 2t + (i & 1); f16 accumulators pack elements 2j, 2j+1
// into register j. `use_c` drives the scale-d predicate (0: D = A*B, 1: D = A*B + C).
#include <cuda_fp16.h>

typedef unsigned char u8;

__device__ __forceinline__ unsigned smem_addr(const void* p) { return (unsigned)__cvta_generic_to_shared(p); }

// byte b (0..31) of K-major row r -> byte offset in the no-swizzle core-matrix layout
__device__ __forceinline__ int core_byte(int r, int b) { return ((r >> 3) * 2 + (b >> 4)) * 128 + (r & 7) * 16 + (b & 15); }

__device__ __forceinline__ void stage_kmajor(u8* s, const u8* g, int rows) {
    for (int i = threadIdx.x; i < rows * 32; i += 128) s[core_byte(i >> 5, i & 31)] = g[i];
}

__device__ __forceinline__ unsigned long long make_desc(const void* smem, unsigned lbo, unsigned sbo) {
    unsigned long long d = 0;
    d |= (unsigned long long)((smem_addr(smem) & 0x3ffff) >> 4);
    d |= (unsigned long long)((lbo & 0x3ffff) >> 4) << 16;
    d |= (unsigned long long)((sbo & 0x3ffff) >> 4) << 32;
    return d;   // base offset 0, swizzle mode 0 (none)
}

__device__ __forceinline__ int acc_row(int i) { return 16 * (threadIdx.x >> 5) + ((threadIdx.x & 31) >> 2) + 8 * ((i >> 1) & 1); }
__device__ __forceinline__ int acc_col(int i) { return 8 * (i >> 2) + 2 * (threadIdx.x & 3) + (i & 1); }

// 32-bit accumulators (f32 / s32): N/2 registers
template <int N> __device__ __forceinline__ void load_acc32(unsigned* d, const unsigned* C, int use_c) {
    for (int i = 0; i < N / 2; ++i) d[i] = use_c ? C[acc_row(i) * N + acc_col(i)] : 0u;
}
template <int N> __device__ __forceinline__ void store_acc32(unsigned* D, const unsigned* d) {
    for (int i = 0; i < N / 2; ++i) D[acc_row(i) * N + acc_col(i)] = d[i];
}
// f16 accumulators: N/4 registers, register j = elements 2j (low half) and 2j + 1 (high half)
template <int N> __device__ __forceinline__ void load_acc16(unsigned* d, const unsigned* C, int use_c) {
    for (int j = 0; j < N / 4; ++j) d[j] = use_c ? C[(acc_row(2 * j) * N + acc_col(2 * j)) / 2] : 0u;
}
template <int N> __device__ __forceinline__ void store_acc16(unsigned* D, const unsigned* d) {
    for (int j = 0; j < N / 4; ++j) D[(acc_row(2 * j) * N + acc_col(2 * j)) / 2] = d[j];
}

#define WG_BEGIN() asm volatile("wgmma.fence.sync.aligned;" ::: "memory")
#define WG_END()                                                    \
    asm volatile("wgmma.commit_group.sync.aligned;" ::: "memory"); \
    asm volatile("wgmma.wait_group.sync.aligned 0;" ::: "memory")
#define STAGE_FENCE()                                                \
    asm volatile("fence.proxy.async.shared::cta;" ::: "memory");     \
    __syncthreads()

// A fragment registers of the warpgroup (rows of warp w: 16w..16w+15), read from row-major A [64][K]:
// 16-bit (K 16): register r = row g + 8*(r & 1), cols 2t + 8*(r >> 1) .. +1
__device__ __forceinline__ void a_regs_16bit(unsigned* a, const unsigned short* A) {
    int w = threadIdx.x >> 5, g = (threadIdx.x & 31) >> 2, t = threadIdx.x & 3;
    for (int r = 0; r < 4; ++r) a[r] = *reinterpret_cast<const unsigned*>(A + (16 * w + g + 8 * (r & 1)) * 16 + 2 * t + 8 * (r >> 1));
}
// tf32 (K 8): register r = row g + 8*(r & 1), col t + 4*(r >> 1)
__device__ __forceinline__ void a_regs_tf32(unsigned* a, const unsigned* A) {
    int w = threadIdx.x >> 5, g = (threadIdx.x & 31) >> 2, t = threadIdx.x & 3;
    for (int r = 0; r < 4; ++r) a[r] = A[(16 * w + g + 8 * (r & 1)) * 8 + t + 4 * (r >> 1)];
}
// 8-bit (K 32): register r = row g + 8*(r & 1), cols 4t + 16*(r >> 1) .. +3 (low byte first)
__device__ __forceinline__ void a_regs_8bit(unsigned* a, const u8* A) {
    int w = threadIdx.x >> 5, g = (threadIdx.x & 31) >> 2, t = threadIdx.x & 3;
    for (int r = 0; r < 4; ++r) a[r] = *reinterpret_cast<const unsigned*>(A + (16 * w + g + 8 * (r & 1)) * 32 + 4 * t + 16 * (r >> 1));
}

// ---------------------------------------------------------------- f16 accumulators

// .f16.f16.f16, N 16, both operands from shared memory, B negated (imm-scale-b = -1): D = A*(-B) + C
extern "C" __global__ void __launch_bounds__(128) wgmma_f16acc_m64n16k16(const u8* A, const u8* Bt, const unsigned* C,
                                                                       unsigned* D, int use_c) {
    __shared__ __align__(128) u8 sa[64 * 32];
    __shared__ __align__(128) u8 sb[16 * 32];
    stage_kmajor(sa, A, 64);
    stage_kmajor(sb, Bt, 16);
    STAGE_FENCE();
    unsigned long long da = make_desc(sa, 128, 256), db = make_desc(sb, 128, 256);
    unsigned d[4];
    load_acc16<16>(d, C, use_c);
    WG_BEGIN();
    asm volatile(
        "{\n .reg .pred p;\n setp.ne.b32 p, %6, 0;\n"
        " wgmma.mma_async.sync.aligned.m64n16k16.f16.f16.f16 {%0,%1,%2,%3}, %4, %5, p, 1, -1, 0, 0;\n}\n"
        : "+r"(d[0]), "+r"(d[1]), "+r"(d[2]), "+r"(d[3]) : "l"(da), "l"(db), "r"(use_c));
    WG_END();
    store_acc16<16>(D, d);
}

// .f16.f16.f16, N 16, A from registers, B given as B [16][16] (K rows, N contiguous) and read N-major
// (imm-trans-b = 1) from the no-swizzle MN-major layout: 8 N-elements (16 bytes) per core-matrix row, the
// next 8 K-rows at +128 bytes (leading byte offset), the next 8 N-columns at +256 bytes (stride byte offset).
extern "C" __global__ void __launch_bounds__(128) wgmma_f16acc_m64n16k16_rs_tb(const unsigned short* A, const u8* B,
                                                                             unsigned* D) {
    __shared__ __align__(128) u8 sb[16 * 32];
    for (int i = threadIdx.x; i < 16 * 32; i += 128) {
        int k = i >> 5, nb = i & 31;   // K row, byte within the 16 N-elements of the row
        sb[(nb >> 4) * 256 + (k >> 3) * 128 + (k & 7) * 16 + (nb & 15)] = B[i];
    }
    STAGE_FENCE();
    unsigned a[4];
    a_regs_16bit(a, A);
    unsigned long long db = make_desc(sb, 128, 256);
    unsigned d[4] = {0u, 0u, 0u, 0u};
    WG_BEGIN();
    asm volatile(
        "wgmma.mma_async.sync.aligned.m64n16k16.f16.f16.f16 {%0,%1,%2,%3}, {%4,%5,%6,%7}, %8, 0, 1, 1, 1;\n"
        : "+r"(d[0]), "+r"(d[1]), "+r"(d[2]), "+r"(d[3]) : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(db));
    WG_END();
    store_acc16<16>(D, d);
}

// .f16.e4m3.e4m3, N 16, both operands from shared memory
extern "C" __global__ void __launch_bounds__(128) wgmma_f16acc_e4m3_m64n16k32(const u8* A, const u8* Bt, const unsigned* C,
                                                                            unsigned* D, int use_c) {
    __shared__ __align__(128) u8 sa[64 * 32];
    __shared__ __align__(128) u8 sb[16 * 32];
    stage_kmajor(sa, A, 64);
    stage_kmajor(sb, Bt, 16);
    STAGE_FENCE();
    unsigned long long da = make_desc(sa, 128, 256), db = make_desc(sb, 128, 256);
    unsigned d[4];
    load_acc16<16>(d, C, use_c);
    WG_BEGIN();
    asm volatile(
        "{\n .reg .pred p;\n setp.ne.b32 p, %6, 0;\n"
        " wgmma.mma_async.sync.aligned.m64n16k32.f16.e4m3.e4m3 {%0,%1,%2,%3}, %4, %5, p, 1, 1;\n}\n"
        : "+r"(d[0]), "+r"(d[1]), "+r"(d[2]), "+r"(d[3]) : "l"(da), "l"(db), "r"(use_c));
    WG_END();
    store_acc16<16>(D, d);
}

// .f16.e5m2.e4m3, N 8, A (e5m2) from registers, A negated (imm-scale-a = -1)
extern "C" __global__ void __launch_bounds__(128) wgmma_f16acc_e5m2_e4m3_m64n8k32_rs(const u8* A, const u8* Bt,
                                                                                   const unsigned* C, unsigned* D,
                                                                                   int use_c) {
    __shared__ __align__(128) u8 sb[8 * 32];
    stage_kmajor(sb, Bt, 8);
    STAGE_FENCE();
    unsigned a[4];
    a_regs_8bit(a, A);
    unsigned long long db = make_desc(sb, 128, 256);
    unsigned d[2];
    load_acc16<8>(d, C, use_c);
    WG_BEGIN();
    asm volatile(
        "{\n .reg .pred p;\n setp.ne.b32 p, %7, 0;\n"
        " wgmma.mma_async.sync.aligned.m64n8k32.f16.e5m2.e4m3 {%0,%1}, {%2,%3,%4,%5}, %6, p, -1, 1;\n}\n"
        : "+r"(d[0]), "+r"(d[1]) : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(db), "r"(use_c));
    WG_END();
    store_acc16<8>(D, d);
}

// ---------------------------------------------------------------- tf32 (K-major only)

// .f32.tf32.tf32, N 16, both operands from shared memory; the inputs are raw f32 bits
extern "C" __global__ void __launch_bounds__(128) wgmma_tf32_m64n16k8(const u8* A, const u8* Bt, const unsigned* C,
                                                                    unsigned* D, int use_c) {
    __shared__ __align__(128) u8 sa[64 * 32];
    __shared__ __align__(128) u8 sb[16 * 32];
    stage_kmajor(sa, A, 64);
    stage_kmajor(sb, Bt, 16);
    STAGE_FENCE();
    unsigned long long da = make_desc(sa, 128, 256), db = make_desc(sb, 128, 256);
    unsigned d[8];
    load_acc32<16>(d, C, use_c);
    WG_BEGIN();
    asm volatile(
        "{\n .reg .pred p;\n setp.ne.b32 p, %10, 0;\n"
        " wgmma.mma_async.sync.aligned.m64n16k8.f32.tf32.tf32 {%0,%1,%2,%3,%4,%5,%6,%7}, %8, %9, p, 1, 1;\n}\n"
        : "+r"(d[0]), "+r"(d[1]), "+r"(d[2]), "+r"(d[3]), "+r"(d[4]), "+r"(d[5]), "+r"(d[6]), "+r"(d[7])
        : "l"(da), "l"(db), "r"(use_c));
    WG_END();
    store_acc32<16>(D, d);
}

// .f32.tf32.tf32, N 8, A from registers, A negated (imm-scale-a = -1)
extern "C" __global__ void __launch_bounds__(128) wgmma_tf32_m64n8k8_rs(const unsigned* A, const u8* Bt, const unsigned* C,
                                                                      unsigned* D, int use_c) {
    __shared__ __align__(128) u8 sb[8 * 32];
    stage_kmajor(sb, Bt, 8);
    STAGE_FENCE();
    unsigned a[4];
    a_regs_tf32(a, A);
    unsigned long long db = make_desc(sb, 128, 256);
    unsigned d[4];
    load_acc32<8>(d, C, use_c);
    WG_BEGIN();
    asm volatile(
        "{\n .reg .pred p;\n setp.ne.b32 p, %9, 0;\n"
        " wgmma.mma_async.sync.aligned.m64n8k8.f32.tf32.tf32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, %8, p, -1, 1;\n}\n"
        : "+r"(d[0]), "+r"(d[1]), "+r"(d[2]), "+r"(d[3]) : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(db),
          "r"(use_c));
    WG_END();
    store_acc32<8>(D, d);
}

// ---------------------------------------------------------------- integer (s8/u8 -> s32)

// N 16, both operands from shared memory, D = A*B + C twice: wrapping into D, .satfinite into Ds
#define WGMMA_INT_SS(NAME, TYPES)                                                                                   \
    extern "C" __global__ void __launch_bounds__(128) NAME(const u8* A, const u8* Bt, const unsigned* C, unsigned* D, \
                                                           unsigned* Ds) {                                          \
        __shared__ __align__(128) u8 sa[64 * 32];                                                                   \
        __shared__ __align__(128) u8 sb[16 * 32];                                                                   \
        stage_kmajor(sa, A, 64);                                                                                    \
        stage_kmajor(sb, Bt, 16);                                                                                   \
        STAGE_FENCE();                                                                                              \
        unsigned long long da = make_desc(sa, 128, 256), db = make_desc(sb, 128, 256);                              \
        unsigned d[8], e[8];                                                                                        \
        load_acc32<16>(d, C, 1);                                                                                    \
        load_acc32<16>(e, C, 1);                                                                                    \
        WG_BEGIN();                                                                                                 \
        asm volatile("wgmma.mma_async.sync.aligned.m64n16k32.s32." TYPES                                            \
                     " {%0,%1,%2,%3,%4,%5,%6,%7}, %8, %9, 1;\n"                                                     \
                     : "+r"(d[0]), "+r"(d[1]), "+r"(d[2]), "+r"(d[3]), "+r"(d[4]), "+r"(d[5]), "+r"(d[6]),         \
                       "+r"(d[7])                                                                                   \
                     : "l"(da), "l"(db));                                                                           \
        asm volatile("wgmma.mma_async.sync.aligned.m64n16k32.satfinite.s32." TYPES                                  \
                     " {%0,%1,%2,%3,%4,%5,%6,%7}, %8, %9, 1;\n"                                                     \
                     : "+r"(e[0]), "+r"(e[1]), "+r"(e[2]), "+r"(e[3]), "+r"(e[4]), "+r"(e[5]), "+r"(e[6]),         \
                       "+r"(e[7])                                                                                   \
                     : "l"(da), "l"(db));                                                                           \
        WG_END();                                                                                                   \
        store_acc32<16>(D, d);                                                                                      \
        store_acc32<16>(Ds, e);                                                                                     \
    }

WGMMA_INT_SS(wgmma_s32_s8s8_m64n16k32, "s8.s8")
WGMMA_INT_SS(wgmma_s32_u8u8_m64n16k32, "u8.u8")
WGMMA_INT_SS(wgmma_s32_s8u8_m64n16k32, "s8.u8")
WGMMA_INT_SS(wgmma_s32_u8s8_m64n16k32, "u8.s8")

// .s32.s8.u8, N 8, A from registers; wrapping into D, .satfinite into Ds; scale-d from use_c
extern "C" __global__ void __launch_bounds__(128) wgmma_s32_s8u8_m64n8k32_rs(const u8* A, const u8* Bt, const unsigned* C,
                                                                           unsigned* D, unsigned* Ds, int use_c) {
    __shared__ __align__(128) u8 sb[8 * 32];
    stage_kmajor(sb, Bt, 8);
    STAGE_FENCE();
    unsigned a[4];
    a_regs_8bit(a, A);
    unsigned long long db = make_desc(sb, 128, 256);
    unsigned d[4], e[4];
    load_acc32<8>(d, C, use_c);
    load_acc32<8>(e, C, use_c);
    WG_BEGIN();
    asm volatile(
        "{\n .reg .pred p;\n setp.ne.b32 p, %9, 0;\n"
        " wgmma.mma_async.sync.aligned.m64n8k32.s32.s8.u8 {%0,%1,%2,%3}, {%4,%5,%6,%7}, %8, p;\n}\n"
        : "+r"(d[0]), "+r"(d[1]), "+r"(d[2]), "+r"(d[3]) : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(db),
          "r"(use_c));
    asm volatile(
        "{\n .reg .pred p;\n setp.ne.b32 p, %9, 0;\n"
        " wgmma.mma_async.sync.aligned.m64n8k32.satfinite.s32.s8.u8 {%0,%1,%2,%3}, {%4,%5,%6,%7}, %8, p;\n}\n"
        : "+r"(e[0]), "+r"(e[1]), "+r"(e[2]), "+r"(e[3]) : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(db),
          "r"(use_c));
    WG_END();
    store_acc32<8>(D, d);
    store_acc32<8>(Ds, e);
}

// ---------------------------------------------------------------- fp8 A from registers, f32 accumulators

// .f32.e4m3.e5m2, N 16, A (e4m3) from registers
extern "C" __global__ void __launch_bounds__(128) wgmma_e4m3_e5m2_m64n16k32_rs(const u8* A, const u8* Bt, const unsigned* C,
                                                                             unsigned* D, int use_c) {
    __shared__ __align__(128) u8 sb[16 * 32];
    stage_kmajor(sb, Bt, 16);
    STAGE_FENCE();
    unsigned a[4];
    a_regs_8bit(a, A);
    unsigned long long db = make_desc(sb, 128, 256);
    unsigned d[8];
    load_acc32<16>(d, C, use_c);
    WG_BEGIN();
    asm volatile(
        "{\n .reg .pred p;\n setp.ne.b32 p, %13, 0;\n"
        " wgmma.mma_async.sync.aligned.m64n16k32.f32.e4m3.e5m2 {%0,%1,%2,%3,%4,%5,%6,%7}, {%8,%9,%10,%11}, %12, p, 1, 1;\n}\n"
        : "+r"(d[0]), "+r"(d[1]), "+r"(d[2]), "+r"(d[3]), "+r"(d[4]), "+r"(d[5]), "+r"(d[6]), "+r"(d[7])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(db), "r"(use_c));
    WG_END();
    store_acc32<16>(D, d);
}
