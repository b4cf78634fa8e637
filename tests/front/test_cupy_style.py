"""CuPy's RawKernel/RawModule and cuda.core's Program/LaunchConfig/launch spellings over compile_cuda."""

import numpy as np
import pytest

import ptxforge as pf
from ptxforge.front import cupy_style as cp
from ptxforge.front import nvrtc
from ptxforge.toolchain import ToolNotFound

try:
    nvrtc.find_nvrtc()
    HAVE_NVRTC = True
except ToolNotFound:  # decided up front: no NVRTC library anywhere
    HAVE_NVRTC = False
pytestmark = pytest.mark.skipif(not HAVE_NVRTC, reason="no NVRTC library (pip install 'ptxforge[tools]')")

CODE = r'''
extern "C" __global__ void saxpy(float a, const float* x, float* y, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) y[i] = a * x[i] + y[i];
}
template <typename T> __global__ void fill(T* out, T v, int n) {
    extern __shared__ T stage[];
    stage[threadIdx.x] = v;
    __syncthreads();
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) out[i] = stage[blockDim.x - 1 - threadIdx.x];
}
'''


def test_raw_kernel_called_like_cupy():
    k = cp.RawKernel(CODE, "saxpy")
    x, y = np.arange(100, dtype=np.float32), np.ones(100, np.float32)
    k((4,), (32,), (np.float32(2), x, y, np.int32(100)), device="emu")
    np.testing.assert_array_equal(y, 2 * np.arange(100, dtype=np.float32) + 1)


def test_raw_module_templates_and_dynamic_shared_memory():
    mod = cp.RawModule(code=CODE, name_expressions=("fill<int>",))
    out = np.zeros(64, np.int32)
    mod.get_function("fill<int>")((2,), (32,), (out, np.int32(7), np.int32(64)), shared_mem=32 * 4, device="emu")
    assert (out == 7).all()
    with pytest.raises(pf.LaunchError, match=r"int\* in the C\+\+ signature, which takes int32 elements"):
        mod.get_function("fill<int>")((1,), (32,), (np.zeros(4), np.int32(7), np.int32(4)), shared_mem=128,
                                      device="emu")


def test_cuda_core_program_launch_config_and_launch():
    prog = cp.Program(CODE, "c++", cp.ProgramOptions(arch="sm_80"))
    kernel = prog.compile("ptx").get_kernel("saxpy")
    x, y = np.ones(40, np.float32), np.zeros(40, np.float32)
    cp.launch(None, cp.LaunchConfig(grid=(2,), block=(32,)), kernel, np.float32(3), x, y, np.int32(40),
              device="emu")
    assert (y == 3).all()
    with pytest.raises(TypeError, match="config is a tuple, expected a LaunchConfig"):
        cp.launch(None, (2,), kernel, x)
    with pytest.raises(ValueError, match="target 'cubin' is not supported"):
        prog.compile("cubin")
