// A DeepGEMM-shaped FP8 GEMM tile (written for this corpus): two math warpgroups, a 128x128 output tile per block,
// wgmma.m64n128k32.f32.e4m3.e4m3 from shared memory, and FP32 promotion every 128 elements of K with 1x128
// activation scales and 128x128 weight scales (DeepSeek-V3's recipe: the tensor core's partial sums are
// scaled and added into FP32 registers once per four wgmmas). archs: sm_90a
// Launch: blockDim.x = 256, grid (N/128, M/128). A [M][K] e4m3 row-major; sa [M][K/128] fp32; B [N][K] e4m3
// (K-major, i.e. the weight as stored); sb [N/128][K/128] fp32; D [M][N] fp32. M, N multiples of 128, K of 128.
// Shared memory holds each 32-byte K slice of the A and B tiles in the no-swizzle K-major core-matrix layout
// (8-row x 16-byte core matrices, K-neighbour +128 bytes, 8-row groups +256 bytes). Check: D against
// sum over k-blocks of (A_blk @ B_blk^T) * sa * sb within FP8 GEMM tolerance (the partial sums keep 13 bits).
typedef unsigned char u8;

__device__ __forceinline__ unsigned smem_addr(const void* p) { return (unsigned)__cvta_generic_to_shared(p); }

__device__ __forceinline__ unsigned long long make_desc(const void* smem) {
    unsigned long long d = 0;
    d |= (unsigned long long)((smem_addr(smem) & 0x3ffff) >> 4);
    d |= (unsigned long long)(128 >> 4) << 16;   // leading byte offset: the K-neighbour core matrix
    d |= (unsigned long long)(256 >> 4) << 32;   // stride byte offset: the next 8-row group
    return d;
}

// word w (0..7) of 32-byte row r of a K slice -> word offset in the core-matrix layout
__device__ __forceinline__ int core_word(int r, int w) { return ((r >> 3) * 2 + (w >> 2)) * 32 + (r & 7) * 4 + (w & 3); }

// stage the 128-row x 128-byte tile at g (row pitch `ld` bytes) as four 32-byte K slices
__device__ __forceinline__ void stage_tile(unsigned* s, const u8* g, int ld) {
    for (int i = threadIdx.x; i < 128 * 32; i += blockDim.x) {
        int r = i >> 5, c = i & 31, slice = c >> 3;
        s[slice * 1024 + core_word(r, c & 7)] = *reinterpret_cast<const unsigned*>(g + (size_t)r * ld + c * 4);
    }
}

__device__ __forceinline__ void wgmma_m64n128k32(unsigned* t, unsigned long long da, unsigned long long db, int acc) {
    asm volatile(
        "{\n .reg .pred p;\n setp.ne.b32 p, %66, 0;\n"
        " wgmma.mma_async.sync.aligned.m64n128k32.f32.e4m3.e4m3 {%0,%1,%2,%3,%4,%5,%6,%7,%8,%9,%10,%11,%12,%13,%14,%15,%16,%17,%18,%19,%20,%21,%22,%23,%24,%25,%26,%27,%28,%29,%30,%31,%32,%33,%34,%35,%36,%37,%38,%39,%40,%41,%42,%43,%44,%45,%46,%47,%48,%49,%50,%51,%52,%53,%54,%55,%56,%57,%58,%59,%60,%61,%62,%63}, %64, %65, p, 1, 1;\n}\n"
        : "+r"(t[0]), "+r"(t[1]), "+r"(t[2]), "+r"(t[3]), "+r"(t[4]), "+r"(t[5]), "+r"(t[6]), "+r"(t[7]), "+r"(t[8]), "+r"(t[9]), "+r"(t[10]), "+r"(t[11]), "+r"(t[12]), "+r"(t[13]), "+r"(t[14]), "+r"(t[15]), "+r"(t[16]), "+r"(t[17]), "+r"(t[18]), "+r"(t[19]), "+r"(t[20]), "+r"(t[21]), "+r"(t[22]), "+r"(t[23]), "+r"(t[24]), "+r"(t[25]), "+r"(t[26]), "+r"(t[27]), "+r"(t[28]), "+r"(t[29]), "+r"(t[30]), "+r"(t[31]), "+r"(t[32]), "+r"(t[33]), "+r"(t[34]), "+r"(t[35]), "+r"(t[36]), "+r"(t[37]), "+r"(t[38]), "+r"(t[39]), "+r"(t[40]), "+r"(t[41]), "+r"(t[42]), "+r"(t[43]), "+r"(t[44]), "+r"(t[45]), "+r"(t[46]), "+r"(t[47]), "+r"(t[48]), "+r"(t[49]), "+r"(t[50]), "+r"(t[51]), "+r"(t[52]), "+r"(t[53]), "+r"(t[54]), "+r"(t[55]), "+r"(t[56]), "+r"(t[57]), "+r"(t[58]), "+r"(t[59]), "+r"(t[60]), "+r"(t[61]), "+r"(t[62]), "+r"(t[63])
        : "l"(da), "l"(db), "r"(acc));
}

extern "C" __global__ void __launch_bounds__(256) fp8_gemm_1d2d(const u8* A, const float* sa, const u8* B, const float* sb,
                                                              float* D, int M, int N, int K) {
    __shared__ __align__(128) unsigned sA[4 * 1024];
    __shared__ __align__(128) unsigned sB[4 * 1024];
    const int wg = threadIdx.x >> 7, warp = (threadIdx.x >> 5) & 3, g = (threadIdx.x & 31) >> 2, q = threadIdx.x & 3;
    const int m0 = blockIdx.y * 128, n0 = blockIdx.x * 128, kblocks = K / 128;
    float acc[64];
    for (int i = 0; i < 64; ++i) acc[i] = 0.f;
    for (int kb = 0; kb < kblocks; ++kb) {
        stage_tile(sA, A + (size_t)m0 * K + kb * 128, K);
        stage_tile(sB, B + (size_t)n0 * K + kb * 128, K);
        asm volatile("fence.proxy.async.shared::cta;" ::: "memory");
        __syncthreads();
        unsigned t[64];
        asm volatile("wgmma.fence.sync.aligned;" ::: "memory");
        for (int s = 0; s < 4; ++s)   // rows 64*wg.. of A start 64 rows = 8 groups x 256 bytes into the slice
            wgmma_m64n128k32(t, make_desc(sA + s * 1024 + wg * 512), make_desc(sB + s * 1024), s);
        asm volatile("wgmma.commit_group.sync.aligned;" ::: "memory");
        asm volatile("wgmma.wait_group.sync.aligned 0;" ::: "memory");
        const float scale_b = sb[(n0 / 128) * kblocks + kb];
        const int row0 = m0 + 64 * wg + 16 * warp + g;
        const float s_lo = sa[(size_t)row0 * kblocks + kb] * scale_b, s_hi = sa[(size_t)(row0 + 8) * kblocks + kb] * scale_b;
        for (int i = 0; i < 64; ++i) acc[i] += __uint_as_float(t[i]) * (((i >> 1) & 1) ? s_hi : s_lo);
        __syncthreads();
    }
    const int row0 = m0 + 64 * wg + 16 * warp + g;
    for (int i = 0; i < 64; ++i)
        D[(size_t)(row0 + 8 * ((i >> 1) & 1)) * N + n0 + 8 * (i >> 2) + 2 * q + (i & 1)] = acc[i];
}
