// Kernels bundled with ptxforge for the node section of `ptxforge demo` (ptxforge.emu.Node). The PTX next to
// this file is nvcc 13.0 output:
//   nvcc -ptx -O3 -lineinfo -arch=sm_90a node_demo.cu -o node_demo.sm_90a.ptx

__device__ __forceinline__ void st_release_sys(unsigned* p, unsigned v) {
  asm volatile("st.release.sys.global.u32 [%0], %1;" ::"l"(p), "r"(v) : "memory");
}

__device__ __forceinline__ unsigned ld_acquire_sys(const unsigned* p) {
  unsigned v;
  asm volatile("ld.acquire.sys.global.u32 %0, [%1];" : "=r"(v) : "l"(p) : "memory");
  return v;
}

__device__ __forceinline__ unsigned ld_acquire_gpu(const unsigned* p) {
  unsigned v;
  asm volatile("ld.acquire.gpu.global.u32 %0, [%1];" : "=r"(v) : "l"(p) : "memory");
  return v;
}

__device__ __forceinline__ void red_release_gpu_add(unsigned* p, unsigned v) {
  asm volatile("red.release.gpu.global.add.u32 [%0], %1;" ::"l"(p), "r"(v) : "memory");
}

__device__ __forceinline__ unsigned smid() {
  unsigned s;
  asm volatile("mov.u32 %0, %%smid;" : "=r"(s));
  return s;
}

// One step of a ring among the GPUs of a node: this GPU writes its n ints into the next GPU's `next_recv`
// through a peer pointer, block b raises next_flags[b] = tag (system-scope release) and waits for its own
// my_flags[b] == tag (system-scope acquire), then copies what the previous GPU sent (`my_recv`) to out.
extern "C" __global__ void ring_exchange(const int* __restrict__ send, int* next_recv, unsigned* next_flags,
                                         const unsigned* my_flags, const int* my_recv, int* __restrict__ out,
                                         int n, unsigned tag) {
  int per = (n + gridDim.x - 1) / gridDim.x;
  int lo = blockIdx.x * per, hi = min(n, lo + per);
  for (int i = lo + threadIdx.x; i < hi; i += blockDim.x) next_recv[i] = send[i];
  __syncthreads();
  if (threadIdx.x == 0) {
    st_release_sys(next_flags + blockIdx.x, tag);
    while (ld_acquire_sys(my_flags + blockIdx.x) != tag) {
    }
  }
  __syncthreads();
  for (int i = lo + threadIdx.x; i < hi; i += blockDim.x) out[i] = my_recv[i];
}

// A persistent "communication" kernel, one block per SM of its stream: thread 0 spins until the compute
// kernel's blocks have all finished (*done == target), then records its SM and how often it polled.
extern "C" __global__ void comm_persistent(const unsigned* done, unsigned target, unsigned* sm_of_block,
                                           unsigned* polls) {
  if (threadIdx.x != 0) return;
  unsigned n = 0;
  while (ld_acquire_gpu(done) < target) ++n;
  sm_of_block[blockIdx.x] = smid();
  polls[blockIdx.x] = n;
}

// The "GEMM" beside it: y[i] = x[i] * x[i] + 1 over the grid; each block's thread 0 then records its SM
// and bumps *done with a release reduction.
extern "C" __global__ void compute_square(const float* __restrict__ x, float* __restrict__ y, int n,
                                          unsigned* done, unsigned* sm_of_block) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) y[i] = x[i] * x[i] + 1.0f;
  __syncthreads();
  if (threadIdx.x == 0) {
    sm_of_block[blockIdx.x] = smid();
    red_release_gpu_add(done, 1u);
  }
}
