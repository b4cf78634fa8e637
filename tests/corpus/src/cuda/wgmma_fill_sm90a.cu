// One warp fills a wgmma's shared-memory operands, the warpgroup multiplies them. archs: sm_90a
// Launch: blockDim.x = 256 (two warpgroups), one block. Warp `filler` writes A (64x16, rows from `rows` on
// as zeros, the out-of-bounds rows of a tile) and Bt (8x16) into shared memory with 8-byte stores, then
// fence.proxy.async; warpgroup 0 (threads 0-127) then runs wgmma.fence, wgmma.mma_async m64n8k16 f32 += f16
// x f16, commit and wait, with no barrier between the warps. Warpgroup 1 only fills (or nothing) and leaves.
// D = A[:rows] @ Bt.T (rows past `rows` zero), row-major [64][8] f32 (layout as wgmma_sm90a.cu).
// A filler inside warpgroup 0 is ordered before the MMA by the MMA itself (every warp of the warpgroup
// issues it after its own writes); a filler in warpgroup 1 is not (docs/sanitizer-rulings.md).
#include <cuda_fp16.h>

__device__ __forceinline__ unsigned smem_addr(const void* p) { return (unsigned)__cvta_generic_to_shared(p); }

// element (r, k) of a K-major [R][16] operand -> offset in the no-swizzle core-matrix layout
__device__ __forceinline__ int core_offset(int r, int k) { return ((r >> 3) * 2 + (k >> 3)) * 64 + (r & 7) * 8 + (k & 7); }

__device__ __forceinline__ unsigned long long make_desc(const void* smem, unsigned lbo, unsigned sbo) {
    unsigned long long d = (unsigned long long)((smem_addr(smem) & 0x3ffff) >> 4);
    d |= (unsigned long long)((lbo & 0x3ffff) >> 4) << 16;
    d |= (unsigned long long)((sbo & 0x3ffff) >> 4) << 32;
    return d;
}

extern "C" __global__ void __launch_bounds__(256) wgmma_one_warp_fills(const __half* A, const __half* Bt, float* D,
                                                                       int filler, int rows) {
    __shared__ __align__(128) __half sa[64 * 16];
    __shared__ __align__(128) __half sb[8 * 16];
    int tid = threadIdx.x, w = tid >> 5, lane = tid & 31;
    if (w == filler) {
        for (int i = lane; i < 64 * 4; i += 32) {  // four halves (8 bytes) a store
            int r = i / 4, k = (i % 4) * 4;
            unsigned long long v = 0;
            if (r < rows) v = *reinterpret_cast<const unsigned long long*>(&A[r * 16 + k]);
            *reinterpret_cast<unsigned long long*>(&sa[core_offset(r, k)]) = v;
        }
        for (int i = lane; i < 8 * 4; i += 32) {
            int n = i / 4, k = (i % 4) * 4;
            *reinterpret_cast<unsigned long long*>(&sb[core_offset(n, k)]) =
                *reinterpret_cast<const unsigned long long*>(&Bt[n * 16 + k]);
        }
        asm volatile("fence.proxy.async.shared::cta;" ::: "memory");  // generic-proxy writes -> async proxy
    }
    if (tid >= 128) return;
    unsigned long long da = make_desc(sa, 128, 256), db = make_desc(sb, 128, 256);
    float d[4] = {0.f, 0.f, 0.f, 0.f};
    asm volatile("wgmma.fence.sync.aligned;" ::: "memory");
    asm volatile(
        "{\n .reg .pred p;\n setp.ne.b32 p, %6, 0;\n"
        " wgmma.mma_async.sync.aligned.m64n8k16.f32.f16.f16 {%0,%1,%2,%3}, %4, %5, p, 1, 1, 0, 0;\n}\n"
        : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]) : "l"(da), "l"(db), "r"(0));
    asm volatile("wgmma.commit_group.sync.aligned;" ::: "memory");
    asm volatile("wgmma.wait_group.sync.aligned 0;" ::: "memory");
    int g = lane >> 2, t = lane & 3;
    for (int i = 0; i < 4; ++i) D[(16 * w + g + 8 * (i >> 1)) * 8 + 2 * t + (i & 1)] = d[i];
}
