// TMA and bulk async copies tracked by mbarrier transaction counts. archs: sm_90a sm_100a
// Covers: mbarrier.init / arrive.expect_tx / try_wait.parity, cp.async.bulk (non-tensor) global->shared
// with complete_tx and shared->global with bulk_group, cp.async.bulk.tensor.2d load and store with a
// CUtensorMap passed as a __grid_constant__ kernel parameter, prefetch.tensormap, fence.proxy.async,
// elect.sync. Reference: outputs equal transformed copies of the inputs (see each kernel).
#include <cuda.h>

__device__ __forceinline__ unsigned smem_addr(const void* p) { return (unsigned)__cvta_generic_to_shared(p); }

__device__ __forceinline__ void mbar_init(unsigned bar, unsigned count) {
    asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;" :: "r"(bar), "r"(count) : "memory");
}
__device__ __forceinline__ void mbar_expect_tx(unsigned bar, unsigned bytes) {
    asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;" :: "r"(bar), "r"(bytes) : "memory");
}
__device__ __forceinline__ void mbar_wait_parity(unsigned bar, unsigned parity) {
    asm volatile(
        "{\n .reg .pred done;\n"
        "WAIT_%=:\n"
        " mbarrier.try_wait.parity.shared::cta.b64 done, [%0], %1;\n"
        " @!done bra WAIT_%=;\n}\n" :: "r"(bar), "r"(parity) : "memory");
}
__device__ __forceinline__ bool elect_one() {
    unsigned pred = 0;
    asm volatile("{\n .reg .pred p;\n .reg .b32 r;\n elect.sync r|p, 0xffffffff;\n selp.u32 %0, 1, 0, p;\n}\n"
                 : "=r"(pred));
    return pred != 0;
}

// Non-tensor bulk copy: each block copies 4 KB chunks (1024 floats) of `in` into shared memory with one
// elected thread, adds 1 to each element, and writes it back with a bulk shared->global copy.
// Launch: blockDim.x = 128, n a multiple of 1024; block b handles chunks b, b + gridDim.x, ...
// Reference: out = in + 1.
extern "C" __global__ void bulk_copy_roundtrip(const float* in, float* out, int n) {
    __shared__ __align__(128) float buf[1024];
    __shared__ __align__(8) unsigned long long bar;
    unsigned b = smem_addr(&bar);
    if (threadIdx.x == 0) {
        mbar_init(b, 1);
        asm volatile("fence.mbarrier_init.release.cluster;" ::: "memory");
    }
    __syncthreads();
    unsigned phase = 0;
    for (int chunk = blockIdx.x; chunk < n / 1024; chunk += gridDim.x, phase ^= 1) {
        if (threadIdx.x < 32 && elect_one()) {
            mbar_expect_tx(b, 4096);
            asm volatile(
                "cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1], %2, [%3];"
                :: "r"(smem_addr(buf)), "l"(in + (size_t)chunk * 1024), "r"(4096), "r"(b) : "memory");
        }
        mbar_wait_parity(b, phase);
        for (int i = threadIdx.x; i < 1024; i += blockDim.x) buf[i] += 1.0f;
        asm volatile("fence.proxy.async.shared::cta;" ::: "memory");
        __syncthreads();
        if (threadIdx.x == 0) {
            asm volatile("cp.async.bulk.global.shared::cta.bulk_group [%0], [%1], %2;"
                         :: "l"(out + (size_t)chunk * 1024), "r"(smem_addr(buf)), "r"(4096) : "memory");
            asm volatile("cp.async.bulk.commit_group;" ::: "memory");
            asm volatile("cp.async.bulk.wait_group.read 0;" ::: "memory");
        }
        __syncthreads();
    }
}

