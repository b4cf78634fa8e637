// libcu++ asynchronous copies: cuda::pipeline (thread scope and a block-scoped producer/consumer pipeline
// with shared state), cuda::barrier (arrive_and_wait, split arrive/wait with a token) fed by
// cuda::memcpy_async. archs: sm_80 sm_90a. Launch: 1D; each kernel's reference is below.

#include <cuda/barrier>
#include <cuda/pipeline>
#include <cooperative_groups.h>

#pragma nv_diag_suppress static_var_with_dynamic_init  // shared barriers are initialized by init() / make_pipeline

namespace cg = cooperative_groups;

// Each thread double-buffers its own 4-float chunks through a thread-scope pipeline.
// Launch: block 64, grid any; n = grid * 64 * 4 * steps with steps = 3. Reference: out = 2 * in + 1.
extern "C" __global__ void pipe_thread_double_buffer(const float* in, float* out, int steps) {
    __shared__ __align__(16) float buf[2][64 * 4];
    cuda::pipeline<cuda::thread_scope_thread> pipe = cuda::make_pipeline();
    int t = threadIdx.x;
    size_t base = (size_t)blockIdx.x * 64 * 4 * steps;
    auto load = [&](int s) {
        pipe.producer_acquire();
        cuda::memcpy_async(&buf[s & 1][t * 4], in + base + (size_t)s * 256 + t * 4,
                           cuda::aligned_size_t<16>(16), pipe);
        pipe.producer_commit();
    };
    load(0);
    for (int s = 0; s < steps; ++s) {
        if (s + 1 < steps) load(s + 1);
        pipe.consumer_wait();
        for (int k = 0; k < 4; ++k) out[base + (size_t)s * 256 + t * 4 + k] = 2.0f * buf[s & 1][t * 4 + k] + 1.0f;
        pipe.consumer_release();
    }
}

// A block-scoped pipeline with 2 stages: every thread produces (a block-wide memcpy_async of one 256-float
// tile) and consumes: out[b*256*tiles + k*256 + j] = in[same index] * (k + 1) for tile k of block b.
// Launch: block 128, grid any, tiles = 4; in/out are [grid * 256 * tiles] f32.
extern "C" __global__ void pipe_block_stages(const float* in, float* out, int tiles) {
    constexpr int stages = 2;
    __shared__ __align__(16) float buf[stages][256];
    __shared__ cuda::pipeline_shared_state<cuda::thread_scope_block, stages> state;
    auto block = cg::this_thread_block();
    auto pipe = cuda::make_pipeline(block, &state);
    size_t base = (size_t)blockIdx.x * 256 * tiles;
    int fetched = 0;
    for (int k = 0; k < tiles; ++k) {
        for (; fetched < tiles && fetched < k + stages; ++fetched) {
            pipe.producer_acquire();
            cuda::memcpy_async(block, buf[fetched % stages], in + base + (size_t)fetched * 256,
                               sizeof(float) * 256, pipe);
            pipe.producer_commit();
        }
        pipe.consumer_wait();
        for (int j = threadIdx.x; j < 256; j += blockDim.x)
            out[base + (size_t)k * 256 + j] = buf[k % stages][j] * (float)(k + 1);
        pipe.consumer_release();
    }
}

// cuda::barrier in shared memory completing a block-wide memcpy_async; then a reversed copy out.
// Launch: block 128, grid any; in/out are [grid * 512] i32. Reference: out[b, j] = in[b, 511 - j].
extern "C" __global__ void barrier_memcpy_reverse(const int* in, int* out) {
    using barrier_t = cuda::barrier<cuda::thread_scope_block>;
    __shared__ __align__(16) int tile[512];
    __shared__ barrier_t bar;
    auto block = cg::this_thread_block();
    if (block.thread_rank() == 0) init(&bar, block.size());
    block.sync();
    cuda::memcpy_async(block, tile, in + blockIdx.x * 512, cuda::aligned_size_t<16>(sizeof(int) * 512), bar);
    bar.arrive_and_wait();
    for (int j = threadIdx.x; j < 512; j += blockDim.x) out[blockIdx.x * 512 + j] = tile[511 - j];
}

// Split arrive/wait: each thread writes its value, arrives (token), does independent work, then waits and
// reads a neighbour. Two rounds reuse the barrier. Launch: block 64, grid any; in/out are [grid*64] i32.
// Reference: per 64-slice v, a = v + 1, out[t] = a[(t + 1) % 64] * 3 + a[(t + 63) % 64].
extern "C" __global__ void barrier_split_arrive(const int* in, int* out) {
    __shared__ cuda::barrier<cuda::thread_scope_block> bar;
    __shared__ int a[64], b[64];
    int t = threadIdx.x;
    if (t == 0) init(&bar, blockDim.x);
    __syncthreads();
    a[t] = in[blockIdx.x * 64 + t] + 1;
    auto tok = bar.arrive();
    int local = t * 7;  // independent work between arrive and wait
    bar.wait(std::move(tok));
    b[t] = a[(t + 1) % 64] * 3 + local - t * 7;
    bar.arrive_and_wait();
    out[blockIdx.x * 64 + t] = b[t] + a[(t + 63) % 64];
}
