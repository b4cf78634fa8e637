"""On a GPU: CUDA torch tensors pass by address (zero copy); launch checks refuse what the driver refuses."""

import numpy as np
import pytest

import ptxforge as pf
from ptxforge.dsl import f32, if_, ld, st, u32
from ptxforge.dsl import ptr as P
from ptxforge.emu.errors import LaunchError

torch = pytest.importorskip("torch")
pytestmark = [pytest.mark.gpu, pytest.mark.skipif(not torch.cuda.is_available(), reason="torch without CUDA")]


@pf.kernel(arch="auto")
def double(x: P(f32), y: P(f32), n: u32):
    from ptxforge.dsl import ctaid, ntid, tid

    i = ctaid.x * ntid.x + tid.x
    with if_(i < n):
        st(y[i], ld(x[i]) * 2.0)


def test_cuda_tensors_zero_copy_and_cpu_tensors_copied_back():
    x = torch.arange(256, dtype=torch.float32, device="cuda")
    y = torch.zeros(256, dtype=torch.float32, device="cuda")
    double.launch(grid=(1,), block=(256,), args=[x, y, np.uint32(256)], device="cuda")
    assert torch.equal(y.cpu(), 2 * x.cpu())
    yc = torch.zeros(256)
    double.launch(grid=(1,), block=(256,), args=[x, yc, np.uint32(256)], device="cuda")
    assert torch.equal(yc, 2 * x.cpu())
    with pytest.raises(LaunchError, match="float32 elements; got a torch tensor of float64"):
        double.launch(grid=(1,), block=(256,), args=[x.double(), y, np.uint32(256)], device="cuda")


def test_cuda_tensor_on_the_emulator_is_copied_there_and_back():
    x = torch.arange(64, dtype=torch.float32, device="cuda")
    y = torch.zeros(64, dtype=torch.float32, device="cuda")
    double.launch(grid=(1,), block=(64,), args=[x, y, np.uint32(64)], device="emu")
    assert torch.equal(y.cpu(), 2 * x.cpu())


def test_reqntid_refused_on_the_gpu_too():
    text = ".version 8.0\n.target sm_80\n.address_size 64\n.visible .entry k()\n.reqntid 128\n{\n    ret;\n}\n"
    k = pf.parse(text, filename="k.ptx").kernel("k")
    with pytest.raises(LaunchError, match="k.ptx:5: k declares .reqntid 128"):
        k.launch(grid=(1,), block=(64,), args=[], device="cuda")