// 2D TMA: load a 32x32 float box at (x0, y0) = (32*blockIdx.x, 32*blockIdx.y) of the tensor described by
// `in_map`, transpose it in shared memory, and store it with a second tensor map at (y0, x0).
// Host side: in_map over a [H][W] float tensor, out_map over [W][H], both with box {32, 32}, no swizzle,
// no interleave. Launch: grid (W/32, H/32), blockDim.x = 256. Reference: out = in.T.
extern "C" __global__ void tma_transpose_2d(const __grid_constant__ CUtensorMap in_map,
                                            const __grid_constant__ CUtensorMap out_map) {
    __shared__ __align__(128) float tile[32][32];
    __shared__ __align__(128) float tile_t[32][32];
    __shared__ __align__(8) unsigned long long bar;
    unsigned b = smem_addr(&bar);
    int x0 = 32 * blockIdx.x, y0 = 32 * blockIdx.y;
    if (threadIdx.x == 0) {
        asm volatile("prefetch.tensormap [%0];" :: "l"(&in_map) : "memory");
        mbar_init(b, 1);
        asm volatile("fence.proxy.async.shared::cta;" ::: "memory");
    }
    __syncthreads();
    if (threadIdx.x == 0) {
        mbar_expect_tx(b, sizeof(tile));
        asm volatile(
            "cp.async.bulk.tensor.2d.shared::cluster.global.tile.mbarrier::complete_tx::bytes [%0], [%1, {%2, %3}], [%4];"
            :: "r"(smem_addr(tile)), "l"(&in_map), "r"(x0), "r"(y0), "r"(b) : "memory");
    }
    mbar_wait_parity(b, 0);
    for (int i = threadIdx.x; i < 32 * 32; i += blockDim.x) tile_t[i % 32][i / 32] = tile[i / 32][i % 32];
    asm volatile("fence.proxy.async.shared::cta;" ::: "memory");
    __syncthreads();
    if (threadIdx.x == 0) {
        asm volatile("cp.async.bulk.tensor.2d.global.shared::cta.tile.bulk_group [%0, {%1, %2}], [%3];"
                     :: "l"(&out_map), "r"(y0), "r"(x0), "r"(smem_addr(tile_t)) : "memory");
        asm volatile("cp.async.bulk.commit_group;" ::: "memory");
        asm volatile("cp.async.bulk.wait_group 0;" ::: "memory");
    }
}

// 3D TMA load into shared memory, then a plain reduction: out[blockIdx.x] = sum of the 4x8x16 box at
// (0, 0, 4*blockIdx.x) of a [D][8][16] float tensor (map dims innermost first: 16, 8, D; box 16, 8, 4).
extern "C" __global__ void tma_load_3d_sum(const __grid_constant__ CUtensorMap map, float* out) {
    __shared__ __align__(128) float box[4][8][16];
    __shared__ __align__(8) unsigned long long bar;
    __shared__ float partial[32];
    unsigned b = smem_addr(&bar);
    if (threadIdx.x == 0) { mbar_init(b, 1); asm volatile("fence.proxy.async.shared::cta;" ::: "memory"); }
    __syncthreads();
    if (threadIdx.x == 0) {
        mbar_expect_tx(b, sizeof(box));
        asm volatile(
            "cp.async.bulk.tensor.3d.shared::cluster.global.tile.mbarrier::complete_tx::bytes [%0], [%1, {%2, %3, %4}], [%5];"
            :: "r"(smem_addr(box)), "l"(&map), "r"(0), "r"(0), "r"(4 * (int)blockIdx.x), "r"(b) : "memory");
    }
    mbar_wait_parity(b, 0);
    const float* flat = &box[0][0][0];
    float s = 0.f;
    for (int i = threadIdx.x; i < 4 * 8 * 16; i += blockDim.x) s += flat[i];
    for (int o = 16; o > 0; o >>= 1) s += __shfl_xor_sync(0xffffffffu, s, o);
    if ((threadIdx.x & 31) == 0) partial[threadIdx.x >> 5] = s;
    __syncthreads();
    if (threadIdx.x == 0) {
        float t = 0.f;
        for (int w = 0; w < (int)(blockDim.x >> 5); ++w) t += partial[w];
        out[blockIdx.x] = t;
    }
}
