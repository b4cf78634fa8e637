// WMMA (mma.h fragments): load_matrix_sync / mma_sync / store_matrix_sync for f16 -> f32, f16 -> f16,
// bf16 -> f32, tf32 -> f32 (m16n16k8), u8 -> s32, several fragment shapes (m16n16k16, m32n8k16,
// m8n32k16), row- and column-major operands, fill_fragment and per-element fragment scaling, and a K loop
// by several warps. archs: sm_80 sm_90a. Launch: 32 threads per warp tile; references below (numpy matmul).

#include <mma.h>
#include <cuda_bf16.h>
#include <cuda_fp16.h>

using namespace nvcuda;

// D = A[16x16] (row-major) * B[16x16] (col-major) + C[16x16] (row-major), f16 inputs, f32 accumulate.
// Launch: grid 1, block 32.
extern "C" __global__ void wmma_f16_f32_16x16x16(const half* a, const half* b, const float* c, float* d) {
    wmma::fragment<wmma::matrix_a, 16, 16, 16, half, wmma::row_major> fa;
    wmma::fragment<wmma::matrix_b, 16, 16, 16, half, wmma::col_major> fb;
    wmma::fragment<wmma::accumulator, 16, 16, 16, float> acc;
    wmma::load_matrix_sync(fa, a, 16);
    wmma::load_matrix_sync(fb, b, 16);
    wmma::load_matrix_sync(acc, c, 16, wmma::mem_row_major);
    wmma::mma_sync(acc, fa, fb, acc);
    wmma::store_matrix_sync(d, acc, 16, wmma::mem_row_major);
}

// f16 accumulators, m32n8k16: D[32x8] = A[32x16] (row) * B[16x8] (row) with the accumulator zero-filled,
// then every element scaled by 0.5 through the fragment's x[] array; stored column-major (ld 32).
// Launch: grid 1, block 32. Reference: (0.5 * (A @ B)) in f16, transposed layout.
extern "C" __global__ void wmma_f16_f16_32x8x16(const half* a, const half* b, half* d) {
    wmma::fragment<wmma::matrix_a, 32, 8, 16, half, wmma::row_major> fa;
    wmma::fragment<wmma::matrix_b, 32, 8, 16, half, wmma::row_major> fb;
    wmma::fragment<wmma::accumulator, 32, 8, 16, half> acc;
    wmma::fill_fragment(acc, __float2half(0.0f));
    wmma::load_matrix_sync(fa, a, 16);
    wmma::load_matrix_sync(fb, b, 8);
    wmma::mma_sync(acc, fa, fb, acc);
    for (int e = 0; e < acc.num_elements; ++e) acc.x[e] = __hmul(acc.x[e], __float2half(0.5f));
    wmma::store_matrix_sync(d, acc, 32, wmma::mem_col_major);
}

// bf16 m8n32k16: D[8x32] = A[8x16] (row) * B[16x32] (col, ld 16). Launch: grid 1, block 32.
extern "C" __global__ void wmma_bf16_8x32x16(const __nv_bfloat16* a, const __nv_bfloat16* b, float* d) {
    wmma::fragment<wmma::matrix_a, 8, 32, 16, __nv_bfloat16, wmma::row_major> fa;
    wmma::fragment<wmma::matrix_b, 8, 32, 16, __nv_bfloat16, wmma::col_major> fb;
    wmma::fragment<wmma::accumulator, 8, 32, 16, float> acc;
    wmma::fill_fragment(acc, 0.0f);
    wmma::load_matrix_sync(fa, a, 16);
    wmma::load_matrix_sync(fb, b, 16);
    wmma::mma_sync(acc, fa, fb, acc);
    wmma::store_matrix_sync(d, acc, 32, wmma::mem_row_major);
}

// tf32 m16n16k8 over a K loop: D[16x16] = A[16xK] (row) * B[Kx16] (row), f32 inputs rounded to tf32 with
// __float_to_tf32 per fragment element. Launch: grid 1, block 32; K = 32.
extern "C" __global__ void wmma_tf32_16x16x8(const float* a, const float* b, float* d, int K) {
    wmma::fragment<wmma::matrix_a, 16, 16, 8, wmma::precision::tf32, wmma::row_major> fa;
    wmma::fragment<wmma::matrix_b, 16, 16, 8, wmma::precision::tf32, wmma::row_major> fb;
    wmma::fragment<wmma::accumulator, 16, 16, 8, float> acc;
    wmma::fill_fragment(acc, 0.0f);
    for (int k = 0; k < K; k += 8) {
        wmma::load_matrix_sync(fa, a + k, K);
        wmma::load_matrix_sync(fb, b + k * 16, 16);
        for (int e = 0; e < fa.num_elements; ++e) fa.x[e] = wmma::__float_to_tf32(fa.x[e]);
        for (int e = 0; e < fb.num_elements; ++e) fb.x[e] = wmma::__float_to_tf32(fb.x[e]);
        wmma::mma_sync(acc, fa, fb, acc);
    }
    wmma::store_matrix_sync(d, acc, 16, wmma::mem_row_major);
}

// u8 x u8 -> s32, m16n16k16: D = A (row) * B (col) + 1000 (fill). Launch: grid 1, block 32.
extern "C" __global__ void wmma_u8_s32_16x16x16(const unsigned char* a, const unsigned char* b, int* d) {
    wmma::fragment<wmma::matrix_a, 16, 16, 16, unsigned char, wmma::row_major> fa;
    wmma::fragment<wmma::matrix_b, 16, 16, 16, unsigned char, wmma::col_major> fb;
    wmma::fragment<wmma::accumulator, 16, 16, 16, int> acc;
    wmma::fill_fragment(acc, 1000);
    wmma::load_matrix_sync(fa, a, 16);
    wmma::load_matrix_sync(fb, b, 16);
    wmma::mma_sync(acc, fa, fb, acc);
    wmma::store_matrix_sync(d, acc, 16, wmma::mem_row_major);
}

// A tiled GEMM by 4 warps: C[M x N] = A[M x K] (row) * B[K x N] (row), f16 in, f32 out; warp w of block
// (bx, by) computes the 16x16 tile (by*2 + w/2, bx*2 + w%2). Launch: grid (N/32, M/32), block 128;
// M, N multiples of 32, K a multiple of 16.
extern "C" __global__ void wmma_gemm_4warps(const half* a, const half* b, float* c, int M, int N, int K) {
    int w = threadIdx.x / 32;
    int tm = blockIdx.y * 2 + w / 2, tn = blockIdx.x * 2 + w % 2;
    wmma::fragment<wmma::matrix_a, 16, 16, 16, half, wmma::row_major> fa;
    wmma::fragment<wmma::matrix_b, 16, 16, 16, half, wmma::row_major> fb;
    wmma::fragment<wmma::accumulator, 16, 16, 16, float> acc;
    wmma::fill_fragment(acc, 0.0f);
    for (int k = 0; k < K; k += 16) {
        wmma::load_matrix_sync(fa, a + (size_t)tm * 16 * K + k, K);
        wmma::load_matrix_sync(fb, b + (size_t)k * N + tn * 16, N);
        wmma::mma_sync(acc, fa, fb, acc);
    }
    wmma::store_matrix_sync(c + (size_t)tm * 16 * N + tn * 16, acc, N, wmma::mem_row_major);
}
