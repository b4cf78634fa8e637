"""A GPU keeps at most `max_modules` CUmodules loaded: the least recently used is unloaded (cuModuleUnload),
never one a launch has pinned, and a module launched again is loaded afresh."""

import numpy as np
import pytest

import ptxforge as pf
from ptxforge.runtime.constants import set_constant
from ptxforge.runtime.cuda_device import CudaDevice

pytestmark = pytest.mark.gpu

TABLE = """.version 8.0
.target sm_80
.address_size 64
.const .align 4 .b32 table[4] = {V, V, V, V};
.visible .entry k(.param .u64 out)
{
    .reg .b32 %r<2>;
    .reg .b64 %rd<3>;
    ld.param.u64 %rd1, [out];
    ld.const.u32 %r1, [table+8];
    st.global.u32 [%rd1], %r1;
    ret;
}
"""


def _module(i: int):
    return pf.parse(TABLE.replace("V", str(i)), filename=f"m{i}.ptx")


def test_a_gpu_keeps_at_most_max_modules_loaded():
    dev = CudaDevice(0, max_modules=2)
    mods = [_module(i) for i in range(4)]
    out = np.zeros(1, np.uint32)
    for i, m in enumerate(mods[:3]):
        m.kernel("k").launch(grid=1, block=1, args=[out], device=dev)
        assert out[0] == i and len(dev.modules) == min(i + 1, 2)
    set_constant(mods[2], "table", np.array([9, 9, 9, 9], np.uint32), device=dev)
    mods[0].kernel("k").launch(grid=1, block=1, args=[out], device=dev)  # reloaded; evicts mods[1]
    assert out[0] == 0
    mods[2].kernel("k").launch(grid=1, block=1, args=[out], device=dev)  # still loaded: the value set
    assert out[0] == 9
    mods[1].kernel("k").launch(grid=1, block=1, args=[out], device=dev)  # reloaded: its initial values
    assert out[0] == 1 and len(dev.modules) == 2


def test_a_pinned_module_is_not_unloaded():
    dev = CudaDevice(0, max_modules=1)
    first, others = _module(5), [_module(6), _module(7)]
    release = dev.pin_module(first)
    handle = dev.load(first)
    out = np.zeros(1, np.uint32)
    for m in others:
        m.kernel("k").launch(grid=1, block=1, args=[out], device=dev)
    assert len(dev.modules) == 2 and dev.load(first) is handle  # kept, past the bound
    first.kernel("k").launch(grid=1, block=1, args=[out], device=dev)
    assert out[0] == 5
    release()
    release()  # a second call does nothing
    others[0].kernel("k").launch(grid=1, block=1, args=[out], device=dev)
    assert len(dev.modules) == 1 and out[0] == 6
