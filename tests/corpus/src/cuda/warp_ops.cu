// Warp vote, shuffle (all modes, with widths), match, redux, activemask, syncwarp.
// archs: all (sm_80 sm_89 sm_90a sm_100a; __reduce_*_sync needs sm_80+). Launch: 1D, blockDim.x a multiple
// of 32; every lane of every warp is active unless a kernel says otherwise. Reference: per-warp numpy.

// out is [nthreads, 16] u32: vote and shuffle results for lane l of each warp, input v = in[tid].
extern "C" __global__ void warp_vote_shuffle(const unsigned* in, unsigned* out) {
    unsigned tid = blockIdx.x * blockDim.x + threadIdx.x;
    unsigned lane = threadIdx.x & 31;
    unsigned v = in[tid];
    unsigned* o = out + 16 * tid;
    const unsigned full = 0xffffffffu;
    o[0] = __ballot_sync(full, v & 1);
    o[1] = __all_sync(full, v != 0);
    o[2] = __any_sync(full, v > 1000);
    o[3] = __shfl_sync(full, v, 0);                    // broadcast lane 0
    o[4] = __shfl_sync(full, v, (lane * 7) & 31);      // arbitrary permutation (idx mode)
    o[5] = __shfl_up_sync(full, v, 3);                 // lanes < 3 keep their own value
    o[6] = __shfl_down_sync(full, v, 5);               // lanes > 26 keep their own value
    o[7] = __shfl_xor_sync(full, v, 9);
    o[8] = __shfl_sync(full, v, lane + 1, 8);          // width 8: index wraps within each 8-lane segment
    o[9] = __shfl_up_sync(full, v, 2, 16);             // width 16 segments
    o[10] = __shfl_down_sync(full, v, 1, 4);           // width 4 segments
    o[11] = __shfl_xor_sync(full, v, 3, 4);
    o[12] = __float_as_uint(__shfl_sync(full, __uint_as_float(v) * 2.0f, 31 - lane));
    o[13] = (unsigned)(__shfl_down_sync(full, (unsigned long long)v << 32 | lane, 16) >> 16);  // 64-bit shfl
    o[14] = __activemask();
    o[15] = __ballot_sync(full, lane < (v & 31));
}

// match / redux: out is [nthreads, 10] u32.
extern "C" __global__ void warp_match_redux(const unsigned* in, unsigned* out) {
    unsigned tid = blockIdx.x * blockDim.x + threadIdx.x;
    unsigned v = in[tid];
    unsigned* o = out + 10 * tid;
    const unsigned full = 0xffffffffu;
    int pred = 0;
    o[0] = __match_any_sync(full, v & 7);              // lanes with the same (v & 7)
    o[1] = __match_all_sync(full, v >> 31, &pred);     // full mask if all equal else 0
    o[2] = (unsigned)pred;
    o[3] = __match_any_sync(full, (unsigned long long)(v % 3) << 40);
    o[4] = __reduce_add_sync(full, v);
    o[5] = __reduce_min_sync(full, v);
    o[6] = __reduce_max_sync(full, v);
    o[7] = (unsigned)__reduce_min_sync(full, (int)v);  // signed flavour
    o[8] = __reduce_and_sync(full, v) ^ __reduce_or_sync(full, v);
    o[9] = __reduce_xor_sync(full, v);
}

// Divergence: odd lanes take one path, even lanes another, each with its own shuffles/votes over the
// partial mask; __syncwarp reconverges. out is [nthreads, 4].
extern "C" __global__ void warp_divergent(const unsigned* in, unsigned* out) {
    unsigned tid = blockIdx.x * blockDim.x + threadIdx.x;
    unsigned lane = threadIdx.x & 31;
    unsigned v = in[tid];
    unsigned* o = out + 4 * tid;
    if (lane & 1) {
        const unsigned odd = 0xaaaaaaaau;
        o[0] = __activemask();
        o[1] = __shfl_sync(odd, v, 1);                 // lane 1's value
        o[2] = __reduce_add_sync(odd, v);
    } else {
        const unsigned even = 0x55555555u;
        o[0] = __activemask();
        o[1] = __shfl_xor_sync(even, v, 2);
        o[2] = __ballot_sync(even, v > 10);
    }
    __syncwarp();
    o[3] = __activemask();
}

// Partial warp: threads with tid >= n exit early; the rest vote with __activemask.
extern "C" __global__ void warp_partial_exit(const int* in, unsigned* out, int n) {
    int tid = blockIdx.x * blockDim.x + threadIdx.x;
    if (tid >= n) return;
    unsigned m = __activemask();
    out[2 * tid] = m;
    out[2 * tid + 1] = __ballot_sync(m, in[tid] < 0);
}
