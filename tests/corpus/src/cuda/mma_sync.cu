// Warp-level mma.sync tiles via inline PTX. archs: all (sm_80 sm_89 sm_90a sm_100a)
// Launch: one warp (32 threads), one block. Matrices are row-major in global memory:
// A[M,K], B[K,N], C[M,N]; D = A @ B + C (f32 or s32 accumulate). Each lane loads its fragment
// elements with the layouts of the PTX ISA "matrix fragments for mma" section:
// g = lane >> 2 (groupID), t = lane & 3 (threadID_in_group).
// Reference: numpy (A.astype(f32) @ B.astype(f32) + C); tf32 inputs are rounded to 10 mantissa bits first.
#include <cuda_fp16.h>
#include <cuda_bf16.h>

__device__ __forceinline__ unsigned pack_h2(__half lo, __half hi) {
    __half2 h = __halves2half2(lo, hi);
    return *reinterpret_cast<unsigned*>(&h);
}
__device__ __forceinline__ unsigned pack_b2(__nv_bfloat16 lo, __nv_bfloat16 hi) {
    __nv_bfloat162 h = __halves2bfloat162(lo, hi);
    return *reinterpret_cast<unsigned*>(&h);
}
__device__ __forceinline__ unsigned pack_s8x4(const signed char* p, int stride) {
    return (unsigned)(unsigned char)p[0] | ((unsigned)(unsigned char)p[stride] << 8)
         | ((unsigned)(unsigned char)p[2 * stride] << 16) | ((unsigned)(unsigned char)p[3 * stride] << 24);
}

// C/D fragment (16x8, 4 elements): row = g + 8*(i>>1), col = 2t + (i&1)
__device__ __forceinline__ int c_index(int lane, int i) { return ((lane >> 2) + 8 * (i >> 1)) * 8 + 2 * (lane & 3) + (i & 1); }

// m16n8k16, f16 inputs, f32 accumulate. A 16x16, B 16x8.
extern "C" __global__ void mma_m16n8k16_f16_f32(const __half* A, const __half* B, const float* C, float* D) {
    int lane = threadIdx.x & 31, g = lane >> 2, t = lane & 3;
    unsigned a[4], b[2];
    // a_i (i = 0..7): row g + 8*((i>>1)&1), col 2t + (i&1) + 8*(i>>2); registers hold pairs (i, i+1)
    for (int r = 0; r < 4; ++r) {
        int row = g + 8 * (r & 1), col = 2 * t + 8 * (r >> 1);
        a[r] = pack_h2(A[row * 16 + col], A[row * 16 + col + 1]);
    }
    // b_i (i = 0..3): k = 2t + (i&1) + 8*(i>>1), n = g
    for (int r = 0; r < 2; ++r) {
        int k = 2 * t + 8 * r;
        b[r] = pack_h2(B[k * 8 + g], B[(k + 1) * 8 + g]);
    }
    float c[4], d[4];
    for (int i = 0; i < 4; ++i) c[i] = C[c_index(lane, i)];
    asm volatile(
        "mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, {%10,%11,%12,%13};"
        : "=f"(d[0]), "=f"(d[1]), "=f"(d[2]), "=f"(d[3])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]),
          "f"(c[0]), "f"(c[1]), "f"(c[2]), "f"(c[3]));
    for (int i = 0; i < 4; ++i) D[c_index(lane, i)] = d[i];
}

