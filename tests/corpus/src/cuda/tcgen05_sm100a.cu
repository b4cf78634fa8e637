// Blackwell tensor memory (TMEM) and tcgen05. archs: sm_100a
// Covers tcgen05.alloc / dealloc / relinquish_alloc_permit, tcgen05.st / tcgen05.ld (32x32b shapes),
// tcgen05.wait::st / wait::ld, tcgen05.fence::before_thread_sync / after_thread_sync, tcgen05.mma
// (kind::f16 and kind::f8f6f4, cta_group::1) and tcgen05.commit to an mbarrier.
// TMEM addresses: bits 31..16 = lane, bits 15..0 = column. Warp w of the CTA may access lanes 32w..32w+31.
// Semantics follow the PTX ISA; these kernels are assembled with ptxas but not run on hardware here.
#include <cuda_fp16.h>

__device__ __forceinline__ unsigned smem_addr(const void* p) { return (unsigned)__cvta_generic_to_shared(p); }

// Allocate 32 columns, store in[tid * 8 .. +7] to (lane = tid, columns 0..7), read back, add 1.
// Launch: one block of 128 threads (4 warps -> 128 TMEM lanes). Reference: out = in + 1 (128 x 8 ints).
extern "C" __global__ void __launch_bounds__(128) tmem_store_load(const int* in, int* out) {
    __shared__ unsigned tmem_base;
    int warp = threadIdx.x >> 5;
    if (warp == 0) {
        asm volatile("tcgen05.alloc.cta_group::1.sync.aligned.shared::cta.b32 [%0], 32;" :: "r"(smem_addr(&tmem_base)) : "memory");
        asm volatile("tcgen05.relinquish_alloc_permit.cta_group::1.sync.aligned;" ::: "memory");
    }
    asm volatile("tcgen05.fence::before_thread_sync;" ::: "memory");
    __syncthreads();
    asm volatile("tcgen05.fence::after_thread_sync;" ::: "memory");
    unsigned taddr = tmem_base + ((unsigned)(32 * warp) << 16);
    const int* src = in + threadIdx.x * 8;
    asm volatile("tcgen05.st.sync.aligned.32x32b.x8.b32 [%0], {%1,%2,%3,%4,%5,%6,%7,%8};"
                 :: "r"(taddr), "r"(src[0]), "r"(src[1]), "r"(src[2]), "r"(src[3]), "r"(src[4]), "r"(src[5]),
                    "r"(src[6]), "r"(src[7]) : "memory");
    asm volatile("tcgen05.wait::st.sync.aligned;" ::: "memory");
    unsigned r[8];
    asm volatile("tcgen05.ld.sync.aligned.32x32b.x8.b32 {%0,%1,%2,%3,%4,%5,%6,%7}, [%8];"
                 : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3]), "=r"(r[4]), "=r"(r[5]), "=r"(r[6]), "=r"(r[7])
                 : "r"(taddr) : "memory");
    asm volatile("tcgen05.wait::ld.sync.aligned;" ::: "memory");
    for (int i = 0; i < 8; ++i) out[threadIdx.x * 8 + i] = (int)r[i] + 1;
    asm volatile("tcgen05.fence::before_thread_sync;" ::: "memory");
    __syncthreads();
    if (warp == 0) asm volatile("tcgen05.dealloc.cta_group::1.sync.aligned.b32 %0, 32;" :: "r"(tmem_base) : "memory");
}

// element (r, k) of a K-major [R][16] 16-bit operand in the no-swizzle core-matrix layout
__device__ __forceinline__ int core_offset16(int r, int k) { return ((r >> 3) * 2 + (k >> 3)) * 64 + (r & 7) * 8 + (k & 7); }

__device__ __forceinline__ unsigned long long smem_desc(const void* p, unsigned lbo, unsigned sbo) {
    unsigned long long d = 0;
    d |= (unsigned long long)((smem_addr(p) & 0x3ffff) >> 4);
    d |= (unsigned long long)((lbo & 0x3ffff) >> 4) << 16;
    d |= (unsigned long long)((sbo & 0x3ffff) >> 4) << 32;
    d |= 1ull << 46;   // descriptor version 1 (sm_100), base offset 0, no swizzle
    return d;
}

