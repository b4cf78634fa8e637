#include <mma.h>
using namespace nvcuda;
// C[16x16] (f32, row-major, ld 16) = A[16x16] f16 row-major (ld 16) @ B[16x16] f16 col-major (ld 16) + C
extern "C" __global__ void wmma_f16(const half* A, const half* B, float* C) {
    wmma::fragment<wmma::matrix_a, 16, 16, 16, half, wmma::row_major> a;
    wmma::fragment<wmma::matrix_b, 16, 16, 16, half, wmma::col_major> b;
    wmma::fragment<wmma::accumulator, 16, 16, 16, float> c;
    wmma::load_matrix_sync(a, A, 16);
    wmma::load_matrix_sync(b, B, 16);
    wmma::load_matrix_sync(c, C, 16, wmma::mem_row_major);
    wmma::mma_sync(c, a, b, c);
    wmma::store_matrix_sync(C, c, 16, wmma::mem_row_major);
}
