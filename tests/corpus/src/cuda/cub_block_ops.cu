// CUB's block- and warp-wide collectives as libraries use them: BlockLoad / BlockStore with a warp-transpose
// layout, BlockReduce (sum and max), BlockScan (exclusive and inclusive sums with an aggregate), WarpReduce,
// WarpScan, BlockRadixSort of keys and of key-value pairs, templated over block size and items per thread.
// archs: sm_80 sm_90a. Launch: grid any, block = the kernel's BLOCK; references below (numpy).

#include <cub/block/block_load.cuh>
#include <cub/block/block_radix_sort.cuh>
#include <cub/block/block_reduce.cuh>
#include <cub/block/block_scan.cuh>
#include <cub/block/block_store.cuh>
#include <cub/warp/warp_reduce.cuh>
#include <cub/warp/warp_scan.cuh>

// Per block of 128 threads x 4 items (512 ints): sums[b] = sum, maxs[b] = max (BlockReduce, two
// algorithms); excl = exclusive prefix sum within the block slice, incl = inclusive, totals[b] = aggregate.
extern "C" __global__ void __launch_bounds__(128) cub_block_reduce_scan(const int* in, int* sums, int* maxs,
                                                                        int* excl, int* incl, int* totals) {
    constexpr int BLOCK = 128, ITEMS = 4;
    using Load = cub::BlockLoad<int, BLOCK, ITEMS, cub::BLOCK_LOAD_WARP_TRANSPOSE>;
    using Store = cub::BlockStore<int, BLOCK, ITEMS, cub::BLOCK_STORE_WARP_TRANSPOSE>;
    using Reduce = cub::BlockReduce<int, BLOCK>;
    using ReduceRaking = cub::BlockReduce<int, BLOCK, cub::BLOCK_REDUCE_RAKING>;
    using Scan = cub::BlockScan<int, BLOCK>;
    __shared__ union {
        typename Load::TempStorage load;
        typename Store::TempStorage store;
        typename Reduce::TempStorage reduce;
        typename ReduceRaking::TempStorage raking;
        typename Scan::TempStorage scan;
    } tmp;
    int items[ITEMS], out[ITEMS];
    int base = blockIdx.x * BLOCK * ITEMS;
    Load(tmp.load).Load(in + base, items);
    __syncthreads();
    int s = Reduce(tmp.reduce).Sum(items);
    __syncthreads();
    int m = ReduceRaking(tmp.raking).Reduce(items, cuda::maximum<>{});
    if (threadIdx.x == 0) {
        sums[blockIdx.x] = s;
        maxs[blockIdx.x] = m;
    }
    __syncthreads();
    int agg;
    Scan(tmp.scan).ExclusiveSum(items, out, agg);
    __syncthreads();
    Store(tmp.store).Store(excl + base, out);
    __syncthreads();
    Scan(tmp.scan).InclusiveSum(items, out);
    __syncthreads();
    Store(tmp.store).Store(incl + base, out);
    if (threadIdx.x == 0) totals[blockIdx.x] = agg;
}

// Per 32-lane warp (block 64): wsum[w] = WarpReduce sum of the floats, wmin[w] = min, wscan[i] = WarpScan
// inclusive sum of the ints (of the warp), wexcl[i] = exclusive sum. Reference: numpy per warp (float sum
// within 1e-5).
extern "C" __global__ void cub_warp_reduce_scan(const float* xf, const int* xi, float* wsum, float* wmin,
                                                int* wscan, int* wexcl) {
    using WR = cub::WarpReduce<float>;
    using WS = cub::WarpScan<int>;
    __shared__ typename WR::TempStorage rs[2];
    __shared__ typename WS::TempStorage ss[2];
    int w = threadIdx.x / 32;
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    float f = xf[i];
    float sum = WR(rs[w]).Sum(f);
    float mn = WR(rs[w]).Reduce(f, cuda::minimum<>{});
    int inc, exc;
    WS(ss[w]).InclusiveSum(xi[i], inc);
    WS(ss[w]).ExclusiveSum(xi[i], exc);
    if (threadIdx.x % 32 == 0) {
        wsum[i / 32] = sum;
        wmin[i / 32] = mn;
    }
    wscan[i] = inc;
    wexcl[i] = exc;
}

// Sort each block's 64 x 4 = 256 unsigned keys (BlockRadixSort, blocked arrangement in and out) and the
// pairs (key, value) by key descending. Launch: block 64. Reference: np.sort per 256-slice; values
// follow their keys (keys distinct).
extern "C" __global__ void __launch_bounds__(64) cub_block_radix_sort(unsigned* keys, int* vals,
                                                                      unsigned* keys_desc) {
    constexpr int BLOCK = 64, ITEMS = 4;
    using Sort = cub::BlockRadixSort<unsigned, BLOCK, ITEMS, int>;
    using SortKeys = cub::BlockRadixSort<unsigned, BLOCK, ITEMS>;
    __shared__ union {
        typename Sort::TempStorage pairs;
        typename SortKeys::TempStorage keys;
    } tmp;
    unsigned k[ITEMS], kd[ITEMS];
    int v[ITEMS];
    int base = blockIdx.x * BLOCK * ITEMS + threadIdx.x * ITEMS;
    for (int j = 0; j < ITEMS; ++j) {
        k[j] = kd[j] = keys[base + j];
        v[j] = vals[base + j];
    }
    Sort(tmp.pairs).Sort(k, v);
    __syncthreads();
    SortKeys(tmp.keys).SortDescending(kd);
    for (int j = 0; j < ITEMS; ++j) {
        keys[base + j] = k[j];
        vals[base + j] = v[j];
        keys_desc[base + j] = kd[j];
    }
}
