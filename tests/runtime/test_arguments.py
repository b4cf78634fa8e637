"""Pointer arguments: numpy, torch, DLPack and array-interface objects, addresses; DSL pointee types."""

import ml_dtypes
import numpy as np
import pytest

import ptxforge as pf
from ptxforge.dsl import bf16, f32, if_, ld, st, u32
from ptxforge.dsl import ptr as P
from ptxforge.emu.errors import LaunchError
from ptxforge.runtime import to_device
from ptxforge.runtime.arguments import dlpack_address, is_live_address
from ptxforge.runtime.buffers import resolve_device

torch = pytest.importorskip("torch")


@pf.kernel(arch="sm_90a")
def scale(x: P(f32), y: P(f32), n: u32):
    from ptxforge.dsl import ctaid, ntid, tid

    i = ctaid.x * ntid.x + tid.x
    with if_(i < n):
        st(y[i], ld(x[i]) * 2.0)


@pf.kernel(arch="sm_90a")
def copy_bf16(x: P(bf16), y: P(bf16), n: u32):
    from ptxforge.dsl import tid

    with if_(tid.x < n):
        st(y[tid.x], ld(x[tid.x]))


@pf.kernel(arch="sm_90a")
def raw_copy(x: P(u32, typed=False), y: P(u32, typed=False), n: u32):
    from ptxforge.dsl import tid

    with if_(tid.x < n):
        st(y[tid.x], ld(x[tid.x]))


def _launch(k, *args, n=64):
    return k.launch(grid=(1,), block=(64,), args=[*args, np.uint32(n)], device="emu")


def test_float64_array_for_ptr_f32_is_refused_naming_both_dtypes():
    """The silent wrong answer: float64 data for a ptr(f32) parameter used to run and return garbage."""
    x = np.arange(64, dtype=np.float64)
    y = np.zeros(64, np.float32)
    with pytest.raises(LaunchError, match=r"scale argument 0 \(x, .u64\): x is ptr\(f32\), which takes float32 "
                                          r"elements; got a numpy array of float64"):
        _launch(scale, x, y)
    with pytest.raises(LaunchError, match=r"takes float32 elements; got a torch tensor of float64"):
        _launch(scale, torch.zeros(64, dtype=torch.float64), y)
    with pytest.raises(LaunchError, match=r"got a DeviceBuffer of int32"):
        _launch(scale, to_device(np.zeros(64, np.int32), device="emu"), y)


def test_untyped_pointer_takes_any_array():
    x = np.arange(64, dtype=np.float32)
    y = np.zeros(64, np.float32)
    _launch(raw_copy, x, y)
    np.testing.assert_array_equal(y, x)


def test_torch_cpu_tensors_in_and_out_without_copies_in_python():
    x = torch.arange(64, dtype=torch.float32)
    y = torch.zeros(64, dtype=torch.float32)
    _launch(scale, x, y)
    assert torch.equal(y, 2 * x)
    # a strided view is written back in place
    big = torch.zeros(128, dtype=torch.float32)
    _launch(scale, x, big[::2])
    assert torch.equal(big[::2], 2 * x) and torch.count_nonzero(big[1::2]) == 0


def test_bf16_travels_as_itself():
    x = torch.randn(64).to(torch.bfloat16)
    y = torch.zeros(64, dtype=torch.bfloat16)
    _launch(copy_bf16, x, y)
    assert torch.equal(x, y)
    xn = np.random.default_rng(0).standard_normal(64).astype(ml_dtypes.bfloat16)
    yn = np.zeros(64, ml_dtypes.bfloat16)
    _launch(copy_bf16, xn, yn)
    np.testing.assert_array_equal(xn.view(np.uint16), yn.view(np.uint16))
    with pytest.raises(LaunchError, match="takes bfloat16 elements; got a torch tensor of float16"):
        _launch(copy_bf16, x.to(torch.float16), y)


