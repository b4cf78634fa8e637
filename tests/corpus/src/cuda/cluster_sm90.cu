// Thread-block clusters and distributed shared memory. archs: sm_90a sm_100a
// Covers %cluster_ctarank / %cluster_nctarank / %clusterid / %cluster_nctaid special registers,
// barrier.cluster.arrive(.release) / wait(.acquire), mapa, ld/st.shared::cluster, atom on remote shared
// memory, and the cooperative_groups cluster API. Reference: see each kernel.
#include <cooperative_groups.h>
namespace cg = cooperative_groups;

__device__ __forceinline__ unsigned smem_addr(const void* p) { return (unsigned)__cvta_generic_to_shared(p); }
__device__ __forceinline__ void cluster_sync_ptx() {
    asm volatile("barrier.cluster.arrive.release.aligned;\nbarrier.cluster.wait.acquire.aligned;" ::: "memory");
}

// Cluster of 4 CTAs along x. Each CTA writes its rank into its own shared slot, then reads its right
// neighbour's slot through mapa + ld.shared::cluster. Launch: grid (4k, 1, 1), blockDim.x = 32.
// out[4 * blockIdx.x + 0..3] = {rank, nranks, neighbour's slot, cluster id}, where the slot of rank r is
// r * 100 + in[block of rank r] and the neighbour of rank r is (r + 1) % nranks in the same cluster.
extern "C" __global__ void __cluster_dims__(4, 1, 1) cluster_ring_exchange(const int* in, int* out) {
    __shared__ int slot;
    unsigned rank, nranks, cid;
    asm volatile("mov.u32 %0, %%cluster_ctarank;" : "=r"(rank));
    asm volatile("mov.u32 %0, %%cluster_nctarank;" : "=r"(nranks));
    asm volatile("mov.u32 %0, %%clusterid.x;" : "=r"(cid));
    if (threadIdx.x == 0) slot = (int)rank * 100 + in[blockIdx.x];
    cluster_sync_ptx();
    int got = 0;
    if (threadIdx.x == 0) {
        unsigned peer = (rank + 1) % nranks, remote;
        asm volatile("mapa.shared::cluster.u32 %0, %1, %2;" : "=r"(remote) : "r"(smem_addr(&slot)), "r"(peer));
        asm volatile("ld.shared::cluster.s32 %0, [%1];" : "=r"(got) : "r"(remote) : "memory");
        out[4 * blockIdx.x + 0] = (int)rank;
        out[4 * blockIdx.x + 1] = (int)nranks;
        out[4 * blockIdx.x + 2] = got;
        out[4 * blockIdx.x + 3] = (int)cid;
    }
    cluster_sync_ptx();   // keep shared memory alive until every peer has read it
}

// Every CTA of a 2-CTA cluster atomically adds its block-sum into rank 0's shared accumulator; rank 0
// writes the cluster total. Launch: grid (2k), blockDim.x = 128, n = gridDim.x * 128.
// out[clusterid] = sum of in over the cluster's 256 elements.
extern "C" __global__ void __cluster_dims__(2, 1, 1) cluster_dsmem_reduce(const int* in, int* out) {
    __shared__ int acc;
    __shared__ int block_sum;
    cg::cluster_group cluster = cg::this_cluster();
    if (threadIdx.x == 0) { acc = 0; block_sum = 0; }
    cluster.sync();
    atomicAdd(&block_sum, in[blockIdx.x * blockDim.x + threadIdx.x]);
    __syncthreads();
    if (threadIdx.x == 0) {
        int* remote = cluster.map_shared_rank(&acc, 0);
        atomicAdd(remote, block_sum);
    }
    cluster.sync();
    if (cluster.block_rank() == 0 && threadIdx.x == 0) out[blockIdx.x / 2] = acc;
    cluster.sync();
}

// st.shared::cluster push: rank r writes r+1 into slot r of every CTA's array; afterwards every CTA
// holds {1, 2, ..., n}. Also uses barrier.cluster without .aligned from a divergent branch.
// Launch: grid (2k) with a cluster size of 2 chosen at launch time (no __cluster_dims__), blockDim.x = 64.
// out[blockIdx.x * 8 + i] = slots[i] for i < nranks.
extern "C" __global__ void cluster_push_slots(int* out) {
    __shared__ int slots[8];
    unsigned rank, nranks;
    asm volatile("mov.u32 %0, %%cluster_ctarank;" : "=r"(rank));
    asm volatile("mov.u32 %0, %%cluster_nctarank;" : "=r"(nranks));
    if (threadIdx.x < 8) slots[threadIdx.x] = 0;
    asm volatile("barrier.cluster.arrive;\nbarrier.cluster.wait;" ::: "memory");
    if (threadIdx.x < nranks) {
        unsigned remote;
        asm volatile("mapa.shared::cluster.u32 %0, %1, %2;" : "=r"(remote) : "r"(smem_addr(&slots[rank])), "r"(threadIdx.x));
        asm volatile("st.shared::cluster.s32 [%0], %1;" :: "r"(remote), "r"((int)rank + 1) : "memory");
    }
    asm volatile("barrier.cluster.arrive.release;\nbarrier.cluster.wait.acquire;" ::: "memory");
    if (threadIdx.x < nranks) out[blockIdx.x * 8 + threadIdx.x] = slots[threadIdx.x];
}
