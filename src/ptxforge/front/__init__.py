"""Front doors: CUDA C++ through NVRTC (`compile_cuda`); Triton kernels live in `ptxforge.triton`."""

from ptxforge.front.cuda import CudaCompileError, CudaKernel, CudaModule, compile_cuda, compile_cuda_file

__all__ = ["CudaCompileError", "CudaKernel", "CudaModule", "compile_cuda", "compile_cuda_file"]