// m16n8k16, f16 inputs, f16 accumulate (C/D are two f16x2 registers per lane).
extern "C" __global__ void mma_m16n8k16_f16_f16(const __half* A, const __half* B, const __half* C, __half* D) {
    int lane = threadIdx.x & 31, g = lane >> 2, t = lane & 3;
    unsigned a[4], b[2], c[2], d[2];
    for (int r = 0; r < 4; ++r) {
        int row = g + 8 * (r & 1), col = 2 * t + 8 * (r >> 1);
        a[r] = pack_h2(A[row * 16 + col], A[row * 16 + col + 1]);
    }
    for (int r = 0; r < 2; ++r) {
        int k = 2 * t + 8 * r;
        b[r] = pack_h2(B[k * 8 + g], B[(k + 1) * 8 + g]);
    }
    for (int r = 0; r < 2; ++r) c[r] = pack_h2(C[c_index(lane, 2 * r)], C[c_index(lane, 2 * r) + 1]);
    asm volatile("mma.sync.aligned.m16n8k16.row.col.f16.f16.f16.f16 {%0,%1}, {%2,%3,%4,%5}, {%6,%7}, {%8,%9};"
                 : "=r"(d[0]), "=r"(d[1])
                 : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]), "r"(c[0]), "r"(c[1]));
    for (int r = 0; r < 2; ++r) {
        __half2 h = *reinterpret_cast<__half2*>(&d[r]);
        D[c_index(lane, 2 * r)] = __low2half(h);
        D[c_index(lane, 2 * r) + 1] = __high2half(h);
    }
}

// m16n8k16, bf16 inputs, f32 accumulate.
extern "C" __global__ void mma_m16n8k16_bf16_f32(const __nv_bfloat16* A, const __nv_bfloat16* B, const float* C,
                                                 float* D) {
    int lane = threadIdx.x & 31, g = lane >> 2, t = lane & 3;
    unsigned a[4], b[2];
    for (int r = 0; r < 4; ++r) {
        int row = g + 8 * (r & 1), col = 2 * t + 8 * (r >> 1);
        a[r] = pack_b2(A[row * 16 + col], A[row * 16 + col + 1]);
    }
    for (int r = 0; r < 2; ++r) {
        int k = 2 * t + 8 * r;
        b[r] = pack_b2(B[k * 8 + g], B[(k + 1) * 8 + g]);
    }
    float c[4], d[4];
    for (int i = 0; i < 4; ++i) c[i] = C[c_index(lane, i)];
    asm volatile(
        "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, {%10,%11,%12,%13};"
        : "=f"(d[0]), "=f"(d[1]), "=f"(d[2]), "=f"(d[3])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]),
          "f"(c[0]), "f"(c[1]), "f"(c[2]), "f"(c[3]));
    for (int i = 0; i < 4; ++i) D[c_index(lane, i)] = d[i];
}

// m16n8k8, tf32 inputs (f32 bit patterns rounded with cvt.rna.tf32.f32), f32 accumulate. A 16x8, B 8x8.
extern "C" __global__ void mma_m16n8k8_tf32(const float* A, const float* B, const float* C, float* D) {
    int lane = threadIdx.x & 31, g = lane >> 2, t = lane & 3;
    unsigned a[4], b[2];
    // a0: (g, t) a1: (g+8, t) a2: (g, t+4) a3: (g+8, t+4)
    for (int r = 0; r < 4; ++r) {
        float v = A[(g + 8 * (r & 1)) * 8 + t + 4 * (r >> 1)];
        asm("cvt.rna.tf32.f32 %0, %1;" : "=r"(a[r]) : "f"(v));
    }
    // b0: (k=t, n=g) b1: (k=t+4, n=g)
    for (int r = 0; r < 2; ++r) {
        float v = B[(t + 4 * r) * 8 + g];
        asm("cvt.rna.tf32.f32 %0, %1;" : "=r"(b[r]) : "f"(v));
    }
    float c[4], d[4];
    for (int i = 0; i < 4; ++i) c[i] = C[c_index(lane, i)];
    asm volatile(
        "mma.sync.aligned.m16n8k8.row.col.f32.tf32.tf32.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, {%10,%11,%12,%13};"
        : "=f"(d[0]), "=f"(d[1]), "=f"(d[2]), "=f"(d[3])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]),
          "f"(c[0]), "f"(c[1]), "f"(c[2]), "f"(c[3]));
    for (int i = 0; i < 4; ++i) D[c_index(lane, i)] = d[i];
}

