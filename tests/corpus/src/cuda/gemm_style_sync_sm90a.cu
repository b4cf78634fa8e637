// Hopper synchronization as FP8 GEMM kernels (DeepGEMM style) write it in inline asm: mbarrier try_wait
// loops, elect.sync leaders, mbarrier.arrive.expect_tx + cp.async.bulk loads, fence.proxy.async before a
// bulk store from shared memory, named barriers among consumer warps, and a full/empty ring. The kernel
// body is a template over the wait helper: one instantiation waits with an asm block that declares a fixed
// label inside `{ }` (expanded at every call site, as DeepGEMM/DeepEP/CUTLASS do), the other with a C++
// loop around a label-free try_wait. archs: sm_90a.
// Launch (both kernels): grid any, block 96 (warp 0 = producer, warps 1-2 = consumers); x is [n] f32 in
// tiles of 256 (n a multiple of 256), scale is [n / 256] f32. Reference: out[i] = x[i] * scale[i / 256] + 1.

#define TILE 256
#define STAGES 2

__device__ __forceinline__ unsigned smem_u32(const void* p) { return (unsigned)__cvta_generic_to_shared(p); }

struct LabeledWait {  // the label is declared in a `{ }` block of its own at each use
    __device__ __forceinline__ static void wait(unsigned bar, unsigned phase) {
        asm volatile(
            "{\n"
            ".reg .pred P1;\n"
            "LAB_WAIT:\n"
            "mbarrier.try_wait.parity.shared::cta.b64 P1, [%0], %1;\n"
            "@P1 bra DONE;\n"
            "bra     LAB_WAIT;\n"
            "DONE:\n"
            "}\n" ::"r"(bar),
            "r"(phase)
            : "memory");
    }
};

struct LoopWait {  // the same wait written as a C++ loop: no labels in the asm
    __device__ __forceinline__ static void wait(unsigned bar, unsigned phase) {
        unsigned ok = 0;
        do {
            asm volatile(
                "{\n .reg .pred p;\n mbarrier.try_wait.parity.shared::cta.b64 p, [%1], %2;\n selp.u32 %0, 1, 0, p;\n}"
                : "=r"(ok)
                : "r"(bar), "r"(phase)
                : "memory");
        } while (!ok);
    }
};

__device__ __forceinline__ bool elect_one() {
    unsigned pred;
    asm volatile("{\n .reg .pred p;\n elect.sync _|p, 0xffffffff;\n selp.u32 %0, 1, 0, p;\n}" : "=r"(pred));
    return pred != 0;
}

template <class Wait>
__device__ __forceinline__ void scaled_tiles(const float* x, const float* scale, float* out, int n) {
    __shared__ __align__(128) float in_buf[STAGES][TILE];
    __shared__ __align__(128) float out_buf[STAGES][TILE];
    __shared__ __align__(8) unsigned long long full[STAGES], empty[STAGES];
    int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
    int ntiles = n / TILE;
    if (threadIdx.x == 0) {
        for (int s = 0; s < STAGES; ++s) {
            asm volatile("mbarrier.init.shared::cta.b64 [%0], 1;" ::"r"(smem_u32(&full[s])) : "memory");
            asm volatile("mbarrier.init.shared::cta.b64 [%0], 2;" ::"r"(smem_u32(&empty[s])) : "memory");
        }
        asm volatile("fence.mbarrier_init.release.cluster;" ::: "memory");
    }
    __syncthreads();
    if (warp == 0) {  // producer: one elected lane issues the bulk copies
        bool leader = elect_one();
        int k = 0;
        for (int t = blockIdx.x; t < ntiles; t += gridDim.x, ++k) {
            int s = k % STAGES;
            if (k >= STAGES) Wait::wait(smem_u32(&empty[s]), ((k / STAGES) - 1) & 1);
            if (leader) {
                asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;"
                             ::"r"(smem_u32(&full[s])), "r"(TILE * 4) : "memory");
                asm volatile(
                    "cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1], %2, [%3];"
                    ::"r"(smem_u32(in_buf[s])), "l"(x + (size_t)t * TILE), "r"(TILE * 4), "r"(smem_u32(&full[s]))
                    : "memory");
            }
            __syncwarp();
        }
    } else {  // consumers: warps 1 and 2 each take half of every tile
        int c = warp - 1;
        int k = 0;
        for (int t = blockIdx.x; t < ntiles; t += gridDim.x, ++k) {
            int s = k % STAGES;
            Wait::wait(smem_u32(&full[s]), (k / STAGES) & 1);
            // the previous bulk store from out_buf[s] must have finished reading before it is overwritten
            if (c == 0 && lane == 0) asm volatile("cp.async.bulk.wait_group.read %0;" ::"n"(STAGES - 1) : "memory");
            asm volatile("bar.sync 1, 64;" ::: "memory");
            float sc = scale[t];
            for (int j = c * 128 + lane; j < (c + 1) * 128; j += 32) out_buf[s][j] = in_buf[s][j] * sc + 1.0f;
            __syncwarp();
            if (lane == 0) asm volatile("mbarrier.arrive.release.cta.shared::cta.b64 _, [%0];"
                                        ::"r"(smem_u32(&empty[s])) : "memory");
            // generic-proxy writes to out_buf become visible to the async proxy before the bulk store
            asm volatile("fence.proxy.async.shared::cta;" ::: "memory");
            asm volatile("bar.sync 1, 64;" ::: "memory");
            if (c == 0 && lane == 0) {  // the thread that waits on its bulk groups above
                asm volatile("cp.async.bulk.global.shared::cta.bulk_group [%0], [%1], %2;"
                             ::"l"(out + (size_t)t * TILE), "r"(smem_u32(out_buf[s])), "r"(TILE * 4) : "memory");
                asm volatile("cp.async.bulk.commit_group;" ::: "memory");
            }
        }
        if (c == 0 && lane == 0) asm volatile("cp.async.bulk.wait_group 0;" ::: "memory");
    }
}

extern "C" __global__ void __launch_bounds__(96) gemm_sync_labeled_wait(const float* x, const float* scale,
                                                                        float* out, int n) {
    scaled_tiles<LabeledWait>(x, scale, out, n);
}

extern "C" __global__ void __launch_bounds__(96) gemm_sync_loop_wait(const float* x, const float* scale,
                                                                     float* out, int n) {
    scaled_tiles<LoopWait>(x, scale, out, n);
}
