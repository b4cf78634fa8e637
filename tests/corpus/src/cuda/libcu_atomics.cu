// libcu++ atomics: cuda::atomic_ref over global and shared memory with explicit memory orders and thread
// scopes (block, device, system), compare_exchange loops, cuda::atomic_thread_fence, and a flag handoff
// between warps of a block with release/acquire. archs: sm_80 sm_90a. Launch: 1D; references below.

#include <cuda/atomic>

// counters (i32[4]): [0] += 1 per thread (relaxed, device scope), [1] = max of in, [2] = min of in,
// [3] = number of in > 0; bits (u32[2]): [0] = OR of 1 << (in & 31) (system scope, seq_cst), [1] = AND of
// ~(1 << (in & 15)); fmax (f32[1]) = max of in as float through a compare_exchange_weak loop; block_or[b] =
// OR within block b through a shared-memory atomic_ref (block scope). Launch: block 128, grid any, n inputs
// (threads i >= n do nothing but the shared OR of 0). Initial values: counters {0, INT_MIN, INT_MAX, 0},
// bits {0, ~0}, fmax {-inf}, block_or zeros.
extern "C" __global__ void atomic_ref_mix(const int* in, int* counters, unsigned* bits, float* fmax,
                                          unsigned* block_or, int n) {
    __shared__ unsigned sor;
    if (threadIdx.x == 0) sor = 0;
    __syncthreads();
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    unsigned mine = 0;
    if (i < n) {
        int x = in[i];
        cuda::atomic_ref<int, cuda::thread_scope_device> c0(counters[0]), c1(counters[1]), c2(counters[2]),
            c3(counters[3]);
        c0.fetch_add(1, cuda::std::memory_order_relaxed);
        c1.fetch_max(x, cuda::std::memory_order_relaxed);
        c2.fetch_min(x, cuda::std::memory_order_acq_rel);
        if (x > 0) c3.fetch_add(1, cuda::std::memory_order_release);
        cuda::atomic_ref<unsigned, cuda::thread_scope_system> b0(bits[0]), b1(bits[1]);
        b0.fetch_or(1u << (x & 31));
        b1.fetch_and(~(1u << (x & 15)), cuda::std::memory_order_acquire);
        cuda::atomic_ref<float, cuda::thread_scope_device> fm(*fmax);
        float f = (float)x, cur = fm.load(cuda::std::memory_order_relaxed);
        while (f > cur && !fm.compare_exchange_weak(cur, f, cuda::std::memory_order_acq_rel,
                                                    cuda::std::memory_order_relaxed)) {
        }
        mine = (unsigned)x;
    }
    cuda::atomic_ref<unsigned, cuda::thread_scope_block> so(sor);
    so.fetch_or(mine, cuda::std::memory_order_relaxed);
    __syncthreads();
    if (threadIdx.x == 0) block_or[blockIdx.x] = so.load(cuda::std::memory_order_relaxed);
}

// The "last block finishes the reduction" pattern with libcu++: each block writes its partial sum, a
// device-scope fence (release), then takes a ticket with an acq_rel fetch_add; the block that takes the
// last ticket reads every partial and writes the total. Launch: block 128, grid g, n = g * 128; partial is
// [g] i32, ticket and total i32[1] zeroed. Reference: *total = sum(in); partial[b] = block sums.
extern "C" __global__ void atomic_last_block_sum(const int* in, int* partial, unsigned* ticket, int* total) {
    __shared__ int s[128];
    __shared__ bool last;
    int t = threadIdx.x;
    s[t] = in[blockIdx.x * 128 + t];
    __syncthreads();
    for (int h = 64; h > 0; h >>= 1) {
        if (t < h) s[t] += s[t + h];
        __syncthreads();
    }
    if (t == 0) {
        partial[blockIdx.x] = s[0];
        cuda::atomic_thread_fence(cuda::std::memory_order_release, cuda::thread_scope_device);
        cuda::atomic_ref<unsigned, cuda::thread_scope_device> tk(*ticket);
        unsigned my = tk.fetch_add(1, cuda::std::memory_order_acq_rel);
        last = my == gridDim.x - 1;
    }
    __syncthreads();
    if (last && t == 0) {
        cuda::atomic_thread_fence(cuda::std::memory_order_acquire, cuda::thread_scope_device);
        int sum = 0;
        for (unsigned b = 0; b < gridDim.x; ++b) sum += partial[b];
        *total = sum;
    }
}

// A flag handoff between warps: warp 0 writes payload[0..32) (plain stores), then lane 0 publishes with a
// block-scope release store; warp 1 spins on an acquire load and copies the payload, adding its lane.
// Launch: block 64, grid any; payload/out are [grid*32] i32, flags [grid] i32 zeroed.
// Reference: out[b*32 + l] = in[b*32 + l] * 3 + l; flags[b] == 1.
extern "C" __global__ void atomic_flag_handoff(const int* in, int* payload, int* flags, int* out) {
    int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    int* p = payload + blockIdx.x * 32;
    cuda::atomic_ref<int, cuda::thread_scope_block> flag(flags[blockIdx.x]);
    if (warp == 0) {
        p[lane] = in[blockIdx.x * 32 + lane] * 3;
        __syncwarp();
        if (lane == 0) flag.store(1, cuda::std::memory_order_release);
    } else if (warp == 1) {
        while (flag.load(cuda::std::memory_order_acquire) == 0) {
        }
        out[blockIdx.x * 32 + lane] = p[lane] + lane;
    }
}

// exchange and compare_exchange_strong on 64-bit values in shared memory (block scope) and in global
// memory (device scope): slots[k] for k = in[i] % 8 ends as the largest i that chose k (a CAS max loop);
// last64 gets the largest value ever exchanged into it by a thread, via fetch_max on u64; swaps counts
// successful exchanges from 0. Launch: block 128, one block; in is [128] i32 >= 0.
// Reference: slots[k] = max(i for in[i] % 8 == k, default -1); last64 = max(i * 2**33); swaps[0] = 1.
extern "C" __global__ void atomic_cas_u64(const int* in, long long* slots, unsigned long long* last64,
                                          int* swaps) {
    __shared__ long long s[8];
    __shared__ int zero_taken;
    int i = threadIdx.x;
    if (i < 8) s[i] = -1;
    if (i == 0) zero_taken = 0;
    __syncthreads();
    cuda::atomic_ref<long long, cuda::thread_scope_block> slot(s[in[i] % 8]);
    long long cur = slot.load(cuda::std::memory_order_relaxed);
    while (cur < i && !slot.compare_exchange_strong(cur, (long long)i, cuda::std::memory_order_relaxed)) {
    }
    cuda::atomic_ref<int, cuda::thread_scope_block> z(zero_taken);
    if (z.exchange(1, cuda::std::memory_order_acq_rel) == 0) {
        cuda::atomic_ref<int, cuda::thread_scope_device> sw(*swaps);
        sw.fetch_add(1, cuda::std::memory_order_relaxed);
    }
    cuda::atomic_ref<unsigned long long, cuda::thread_scope_device> l(*last64);
    l.fetch_max((unsigned long long)i << 33, cuda::std::memory_order_seq_cst);
    __syncthreads();
    if (i < 8) slots[i] = s[i];
}