// m16n8k32, s8 x s8 -> s32, with and without .satfinite. A 16x32 s8, B 32x8 s8, C/D s32.
extern "C" __global__ void mma_m16n8k32_s8(const signed char* A, const signed char* B, const int* C, int* D,
                                           int* Dsat) {
    int lane = threadIdx.x & 31, g = lane >> 2, t = lane & 3;
    unsigned a[4], b[2];
    // a register r holds 4 consecutive k: row g + 8*(r&1), k = 4t + 16*(r>>1) .. +3
    for (int r = 0; r < 4; ++r) a[r] = pack_s8x4(A + (g + 8 * (r & 1)) * 32 + 4 * t + 16 * (r >> 1), 1);
    // b register r holds k = 4t + 16r .. +3 of column g
    for (int r = 0; r < 2; ++r) b[r] = pack_s8x4(B + (4 * t + 16 * r) * 8 + g, 8);
    int c[4], d[4], e[4];
    for (int i = 0; i < 4; ++i) c[i] = C[c_index(lane, i)];
    asm volatile(
        "mma.sync.aligned.m16n8k32.row.col.s32.s8.s8.s32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, {%10,%11,%12,%13};"
        : "=r"(d[0]), "=r"(d[1]), "=r"(d[2]), "=r"(d[3])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]),
          "r"(c[0]), "r"(c[1]), "r"(c[2]), "r"(c[3]));
    asm volatile(
        "mma.sync.aligned.m16n8k32.row.col.satfinite.s32.s8.s8.s32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, "
        "{%10,%11,%12,%13};"
        : "=r"(e[0]), "=r"(e[1]), "=r"(e[2]), "=r"(e[3])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]),
          "r"(c[0]), "r"(c[1]), "r"(c[2]), "r"(c[3]));
    for (int i = 0; i < 4; ++i) { D[c_index(lane, i)] = d[i]; Dsat[c_index(lane, i)] = e[i]; }
}

// m8n8k4, f64. A 8x4, B 4x8, C/D 8x8 (row g, cols 2t, 2t+1).
extern "C" __global__ void mma_m8n8k4_f64(const double* A, const double* B, const double* C, double* D) {
    int lane = threadIdx.x & 31, g = lane >> 2, t = lane & 3;
    double a = A[g * 4 + t], b = B[t * 8 + g];
    double c0 = C[g * 8 + 2 * t], c1 = C[g * 8 + 2 * t + 1], d0, d1;
    asm volatile("mma.sync.aligned.m8n8k4.row.col.f64.f64.f64.f64 {%0,%1}, {%2}, {%3}, {%4,%5};"
                 : "=d"(d0), "=d"(d1) : "d"(a), "d"(b), "d"(c0), "d"(c1));
    D[g * 8 + 2 * t] = d0;
    D[g * 8 + 2 * t + 1] = d1;
}

// A 16x(16*ktiles) @ B (16*ktiles)x8 by looping mma over K: accumulators chained through registers.
extern "C" __global__ void mma_m16n8k16_f16_kloop(const __half* A, const __half* B, float* D, int ktiles) {
    int lane = threadIdx.x & 31, g = lane >> 2, t = lane & 3;
    int K = 16 * ktiles;
    float d[4] = {0.f, 0.f, 0.f, 0.f};
    for (int kt = 0; kt < ktiles; ++kt) {
        unsigned a[4], b[2];
        for (int r = 0; r < 4; ++r) {
            int row = g + 8 * (r & 1), col = kt * 16 + 2 * t + 8 * (r >> 1);
            a[r] = pack_h2(A[row * K + col], A[row * K + col + 1]);
        }
        for (int r = 0; r < 2; ++r) {
            int k = kt * 16 + 2 * t + 8 * r;
            b[r] = pack_h2(B[k * 8 + g], B[(k + 1) * 8 + g]);
        }
        asm volatile(
            "mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, {%0,%1,%2,%3};"
            : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
            : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]));
    }
    for (int i = 0; i < 4; ++i) D[c_index(lane, i)] = d[i];
}
