// An all-to-all over NVSHMEM's device API, declared as NVSHMEM's C prototypes (unmangled, no NVSHMEM headers):
// warp w of every PE puts row w of `send` into slot my_pe of `recv` on PE w with a put-with-signal (+1 on
// `sig`); thread 0 waits until `sig` >= n_pes; the block copies `recv` to `out`.
// Generated: nvcc -ptx -O3 -arch=sm_90 -rdc=true nvshmem_a2a.cu -o nvshmem_a2a.sm_90.O3.ptx (nvcc 13.0)
#include <cstddef>
#include <cstdint>

enum { NVSHMEM_CMP_GE = 5 };
enum { NVSHMEM_SIGNAL_ADD = 10 };
extern "C" __device__ int nvshmem_my_pe(void);
extern "C" __device__ int nvshmem_n_pes(void);
extern "C" __device__ void nvshmemx_putmem_signal_nbi_warp(void *dest, const void *source, size_t nelems,
                                                           uint64_t *sig_addr, uint64_t signal, int sig_op, int pe);
extern "C" __device__ uint64_t nvshmem_signal_wait_until(uint64_t *sig_addr, int cmp, uint64_t cmp_value);
extern "C" __device__ void nvshmem_quiet(void);

extern "C" __global__ void a2a(const uint32_t *send, uint32_t *recv, uint64_t *sig, uint32_t *out, int n) {
    int me = nvshmem_my_pe(), npes = nvshmem_n_pes();
    int warp = threadIdx.x / 32;
    if (warp < npes)
        nvshmemx_putmem_signal_nbi_warp(recv + me * n, send + warp * n, n * sizeof(uint32_t), sig, 1,
                                        NVSHMEM_SIGNAL_ADD, warp);
    if (threadIdx.x == 0)
        nvshmem_signal_wait_until(sig, NVSHMEM_CMP_GE, npes);
    __syncthreads();
    for (int i = threadIdx.x; i < npes * n; i += blockDim.x)
        out[i] = recv[i];
    if (threadIdx.x == 0)
        nvshmem_quiet();
}
