// Warp-specialized producer/consumer pipeline with setmaxnreg register reallocation, mbarrier
// full/empty rings, elect.sync, cp.async.bulk and griddepcontrol. archs: sm_90a sm_100a
// Launch: blockDim.x = 384 (warpgroup 0 = producer, warpgroups 1-2 = consumers), grid = any, n a multiple
// of 2048 (chunks of 512 floats; 4 stages). Each consumer warpgroup takes alternate chunks.
// Reference: out[i] = in[i] * in[i] + 1.

#define STAGES 4
#define CHUNK 512

__device__ __forceinline__ unsigned smem_addr(const void* p) { return (unsigned)__cvta_generic_to_shared(p); }
__device__ __forceinline__ void mbar_wait(unsigned bar, unsigned parity) {
    asm volatile("{\n .reg .pred p;\nLAB_WAIT_%=:\n mbarrier.try_wait.parity.shared::cta.b64 p, [%0], %1;\n"
                 " @!p bra LAB_WAIT_%=;\n}\n" :: "r"(bar), "r"(parity) : "memory");
}

extern "C" __global__ void __launch_bounds__(384, 1) warp_specialized_pipeline(const float* in, float* out, int n) {
    __shared__ __align__(128) float buf[STAGES][CHUNK];
    __shared__ __align__(8) unsigned long long full[STAGES], empty[STAGES];
    int wg = threadIdx.x / 128;
    int nchunks = n / CHUNK;
    if (threadIdx.x == 0) {
        for (int s = 0; s < STAGES; ++s) {
            asm volatile("mbarrier.init.shared::cta.b64 [%0], 1;" :: "r"(smem_addr(&full[s])) : "memory");
            asm volatile("mbarrier.init.shared::cta.b64 [%0], 128;" :: "r"(smem_addr(&empty[s])) : "memory");
        }
        asm volatile("fence.mbarrier_init.release.cluster;" ::: "memory");
    }
    __syncthreads();
    asm volatile("griddepcontrol.wait;" ::: "memory");   // no-op unless launched with programmatic dependencies
    if (wg == 0) {
        asm volatile("setmaxnreg.dec.sync.aligned.u32 40;");
        if (threadIdx.x < 32) {
            unsigned is_leader;
            asm volatile("{\n .reg .pred p;\n elect.sync _|p, 0xffffffff;\n selp.u32 %0, 1, 0, p;\n}\n" : "=r"(is_leader));
            int k = 0;
            for (int c = blockIdx.x; c < nchunks; c += gridDim.x, ++k) {
                int s = k % STAGES;
                if (k >= STAGES) mbar_wait(smem_addr(&empty[s]), ((k / STAGES) - 1) & 1);
                if (is_leader) {
                    asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;"
                                 :: "r"(smem_addr(&full[s])), "r"(CHUNK * 4) : "memory");
                    asm volatile("cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1], %2, [%3];"
                                 :: "r"(smem_addr(buf[s])), "l"(in + (size_t)c * CHUNK), "r"(CHUNK * 4),
                                    "r"(smem_addr(&full[s])) : "memory");
                }
                __syncwarp();
            }
        }
    } else {
        asm volatile("setmaxnreg.inc.sync.aligned.u32 232;");
        int ct = threadIdx.x - 128 * wg;    // thread index within the consumer warpgroup
        int k = 0;
        for (int c = blockIdx.x; c < nchunks; c += gridDim.x, ++k) {
            int s = k % STAGES;
            bool mine = (k & 1) == (wg - 1);
            if (mine) {
                mbar_wait(smem_addr(&full[s]), (k / STAGES) & 1);
                for (int i = ct; i < CHUNK; i += 128) {
                    float v = buf[s][i];
                    out[(size_t)c * CHUNK + i] = fmaf(v, v, 1.0f);
                }
                asm volatile("mbarrier.arrive.release.cta.shared::cta.b64 _, [%0];" :: "r"(smem_addr(&empty[s])) : "memory");
            }
        }
    }
    asm volatile("griddepcontrol.launch_dependents;" ::: "memory");
}
