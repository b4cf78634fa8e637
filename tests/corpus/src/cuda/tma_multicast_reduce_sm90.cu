// TMA multicast across a thread-block cluster and TMA tensor reductions (DeepGEMM/DeepEP style). archs: sm_90a
// Covers: cp.async.bulk.tensor.2d ... .multicast::cluster with a 16-bit ctaMask (each CTA of the cluster
// loads one slice and multicasts it to all), the non-tensor cp.async.bulk ... .multicast::cluster to a
// subset of the cluster, mbarrier.arrive.expect_tx racing with complete-tx from peer CTAs, barrier.cluster
// around mbarrier init, and cp.reduce.async.bulk.tensor.2d.global.shared::cta.<op>.tile.bulk_group for
// add/min/max/inc/dec/and/or/xor (the element type comes from the tensor map), and the .im2col load mode
// (cp.async.bulk.tensor.4d ... .im2col with im2col offsets) gathering a 3x3 convolution's patches, and
// shared::cta -> shared::cluster bulk copies and reductions into other CTAs, completing on their mbarriers.
// Reference: see each kernel.
#include <cuda.h>
#include <stdint.h>

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
__device__ __forceinline__ void cluster_sync() {
    asm volatile("barrier.cluster.arrive.release.aligned;\nbarrier.cluster.wait.acquire.aligned;" ::: "memory");
}
__device__ __forceinline__ unsigned cluster_rank() {
    unsigned r;
    asm volatile("mov.u32 %0, %%cluster_ctarank;" : "=r"(r));
    return r;
}
__device__ __forceinline__ unsigned cluster_size() {
    unsigned r;
    asm volatile("mov.u32 %0, %%cluster_nctarank;" : "=r"(r));
    return r;
}
__device__ __forceinline__ unsigned cluster_id() {
    unsigned r;
    asm volatile("mov.u32 %0, %%clusterid.x;" : "=r"(r));
    return r;
}

// Tensor multicast, the way DeepGEMM shares an operand tile among the CTAs of a cluster: a cluster of n
// CTAs along x (n <= 8, chosen at launch) owns the band of 8n rows starting at row 8n * clusterid of a
// float tensor whose map has box {32, 8}. CTA rank r loads rows 8r..8r+7 of the band at column 0 and
// multicasts them to every CTA of the cluster (ctaMask = (1 << n) - 1); in each CTA they land at
// band[8r]. Each CTA expects the n boxes (n KB) on its own mbarrier, which the peers complete.
// Launch: grid (n * k), blockDim.x = 128, cluster (n, 1, 1); out holds 2048 floats per block.
// Reference: out[b][i] = (rank(b) + 1) * T[8n * cluster(b) + i / 32][i % 32] for i < 256n (rows past the
// tensor read as zero); the rest of out[b] is untouched.
extern "C" __global__ void tma_multicast_band(const __grid_constant__ CUtensorMap map, float* out) {
    __shared__ __align__(128) float band[64][32];
    __shared__ __align__(8) uint64_t bar;
    unsigned rank = cluster_rank(), n = cluster_size(), cid = cluster_id();
    unsigned b = smem_addr(&bar);
    if (threadIdx.x == 0) {
        mbar_init(b, 1);
        asm volatile("fence.mbarrier_init.release.cluster;" ::: "memory");
    }
    cluster_sync();  // every CTA's mbarrier is initialised before a peer's multicast completes on it
    if (threadIdx.x == 0) {
        mbar_expect_tx(b, n * 8 * 32 * sizeof(float));
        unsigned short mask = (unsigned short)((1u << n) - 1);
        asm volatile(
            "cp.async.bulk.tensor.2d.shared::cluster.global.tile.mbarrier::complete_tx::bytes.multicast::cluster"
            " [%0], [%1, {%2, %3}], [%4], %5;"
            :: "r"(smem_addr(&band[8 * rank][0])), "l"(&map), "r"(0), "r"((int)(8 * n * cid + 8 * rank)), "r"(b),
               "h"(mask)
            : "memory");
    }
    mbar_wait_parity(b, 0);
    const float* flat = &band[0][0];
    for (unsigned i = threadIdx.x; i < 8 * n * 32; i += blockDim.x)
        out[blockIdx.x * 2048 + i] = flat[i] * (float)(rank + 1);
    cluster_sync();  // no CTA exits while a peer may still multicast into its shared memory
}

