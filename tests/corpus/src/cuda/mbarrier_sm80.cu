// mbarrier objects in shared memory with the sm_80 feature set: init, arrive (state token),
// arrive.noComplete with a count, test_wait polling, arrive_drop, cp.async.mbarrier.arrive, inval.
// archs: all (sm_80 sm_89 sm_90a sm_100a)

__device__ __forceinline__ unsigned smem_addr(const void* p) { return (unsigned)__cvta_generic_to_shared(p); }

__device__ __forceinline__ void mbar_wait(unsigned bar, unsigned long long state) {
    unsigned done = 0;
    while (!done) {
        asm volatile("{ .reg .pred p; mbarrier.test_wait.shared.b64 p, [%1], %2; selp.u32 %0, 1, 0, p; }"
                     : "=r"(done) : "r"(bar), "l"(state) : "memory");
    }
}

// Producer/consumer handoff through an mbarrier. Launch: blockDim.x = 128, any grid.
// out[blockIdx.x * 128 + t] = (sum over the block's 128 inputs) + t.
extern "C" __global__ void mbarrier_block_sync(const int* in, int* out) {
    __shared__ unsigned long long bar;
    __shared__ int vals[128];
    unsigned b = smem_addr(&bar);
    int t = threadIdx.x;
    if (t == 0) asm volatile("mbarrier.init.shared.b64 [%0], %1;" :: "r"(b), "r"((int)blockDim.x) : "memory");
    __syncthreads();
    vals[t] = in[blockIdx.x * blockDim.x + t];
    unsigned long long state;
    asm volatile("mbarrier.arrive.shared.b64 %0, [%1];" : "=l"(state) : "r"(b) : "memory");
    mbar_wait(b, state);
    int s = 0;
    for (int i = 0; i < (int)blockDim.x; ++i) s += vals[i];
    out[blockIdx.x * blockDim.x + t] = s + t;
    __syncthreads();
    if (t == 0) asm volatile("mbarrier.inval.shared.b64 [%0];" :: "r"(b) : "memory");
}

// cp.async completion tracked by an mbarrier (cp.async.mbarrier.arrive.noinc) over two phases, plus
// arrive_drop by the upper half of the block after phase 0 (it stops participating).
// Launch: blockDim.x = 64; n = gridDim.x * 128. out[i] = in[i] + 1 for the first 64 values of each block,
// and in[i] * 2 for the second 64 (handled by the lower 32 threads only, 2 each).
extern "C" __global__ void mbarrier_cp_async_phases(const int* in, int* out) {
    __shared__ __align__(8) unsigned long long bar;
    __shared__ __align__(16) int buf[128];
    unsigned b = smem_addr(&bar);
    int t = threadIdx.x;
    const int* src = in + blockIdx.x * 128;
    if (t == 0) asm volatile("mbarrier.init.shared.b64 [%0], %1;" :: "r"(b), "r"(64) : "memory");
    __syncthreads();
    // phase 0: every thread copies one int and arrives through its cp.async (noinc: pre-counted)
    asm volatile("cp.async.ca.shared.global [%0], [%1], 4;" :: "r"(smem_addr(&buf[t])), "l"(src + t) : "memory");
    asm volatile("cp.async.mbarrier.arrive.noinc.shared.b64 [%0];" :: "r"(b) : "memory");
    // with .noinc the cp.async arrival counts toward the 64 expected; wait on phase 0 by parity:
    unsigned done = 0;
    while (!done) {
        asm volatile("{ .reg .pred p; mbarrier.test_wait.parity.shared.b64 p, [%1], %2; selp.u32 %0, 1, 0, p; }"
                     : "=r"(done) : "r"(b), "r"(0) : "memory");
    }
    out[blockIdx.x * 128 + t] = buf[t] + 1;
    // phase 1: upper half drops out, lower half copies two ints each
    if (t >= 32) {
        asm volatile("mbarrier.arrive_drop.shared.b64 _, [%0];" :: "r"(b) : "memory");
        return;
    }
    asm volatile("cp.async.ca.shared.global [%0], [%1], 8;"
                 :: "r"(smem_addr(&buf[64 + 2 * t])), "l"(src + 64 + 2 * t) : "memory");
    asm volatile("cp.async.mbarrier.arrive.noinc.shared.b64 [%0];" :: "r"(b) : "memory");
    done = 0;
    while (!done) {
        asm volatile("{ .reg .pred p; mbarrier.test_wait.parity.shared.b64 p, [%1], %2; selp.u32 %0, 1, 0, p; }"
                     : "=r"(done) : "r"(b), "r"(1) : "memory");
    }
    out[blockIdx.x * 128 + 64 + 2 * t] = buf[64 + 2 * t] * 2;
    out[blockIdx.x * 128 + 65 + 2 * t] = buf[65 + 2 * t] * 2;
}

// Pending-count query: mbarrier.pending_count on the state tokens of two ordered arrivals.
// Launch: one block of >= 2 threads. Thread 0 arrives with count 2, then thread 1 with count 3 on a barrier
// expecting 1000; out[step] = pending count decoded from that arrival's state token (the PTX ISA does not
// pin down whether the token reflects the count before or after the arrival: take the reference from a GPU).
extern "C" __global__ void mbarrier_pending_count(int* out) {
    __shared__ unsigned long long bar;
    unsigned b = smem_addr(&bar);
    if (threadIdx.x == 0) asm volatile("mbarrier.init.shared.b64 [%0], %1;" :: "r"(b), "r"(1000) : "memory");
    __syncthreads();
    // sm_80 allows a count only with .noComplete (the phase must not complete through this arrival)
    for (int step = 0; step < 2; ++step) {
        if ((int)threadIdx.x == step) {
            unsigned long long st;
            unsigned cnt;
            asm volatile("mbarrier.arrive.noComplete.shared.b64 %0, [%1], %2;" : "=l"(st) : "r"(b), "r"(2 + step) : "memory");
            asm volatile("mbarrier.pending_count.b64 %0, %1;" : "=r"(cnt) : "l"(st));
            out[step] = (int)cnt;
        }
        __syncthreads();
    }
}
