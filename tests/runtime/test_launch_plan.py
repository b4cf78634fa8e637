"""Repeat launches (runtime/launch_plan.py): a launch with the signature of an earlier one skips the checks the
signature decided, and still makes every check its values decide, with the full path's messages."""

import numpy as np
import pytest
from test_launch_api import PTX  # the same scale kernel

import ptxforge as pf
from ptxforge.emu.errors import LaunchError
from ptxforge.environment import EnvironmentVariableError
from ptxforge.ptx.errors import PTXValidationError
from ptxforge.runtime import to_device

TIERS = [{"tier": "interp"}, {"tier": "native", "threads": 1, "level": "quick"}]


@pytest.fixture
def k():
    return pf.parse(PTX, filename="scale.ptx").kernel("scale")


def buffers(n=300):
    x = np.arange(n, dtype=np.float32)
    return x, to_device(x, device="emu"), to_device(np.zeros(n, np.float32), device="emu")


@pytest.mark.parametrize("opts", TIERS)
def test_a_repeat_launch_gives_what_the_first_gave(k, opts):
    x, xb, yb = buffers()
    results = []
    for s in (2.0, 3.0, 2.0):  # the second and third launches repeat the first's signature
        r = k.launch(grid=(2,), block=(256,), args=[xb, yb, np.float32(s), np.uint32(300)], options=opts)
        np.testing.assert_array_equal(yb.to_host(), np.float32(s) * x)
        results.append(r)
    assert len(k._plans) == 1
    first, _, third = results
    assert (first.thread_instructions, first.tier, first.level, first.grid, first.block) == \
           (third.thread_instructions, third.tier, third.level, third.grid, third.block)
    np.testing.assert_array_equal(first.per_sm, third.per_sm)


def test_a_repeat_launch_checks_its_scalars(k):
    _, xb, yb = buffers()
    k.launch(grid=(2,), block=(256,), args=[xb, yb, 2.0, 300])
    with pytest.raises(LaunchError, match="does not fit .u32"):
        k.launch(grid=(2,), block=(256,), args=[xb, yb, 2.0, -1])
    with pytest.raises(LaunchError, match="expected an integer"):
        k.launch(grid=(2,), block=(256,), args=[xb, yb, 2.0, 2.5])
    k.launch(grid=(2,), block=(256,), args=[xb, yb, np.float32(2.0), np.uint32(300)])
    with pytest.raises(LaunchError, match="value 4294967296 does not fit .u32"):
        k.launch(grid=(2,), block=(256,), args=[xb, yb, np.float32(2.0), 1 << 32])


def test_a_repeat_launch_refuses_a_freed_buffer(k):
    _, xb, yb = buffers()
    k.launch(grid=(2,), block=(256,), args=[xb, yb, 2.0, 300])
    xb.free()
    with pytest.raises(ValueError, match="freed"):
        k.launch(grid=(2,), block=(256,), args=[xb, yb, 2.0, 300])


def test_a_new_buffer_is_a_new_signature(k):
    x, xb, yb = buffers()
    k.launch(grid=(2,), block=(256,), args=[xb, yb, 2.0, 300])
    for _ in range(3):  # (fresh buffers, maybe at a freed one's id: never taken for it)
        x2 = np.arange(300, dtype=np.float32)[::-1].copy()
        xb2 = to_device(x2, device="emu")
        k.launch(grid=(2,), block=(256,), args=[xb2, yb, 2.0, 300])
        np.testing.assert_array_equal(yb.to_host(), 2 * x2)
        xb2.free()


def test_a_repeat_launch_reads_the_environment(k, monkeypatch):
    _, xb, yb = buffers()
    k.launch(grid=(2,), block=(256,), args=[xb, yb, 2.0, 300])
    monkeypatch.setenv("PTXFORGE_DEVICE", "bogus")
    with pytest.raises(EnvironmentVariableError, match="PTXFORGE_DEVICE='bogus'"):
        k.launch(grid=(2,), block=(256,), args=[xb, yb, 2.0, 300])
    monkeypatch.delenv("PTXFORGE_DEVICE")
    monkeypatch.setenv("PTXFORGE_EMU_REFERENCE", "1")
    assert k.launch(grid=(2,), block=(256,), args=[xb, yb, 2.0, 300]).mode == "reference"


def test_a_repeat_launch_of_invalid_ptx_is_refused_once_validation_is_back(monkeypatch):
    v4 = """.version 8.0
.target sm_90a
.address_size 64
.visible .entry k(.param .u64 out)
{
    .reg .b64 %rd<6>;
    ld.param.u64 %rd1, [out];
    mov.u64 %rd2, 1; mov.u64 %rd3, 2; mov.u64 %rd4, 3; mov.u64 %rd5, 4;
    st.global.v4.u64 [%rd1], {%rd2, %rd3, %rd4, %rd5};
    ret;
}
"""  # (st.v4.u64 needs sm_100: the validator refuses it)
    k = pf.parse(v4, filename="v4.ptx").kernel("k")
    out = to_device(np.zeros(4, np.uint64), device="emu")
    monkeypatch.setenv("PTXFORGE_VALIDATE", "0")
    for _ in range(2):
        k.launch(grid=(1,), block=(1,), args=[out])
    assert list(out.to_host()) == [1, 2, 3, 4]
    monkeypatch.setenv("PTXFORGE_VALIDATE", "1")
    with pytest.raises(PTXValidationError):
        k.launch(grid=(1,), block=(1,), args=[out])


def test_launches_the_plan_does_not_describe_take_the_full_path(k):
    x, xb, yb = buffers()
    y = np.zeros(300, np.float32)
    for _ in range(2):  # host arrays are copied in and out at every launch
        k.launch(grid=(2,), block=(256,), args=[x, y, 2.0, 300])
        np.testing.assert_array_equal(y, 2 * x)
    k.launch(grid=[2], block=[256], args=[xb, yb, 2.0, 300])  # (lists: no signature)
    assert k._plans == {}


def test_a_dsl_kernels_repeat_launches_keep_its_pointee_types():
    from ptxforge.dsl import f32, kernel, ld, ptr, st, tid

    @kernel(arch="sm_80")
    def double(x: ptr(f32), y: ptr(f32)):
        i = tid.x
        st(y[i], ld(x[i]) * 2.0)
    x = np.arange(32, dtype=np.float32)
    xb, yb = to_device(x, device="emu"), to_device(np.zeros(32, np.float32), device="emu")
    for _ in range(2):
        double.launch(grid=(1,), block=(32,), args=[xb, yb])
    np.testing.assert_array_equal(yb.to_host(), 2 * x)
    assert double.runtime_kernel() is double.runtime_kernel() and len(double.runtime_kernel()._plans) == 1
    wide = to_device(np.arange(32, dtype=np.float64), device="emu")
    with pytest.raises(LaunchError, match="takes float32 elements"):
        double.launch(grid=(1,), block=(32,), args=[wide, yb])
