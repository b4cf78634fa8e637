"""Per-launch setup sized to the kernel: .param storage only for the functions a wave calls, static lane
arrays cached with the kernel's layout, the C allocator's thresholds fixed once."""

from __future__ import annotations

import numpy as np
import pytest

import ptxforge as pf
from ptxforge.emu import allocator
from ptxforge.emu.launch import EmuDevice, emulate

PTX = """.version 8.5
.target sm_90
.address_size 64
.func (.param .b32 r) inc(.param .b32 x)
{
.reg .b32 %r<3>;
ld.param.b32 %r1, [x];
add.s32 %r2, %r1, 1;
st.param.b32 [r], %r2;
ret;
}
.func unused(.param .align 4 .b8 big[4096])
{
.local .align 4 .b8 frame[65536];
ret;
}
.visible .entry k(.param .u64 out)
{
.reg .b32 %r<4>;
.reg .b64 %rd<4>;
ld.param.u64 %rd1, [out];
mov.u32 %r1, %tid.x;
{
.param .b32 a;
.param .b32 b;
st.param.b32 [a], %r1;
call.uni (b), inc, (a);
ld.param.b32 %r2, [b];
}
mul.wide.u32 %rd2, %r1, 4;
add.s64 %rd3, %rd1, %rd2;
st.global.u32 [%rd3], %r2;
ret;
}
"""


def _launch(mod, dev, out, grid=(2,), block=(64,)):
    m = emulate(mod, mod.function("k"), grid=grid, block=block, device=dev,
                params=np.uint64(out.base).tobytes(), run=False)
    m.run()
    return m


@pytest.fixture()
def setup():
    mod = pf.parse(PTX)
    dev = EmuDevice()
    out = dev.memory.alloc(4 * 128)
    return mod, dev, out


def test_param_storage_and_local_frames_only_for_functions_the_kernel_runs(setup):
    mod, dev, out = setup
    m = _launch(mod, dev, out)
    got = dev.memory.read(out)[: 4 * 128].view(np.uint32)
    np.testing.assert_array_equal(got[:64], np.arange(64, dtype=np.uint32) + 1)  # both blocks store there
    lay = m.layout
    assert lay.reachable == {"k", "inc"}
    fl = lay.functions
    assert all(m.st.pvars[i] is None for i in fl["unused"].pvars)  # its 4 KiB .param: never made
    assert all(m.st.pvars[i] is not None for i in [*fl["inc"].pvars, *fl["inc"].return_pvars, *fl["k"].pvars])
    assert m.st.mem.local_stride < 65536  # the unused function's frame is not reserved per lane


def test_static_lane_arrays_are_shared_by_launches_of_one_shape_and_read_only(setup):
    mod, dev, out = setup
    a, b = _launch(mod, dev, out), _launch(mod, dev, out)
    assert a._static_cache is b._static_cache
    assert not a.st.sregs["%tid.x"].flags.writeable and not a.slot.flags.writeable
    c = _launch(mod, dev, out, grid=(1,), block=(128,))  # another shape: its own arrays, same results
    assert c._static_cache is not a._static_cache
    got = dev.memory.read(out)[: 4 * 128].view(np.uint32)
    np.testing.assert_array_equal(got, np.arange(128, dtype=np.uint32) + 1)


def test_malloc_thresholds_are_set_once_on_glibc():
    import platform

    if platform.libc_ver()[0] != "glibc":
        assert allocator.tune_malloc() is False
    else:
        assert allocator.tune_malloc() is True  # set at import; a second call is a no-op that says so


def test_a_finished_launch_frees_its_lanes_without_the_cyclic_gc(setup):
    import gc
    import weakref

    mod, dev, out = setup
    gc.disable()
    try:
        m = _launch(mod, dev, out)
        st, mach = weakref.ref(m.st), weakref.ref(m)
        del m
        assert mach() is None and st() is None  # freed by reference counting, at once
    finally:
        gc.enable()
