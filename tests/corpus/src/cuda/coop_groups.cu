// Cooperative groups as applications use them: thread_block_tile reductions (cg::reduce and hand-written
// shuffles), tile ballots/any/all/match, coalesced_group aggregation of atomics in divergent code, a block-
// wide cg::sync, and a two-phase kernel with grid.sync() (needs a cooperative launch on a GPU).
// archs: sm_80 sm_90a. Launch: 1D, blockDim.x a multiple of 32. Reference: numpy, per kernel below.

#include <cooperative_groups.h>
#include <cooperative_groups/reduce.h>

namespace cg = cooperative_groups;

// sums[b] = sum of in[b*blockDim .. (b+1)*blockDim) over 32-lane tiles with cg::reduce, then over warps in
// shared memory; tile16[i] = sum over the 16-lane tile of i with shfl_down; rank8[i] = meta_group_rank of
// i's 8-lane tile * 100 + its thread_rank. Launch: block 128 (or 256), grid any; in is [grid*block] i32.
extern "C" __global__ void cg_tile_reduce(const int* in, int* sums, int* tile16, int* rank8) {
    cg::thread_block block = cg::this_thread_block();
    cg::thread_block_tile<32> warp = cg::tiled_partition<32>(block);
    __shared__ int partial[32];
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    int v = in[i];
    int w = cg::reduce(warp, v, cg::plus<int>());
    if (warp.thread_rank() == 0) partial[warp.meta_group_rank()] = w;
    block.sync();
    if (warp.meta_group_rank() == 0) {
        int p = warp.thread_rank() < warp.meta_group_size() ? partial[warp.thread_rank()] : 0;
        p = cg::reduce(warp, p, cg::plus<int>());
        if (warp.thread_rank() == 0) sums[blockIdx.x] = p;
    }
    cg::thread_block_tile<16> t16 = cg::tiled_partition<16>(block);
    int s = v;
    for (int o = t16.size() / 2; o > 0; o /= 2) s += t16.shfl_down(s, o);
    tile16[i] = t16.shfl(s, 0);
    cg::thread_block_tile<8> t8 = cg::tiled_partition<8>(block);
    rank8[i] = (int)t8.meta_group_rank() * 100 + (int)t8.thread_rank();
}

// Per 32-lane tile, for x = in[i]: out[i*5 + 0] = ballot(x odd), 1 = any(x > 90), 2 = all(x >= 0),
// 3 = match_any(x mod 4) (mask of lanes with the same residue), 4 = max over the tile (cg::reduce greater).
// Launch: block 64, grid any; in is [grid*64] i32 in [0, 100).
extern "C" __global__ void cg_tile_votes(const int* in, unsigned* out) {
    cg::thread_block_tile<32> tile = cg::tiled_partition<32>(cg::this_thread_block());
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    int x = in[i];
    out[i * 5 + 0] = tile.ballot(x & 1);
    out[i * 5 + 1] = tile.any(x > 90);
    out[i * 5 + 2] = tile.all(x >= 0);
    out[i * 5 + 3] = tile.match_any(x & 3);
    out[i * 5 + 4] = (unsigned)cg::reduce(tile, x, cg::greater<int>());
}

// Stream compaction with warp-aggregated atomics: the threads with in[i] > 0 form a coalesced_group, its
// leader reserves room for all of them with one atomicAdd, and each writes at base + its rank.
// Launch: block 128, grid any, n = number of inputs. Reference: sorted(out[:count]) == sorted(in[in > 0]);
// *count == number of positives.
extern "C" __global__ void cg_coalesced_compact(const int* in, int* out, int* count, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= n) return;
    int x = in[i];
    if (x > 0) {
        cg::coalesced_group active = cg::coalesced_threads();
        int base = 0;
        if (active.thread_rank() == 0) base = atomicAdd(count, (int)active.size());
        base = active.shfl(base, 0);
        out[base + active.thread_rank()] = x;
    }
}

// coalesced_group inside a data-dependent branch: lanes with in[i] even compute the group's sum and
// size; out[2i] = sum over the even-valued lanes of i's warp, out[2i+1] = their count; odd lanes write -1.
// Launch: block 64, grid any; in is [grid*64] i32.
extern "C" __global__ void cg_coalesced_reduce(const int* in, int* out) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    int x = in[i];
    if ((x & 1) == 0) {
        cg::coalesced_group g = cg::coalesced_threads();
        int s = cg::reduce(g, x, cg::plus<int>());
        out[2 * i] = s;
        out[2 * i + 1] = (int)g.num_threads();
    } else {
        out[2 * i] = -1;
        out[2 * i + 1] = -1;
    }
}

// Two phases separated by grid.sync(): phase 1 writes in[i] * 2 to tmp, phase 2 reads the neighbour
// written by another block: out[i] = tmp[(i + blockDim.x) % n]. Launch: cudaLaunchCooperativeKernel,
// grid <= co-resident blocks, block 128; n = grid * 128.
extern "C" __global__ void cg_grid_sync_shift(const int* in, int* tmp, int* out, int n) {
    cg::grid_group grid = cg::this_grid();
    int i = (int)grid.thread_rank();
    tmp[i] = in[i] * 2;
    grid.sync();
    out[i] = tmp[(i + blockDim.x) % n];
}
