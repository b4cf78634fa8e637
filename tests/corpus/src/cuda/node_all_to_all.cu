// All-to-all among the GPUs of one node through peer pointers, one flag per (sender, receiver) pair: the
// shape of an intranode expert-parallel exchange, written for ptxforge.emu.Node.
// archs: sm_90a
//
// Each GPU `rank` of `world` runs node_all_to_all<<<world, 128>>>. Block `peer` copies chunk `peer` of
// `send` ([world, chunk] ints) into slot `rank` of GPU peer's receive buffer (recv_ptrs[peer], [world,
// chunk]), through a plain pointer to the other GPU's memory; a barrier, then thread 0 raises
// flag_ptrs[peer][rank] = tag with a system-scope release store, and waits (system-scope acquire loads)
// until its own flag_ptrs[rank][peer] == tag, i.e. until GPU peer has delivered slot `peer` here. After a
// second barrier the block copies that slot to out[peer]. So out[j] on GPU r is send[r-th chunk] of GPU j.
// recv_ptrs and flag_ptrs are arrays of `world` device addresses, the same on every GPU. `tag` changes
// from one round to the next, so the flags need no reset.
//
// node_barrier_exchange<<<1, 128>>> does the same exchange in two phases around a barrier of the whole node
// instead of a flag per pair: every GPU writes its chunks into the peers' buffers, its thread 0 adds 1 to a
// counter in GPU 0's memory (`release` 1: a system-scope release reduction; 0: a relaxed one, which orders
// nothing) and waits until the counter reaches world * round; then every GPU reads what it received.

__device__ __forceinline__ void st_release_sys(int* p, int v) {
    asm volatile("st.release.sys.global.s32 [%0], %1;" ::"l"(p), "r"(v) : "memory");
}

__device__ __forceinline__ int ld_acquire_sys(const int* p) {
    int v;
    asm volatile("ld.acquire.sys.global.s32 %0, [%1];" : "=r"(v) : "l"(p) : "memory");
    return v;
}

// A read-only load that skips L1 (how communication kernels read their own send buffers).
__device__ __forceinline__ int ld_nc_no_allocate(const int* p) {
    int v;
    asm volatile("ld.global.nc.L1::no_allocate.L2::256B.s32 %0, [%1];" : "=r"(v) : "l"(p));
    return v;
}

extern "C" __global__ void node_all_to_all(const int* __restrict__ send, int* const* recv_ptrs,
                                           int* const* flag_ptrs, int* __restrict__ out, int rank, int world,
                                           int chunk, int tag) {
    const int peer = blockIdx.x;
    if (peer >= world) return;
    int* dst = recv_ptrs[peer] + rank * chunk;
    const int* src = send + peer * chunk;
    for (int i = threadIdx.x; i < chunk; i += blockDim.x) dst[i] = ld_nc_no_allocate(src + i);
    __syncthreads();
    if (threadIdx.x == 0) {
        st_release_sys(flag_ptrs[peer] + rank, tag);
        while (ld_acquire_sys(flag_ptrs[rank] + peer) != tag) {
        }
    }
    __syncthreads();
    const int* mine = recv_ptrs[rank] + peer * chunk;
    for (int i = threadIdx.x; i < chunk; i += blockDim.x) out[peer * chunk + i] = mine[i];
}

// A counter barrier across the GPUs of a node: one arrival per GPU, then wait for all `world` of this round.
__device__ __forceinline__ void node_barrier(unsigned* counter, unsigned target, int release) {
    if (release) {
        asm volatile("red.release.sys.global.add.u32 [%0], 1;" ::"l"(counter) : "memory");
    } else {
        asm volatile("red.relaxed.sys.global.add.u32 [%0], 1;" ::"l"(counter) : "memory");
    }
    while (ld_acquire_sys(reinterpret_cast<const int*>(counter)) < static_cast<int>(target)) {
    }
}

extern "C" __global__ void node_barrier_exchange(const int* __restrict__ send, int* const* recv_ptrs,
                                                 unsigned* counter, int* __restrict__ out, int rank, int world,
                                                 int chunk, unsigned round, int release) {
    for (int peer = 0; peer < world; ++peer) {
        int* dst = recv_ptrs[peer] + rank * chunk;
        for (int i = threadIdx.x; i < chunk; i += blockDim.x) dst[i] = send[peer * chunk + i];
    }
    __syncthreads();
    if (threadIdx.x == 0) node_barrier(counter, round * world, release);
    __syncthreads();
    const int* mine = recv_ptrs[rank];
    for (int i = threadIdx.x; i < world * chunk; i += blockDim.x) out[i] = mine[i];
}
