"""The `Device` protocol every device satisfies, and the emulated device's bounded cache of loaded modules."""

from __future__ import annotations

import inspect
import re
from pathlib import Path

import numpy as np
import pytest

import ptxforge as pf
from ptxforge.emu import Node
from ptxforge.emu.launch import MAX_IMAGES, EmuDevice, emu_device
from ptxforge.runtime.constants import set_constant
from ptxforge.runtime.cuda_device import CudaDevice
from ptxforge.runtime.device import Device, DeviceMemory, is_emulated

SRC = Path(pf.__file__).parent
MEMBERS = [n for n in vars(Device) if not n.startswith("_")]

TABLE = """.version 8.0
.target sm_80
.address_size 64
.const .align 4 .b32 table[4] = {1, 2, 3, 4};
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


def test_the_protocol_lists_what_the_runtime_uses():
    assert MEMBERS == ["kind", "name", "description", "num_sms", "max_shared_per_block", "memory",
                       "owns_address", "write_global", "synchronize"]


def test_emulated_devices_satisfy_it():
    node = Node(gpus=2, sms=4)
    for dev, kind, description in ((emu_device(), "emu", "the emulator"), (EmuDevice(num_sms=8), "emu",
                                                                          "the emulator"),
                                   (node.devices[1], "emu", "GPU 1 of the emulated node")):
        assert isinstance(dev, Device) and isinstance(dev.memory, DeviceMemory)
        assert (dev.kind, dev.description, is_emulated(dev)) == (kind, description, True)
        assert dev.max_shared_per_block == 227 * 1024
        dev.synchronize()


def test_the_cuda_device_satisfies_it_structurally():
    """Checked on the class (no GPU here): every member is a class attribute, a property, a method with the
    protocol's parameters, or an attribute `__init__` sets (declared on the class)."""
    declared = CudaDevice.__annotations__
    for name in MEMBERS:
        want = inspect.getattr_static(Device, name)
        have = inspect.getattr_static(CudaDevice, name, None)
        if inspect.isfunction(want):
            assert inspect.isfunction(have), name
            assert list(inspect.signature(have).parameters) == list(inspect.signature(want).parameters), name
        else:
            assert have is not None or name in declared, name
    assert CudaDevice.kind == "cuda"
    init = inspect.getsource(CudaDevice.__init__)
    for name in declared:
        assert re.search(rf"self\.{name} = ", init), name  # what the class declares, __init__ sets


def test_no_launch_path_tells_devices_apart_by_class():
    for folder in ("runtime", "cli"):
        for path in (SRC / folder).glob("*.py"):
            text = path.read_text()
            assert not re.search(r"isinstance\([^)]*(EmuDevice|NodeGpu|CudaDevice)", text), path


def test_set_constant_through_the_protocol_on_every_emulated_device():
    m = pf.parse(TABLE, filename="t.ptx")
    node = Node(gpus=2, sms=2)
    for dev in (EmuDevice(num_sms=2), node.devices[1]):
        out = np.zeros(1, np.uint32)
        m.kernel("k").launch(grid=1, block=1, args=[out], device=dev)
        assert out[0] == 3
        set_constant(m, "table", np.array([30], np.uint32), device=dev, offset=8)
        m.kernel("k").launch(grid=1, block=1, args=[out], device=dev)
        assert out[0] == 30
    with pytest.raises(pf.LaunchError, match="4 bytes at offset 16 do not fit its 16 bytes"):
        EmuDevice().write_global(m, "table", np.zeros(1, np.uint32), 16)


# ---------------------------------------------------------------- the bounded module cache
def _module(i: int):
    return pf.parse(TABLE.replace("{1, 2, 3, 4}", f"{{{i}, {i}, {i}, {i}}}"), filename=f"m{i}.ptx")