// Instruction descriptor: D format bits 4-5, A format 7-9, B format 10-12, K-major A/B (bits 15/16 = 0),
// N >> 3 at bits 17-22, M >> 4 at bits 24-28.
__host__ __device__ constexpr unsigned instr_desc(unsigned d_fmt, unsigned a_fmt, unsigned b_fmt, unsigned m, unsigned n) {
    return (d_fmt << 4) | (a_fmt << 7) | (b_fmt << 10) | ((n >> 3) << 17) | ((m >> 4) << 24);
}

// D[128][16] f32 = A[128][16] f16 @ Bt[16][16]^T. One CTA of 128 threads; thread 0 issues the MMA,
// tcgen05.commit arrives on an mbarrier, then warp w reads TMEM lanes 32w.. (row = lane, col = column).
extern "C" __global__ void __launch_bounds__(128) tcgen05_mma_f16_m128n16k16(const __half* A, const __half* Bt, float* D) {
    __shared__ __align__(128) __half sa[128 * 16];
    __shared__ __align__(128) __half sb[16 * 16];
    __shared__ __align__(8) unsigned long long bar;
    __shared__ unsigned tmem_base;
    int tid = threadIdx.x, warp = tid >> 5;
    for (int i = tid; i < 128 * 16; i += 128) sa[core_offset16(i / 16, i % 16)] = A[i];
    for (int i = tid; i < 16 * 16; i += 128) sb[core_offset16(i / 16, i % 16)] = Bt[i];
    if (tid == 0) {
        asm volatile("mbarrier.init.shared::cta.b64 [%0], 1;" :: "r"(smem_addr(&bar)) : "memory");
        asm volatile("fence.mbarrier_init.release.cluster;" ::: "memory");
    }
    if (warp == 0) asm volatile("tcgen05.alloc.cta_group::1.sync.aligned.shared::cta.b32 [%0], 32;" :: "r"(smem_addr(&tmem_base)) : "memory");
    asm volatile("fence.proxy.async.shared::cta;" ::: "memory");
    asm volatile("tcgen05.fence::before_thread_sync;" ::: "memory");
    __syncthreads();
    asm volatile("tcgen05.fence::after_thread_sync;" ::: "memory");
    unsigned dt = tmem_base;
    if (tid == 0) {
        unsigned long long da = smem_desc(sa, 128, 256), db = smem_desc(sb, 128, 256);
        unsigned idesc = instr_desc(1, 0, 0, 128, 16);    // f32 accumulate, f16 x f16
        asm volatile("{\n .reg .pred p;\n setp.ne.b32 p, %4, 0;\n"
                     " tcgen05.mma.cta_group::1.kind::f16 [%0], %1, %2, %3, p;\n}\n"
                     :: "r"(dt), "l"(da), "l"(db), "r"(idesc), "r"(0) : "memory");
        asm volatile("tcgen05.commit.cta_group::1.mbarrier::arrive::one.shared::cluster.b64 [%0];"
                     :: "r"(smem_addr(&bar)) : "memory");
    }
    asm volatile("{\n .reg .pred p;\nWAIT_%=:\n mbarrier.try_wait.parity.shared::cta.b64 p, [%0], 0;\n @!p bra WAIT_%=;\n}\n"
                 :: "r"(smem_addr(&bar)) : "memory");
    asm volatile("tcgen05.fence::after_thread_sync;" ::: "memory");
    unsigned r[16];
    asm volatile("tcgen05.ld.sync.aligned.32x32b.x16.b32 {%0,%1,%2,%3,%4,%5,%6,%7,%8,%9,%10,%11,%12,%13,%14,%15}, [%16];"
                 : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3]), "=r"(r[4]), "=r"(r[5]), "=r"(r[6]), "=r"(r[7]),
                   "=r"(r[8]), "=r"(r[9]), "=r"(r[10]), "=r"(r[11]), "=r"(r[12]), "=r"(r[13]), "=r"(r[14]), "=r"(r[15])
                 : "r"(dt + ((unsigned)(32 * warp) << 16)) : "memory");
    asm volatile("tcgen05.wait::ld.sync.aligned;" ::: "memory");
    for (int j = 0; j < 16; ++j) D[tid * 16 + j] = __uint_as_float(r[j]);
    asm volatile("tcgen05.fence::before_thread_sync;" ::: "memory");
    __syncthreads();
    if (warp == 0) asm volatile("tcgen05.dealloc.cta_group::1.sync.aligned.b32 %0, 32;" :: "r"(dt) : "memory");
}

