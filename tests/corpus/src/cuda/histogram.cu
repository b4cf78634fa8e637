// Histograms with atomics. archs: all (sm_80 sm_89 sm_90a sm_100a)
// bins[b] = number of inputs v with (v % nbins) == b (unsigned). Reference: numpy.bincount(v % nbins).
// Launch: 1D grid-stride; any block size; the shared variant needs nbins <= 256.

extern "C" __global__ void histogram_global(const unsigned* in, unsigned* bins, int n, unsigned nbins) {
    for (int i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += blockDim.x * gridDim.x)
        atomicAdd(&bins[in[i] % nbins], 1u);
}

extern "C" __global__ void histogram_shared(const unsigned* in, unsigned* bins, int n, unsigned nbins) {
    __shared__ unsigned local[256];
    for (unsigned b = threadIdx.x; b < nbins; b += blockDim.x) local[b] = 0;
    __syncthreads();
    for (int i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += blockDim.x * gridDim.x)
        atomicAdd(&local[in[i] % nbins], 1u);
    __syncthreads();
    for (unsigned b = threadIdx.x; b < nbins; b += blockDim.x)
        if (local[b]) atomicAdd(&bins[b], local[b]);
}

// Byte histogram (256 bins) of a byte buffer read as uchar4; warp-aggregated with __match_any_sync so
// lanes holding the same byte value issue one atomic. bins has 256 entries.
extern "C" __global__ void histogram_bytes_match(const uchar4* in, unsigned* bins, int n4) {
    __shared__ unsigned local[256];
    for (unsigned b = threadIdx.x; b < 256; b += blockDim.x) local[b] = 0;
    __syncthreads();
    int lane = threadIdx.x & 31;
    // loop bound is uniform per warp so every lane reaches the __match_any_sync calls
    for (int base = blockIdx.x * blockDim.x; base < n4; base += blockDim.x * gridDim.x) {
        int i = base + threadIdx.x;
        uchar4 v = i < n4 ? in[i] : make_uchar4(0, 0, 0, 0);
        unsigned valid = i < n4 ? 1u : 0u;
        unsigned bytes[4] = {v.x, v.y, v.z, v.w};
#pragma unroll
        for (int k = 0; k < 4; ++k) {
            unsigned key = valid ? bytes[k] : 0x100u + lane;  // invalid lanes never match a real byte
            unsigned peers = __match_any_sync(0xffffffffu, key);
            int leader = __ffs(peers) - 1;
            if (valid && lane == leader) atomicAdd(&local[bytes[k]], (unsigned)__popc(peers));
        }
    }
    __syncthreads();
    for (unsigned b = threadIdx.x; b < 256; b += blockDim.x)
        if (local[b]) atomicAdd(&bins[b], local[b]);
}
