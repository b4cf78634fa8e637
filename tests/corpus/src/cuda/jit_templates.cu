// Kernels as JIT systems generate them for NVRTC: templates over tile sizes, dtypes and epilogues with
// compile-time constants, instantiated through extern "C" wrappers; __restrict__, __ldg, __launch_bounds__,
// #pragma unroll, if constexpr, a __noinline__ device function (a real .func call), no standard headers.
// archs: sm_80 sm_90a (also built by NVRTC, see compile_nvrtc.py; variants: lineinfo, i.e. -O3 -lineinfo too).
// Launch and reference: below.

enum class Epilogue { None, Relu, AddBias };

template <class T> struct Acc { using type = float; };
template <> struct Acc<double> { using type = double; };

// y[r] = epi(sum_k W[r, k] * x[k]) for r < rows: one warp per row, each lane takes COLS_PER_LANE-strided
// columns, a shuffle tree reduces; rows are spread over BLOCK / 32 warps per block.
template <class T, int BLOCK, int UNROLL, Epilogue EPI>
__device__ __forceinline__ void gemv(const T* __restrict__ W, const T* __restrict__ x, const T* __restrict__ bias,
                                     T* __restrict__ y, int rows, int cols) {
    using A = typename Acc<T>::type;
    int lane = threadIdx.x & 31;
    int row = blockIdx.x * (BLOCK / 32) + threadIdx.x / 32;
    if (row >= rows) return;
    A acc = 0;
    int k = lane;
    for (; k + 32 * (UNROLL - 1) < cols; k += 32 * UNROLL) {
#pragma unroll
        for (int u = 0; u < UNROLL; ++u) acc += (A)__ldg(W + (size_t)row * cols + k + 32 * u) * (A)__ldg(x + k + 32 * u);
    }
    for (; k < cols; k += 32) acc += (A)W[(size_t)row * cols + k] * (A)x[k];
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) acc += __shfl_xor_sync(0xffffffffu, acc, o);
    if (lane == 0) {
        if constexpr (EPI == Epilogue::Relu) acc = acc > 0 ? acc : 0;
        if constexpr (EPI == Epilogue::AddBias) acc += (A)bias[row];
        y[row] = (T)acc;
    }
}

// W is [rows, cols], x [cols], bias [rows], y [rows]. Launch: block 128, grid ceil(rows / 4).
// Reference: relu(W @ x) (f32, rtol 1e-5).
extern "C" __global__ void __launch_bounds__(128) jit_gemv_f32_relu(const float* W, const float* x, float* y,
                                                                    int rows, int cols) {
    gemv<float, 128, 4, Epilogue::Relu>(W, x, nullptr, y, rows, cols);
}

// Launch: block 256, grid ceil(rows / 8). Reference: W @ x + bias (f64, rtol 1e-12).
extern "C" __global__ void __launch_bounds__(256) jit_gemv_f64_bias(const double* W, const double* x,
                                                                    const double* bias, double* y, int rows,
                                                                    int cols) {
    gemv<double, 256, 2, Epilogue::AddBias>(W, x, bias, y, rows, cols);
}

// A __noinline__ device function with several parameters and a 64-bit return: a .func with .param
// arguments and a call.uni in PTX.
template <int SHIFT>
__device__ __noinline__ unsigned long long mix64(unsigned long long a, unsigned b, int c) {
    unsigned long long h = a ^ ((unsigned long long)b << SHIFT);
    h *= 0x9E3779B97F4A7C15ull;
    return h ^ (h >> 29) ^ (unsigned long long)(long long)c;
}

// out[i] = mix64<7>(in[i], i, -i) ^ mix64<13>(in[i] + 1, 2 * i, i). Launch: block 128, grid any, n inputs.
// Reference: the same arithmetic in numpy uint64.
extern "C" __global__ void jit_hash_calls(const unsigned long long* in, unsigned long long* out, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= n) return;
    out[i] = mix64<7>(in[i], (unsigned)i, -i) ^ mix64<13>(in[i] + 1, 2u * i, i);
}

// A compile-time-sized block tile: out[b, j] = sum over the TILE inputs of block b, for every j, via a
// static shared array and a fully unrolled tree. Launch: block TILE = 64, grid any.
template <int TILE>
__device__ __forceinline__ void tile_sum_broadcast(const int* in, int* out) {
    __shared__ int s[TILE];
    s[threadIdx.x] = in[blockIdx.x * TILE + threadIdx.x];
    __syncthreads();
#pragma unroll
    for (int h = TILE / 2; h > 0; h >>= 1) {
        if ((int)threadIdx.x < h) s[threadIdx.x] += s[threadIdx.x + h];
        __syncthreads();
    }
    out[blockIdx.x * TILE + threadIdx.x] = s[0];
}

extern "C" __global__ void jit_tile_sum_64(const int* in, int* out) { tile_sum_broadcast<64>(in, out); }