// element (r, k) of a K-major [R][32] 8-bit operand: core matrices are 8 rows x 16 bytes
__device__ __forceinline__ int core_offset8(int r, int k) { return ((r >> 3) * 2 + (k >> 4)) * 128 + (r & 7) * 16 + (k & 15); }

// kind::f8f6f4 with e4m3 A and B: D[128][16] f32 = A[128][32] @ Bt[16][32]^T (fp8 bytes).
extern "C" __global__ void __launch_bounds__(128) tcgen05_mma_e4m3_m128n16k32(const unsigned char* A,
                                                                              const unsigned char* Bt, float* D) {
    __shared__ __align__(128) unsigned char sa[128 * 32];
    __shared__ __align__(128) unsigned char sb[16 * 32];
    __shared__ __align__(8) unsigned long long bar;
    __shared__ unsigned tmem_base;
    int tid = threadIdx.x, warp = tid >> 5;
    for (int i = tid; i < 128 * 32; i += 128) sa[core_offset8(i / 32, i % 32)] = A[i];
    for (int i = tid; i < 16 * 32; i += 128) sb[core_offset8(i / 32, i % 32)] = Bt[i];
    if (tid == 0) {
        asm volatile("mbarrier.init.shared::cta.b64 [%0], 1;" :: "r"(smem_addr(&bar)) : "memory");
        asm volatile("fence.mbarrier_init.release.cluster;" ::: "memory");
    }
    if (warp == 0) asm volatile("tcgen05.alloc.cta_group::1.sync.aligned.shared::cta.b32 [%0], 32;" :: "r"(smem_addr(&tmem_base)) : "memory");
    asm volatile("fence.proxy.async.shared::cta;" ::: "memory");
    asm volatile("tcgen05.fence::before_thread_sync;" ::: "memory");
    __syncthreads();
    asm volatile("tcgen05.fence::after_thread_sync;" ::: "memory");
    unsigned dt = tmem_base;
    if (tid == 0) {
        unsigned long long da = smem_desc(sa, 128, 256), db = smem_desc(sb, 128, 256);
        unsigned idesc = instr_desc(1, 0, 0, 128, 16);    // f32 accumulate, e4m3 x e4m3
        asm volatile("{\n .reg .pred p;\n setp.ne.b32 p, %4, 0;\n"
                     " tcgen05.mma.cta_group::1.kind::f8f6f4 [%0], %1, %2, %3, p;\n}\n"
                     :: "r"(dt), "l"(da), "l"(db), "r"(idesc), "r"(0) : "memory");
        asm volatile("tcgen05.commit.cta_group::1.mbarrier::arrive::one.shared::cluster.b64 [%0];"
                     :: "r"(smem_addr(&bar)) : "memory");
    }
    asm volatile("{\n .reg .pred p;\nWAIT_%=:\n mbarrier.try_wait.parity.shared::cta.b64 p, [%0], 0;\n @!p bra WAIT_%=;\n}\n"
                 :: "r"(smem_addr(&bar)) : "memory");
    asm volatile("tcgen05.fence::after_thread_sync;" ::: "memory");
    for (int half = 0; half < 2; ++half) {
        unsigned r[8];
        asm volatile("tcgen05.ld.sync.aligned.32x32b.x8.b32 {%0,%1,%2,%3,%4,%5,%6,%7}, [%8];"
                     : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3]), "=r"(r[4]), "=r"(r[5]), "=r"(r[6]), "=r"(r[7])
                     : "r"(dt + ((unsigned)(32 * warp) << 16) + 8 * half) : "memory");
        asm volatile("tcgen05.wait::ld.sync.aligned;" ::: "memory");
        for (int j = 0; j < 8; ++j) D[tid * 16 + 8 * half + j] = __uint_as_float(r[j]);
    }
    asm volatile("tcgen05.fence::before_thread_sync;" ::: "memory");
    __syncthreads();
    if (warp == 0) asm volatile("tcgen05.dealloc.cta_group::1.sync.aligned.b32 %0, 32;" :: "r"(dt) : "memory");
}
