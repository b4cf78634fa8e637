// Distributed shared memory addressed as Hopper lays it out. archs: sm_90a
// The CTA's %cluster_ctarank sits at bit 24 of its shared addresses (the 32-bit shared::cta/shared::cluster
// address and the generic one), so in a 2-CTA cluster the peer's copy of a shared variable is the own
// generic address XOR (1 << 24). dsmem_xor_peer relies on that layout fact, dsmem_mapa_peer asks mapa.
// Launch both with grid (2k, 1, 1) (clusters of 2 along x), blockDim.x = 64.
#include <cstdint>

__device__ __forceinline__ void cluster_sync_ptx() {
    asm volatile("barrier.cluster.arrive.release.aligned;\nbarrier.cluster.wait.acquire.aligned;" ::: "memory");
}
__device__ __forceinline__ unsigned cluster_rank() {
    unsigned r;
    asm volatile("mov.u32 %0, %%cluster_ctarank;" : "=r"(r));
    return r;
}

// Each CTA fills buf[t] = 1000 * rank + in[64 * blockIdx.x + t], then adds (t + 1) into the peer's
// buf[t] through the XOR'ed generic pointer. out[64 * blockIdx.x + t] = own buf[t] afterwards, so
// out = 1000 * rank + in[own] + t + 1. addrs[4 * blockIdx.x + 0..3] = {generic address of buf,
// its shared::cta address (cvta), getctarank of the XOR'ed pointer, rank}.
extern "C" __global__ void __cluster_dims__(2, 1, 1) dsmem_xor_peer(const int* in, int* out,
                                                                    unsigned long long* addrs) {
    __shared__ int buf[64];
    unsigned t = threadIdx.x, rank = cluster_rank();
    buf[t] = 1000 * (int)rank + in[64 * blockIdx.x + t];
    cluster_sync_ptx();
    int* peer = reinterpret_cast<int*>(reinterpret_cast<uintptr_t>(buf) ^ (uintptr_t{1} << 24));
    atomicAdd(&peer[t], (int)t + 1);
    cluster_sync_ptx();
    out[64 * blockIdx.x + t] = buf[t];
    if (t == 0) {
        unsigned peer_rank;
        asm volatile("getctarank.u64 %0, %1;" : "=r"(peer_rank) : "l"(peer));
        addrs[4 * blockIdx.x + 0] = reinterpret_cast<uintptr_t>(buf);
        addrs[4 * blockIdx.x + 1] = __cvta_generic_to_shared(buf);
        addrs[4 * blockIdx.x + 2] = peer_rank;
        addrs[4 * blockIdx.x + 3] = rank;
    }
}

// The same exchange through mapa (generic and shared::cluster forms): out as dsmem_xor_peer's, and
// addrs[4 * blockIdx.x + 0..3] = {generic mapa of buf to the peer, shared::cluster mapa of buf to the
// peer, shared::cluster mapa of buf to this CTA itself, rank}.
extern "C" __global__ void __cluster_dims__(2, 1, 1) dsmem_mapa_peer(const int* in, int* out,
                                                                     unsigned long long* addrs) {
    __shared__ int buf[64];
    unsigned t = threadIdx.x, rank = cluster_rank(), other = rank ^ 1u;
    buf[t] = 1000 * (int)rank + in[64 * blockIdx.x + t];
    cluster_sync_ptx();
    int* peer;
    unsigned peer32, self32, own32 = (unsigned)__cvta_generic_to_shared(buf);
    asm volatile("mapa.u64 %0, %1, %2;" : "=l"(peer) : "l"(buf), "r"(other));
    asm volatile("mapa.shared::cluster.u32 %0, %1, %2;" : "=r"(peer32) : "r"(own32), "r"(other));
    asm volatile("mapa.shared::cluster.u32 %0, %1, %2;" : "=r"(self32) : "r"(own32), "r"(rank));
    asm volatile("red.shared::cluster.add.u32 [%0], %1;" :: "r"(peer32 + 4 * t), "r"(t + 1) : "memory");
    cluster_sync_ptx();
    out[64 * blockIdx.x + t] = buf[t];
    if (t == 0) {
        addrs[4 * blockIdx.x + 0] = reinterpret_cast<uintptr_t>(peer);
        addrs[4 * blockIdx.x + 1] = peer32;
        addrs[4 * blockIdx.x + 2] = self32;
        addrs[4 * blockIdx.x + 3] = rank;
    }
}
