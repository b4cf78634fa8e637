// Launch-shape features: __launch_bounds__ (max threads, min blocks), __maxnreg__, 2D and 3D grids and
// blocks, and every special register for the launch geometry. archs: all (sm_80 sm_89 sm_90a sm_100a)

// Launch: any grid, blockDim.x <= 256. out[i] = in[i] * 3 - 1. (.maxntid 256, .minnctapersm 2)
extern "C" __global__ void __launch_bounds__(256, 2) launch_bounds_scale(const int* in, int* out, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) out[i] = in[i] * 3 - 1;
}

// .maxnreg 32: heavy unrolled work under a small register budget (may spill to local memory).
// out[i] = sum_{j<16} (in[i] + j)^2 as a double.
extern "C" __global__ void __maxnreg__(32) maxnreg_sum_squares(const float* in, double* out, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= n) return;
    double v = in[i], acc[16];
#pragma unroll
    for (int j = 0; j < 16; ++j) acc[j] = (v + j) * (v + j);
    double s = 0.0;
#pragma unroll
    for (int j = 0; j < 16; ++j) s += acc[j];
    out[i] = s;
}

// 2D: block (16, 16), grid (ceil(W/16), ceil(H/16)). out[y, x] = y * 1000 + x if inside.
extern "C" __global__ void grid_2d_coords(int* out, int W, int H) {
    int x = blockIdx.x * blockDim.x + threadIdx.x;
    int y = blockIdx.y * blockDim.y + threadIdx.y;
    if (x < W && y < H) out[y * W + x] = y * 1000 + x;
}

// 3D: any block/grid shape. For each thread, writes 10 ints at its linear id:
// {tid.x, tid.y, tid.z, ctaid.x, ctaid.y, ctaid.z, ntid.x*ntid.y*ntid.z, nctaid.x*nctaid.y*nctaid.z,
//  warpid-independent lane (%laneid), linear thread index within the block}.
extern "C" __global__ void grid_3d_special_regs(int* out) {
    unsigned bx = blockDim.x * blockDim.y * blockDim.z;
    unsigned block_lin = blockIdx.x + gridDim.x * (blockIdx.y + gridDim.y * blockIdx.z);
    unsigned t_lin = threadIdx.x + blockDim.x * (threadIdx.y + blockDim.y * threadIdx.z);
    unsigned lin = block_lin * bx + t_lin;
    unsigned laneid;
    asm("mov.u32 %0, %%laneid;" : "=r"(laneid));
    int* o = out + 10 * lin;
    o[0] = threadIdx.x; o[1] = threadIdx.y; o[2] = threadIdx.z;
    o[3] = blockIdx.x; o[4] = blockIdx.y; o[5] = blockIdx.z;
    o[6] = bx; o[7] = gridDim.x * gridDim.y * gridDim.z;
    o[8] = laneid; o[9] = t_lin;
}

// 3D stencil over a [D][H][W] volume: 7-point Laplacian with zero boundary. block (8, 8, 4).
extern "C" __global__ void stencil_3d_7pt(const float* in, float* out, int W, int H, int D) {
    int x = blockIdx.x * blockDim.x + threadIdx.x;
    int y = blockIdx.y * blockDim.y + threadIdx.y;
    int z = blockIdx.z * blockDim.z + threadIdx.z;
    if (x >= W || y >= H || z >= D) return;
    auto at = [&](int i, int j, int k) -> float {
        return (i < 0 || j < 0 || k < 0 || i >= W || j >= H || k >= D) ? 0.0f : in[((size_t)k * H + j) * W + i];
    };
    out[((size_t)z * H + y) * W + x] = at(x - 1, y, z) + at(x + 1, y, z) + at(x, y - 1, z) + at(x, y + 1, z)
                                       + at(x, y, z - 1) + at(x, y, z + 1) - 6.0f * at(x, y, z);
}

// Required block size (.reqntid) and cluster-free block of 96 threads; out[i] = __syncthreads_count etc.
extern "C" __global__ void __launch_bounds__(96) block_sync_counts(const int* in, int* out) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    int v = in[i];
    int cnt = __syncthreads_count(v > 0);
    int all = __syncthreads_and(v != 0);
    int any = __syncthreads_or(v < 0);
    out[3 * i + 0] = cnt;
    out[3 * i + 1] = all;
    out[3 * i + 2] = any;
}
