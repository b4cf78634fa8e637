"""set_constant: a module's .const/.global variables filled before a launch (cudaMemcpyToSymbol's job)."""

import numpy as np
import pytest

import ptxforge as pf
from ptxforge.emu.errors import LaunchError
from ptxforge.emu.launch import EmuDevice
from ptxforge.runtime.constants import constant_bytes, module_variable
from ptxforge.runtime.cuda_device import global_copy_arguments
from ptxforge.runtime.kernel import cuda_available

PTX = """.version 8.0
.target sm_90a
.address_size 64
.const .align 4 .f32 scale[4];
.const .align 8 .b8 table[16] = {1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16};
.global .align 4 .u32 bias;
.visible .entry k(.param .u64 p)
{
  .reg .b32 %r<4>;
  .reg .f32 %f<3>;
  .reg .b64 %rd<6>;
  ld.param.u64 %rd0, [p];
  cvta.to.global.u64 %rd0, %rd0;
  mov.u32 %r1, %tid.x;
  mul.wide.u32 %rd1, %r1, 4;
  mov.u64 %rd2, scale;
  add.u64 %rd3, %rd2, %rd1;
  ld.const.f32 %f1, [%rd3];
  ld.global.u32 %r2, [bias];
  cvt.rn.f32.u32 %f2, %r2;
  add.f32 %f1, %f1, %f2;
  mov.u64 %rd2, table;
  add.u64 %rd3, %rd2, %rd1;
  ld.const.u32 %r3, [%rd3];
  add.u64 %rd4, %rd0, %rd1;
  st.global.f32 [%rd4], %f1;
  st.global.u32 [%rd4+16], %r3;
  ret;
}
"""


def launch(m, dev):
    out = np.zeros(8, np.float32)
    m.kernel("k").launch(grid=(1,), block=(4,), args=[out], device="emu", emu_device_=dev)
    return out[:4], out[4:].view(np.uint32)


def test_set_constant_fills_const_and_global_variables_before_a_launch():
    m, dev = pf.parse(PTX, "c.ptx"), EmuDevice()
    f, t = launch(m, dev)
    assert f.tolist() == [0, 0, 0, 0] and t.tolist() == [0x04030201, 0x08070605, 0x0C0B0A09, 0x100F0E0D]
    m.set_constant("scale", np.array([0.5, 1.5, 2.5, 3.5], np.float32), device=dev)
    m.set_constant("bias", np.uint32(10), device=dev)
    m.set_constant("table", np.array([7, 9], np.uint32), device=dev, offset=8)  # part of it, at an offset
    f, t = launch(m, dev)
    assert f.tolist() == [10.5, 11.5, 12.5, 13.5]
    assert t.tolist() == [0x04030201, 0x08070605, 7, 9]


def test_set_constant_errors_name_the_variable():
    m = pf.parse(PTX, "c.ptx")
    with pytest.raises(KeyError, match="no .const or .global variable 'nope' in c.ptx; it has: scale, table, bias"):
        m.set_constant("nope", np.zeros(1), device=EmuDevice())
    with pytest.raises(LaunchError, match=r"scale: 32 bytes at offset 0 do not fit its 16 bytes \(.const .f32\[4\]\)"):
        m.set_constant("scale", np.zeros(8, np.float32), device=EmuDevice())
    with pytest.raises(LaunchError, match="offset must be a non-negative integer"):
        constant_bytes(module_variable(m, "table"), np.zeros(1, np.uint8), -1)


@pytest.mark.skipif(cuda_available(), reason="checks the argument types without a GPU")
def test_cuda_path_arguments_are_accepted_by_cuda_bindings():
    d = pytest.importorskip("cuda.bindings.driver")
    raw = constant_bytes(module_variable(pf.parse(PTX, "c.ptx"), "scale"), np.ones(2, np.float32))
    args = global_copy_arguments(d, 1 << 20, 8, raw)
    assert int(args[0]) == (1 << 20) + 8 and args[2] == 8
    for call, *a in [(d.cuModuleGetGlobal, d.CUmodule(), b"scale"), (d.cuMemcpyHtoD, *args)]:
        try:
            result = call(*a)
        except TypeError:
            raise
        except Exception as e:  # no libcuda.so.1 here: the types were accepted, the driver is missing
            assert "driver" in str(e).lower() or "cuda" in str(e).lower()
            continue
        assert isinstance(result, tuple)
