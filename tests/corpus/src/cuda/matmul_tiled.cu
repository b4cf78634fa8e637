// Tiled matrix multiply in shared memory. archs: all (sm_80 sm_89 sm_90a sm_100a)
// C[M,N] = A[M,K] @ B[K,N], row-major. Launch: block (16,16), grid (ceil(N/16), ceil(M/16)).
// Reference: numpy A @ B (float32; compare with a tolerance).

#define TILE 16

extern "C" __global__ void matmul_tiled_f32(const float* A, const float* B, float* C, int M, int N, int K) {
    __shared__ float As[TILE][TILE];
    __shared__ float Bs[TILE][TILE];
    int row = blockIdx.y * TILE + threadIdx.y;
    int col = blockIdx.x * TILE + threadIdx.x;
    float acc = 0.0f;
    for (int k0 = 0; k0 < K; k0 += TILE) {
        int ak = k0 + threadIdx.x, bk = k0 + threadIdx.y;
        As[threadIdx.y][threadIdx.x] = (row < M && ak < K) ? A[row * K + ak] : 0.0f;
        Bs[threadIdx.y][threadIdx.x] = (bk < K && col < N) ? B[bk * N + col] : 0.0f;
        __syncthreads();
#pragma unroll
        for (int k = 0; k < TILE; ++k) acc = fmaf(As[threadIdx.y][k], Bs[k][threadIdx.x], acc);
        __syncthreads();
    }
    if (row < M && col < N) C[row * N + col] = acc;
}

// Register-blocked variant: each thread computes a 4x1 column strip; block (16,16) covers a 64x16 tile.
// Requires M % 64 == 0, N % 16 == 0, K % 16 == 0. Double-precision accumulate of float inputs.
extern "C" __global__ void matmul_tiled_4x1_f64acc(const float* A, const float* B, double* C, int M, int N, int K) {
    __shared__ float As[4 * TILE][TILE];
    __shared__ float Bs[TILE][TILE];
    int row0 = blockIdx.y * 4 * TILE + threadIdx.y;
    int col = blockIdx.x * TILE + threadIdx.x;
    double acc[4] = {0.0, 0.0, 0.0, 0.0};
    for (int k0 = 0; k0 < K; k0 += TILE) {
#pragma unroll
        for (int r = 0; r < 4; ++r) As[threadIdx.y + r * TILE][threadIdx.x] = A[(row0 + r * TILE) * K + k0 + threadIdx.x];
        Bs[threadIdx.y][threadIdx.x] = B[(k0 + threadIdx.y) * N + col];
        __syncthreads();
#pragma unroll
        for (int k = 0; k < TILE; ++k) {
            double b = Bs[k][threadIdx.x];
#pragma unroll
            for (int r = 0; r < 4; ++r) acc[r] += (double)As[threadIdx.y + r * TILE][k] * b;
        }
        __syncthreads();
    }
#pragma unroll
    for (int r = 0; r < 4; ++r) C[(row0 + r * TILE) * N + col] = acc[r];
}
