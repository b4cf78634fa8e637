// Warpgroup MMA (wgmma.mma_async) with shared-memory descriptors. archs: sm_90a
// Launch: one warpgroup (blockDim.x = 128), one block. A is 64x16 (row-major, "K-major"), B is given
// transposed as Bt[N][K] (K-major), D = A @ B row-major [64][N] f32. Shared memory uses the no-swizzle
// canonical layout: 8x8 core matrices of 16-bit elements (128 bytes each) with the K-neighbour core matrix
// at +128 bytes (leading byte offset) and the M/N-neighbour at +256 bytes (stride byte offset).
// Accumulator layout: warp w owns rows 16w..16w+15; d[4j + i] is row 16w + g + 8*(i>>1),
// col 8j + 2t + (i&1) with g = lane >> 2, t = lane & 3. Reference: numpy float32 A @ Bt.T.
#include <cuda_fp16.h>
#include <cuda_bf16.h>

__device__ __forceinline__ unsigned smem_addr(const void* p) { return (unsigned)__cvta_generic_to_shared(p); }

// element (r, k) of a K-major [R][16] operand -> offset in the core-matrix layout
__device__ __forceinline__ int core_offset(int r, int k) { return ((r >> 3) * 2 + (k >> 3)) * 64 + (r & 7) * 8 + (k & 7); }

__device__ __forceinline__ unsigned long long make_desc(const void* smem, unsigned lbo, unsigned sbo) {
    unsigned long long d = 0;
    d |= (unsigned long long)((smem_addr(smem) & 0x3ffff) >> 4);
    d |= (unsigned long long)((lbo & 0x3ffff) >> 4) << 16;
    d |= (unsigned long long)((sbo & 0x3ffff) >> 4) << 32;
    return d;   // base offset 0, swizzle mode 0 (none)
}

extern "C" __global__ void __launch_bounds__(128) wgmma_m64n8k16_f16(const __half* A, const __half* Bt, float* D) {
    __shared__ __align__(128) __half sa[64 * 16];
    __shared__ __align__(128) __half sb[8 * 16];
    int tid = threadIdx.x;
    for (int i = tid; i < 64 * 16; i += 128) sa[core_offset(i / 16, i % 16)] = A[i];
    for (int i = tid; i < 8 * 16; i += 128) sb[core_offset(i / 16, i % 16)] = Bt[i];
    asm volatile("fence.proxy.async.shared::cta;" ::: "memory");   // generic-proxy writes -> async proxy
    __syncthreads();
    unsigned long long da = make_desc(sa, 128, 256), db = make_desc(sb, 128, 256);
    float d[4] = {0.f, 0.f, 0.f, 0.f};
    asm volatile("wgmma.fence.sync.aligned;" ::: "memory");
    asm volatile(
        "{\n .reg .pred p;\n setp.ne.b32 p, %6, 0;\n"
        " wgmma.mma_async.sync.aligned.m64n8k16.f32.f16.f16 {%0,%1,%2,%3}, %4, %5, p, 1, 1, 0, 0;\n}\n"
        : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]) : "l"(da), "l"(db), "r"(0));
    asm volatile("wgmma.commit_group.sync.aligned;" ::: "memory");
    asm volatile("wgmma.wait_group.sync.aligned 0;" ::: "memory");
    int w = tid >> 5, lane = tid & 31, g = lane >> 2, t = lane & 3;
    for (int i = 0; i < 4; ++i) D[(16 * w + g + 8 * (i >> 1)) * 8 + 2 * t + (i & 1)] = d[i];
}

