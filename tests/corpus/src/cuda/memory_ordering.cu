// Loads/stores with cache and ordering qualifiers, fences, special registers and timers.
// archs: all (sm_80 sm_89 sm_90a sm_100a)
#include <cooperative_groups.h>
namespace cg = cooperative_groups;

// Cache-hinted copies: out[i] = in[i] via __ldg / __ldcs / __ldcg / __ldlu / __ldcv, and the matching
// __stcs / __stcg / __stwb / __stwt stores. out is [5, n].
extern "C" __global__ void cache_hint_copies(const float* in, float* out, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= n) return;
    __stcs(out + i, __ldg(in + i));
    __stcg(out + n + i, __ldcs(in + i));
    __stwb(out + 2 * n + i, __ldcg(in + i));
    __stwt(out + 3 * n + i, __ldlu(in + i));
    out[4 * n + i] = __ldcv(in + i);
}

// Message passing between blocks with __threadfence and volatile loads: block 0 publishes data then sets
// a flag; other blocks spin on the flag (requires all blocks co-resident: launch <= #SMs blocks).
// out[b] = data[0] + data[1] as seen by block b (always 3).
extern "C" __global__ void fence_message_passing(volatile int* flag, int* data, int* out) {
    if (blockIdx.x == 0) {
        if (threadIdx.x == 0) {
            data[0] = 1;
            data[1] = 2;
            __threadfence();
            *flag = 1;
        }
    } else if (threadIdx.x == 0) {
        while (*flag == 0) { __nanosleep(100); }
        __threadfence();
        out[blockIdx.x] = ((volatile int*)data)[0] + ((volatile int*)data)[1];
    }
    __threadfence_block();
    __threadfence_system();
}

// Special registers: out is [nthreads, 8]: %smid < %nsmid, %warpid < %nwarpid, clock64 increasing,
// %globaltimer nonzero, %lanemask_lt == (1 << laneid) - 1, %dynamic_smem_size.
extern "C" __global__ void special_registers(unsigned* out) {
    unsigned tid = blockIdx.x * blockDim.x + threadIdx.x;
    unsigned smid, nsmid, warpid, nwarpid, lanemask_lt, dsmem, laneid;
    unsigned long long gt;
    asm volatile("mov.u32 %0, %%smid;" : "=r"(smid));
    asm volatile("mov.u32 %0, %%nsmid;" : "=r"(nsmid));
    asm volatile("mov.u32 %0, %%warpid;" : "=r"(warpid));
    asm volatile("mov.u32 %0, %%nwarpid;" : "=r"(nwarpid));
    asm volatile("mov.u32 %0, %%lanemask_lt;" : "=r"(lanemask_lt));
    asm volatile("mov.u32 %0, %%dynamic_smem_size;" : "=r"(dsmem));
    asm volatile("mov.u32 %0, %%laneid;" : "=r"(laneid));
    asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(gt));
    long long c0 = clock64();
    unsigned c32 = clock();
    long long c1 = clock64();
    unsigned* o = out + 8 * tid;
    o[0] = smid < nsmid;
    o[1] = warpid < nwarpid;
    o[2] = c1 >= c0;
    o[3] = gt != 0;
    o[4] = lanemask_lt == ((1u << laneid) - 1u);
    o[5] = dsmem;
    o[6] = c32 != 0xffffffffu;
    o[7] = laneid;
}

// Cooperative groups: tiled partitions of 8 and 16 lanes, per-tile reductions and a block-wide scan.
// out is [nthreads, 3]: sum over the 8-lane tile, max over the 16-lane tile, inclusive block scan.
extern "C" __global__ void cooperative_tiles(const int* in, int* out) {
    __shared__ int warp_tot[32];
    cg::thread_block block = cg::this_thread_block();
    cg::thread_block_tile<8> t8 = cg::tiled_partition<8>(block);
    cg::thread_block_tile<16> t16 = cg::tiled_partition<16>(block);
    int v = in[blockIdx.x * blockDim.x + threadIdx.x];
    int s8 = v;
    for (int o = 4; o > 0; o >>= 1) s8 += t8.shfl_xor(s8, o);
    int m16 = v;
    for (int o = 8; o > 0; o >>= 1) m16 = max(m16, t16.shfl_down(m16, o));
    m16 = t16.shfl(m16, 0);
    cg::thread_block_tile<32> w = cg::tiled_partition<32>(block);
    int inc = v;
    for (int o = 1; o < 32; o <<= 1) { int u = w.shfl_up(inc, o); if (w.thread_rank() >= o) inc += u; }
    if (w.thread_rank() == 31) warp_tot[w.meta_group_rank()] = inc;
    block.sync();
    for (unsigned k = 0; k < w.meta_group_rank(); ++k) inc += warp_tot[k];
    int* o = out + 3 * (blockIdx.x * blockDim.x + threadIdx.x);
    o[0] = s8;
    o[1] = m16;
    o[2] = inc;
}
