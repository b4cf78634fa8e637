// FP8 mma.sync (e4m3 / e5m2, m16n8k32, f32 accumulate). archs: sm_89 sm_90a sm_100a
// Launch: one warp. A 16x32 and B 32x8 are fp8 bytes, row-major [M,K] / [K,N]; C, D f32 16x8 row-major.
// Fragment layout is the 8-bit one of m16n8k32 (see mma_sync.cu). Reference: decode the bytes with
// ml_dtypes.float8_e4m3fn / float8_e5m2, then A @ B + C in f32 (tolerance for accumulation order).

__device__ __forceinline__ unsigned pack_u8x4(const unsigned char* p, int stride) {
    return (unsigned)p[0] | ((unsigned)p[stride] << 8) | ((unsigned)p[2 * stride] << 16)
         | ((unsigned)p[3 * stride] << 24);
}
__device__ __forceinline__ int c_index(int lane, int i) { return ((lane >> 2) + 8 * (i >> 1)) * 8 + 2 * (lane & 3) + (i & 1); }

extern "C" __global__ void mma_m16n8k32_e4m3(const unsigned char* A, const unsigned char* B, const float* C, float* D) {
    int lane = threadIdx.x & 31, g = lane >> 2, t = lane & 3;
    unsigned a[4], b[2];
    for (int r = 0; r < 4; ++r) a[r] = pack_u8x4(A + (g + 8 * (r & 1)) * 32 + 4 * t + 16 * (r >> 1), 1);
    for (int r = 0; r < 2; ++r) b[r] = pack_u8x4(B + (4 * t + 16 * r) * 8 + g, 8);
    float c[4], d[4];
    for (int i = 0; i < 4; ++i) c[i] = C[c_index(lane, i)];
    asm volatile(
        "mma.sync.aligned.m16n8k32.row.col.f32.e4m3.e4m3.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, {%10,%11,%12,%13};"
        : "=f"(d[0]), "=f"(d[1]), "=f"(d[2]), "=f"(d[3])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]),
          "f"(c[0]), "f"(c[1]), "f"(c[2]), "f"(c[3]));
    for (int i = 0; i < 4; ++i) D[c_index(lane, i)] = d[i];
}

// Mixed: A e5m2, B e4m3.
extern "C" __global__ void mma_m16n8k32_e5m2_e4m3(const unsigned char* A, const unsigned char* B, const float* C,
                                                  float* D) {
    int lane = threadIdx.x & 31, g = lane >> 2, t = lane & 3;
    unsigned a[4], b[2];
    for (int r = 0; r < 4; ++r) a[r] = pack_u8x4(A + (g + 8 * (r & 1)) * 32 + 4 * t + 16 * (r >> 1), 1);
    for (int r = 0; r < 2; ++r) b[r] = pack_u8x4(B + (4 * t + 16 * r) * 8 + g, 8);
    float c[4], d[4];
    for (int i = 0; i < 4; ++i) c[i] = C[c_index(lane, i)];
    asm volatile(
        "mma.sync.aligned.m16n8k32.row.col.f32.e5m2.e4m3.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, {%10,%11,%12,%13};"
        : "=f"(d[0]), "=f"(d[1]), "=f"(d[2]), "=f"(d[3])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]),
          "f"(c[0]), "f"(c[1]), "f"(c[2]), "f"(c[3]));
    for (int i = 0; i < 4; ++i) D[c_index(lane, i)] = d[i];
}