// Non-tensor bulk multicast to a subset of the cluster: rank 0 copies 1024 floats starting at
// in[1024 * clusterid] into buf of every CTA whose bit is set in `mask` (rank 0 itself need not be one).
// Launch: grid (n * k), blockDim.x = 128, cluster (n, 1, 1), mask < 2^n.
// Reference: for a block b of rank r in mask: out[1024 b + i] = in[1024 cluster(b) + i] + r; blocks not
// in mask leave out untouched.
extern "C" __global__ void bulk_multicast_mask(const float* in, float* out, unsigned mask) {
    __shared__ __align__(128) float buf[1024];
    __shared__ __align__(8) uint64_t bar;
    unsigned rank = cluster_rank(), cid = cluster_id();
    bool mine = (mask >> rank) & 1u;
    unsigned b = smem_addr(&bar);
    if (threadIdx.x == 0) {
        mbar_init(b, 1);
        asm volatile("fence.mbarrier_init.release.cluster;" ::: "memory");
    }
    cluster_sync();
    if (threadIdx.x == 0 && mine) mbar_expect_tx(b, sizeof(buf));
    if (threadIdx.x == 0 && rank == 0) {
        asm volatile(
            "cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes.multicast::cluster"
            " [%0], [%1], %2, [%3], %4;"
            :: "r"(smem_addr(buf)), "l"(in + 1024 * (size_t)cid), "r"((unsigned)sizeof(buf)), "r"(b),
               "h"((unsigned short)mask)
            : "memory");
    }
    if (mine) {
        mbar_wait_parity(b, 0);
        for (int i = threadIdx.x; i < 1024; i += blockDim.x) out[1024 * blockIdx.x + i] = buf[i] + (float)rank;
    }
    cluster_sync();
}

// Distributed shared memory by bulk copy, the way a cluster passes tiles between its CTAs: rank r copies its
// 1 KB `mine` into the `inbox` of rank (r + 1) % n with cp.async.bulk.shared::cluster.shared::cta, and
// adds it into rank 0's `acc` with cp.reduce.async.bulk.shared::cluster.shared::cta ... .add.u32; both
// complete on the destination's mbarrier (found with mapa), which expects 1 KB (plus n KB at rank 0).
// Launch: grid (n * k), blockDim.x = 128, cluster (n, 1, 1); out holds 512 words per block.
// Reference: out[b][0:256] = in[block of rank (r - 1) % n of b's cluster]; out[b][256:512] = the sum (mod
// 2^32) of in over b's cluster at rank 0, zero at the other ranks.
extern "C" __global__ void dsmem_bulk_ring(const unsigned* in, unsigned* out) {
    __shared__ __align__(128) unsigned mine[256];
    __shared__ __align__(128) unsigned inbox[256];
    __shared__ __align__(128) unsigned acc[256];
    __shared__ __align__(8) uint64_t bar;
    unsigned rank = cluster_rank(), n = cluster_size();
    unsigned b = smem_addr(&bar);
    for (int i = threadIdx.x; i < 256; i += blockDim.x) {
        mine[i] = in[256 * blockIdx.x + i];
        acc[i] = 0;
    }
    if (threadIdx.x == 0) {
        mbar_init(b, 1);
        asm volatile("fence.mbarrier_init.release.cluster;" ::: "memory");
    }
    asm volatile("fence.proxy.async.shared::cta;" ::: "memory");  // `mine` is read by the async proxy
    cluster_sync();
    if (threadIdx.x == 0) {
        mbar_expect_tx(b, rank == 0 ? 1024 * (n + 1) : 1024);
        unsigned peer = (rank + 1) % n, dst, dbar, acc0, bar0;
        asm volatile("mapa.shared::cluster.u32 %0, %1, %2;" : "=r"(dst) : "r"(smem_addr(inbox)), "r"(peer));
        asm volatile("mapa.shared::cluster.u32 %0, %1, %2;" : "=r"(dbar) : "r"(b), "r"(peer));
        asm volatile("mapa.shared::cluster.u32 %0, %1, %2;" : "=r"(acc0) : "r"(smem_addr(acc)), "r"(0));
        asm volatile("mapa.shared::cluster.u32 %0, %1, %2;" : "=r"(bar0) : "r"(b), "r"(0));
        asm volatile("cp.async.bulk.shared::cluster.shared::cta.mbarrier::complete_tx::bytes [%0], [%1], 1024, [%2];"
                     :: "r"(dst), "r"(smem_addr(mine)), "r"(dbar) : "memory");
        asm volatile("cp.reduce.async.bulk.shared::cluster.shared::cta.mbarrier::complete_tx::bytes.add.u32"
                     " [%0], [%1], 1024, [%2];" :: "r"(acc0), "r"(smem_addr(mine)), "r"(bar0) : "memory");
    }
    mbar_wait_parity(b, 0);
    for (int i = threadIdx.x; i < 256; i += blockDim.x) {
        out[512 * blockIdx.x + i] = inbox[i];
        out[512 * blockIdx.x + 256 + i] = acc[i];
    }
    cluster_sync();  // no CTA exits while its shared memory may still be read or written by a peer
}

