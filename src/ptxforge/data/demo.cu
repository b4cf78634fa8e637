// Kernels bundled with ptxforge for `ptxforge demo`. The PTX next to this file is nvcc 13.0 output:
//   nvcc -ptx -O3 -lineinfo -arch=sm_90a demo.cu -o demo.sm_90a.ptx
// (-lineinfo adds .loc lines, so the sanitizer can name the CUDA source line too)
#include <cuda_fp8.h>

extern "C" __global__ void vadd(const float* a, const float* b, float* c, int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) c[i] = a[i] + b[i];
}

// Sum of each block's 256 inputs: shared memory for the first steps, warp shuffles for the last.
extern "C" __global__ void block_sum(const float* x, float* out, int n) {
  __shared__ float s[256];
  int i = blockIdx.x * 256 + threadIdx.x;
  s[threadIdx.x] = i < n ? x[i] : 0.0f;
  __syncthreads();
  for (int k = 128; k >= 32; k >>= 1) {
    if (threadIdx.x < k) s[threadIdx.x] += s[threadIdx.x + k];
    __syncthreads();
  }
  if (threadIdx.x < 32) {
    float v = s[threadIdx.x];
    for (int o = 16; o > 0; o >>= 1) v += __shfl_down_sync(0xffffffffu, v, o);
    if (threadIdx.x == 0) out[blockIdx.x] = v;
  }
}

// The same reduction with the barrier after the first store forgotten: a race the sanitizer names.
extern "C" __global__ void block_sum_racy(const float* x, float* out, int n) {
  __shared__ float s[256];
  int i = blockIdx.x * 256 + threadIdx.x;
  s[threadIdx.x] = i < n ? x[i] : 0.0f;
  for (int k = 128; k >= 32; k >>= 1) {  // BUG: no __syncthreads() before the first read of s
    if (threadIdx.x < k) s[threadIdx.x] += s[threadIdx.x + k];
    __syncthreads();
  }
  if (threadIdx.x < 32) {
    float v = s[threadIdx.x];
    for (int o = 16; o > 0; o >>= 1) v += __shfl_down_sync(0xffffffffu, v, o);
    if (threadIdx.x == 0) out[blockIdx.x] = v;
  }
}

// DeepSeek-V3's 1x128 activation quantization: one warp per 128-channel group of one token,
// scale = amax / 448 (E4M3's largest finite value), values stored as FP8 E4M3.
extern "C" __global__ void quant_fp8_1x128(const float* x, __nv_fp8_e4m3* q, float* scales, int cols) {
  int row = blockIdx.x, group = threadIdx.y, lane = threadIdx.x;
  const float* src = x + (size_t)row * cols + group * 128;
  float v[4], amax = 0.0f;
  for (int j = 0; j < 4; ++j) { v[j] = src[lane + 32 * j]; amax = fmaxf(amax, fabsf(v[j])); }
  for (int o = 16; o > 0; o >>= 1) amax = fmaxf(amax, __shfl_xor_sync(0xffffffffu, amax, o));
  float scale = amax > 0.0f ? amax / 448.0f : 1.0f;
  __nv_fp8_e4m3* dst = q + (size_t)row * cols + group * 128;
  for (int j = 0; j < 4; ++j) dst[lane + 32 * j] = __nv_fp8_e4m3(v[j] / scale);
  if (lane == 0) scales[row * (cols / 128) + group] = scale;
}
