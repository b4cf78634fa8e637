// Matrix transpose through shared memory with +1 padding (avoids bank conflicts), plus a naive variant.
// archs: all (sm_80 sm_89 sm_90a sm_100a). in is [rows, cols] row-major, out = in.T ([cols, rows]).
// Launch: block (32, 8), grid (ceil(cols / 32), ceil(rows / 32)). Reference: numpy .T

#define TILE 32
#define ROWS_PER_PASS 8

extern "C" __global__ void transpose_padded(const float* in, float* out, int rows, int cols) {
    __shared__ float tile[TILE][TILE + 1];
    int x = blockIdx.x * TILE + threadIdx.x;
    int y = blockIdx.y * TILE + threadIdx.y;
    for (int j = 0; j < TILE; j += ROWS_PER_PASS)
        if (x < cols && y + j < rows) tile[threadIdx.y + j][threadIdx.x] = in[(size_t)(y + j) * cols + x];
    __syncthreads();
    x = blockIdx.y * TILE + threadIdx.x;   // column in the output = row in the input
    y = blockIdx.x * TILE + threadIdx.y;
    for (int j = 0; j < TILE; j += ROWS_PER_PASS)
        if (x < rows && y + j < cols) out[(size_t)(y + j) * rows + x] = tile[threadIdx.x][threadIdx.y + j];
}

extern "C" __global__ void transpose_naive(const float* in, float* out, int rows, int cols) {
    int x = blockIdx.x * TILE + threadIdx.x;
    int y = blockIdx.y * TILE + threadIdx.y;
    for (int j = 0; j < TILE; j += ROWS_PER_PASS)
        if (x < cols && y + j < rows) out[(size_t)x * rows + y + j] = in[(size_t)(y + j) * cols + x];
}

// 8-byte elements with an XOR swizzle instead of padding: column c of row r lives at c ^ (r % 32).
extern "C" __global__ void transpose_swizzled_f64(const double* in, double* out, int rows, int cols) {
    __shared__ double tile[TILE][TILE];
    int x = blockIdx.x * TILE + threadIdx.x;
    int y = blockIdx.y * TILE + threadIdx.y;
    for (int j = 0; j < TILE; j += ROWS_PER_PASS) {
        int r = threadIdx.y + j;
        if (x < cols && y + j < rows) tile[r][threadIdx.x ^ r] = in[(size_t)(y + j) * cols + x];
    }
    __syncthreads();
    x = blockIdx.y * TILE + threadIdx.x;
    y = blockIdx.x * TILE + threadIdx.y;
    for (int j = 0; j < TILE; j += ROWS_PER_PASS) {
        int c = threadIdx.y + j;   // source column within the tile
        if (x < rows && y + j < cols) out[(size_t)(y + j) * rows + x] = tile[threadIdx.x][c ^ threadIdx.x];
    }
}