class _Interface:
    """An object exposing only __array_interface__ (like many array libraries)."""

    def __init__(self, a):
        self._a = a
        self.__array_interface__ = a.__array_interface__


class _DLPackOnly:
    def __init__(self, a):
        self._a = a

    def __dlpack__(self, **kw):
        return self._a.__dlpack__(**kw)

    def __dlpack_device__(self):
        return self._a.__dlpack_device__()


def test_array_interface_and_dlpack_objects():
    x = np.arange(64, dtype=np.float32)
    y = np.zeros(64, np.float32)
    _launch(scale, _DLPackOnly(x), _Interface(y))
    np.testing.assert_array_equal(y, 2 * x)


def test_dlpack_capsule_address_is_the_tensors():
    t = torch.arange(10, dtype=torch.float32)[2:]
    address, name = dlpack_address(t)
    assert address == t.data_ptr() and name == "float32"
    assert dlpack_address(torch.zeros(3, dtype=torch.bfloat16))[1] == "bfloat16"


def test_integer_addresses_only_inside_live_allocations():
    x = to_device(np.arange(64, dtype=np.float32), device="emu")
    y = np.zeros(64, np.float32)
    _launch(scale, x.address, y)
    np.testing.assert_array_equal(y, 2 * np.arange(64, dtype=np.float32))
    assert is_live_address(resolve_device("emu"), x.address + 255)
    with pytest.raises(LaunchError, match=r"scale argument x: 0x400 is not inside a live allocation of the "
                                          r"emulator"):
        _launch(scale, 1024, y)
    x.free()
    with pytest.raises(LaunchError, match="is not inside a live allocation"):
        _launch(scale, x.allocation.base, y)


def test_anything_else_names_the_parameter():
    y = np.zeros(64, np.float32)
    with pytest.raises(LaunchError, match=r"scale argument 0 \(x, .u64\): x is a pointer; expected an array, "
                                          r"tensor, DeviceBuffer, None or a device address, got str"):
        _launch(scale, "x", y)
    with pytest.raises(LaunchError, match=r"x is a pointer; .* got float"):
        _launch(scale, 1.5, y)


NVCC_LIKE = """.version 8.0
.target sm_80
.address_size 64
.visible .entry fill(.param .u64 out, .param .u64 count)
{
    .reg .b32 %r<3>;
    .reg .b64 %rd<6>;
    ld.param.u64 %rd1, [out];
    ld.param.u64 %rd2, [count];
    cvta.to.global.u64 %rd3, %rd1;
    mov.u32 %r1, %tid.x;
    mul.wide.u32 %rd4, %r1, 4;
    add.s64 %rd5, %rd3, %rd4;
    st.global.u32 [%rd5], %r1;
    ret;
}
"""


def test_raw_ptx_pointer_parameters_are_found_from_their_use():
    """A .u64 parameter converted by cvta (nvcc's pattern) is a pointer: a stray integer is refused before the
    launch, where it used to fault inside the kernel; a .u64 count stays an integer."""
    k = pf.parse(NVCC_LIKE, filename="fill.ptx").kernel("fill")
    from ptxforge.runtime.params import pointer_params

    assert pointer_params(k.function) == frozenset({"out"})
    out = np.zeros(32, np.uint32)
    k.launch(grid=(1,), block=(32,), args=[out, 32], device="emu")
    np.testing.assert_array_equal(out, np.arange(32))
    with pytest.raises(LaunchError, match="fill argument out: 0x20 is not inside a live allocation"):
        k.launch(grid=(1,), block=(32,), args=[32, 32], device="emu")


def test_triton_pointer_params_are_pointers():
    from pathlib import Path

    from ptxforge.runtime.params import pointer_params

    m = pf.parse_file(str(Path(__file__).parents[1] / "corpus/ptx/triton/vector_add_f32.sm_80.ptx"))
    assert "add_kernel_param_0" in pointer_params(m.function("add_kernel"))
    assert "add_kernel_param_3" not in pointer_params(m.function("add_kernel"))