// Tensor reductions, the way an epilogue (or DeepEP's combine) accumulates a tile into global memory:
// block b copies its `nbytes` of `src` (bytes 16 * (nbytes / 16) * b ...) into shared memory as they are,
// then one thread reduces that box into the tensor of `map` at coordinates (x0 + b * dx, y0 + b * dy)
// with cp.reduce.async.bulk.tensor.2d ... .OP; the map says the element type and box (nbytes = box bytes,
// at most 4096; (x0 + b * dx) * element size a multiple of 16, as a GPU needs). Launch: grid (k), blockDim.x = 128.
// Reference: for b = 0..k-1 in any order, T[box at those coordinates] = T OP src box b, elementwise,
// elements outside the tensor skipped (inc: t >= s ? 0 : t + 1; dec: t == 0 || t > s ? s : t - 1).
#define TMA_REDUCE_KERNEL(OP)                                                                               \
    extern "C" __global__ void tma_reduce_##OP(const __grid_constant__ CUtensorMap map, const uint4* src,   \
                                               int nbytes, int x0, int y0, int dx, int dy) {                \
        __shared__ __align__(128) uint4 tile[256];                                                          \
        int nvec = nbytes / 16;                                                                             \
        for (int i = threadIdx.x; i < nvec; i += blockDim.x) tile[i] = src[(size_t)blockIdx.x * nvec + i]; \
        asm volatile("fence.proxy.async.shared::cta;" ::: "memory");                                       \
        __syncthreads();                                                                                    \
        if (threadIdx.x == 0) {                                                                             \
            int x = x0 + (int)blockIdx.x * dx, y = y0 + (int)blockIdx.x * dy;                               \
            asm volatile("cp.reduce.async.bulk.tensor.2d.global.shared::cta." #OP ".tile.bulk_group"        \
                         " [%0, {%1, %2}], [%3];"                                                           \
                         :: "l"(&map), "r"(x), "r"(y), "r"(smem_addr(tile)) : "memory");                    \
            asm volatile("cp.async.bulk.commit_group;" ::: "memory");                                       \
            asm volatile("cp.async.bulk.wait_group.read 0;" ::: "memory");                                  \
        }                                                                                                   \
    }

TMA_REDUCE_KERNEL(add)
TMA_REDUCE_KERNEL(min)
TMA_REDUCE_KERNEL(max)
TMA_REDUCE_KERNEL(inc)
TMA_REDUCE_KERNEL(dec)
TMA_REDUCE_KERNEL(and)
TMA_REDUCE_KERNEL(or)
TMA_REDUCE_KERNEL(xor)

// im2col loads, the way an implicit-GEMM convolution (CUTLASS-style) gathers its A operand: a float NHWC
// tensor with 16 channels, an im2col map with channels_per_pixel 16, pixels_per_column 32, bounding box
// corners lower (-1, -1) and upper (-1, -1) (a 3x3 filter with padding 1) and traversal strides (1, s, s, 1).
// Block g handles output pixels 32g .. 32g+31 of the flattened (n, oh, ow) output grid of OH x OW: it places
// the filter base of the first one at (w, h) = (ow * s - 1, oh * s - 1), image n, and issues nine loads,
// one per filter tap (r, q) with im2col offsets (q, r), into tile[3r + q].
// Launch: grid (ceil(N * OH * OW / 32)), blockDim.x = 128; out holds 9 * 32 * 16 floats per block.
// Reference: out[g][3r + q][i][c] = X[n][oh * s - 1 + r][ow * s - 1 + q][c] for output pixel 32g + i =
// (n, oh, ow), zero where that lies outside X (padding) or past the last image.
extern "C" __global__ void tma_im2col_conv3x3(const __grid_constant__ CUtensorMap map, float* out, int OH, int OW,
                                              int s) {
    __shared__ __align__(128) float tile[9][32][16];
    __shared__ __align__(8) uint64_t bar;
    unsigned b = smem_addr(&bar);
    int p0 = 32 * (int)blockIdx.x;
    int n = p0 / (OH * OW), oh = p0 / OW % OH, ow = p0 % OW;
    if (threadIdx.x == 0) {
        mbar_init(b, 1);
        asm volatile("fence.proxy.async.shared::cta;" ::: "memory");
    }
    __syncthreads();
    if (threadIdx.x == 0) {
        mbar_expect_tx(b, sizeof(tile));
        for (int r = 0; r < 3; ++r)
            for (int q = 0; q < 3; ++q)
                asm volatile(
                    "cp.async.bulk.tensor.4d.shared::cluster.global.im2col.mbarrier::complete_tx::bytes"
                    " [%0], [%1, {%2, %3, %4, %5}], [%6], {%7, %8};"
                    :: "r"(smem_addr(&tile[3 * r + q][0][0])), "l"(&map), "r"(0), "r"(ow * s - 1), "r"(oh * s - 1),
                       "r"(n), "r"(b), "h"((unsigned short)q), "h"((unsigned short)r)
                    : "memory");
    }
    mbar_wait_parity(b, 0);
    const float* flat = &tile[0][0][0];
    for (int i = threadIdx.x; i < 9 * 32 * 16; i += blockDim.x) out[(size_t)blockIdx.x * 9 * 32 * 16 + i] = flat[i];
}
