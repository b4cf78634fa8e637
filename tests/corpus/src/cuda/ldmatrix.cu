// ldmatrix (x1/x2/x4, with .trans) and an ldmatrix-fed mma. archs: all (sm_80 sm_89 sm_90a sm_100a)
// Launch: one warp. M is 4 stacked 8x8 u16 matrices (row-major, 32 rows x 8 cols) copied to shared memory.
// ldmatrix: lane l supplies the row address of row (l % 8) of matrix (l / 8); afterwards register j of
// lane l holds matrix j's elements (row l/4, cols 2*(l%4), 2*(l%4)+1) as a u32 (low half = first element);
// with .trans it holds (rows 2*(l%4), 2*(l%4)+1; col l/4). out layout: out[l * 4 + j].
#include <cuda_fp16.h>

__device__ __forceinline__ unsigned smem_addr(const void* p) {
    return (unsigned)__cvta_generic_to_shared(p);
}

extern "C" __global__ void ldmatrix_variants(const unsigned short* M, unsigned* out_x4, unsigned* out_x4_trans,
                                             unsigned* out_x2, unsigned* out_x1) {
    __shared__ __align__(16) unsigned short s[32 * 8];
    int lane = threadIdx.x & 31;
    for (int i = lane; i < 32 * 8; i += 32) s[i] = M[i];
    __syncwarp();
    unsigned addr = smem_addr(&s[lane * 8]);   // row lane of the stack = row lane%8 of matrix lane/8
    unsigned r0, r1, r2, r3;
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0,%1,%2,%3}, [%4];"
                 : "=r"(r0), "=r"(r1), "=r"(r2), "=r"(r3) : "r"(addr));
    out_x4[lane * 4 + 0] = r0; out_x4[lane * 4 + 1] = r1; out_x4[lane * 4 + 2] = r2; out_x4[lane * 4 + 3] = r3;
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0,%1,%2,%3}, [%4];"
                 : "=r"(r0), "=r"(r1), "=r"(r2), "=r"(r3) : "r"(addr));
    out_x4_trans[lane * 4 + 0] = r0; out_x4_trans[lane * 4 + 1] = r1;
    out_x4_trans[lane * 4 + 2] = r2; out_x4_trans[lane * 4 + 3] = r3;
    // x2 uses the addresses of lanes 0..15, x1 of lanes 0..7 (the others are ignored)
    asm volatile("ldmatrix.sync.aligned.m8n8.x2.shared.b16 {%0,%1}, [%2];" : "=r"(r0), "=r"(r1) : "r"(addr));
    out_x2[lane * 2 + 0] = r0; out_x2[lane * 2 + 1] = r1;
    asm volatile("ldmatrix.sync.aligned.m8n8.x1.trans.shared.b16 {%0}, [%1];" : "=r"(r0) : "r"(addr));
    out_x1[lane] = r0;
}

// D(16x8 f32) = A(16x16 f16, row-major) @ B(16x8 f16, row-major), fragments loaded with ldmatrix.x4 (A)
// and ldmatrix.x2.trans (B). D row-major. Reference: numpy float32 matmul.
extern "C" __global__ void ldmatrix_mma_f16(const __half* A, const __half* B, float* D) {
    __shared__ __align__(16) __half sa[16 * 16];
    __shared__ __align__(16) __half sb[16 * 8];
    int lane = threadIdx.x & 31;
    for (int i = lane; i < 256; i += 32) sa[i] = A[i];
    for (int i = lane; i < 128; i += 32) sb[i] = B[i];
    __syncwarp();
    unsigned a[4], b[2];
    // lanes 0-15 address rows 0-15 at col 0, lanes 16-31 rows 0-15 at col 8
    unsigned pa = smem_addr(&sa[(lane & 15) * 16 + (lane >> 4) * 8]);
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0,%1,%2,%3}, [%4];"
                 : "=r"(a[0]), "=r"(a[1]), "=r"(a[2]), "=r"(a[3]) : "r"(pa));
    unsigned pb = smem_addr(&sb[(lane & 15) * 8]);
    asm volatile("ldmatrix.sync.aligned.m8n8.x2.trans.shared.b16 {%0,%1}, [%2];" : "=r"(b[0]), "=r"(b[1]) : "r"(pb));
    float d[4] = {0.f, 0.f, 0.f, 0.f};
    asm volatile(
        "mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, {%0,%1,%2,%3};"
        : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]));
    int g = lane >> 2, t = lane & 3;
    for (int i = 0; i < 4; ++i) D[(g + 8 * (i >> 1)) * 8 + 2 * t + (i & 1)] = d[i];
}
