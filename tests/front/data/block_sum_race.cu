// a block-wide sum with a planted race: the barrier between the tree steps is missing
template <typename T, int BLOCK>
__global__ void block_sum(const T* in, T* out, int n) {
    __shared__ T buf[BLOCK];
    int t = threadIdx.x;
    int i = blockIdx.x * BLOCK + t;
    buf[t] = i < n ? in[i] : T(0);
    __syncthreads();
    for (int s = BLOCK / 2; s > 0; s /= 2) {
        if (t < s) buf[t] += buf[t + s];
        // __syncthreads();  (the planted bug)
    }
    if (t == 0) out[blockIdx.x] = buf[0];
}
