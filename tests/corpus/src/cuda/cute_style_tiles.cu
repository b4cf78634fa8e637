// CuTe/CUTLASS-style C++: compile-time shapes and layouts as templates, a tile copy generic over the layout,
// an XOR-swizzled shared-memory layout with 128-bit copies, and a ClusterBarrier-like struct whose wait() is
// inline asm with a label inside `{ }` (used twice, so the same label is declared in two blocks).
// archs: sm_80 sm_90a. Launch and reference: see each kernel.

template <int V> struct Int { static constexpr int value = V; };

// A 2-D layout (shape M x N, strides SM, SN): element (i, j) lives at i * SM + j * SN.
template <int M, int N, int SM, int SN> struct Layout {
    static constexpr int rows = M, cols = N, size = M * N;
    __device__ static constexpr int offset(int i, int j) { return i * SM + j * SN; }
};
template <int M, int N> using RowMajor = Layout<M, N, N, 1>;
template <int M, int N> using ColMajor = Layout<M, N, 1, M>;

// Swizzle<B, M, S> as CuTe defines it: XOR bits [M+S, M+S+B) of the offset into bits [M, M+B).
template <int B, int M, int S> struct Swizzle {
    __device__ static constexpr int apply(int o) {
        return o ^ ((o >> S) & (((1 << B) - 1) << M));
    }
};

template <class T, class L> struct Tensor {
    T* ptr;
    __device__ T& operator()(int i, int j) const { return ptr[L::offset(i, j)]; }
};

// Each of NT threads copies elements tid, tid + NT, ... of a tile, from one layout to another.
template <int NT, class TS, class TD, class LS, class LD>
__device__ __forceinline__ void copy_tile(Tensor<TS, LS> src, Tensor<TD, LD> dst, int tid) {
    static_assert(LS::size == LD::size, "tiles differ in size");
#pragma unroll
    for (int e = tid; e < LS::size; e += NT) {
        int i = e / LS::cols, j = e % LS::cols;
        dst(i, j) = src(i, j);
    }
}

// Transpose a [rows, cols] f32 matrix (both multiples of 32) tile by tile: global row-major -> shared column-
// major (padded by one) -> global row-major of the transpose. Launch: grid (cols/32, rows/32), block 256.
// Reference: out = in.T.
template <int TM, int TN, int NT>
__device__ void transpose_tiles(const float* in, float* out, int rows, int cols) {
    __shared__ float smem[TN * (TM + 1)];
    int r0 = blockIdx.y * TM, c0 = blockIdx.x * TN;
    for (int e = threadIdx.x; e < TM * TN; e += NT) {
        int i = e / TN, j = e % TN;
        smem[j * (TM + 1) + i] = in[(size_t)(r0 + i) * cols + c0 + j];
    }
    __syncthreads();
    for (int e = threadIdx.x; e < TM * TN; e += NT) {
        int j = e / TM, i = e % TM;
        out[(size_t)(c0 + j) * rows + r0 + i] = smem[j * (TM + 1) + i];
    }
}

extern "C" __global__ void __launch_bounds__(256) cute_transpose_32x32(const float* in, float* out, int rows,
                                                                       int cols) {
    transpose_tiles<32, 32, 256>(in, out, rows, cols);
}

// One 16x16 tile per block through two compile-time layouts: in (row-major) -> shared (column-major) ->
// out (row-major), so out == in; a second pass writes the tile's transpose to out_t.
// Launch: grid (ntiles), block 64; in, out, out_t are [ntiles, 16, 16] f32.
extern "C" __global__ void cute_layout_copy_16x16(const float* in, float* out, float* out_t) {
    __shared__ float s[256];
    const float* g = in + blockIdx.x * 256;
    Tensor<const float, RowMajor<16, 16>> src{g};
    Tensor<float, ColMajor<16, 16>> sm{s};
    copy_tile<64>(src, sm, threadIdx.x);
    __syncthreads();
    Tensor<float, RowMajor<16, 16>> dst{out + blockIdx.x * 256};
    copy_tile<64>(Tensor<const float, ColMajor<16, 16>>{s}, dst, threadIdx.x);
    // the same shared bytes read as a row-major tile are the transpose
    Tensor<float, RowMajor<16, 16>> dt{out_t + blockIdx.x * 256};
    copy_tile<64>(Tensor<const float, RowMajor<16, 16>>{s}, dt, threadIdx.x);
}