def test_a_device_keeps_at_most_max_images_modules_loaded():
    assert emu_device().max_images == MAX_IMAGES == 64
    dev = EmuDevice(num_sms=2, max_images=2)
    live = len(dev.memory._allocs)
    mods = [_module(i) for i in range(5)]
    out = np.zeros(1, np.uint32)
    for i, m in enumerate(mods):
        m.kernel("k").launch(grid=1, block=1, args=[out], device=dev)
        assert out[0] == i
        assert dev.loaded_modules() == min(i + 1, 2)
        assert len(dev.memory._allocs) == live + min(i + 1, 2)  # an unloaded module's table is freed
    # the least recently launched went first: launching mods[3] keeps it; mods[4] stays; mods[0] loads afresh
    set_constant(mods[3], "table", np.array([9, 9, 9, 9], np.uint32), device=dev)
    mods[3].kernel("k").launch(grid=1, block=1, args=[out], device=dev)
    assert out[0] == 9
    mods[0].kernel("k").launch(grid=1, block=1, args=[out], device=dev)  # evicts mods[4], the older use
    assert out[0] == 0
    mods[3].kernel("k").launch(grid=1, block=1, args=[out], device=dev)
    assert out[0] == 9 and dev.loaded_modules() == 2
    mods[4].kernel("k").launch(grid=1, block=1, args=[out], device=dev)  # reloaded: its initial values
    assert out[0] == 4


def test_a_queued_stream_launch_keeps_its_module_loaded():
    node = Node(gpus=1, sms=2)
    gpu = node.devices[0]
    gpu.images.bound = 1
    first, second = _module(5), _module(6)
    queued, now = np.zeros(1, np.uint32), np.zeros(1, np.uint32)
    p = first.kernel("k").launch(grid=1, block=1, args=[queued], device=gpu, stream=gpu.stream())
    second.kernel("k").launch(grid=1, block=1, args=[now], device=gpu)  # past the bound: first is pinned
    assert now[0] == 6 and gpu.loaded_modules() == 2
    node.synchronize()
    assert queued[0] == 5 and p.result().thread_instructions > 0  # its table was still there
    assert gpu.loaded_modules() == 1  # released: back within the bound
    assert list(gpu.images) == [id(second)]


NO_VARIABLES = """.version 8.0
.target sm_80
.address_size 64
.visible .entry k(.param .u64 out)
{
    .reg .b64 %rd<3>;
    ld.param.u64 %rd1, [out];
    st.global.u32 [%rd1], VALUE;
    ret;
}
"""


def test_a_node_keeps_its_shared_compiled_kernels_bounded():
    node = Node(gpus=2, sms=2)
    node.compiled.bound = 1
    out = np.zeros(1, np.uint32)
    mods = [pf.parse(NO_VARIABLES.replace("VALUE", str(i)), filename=f"n{i}.ptx") for i in (3, 4)]
    for m in mods:
        for gpu in node.devices:  # the second GPU takes the first one's compiled kernel
            m.kernel("k").launch(grid=1, block=1, args=[out], device=gpu)
            assert out[0] == int(m.filename[1])
    assert len(node.compiled) == 1 and list(node.compiled) == [id(mods[1])]


def test_launch_results_on_the_emulator():
    out = np.zeros(1, np.uint32)
    res = _module(7).kernel("k").launch(grid=1, block=1, args=[out], device="emu")
    assert isinstance(res, pf.runtime.LaunchResult) and res.device == "emu" and out[0] == 7
    node = Node(gpus=1, sms=2)
    p = _module(8).kernel("k").launch(grid=1, block=1, args=[out], device=node.devices[0],
                                      stream=node.devices[0].stream())
    assert isinstance(p, pf.emu.PendingLaunch) and not p.done
    res = p.result()
    assert isinstance(res, pf.runtime.LaunchResult) and out[0] == 8 and p.done


def test_the_bound_is_checked():
    with pytest.raises(pf.LaunchError, match="max_images must be at least 1, got 0"):
        EmuDevice(max_images=0)