// bf16, N = 16, K = 32 as two k-steps of 16 accumulating in registers (scale-d = 1 on the second),
// two commit groups and a wait_group 1 / 0 sequence. A is 64x32 row-major, Bt is 16x32 (N x K).
extern "C" __global__ void __launch_bounds__(128) wgmma_m64n16k16_bf16_k32(const __nv_bfloat16* A,
                                                                          const __nv_bfloat16* Bt, float* D) {
    __shared__ __align__(128) __nv_bfloat16 sa[2][64 * 16];
    __shared__ __align__(128) __nv_bfloat16 sb[2][16 * 16];
    int tid = threadIdx.x;
    for (int i = tid; i < 64 * 32; i += 128) {
        int r = i / 32, k = i % 32;
        sa[k >> 4][core_offset(r, k & 15)] = A[i];
    }
    for (int i = tid; i < 16 * 32; i += 128) {
        int n = i / 32, k = i % 32;
        sb[k >> 4][core_offset(n, k & 15)] = Bt[i];
    }
    asm volatile("fence.proxy.async.shared::cta;" ::: "memory");
    __syncthreads();
    float d[8];
    for (int i = 0; i < 8; ++i) d[i] = 0.f;
    asm volatile("wgmma.fence.sync.aligned;" ::: "memory");
    for (int ks = 0; ks < 2; ++ks) {
        unsigned long long da = make_desc(sa[ks], 128, 256), db = make_desc(sb[ks], 128, 256);
        asm volatile(
            "{\n .reg .pred p;\n setp.ne.b32 p, %10, 0;\n"
            " wgmma.mma_async.sync.aligned.m64n16k16.f32.bf16.bf16 {%0,%1,%2,%3,%4,%5,%6,%7}, %8, %9, p, 1, 1, 0, 0;\n}\n"
            : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7])
            : "l"(da), "l"(db), "r"(ks));
        asm volatile("wgmma.commit_group.sync.aligned;" ::: "memory");
    }
    asm volatile("wgmma.wait_group.sync.aligned 1;" ::: "memory");
    asm volatile("wgmma.wait_group.sync.aligned 0;" ::: "memory");
    int w = tid >> 5, lane = tid & 31, g = lane >> 2, t = lane & 3;
    for (int j = 0; j < 2; ++j)
        for (int i = 0; i < 4; ++i) D[(16 * w + g + 8 * (i >> 1)) * 16 + 8 * j + 2 * t + (i & 1)] = d[4 * j + i];
}

// A from registers (wgmma ... {a regs}, descB): the A fragment of warp w is rows 16w..16w+15 with the
// mma.m16n8k16 A layout. N = 8, K = 16.
extern "C" __global__ void __launch_bounds__(128) wgmma_m64n8k16_f16_rs(const __half* A, const __half* Bt, float* D) {
    __shared__ __align__(128) __half sb[8 * 16];
    int tid = threadIdx.x;
    for (int i = tid; i < 8 * 16; i += 128) sb[core_offset(i / 16, i % 16)] = Bt[i];
    asm volatile("fence.proxy.async.shared::cta;" ::: "memory");
    __syncthreads();
    int w = tid >> 5, lane = tid & 31, g = lane >> 2, t = lane & 3;
    unsigned a[4];
    for (int r = 0; r < 4; ++r) {
        int row = 16 * w + g + 8 * (r & 1), col = 2 * t + 8 * (r >> 1);
        __half2 h = __halves2half2(A[row * 16 + col], A[row * 16 + col + 1]);
        a[r] = *reinterpret_cast<unsigned*>(&h);
    }
    unsigned long long db = make_desc(sb, 128, 256);
    float d[4] = {0.f, 0.f, 0.f, 0.f};
    asm volatile("wgmma.fence.sync.aligned;" ::: "memory");
    asm volatile(
        "{\n .reg .pred p;\n setp.ne.b32 p, %9, 0;\n"
        " wgmma.mma_async.sync.aligned.m64n8k16.f32.f16.f16 {%0,%1,%2,%3}, {%4,%5,%6,%7}, %8, p, 1, 1, 0;\n}\n"
        : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(db), "r"(0));
    asm volatile("wgmma.commit_group.sync.aligned;" ::: "memory");
    asm volatile("wgmma.wait_group.sync.aligned 0;" ::: "memory");
    for (int i = 0; i < 4; ++i) D[(16 * w + g + 8 * (i >> 1)) * 8 + 2 * t + (i & 1)] = d[i];
}