// 128-bit copies of a 64 x 64 bf16-sized (u16) tile through a Swizzle<3, 3, 3> shared layout (16-byte chunks
// XOR-permuted by row, as CUTLASS's SM80 GEMM smem layouts are), read back column-chunk-wise.
// Launch: grid (ntiles), block 128; in and out are [ntiles, 64, 64] u16. Reference: out == in.
extern "C" __global__ void cute_swizzled_copy_u16(const unsigned short* in, unsigned short* out) {
    __shared__ __align__(16) unsigned short s[64 * 64];
    const uint4* g = reinterpret_cast<const uint4*>(in + blockIdx.x * 4096);
    uint4* o = reinterpret_cast<uint4*>(out + blockIdx.x * 4096);
    using Sw = Swizzle<3, 3, 3>;
    // chunk c (8 u16) of row r: logical u16 offset r * 64 + c * 8, physical offset swizzled
    for (int k = threadIdx.x; k < 512; k += 128) {
        int r = k >> 3, c = k & 7;
        int phys = Sw::apply(r * 64 + c * 8);
        *reinterpret_cast<uint4*>(&s[phys]) = g[k];
    }
    __syncthreads();
    for (int k = threadIdx.x; k < 512; k += 128) {
        int c = k >> 6, r = k & 63;  // column-chunk major: consecutive threads take consecutive rows
        int phys = Sw::apply(r * 64 + c * 8);
        o[r * 8 + c] = *reinterpret_cast<const uint4*>(&s[phys]);
    }
}

// A ClusterBarrier-like wrapper over an mbarrier. wait() is one asm block that declares its own label, as
// CUTLASS's does: every inlined call repeats `LAB_WAIT` inside its own `{ }`.
struct BlockBarrier {
    unsigned long long bar;
    __device__ void init(int count) {
        unsigned a = (unsigned)__cvta_generic_to_shared(&bar);
        asm volatile("mbarrier.init.shared.b64 [%0], %1;" ::"r"(a), "r"(count) : "memory");
    }
    __device__ void arrive() {
        unsigned a = (unsigned)__cvta_generic_to_shared(&bar);
        asm volatile("{\n\t.reg .b64 st;\n\tmbarrier.arrive.shared.b64 st, [%0];\n\t}" ::"r"(a) : "memory");
    }
    __device__ void wait(unsigned phase) {
        unsigned a = (unsigned)__cvta_generic_to_shared(&bar);
        asm volatile(
            "{\n\t"
            ".reg .pred P1;\n\t"
            "LAB_WAIT:\n\t"
            "mbarrier.test_wait.parity.shared.b64 P1, [%0], %1;\n\t"
            "@!P1 bra LAB_WAIT;\n\t"
            "}" ::"r"(a),
            "r"(phase)
            : "memory");
    }
};

// Two phases of one barrier: every thread writes, arrives, waits (phase 0); reads its neighbour, writes
// again, arrives, waits (phase 1). Launch: block 128, any grid; in/out are [grid * 128] i32.
// Reference: with t = in + 1 per 128-slice, out[i] = b[(i + 1) % 128] + t[(i + 2) % 128] = 2 * t[(i + 2) % 128].
extern "C" __global__ void cute_cluster_barrier_two_waits(const int* in, int* out) {
    __shared__ BlockBarrier bb;
    __shared__ int a[128], b[128];
    int t = threadIdx.x;
    if (t == 0) bb.init(blockDim.x);
    __syncthreads();
    a[t] = in[blockIdx.x * 128 + t] + 1;
    bb.arrive();
    bb.wait(0);
    b[t] = a[(t + 1) % 128];
    bb.arrive();
    bb.wait(1);
    out[blockIdx.x * 128 + t] = b[(t + 1) % 128] + a[(t + 2) % 128];
}
