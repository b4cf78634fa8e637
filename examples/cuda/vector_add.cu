// The CUDA C++ equivalent of examples/vector_add.py (for the instruction-count comparison).
extern "C" __global__ void vadd(const float* a, const float* b, float* c, unsigned n) {
    unsigned i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) c[i] = a[i] + b[i];
}
