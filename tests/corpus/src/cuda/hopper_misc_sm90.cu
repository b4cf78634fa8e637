// Assorted sm_90 instructions: vector float atomics (atom/red .v2/.v4), cp.reduce.async.bulk (shared ->
// global add), st.async / red.async into a peer CTA's shared memory with an mbarrier, mbarrier.try_wait
// with a suspend-time hint, and getctarank. archs: sm_90a sm_100a

__device__ __forceinline__ unsigned smem_addr(const void* p) { return (unsigned)__cvta_generic_to_shared(p); }

// acc[0..3] += in[4t .. 4t+3] with one vector atomic per thread (red.global.v4.f32.add), and
// acc2[0..1] += in[4t .. 4t+1] with atom.global.v2.f32.add (old values discarded).
// Reference: column sums of in reshaped to [T, 4] (exact for small integers).
extern "C" __global__ void vector_float_atomics(const float4* in, float* acc, float* acc2, int T) {
    int t = blockIdx.x * blockDim.x + threadIdx.x;
    if (t >= T) return;
    float4 v = in[t];
    asm volatile("red.global.v4.f32.add [%0], {%1, %2, %3, %4};" :: "l"(acc), "f"(v.x), "f"(v.y), "f"(v.z), "f"(v.w) : "memory");
    float o0, o1;
    asm volatile("atom.global.v2.f32.add {%0, %1}, [%2], {%3, %4};" : "=f"(o0), "=f"(o1) : "l"(acc2), "f"(v.x), "f"(v.y) : "memory");
}

// Each block sums its 256-int slice into shared memory partials and reduces them into global memory with
// cp.reduce.async.bulk (.add.u32), 1 KB at a time. Launch: blockDim.x = 256; out has 256 entries and
// receives the elementwise sum over blocks of in[b*256 .. b*256+255] * 2.
extern "C" __global__ void bulk_reduce_add(const unsigned* in, unsigned* out) {
    __shared__ __align__(128) unsigned buf[256];
    buf[threadIdx.x] = in[blockIdx.x * 256 + threadIdx.x] * 2;
    asm volatile("fence.proxy.async.shared::cta;" ::: "memory");
    __syncthreads();
    if (threadIdx.x == 0) {
        asm volatile("cp.reduce.async.bulk.global.shared::cta.bulk_group.add.u32 [%0], [%1], 1024;"
                     :: "l"(out), "r"(smem_addr(buf)) : "memory");
        asm volatile("cp.async.bulk.commit_group;" ::: "memory");
        asm volatile("cp.async.bulk.wait_group 0;" ::: "memory");
    }
}

// Cluster of 2: each CTA's thread t sends value in[b*32 + t] into the peer's shared array with st.async
// (completing bytes on the peer's mbarrier) and adds 1 to the peer's counter with red.async.
// out[b*33 + t] = value received from the peer's thread t; out[b*33 + 32] = counter (= 32).
extern "C" __global__ void __cluster_dims__(2, 1, 1) st_async_exchange(const int* in, int* out) {
    __shared__ __align__(16) int recv[32];
    __shared__ __align__(8) unsigned long long bar;
    __shared__ int counter;
    unsigned rank;
    asm volatile("mov.u32 %0, %%cluster_ctarank;" : "=r"(rank));
    unsigned b = smem_addr(&bar);
    if (threadIdx.x == 0) {
        counter = 0;
        asm volatile("mbarrier.init.shared::cta.b64 [%0], 1;" :: "r"(b) : "memory");
        asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;" :: "r"(b), "r"(32 * 4 * 2) : "memory");
    }
    asm volatile("fence.mbarrier_init.release.cluster;" ::: "memory");
    asm volatile("barrier.cluster.arrive.release.aligned;\nbarrier.cluster.wait.acquire.aligned;" ::: "memory");
    unsigned peer = rank ^ 1, remote_slot, remote_bar, remote_counter;
    asm volatile("mapa.shared::cluster.u32 %0, %1, %2;" : "=r"(remote_slot) : "r"(smem_addr(&recv[threadIdx.x])), "r"(peer));
    asm volatile("mapa.shared::cluster.u32 %0, %1, %2;" : "=r"(remote_bar) : "r"(b), "r"(peer));
    asm volatile("mapa.shared::cluster.u32 %0, %1, %2;" : "=r"(remote_counter) : "r"(smem_addr(&counter)), "r"(peer));
    int v = in[blockIdx.x * 32 + threadIdx.x];
    asm volatile("st.async.shared::cluster.mbarrier::complete_tx::bytes.s32 [%0], %1, [%2];"
                 :: "r"(remote_slot), "r"(v), "r"(remote_bar) : "memory");
    asm volatile("red.async.relaxed.cluster.shared::cluster.mbarrier::complete_tx::bytes.add.u32 [%0], 1, [%1];"
                 :: "r"(remote_counter), "r"(remote_bar) : "memory");
    asm volatile("{\n .reg .pred p;\nW_%=:\n mbarrier.try_wait.parity.shared::cta.b64 p, [%0], 0, 1000000;\n @!p bra W_%=;\n}\n"
                 :: "r"(b) : "memory");
    out[blockIdx.x * 33 + threadIdx.x] = recv[threadIdx.x];
    if (threadIdx.x == 0) out[blockIdx.x * 33 + 32] = counter;
    asm volatile("barrier.cluster.arrive.release.aligned;\nbarrier.cluster.wait.acquire.aligned;" ::: "memory");
}
