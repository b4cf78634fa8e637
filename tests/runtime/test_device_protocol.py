"""The `Device` protocol every device satisfies, and the emulated device's bounded cache of loaded modules."""

from __future__ import annotations

import ast
import inspect
import re
from pathlib import Path

import numpy as np
import pytest

import ptxforge as pf
from ptxforge.emu import ClusterGpu, Node
from ptxforge.emu.cluster_procs import RankDevice
from ptxforge.emu.ipc import IpcDevice, ipc_device, rank_base
from ptxforge.emu.launch import MAX_IMAGES, EmuDevice, emu_device
from ptxforge.emu.node import NodeGpu
from ptxforge.runtime.constants import set_constant
from ptxforge.runtime.cuda_device import CudaDevice
from ptxforge.runtime.cuda_green import _GreenContextDevice
from ptxforge.runtime.device import DEVICE_KINDS, Device, DeviceMemory, is_emulated

SRC = Path(pf.__file__).parent
MEMBERS = [n for n in vars(Device) if not n.startswith("_")]
# every class in src a device is made of (_GreenContextDevice: a GPU seen through a green context)
DEVICE_CLASSES = (EmuDevice, NodeGpu, ClusterGpu, IpcDevice, RankDevice, CudaDevice, _GreenContextDevice)

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
    assert MEMBERS == ["kind", "name", "description", "num_sms", "max_shared_per_block", "memory", "node", "gpu",
                       "streams_supported", "stream", "owns_address", "address_note", "write_global",
                       "synchronize"]
    for name in MEMBERS:  # each member says what it is
        assert inspect.getdoc(inspect.getattr_static(Device, name)) or name in ("num_sms", "memory"), name


_MISSING = object()


def _declared(cls: type) -> dict[str, object]:
    """Attributes `cls` (or a base) declares with an annotation and leaves to `__init__` to set."""
    out: dict[str, object] = {}
    for c in reversed(cls.__mro__):
        out.update(vars(c).get("__annotations__", {}))
    return out


def _unmet(cls: type) -> list[str]:
    """The protocol members `cls` does not implement, checked on the class (the CUDA one has no GPU here):
    each must be a class attribute, a property, a method taking the protocol's parameters, or an attribute an
    `__init__` of the class (or a base) sets; what the class only declares, an `__init__` must set."""
    inits = "".join(inspect.getsource(c.__init__) for c in cls.__mro__
                    if c is not object and isinstance(vars(c).get("__init__"), type(_unmet)))

    def set_by_init(name: str) -> bool:
        return re.search(rf"self\.{name}(, self\.\w+)* = ", inits) is not None
    unmet = []
    for name in MEMBERS:
        want = inspect.getattr_static(Device, name)
        have = inspect.getattr_static(cls, name, _MISSING)
        if inspect.isfunction(want):
            if not inspect.isfunction(have) or (list(inspect.signature(have).parameters)
                                                != list(inspect.signature(want).parameters)):
                unmet.append(f"{name}()")
        elif have is _MISSING and not set_by_init(name):
            unmet.append(name)
    return unmet + [f"{name} (declared, never set)" for name in _declared(cls)
                    if inspect.getattr_static(cls, name, _MISSING) is _MISSING and not set_by_init(name)]


@pytest.mark.parametrize("cls", DEVICE_CLASSES, ids=lambda c: c.__name__)
def test_every_device_class_implements_every_member(cls):
    assert _unmet(cls) == []


def test_the_member_check_sees_what_a_class_lacks():
    class Partial:
        kind = "emu"
        gpu: int | None

        def __init__(self) -> None:
            self.num_sms = 1

        def stream(self, sms=None) -> None:  # no priority
            pass

    unmet = _unmet(Partial)
    assert "num_sms" not in unmet and "kind" not in unmet
    assert {"node", "stream()", "address_note()", "gpu", "gpu (declared, never set)"} <= set(unmet)


def _device_classes_in_src() -> set[str]:
    """Classes of the package that are devices: those whose body sets `kind` to a device kind ("emu",
    "cuda"), and their subclasses."""
    classes: dict[str, tuple[list[str], bool]] = {}
    for path in SRC.rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ClassDef):
                sets_kind = any(isinstance(s, ast.Assign) and isinstance(s.value, ast.Constant)
                                and s.value.value in DEVICE_KINDS
                                and any(isinstance(t, ast.Name) and t.id == "kind" for t in s.targets)
                                for s in node.body)
                classes[node.name] = ([b.id for b in node.bases if isinstance(b, ast.Name)], sets_kind)
    found = {name for name, (_, kind) in classes.items() if kind}
    grew = True
    while grew:
        more = {name for name, (bases, _) in classes.items() if set(bases) & found} - found
        grew, found = bool(more), found | more
    return found


def test_the_member_check_covers_every_device_class():
    assert _device_classes_in_src() == {c.__name__ for c in DEVICE_CLASSES}


def test_emulated_devices_satisfy_it():
    node = Node(gpus=2, sms=4)
    for dev, kind, description in ((emu_device(), "emu", "the emulator"), (EmuDevice(num_sms=8), "emu",
                                                                          "the emulator"),
                                   (node.devices[1], "emu", "GPU 1 of the emulated node")):
        assert isinstance(dev, Device) and isinstance(dev.memory, DeviceMemory)
        assert (dev.kind, dev.description, is_emulated(dev)) == (kind, description, True)
        assert dev.max_shared_per_block == 227 * 1024
        dev.synchronize()


def test_what_differs_between_devices_is_a_member_each_answers():
    node = Node(gpus=2, sms=4)
    lone, gpu = EmuDevice(num_sms=2), node.devices[1]
    assert (lone.node, lone.gpu, lone.streams_supported, lone.address_note(0x1234)) == (None, None, False, "")
    with pytest.raises(pf.LaunchError, match="the emulator has no streams: .*node.devices"):
        lone.stream()
    assert (gpu.node, gpu.gpu, gpu.streams_supported, gpu.address_note(0x1234)) == (node, 1, True, "")
    s = gpu.stream(sms=range(0, 2))
    assert s.device is gpu and s.sms == (0, 1)
    buf = pf.runtime.empty(4, np.uint32, device=node.devices[0])
    node.disable_peer_access(1, 0)  # still passed as it is: the kernel's access is the fault that names both
    assert gpu.owns_address(buf.address) and not lone.owns_address(buf.address)
    with ipc_device(1, 2, capacity=1 << 20) as ipc:  # rank 0's process need not exist: nothing is opened
        assert isinstance(ipc, Device)
        assert (ipc.node, ipc.gpu, ipc.streams_supported) == (None, 1, False)
        assert ipc.address_note(rank_base(0) + 4096) == (" (it is rank 0's memory, not open on rank 1: open the "
                                                         "buffer's handle first)")
        assert ipc.address_note(rank_base(1) + 4096) == ""
    assert CudaDevice.node is None and CudaDevice.gpu is None and CudaDevice.streams_supported is False


PROBE = re.compile(r"\b(getattr|hasattr)\(\s*([A-Za-z_][\w.]*\.)?(dev|device|_device|other|gpu|mem|memory)\s*,")


def test_no_code_probes_a_device_for_an_attribute():
    """What tells devices apart is a protocol member every device answers: no getattr/hasattr on a device (or
    its memory) anywhere in the package."""
    found = [f"{path.relative_to(SRC)}:{i}: {line.strip()}" for path in sorted(SRC.rglob("*.py"))
             for i, line in enumerate(path.read_text().splitlines(), 1) if PROBE.search(line)]
    assert not found, "\n".join(found)


def test_the_probe_check_sees_the_probes_it_forbids():
    for probe in ('getattr(device, "node", None)', 'hasattr(self.device, "stream")', 'getattr(dev, "gpu", None)',
                  'getattr(st.mem.device, "atomic_lock", None)', 'hasattr(mem, "view")'):
        assert PROBE.search(probe), probe
    for fine in ('getattr(buf, "device", device)', 'getattr(self, "_formats", None)', 'device.node'):
        assert not PROBE.search(fine), fine


def test_no_launch_path_tells_devices_apart_by_class():
    for folder in ("runtime", "cli", "ep"):
        for path in (SRC / folder).glob("*.py"):
            text = path.read_text()
            assert not re.search(r"isinstance\([^)]*(EmuDevice|NodeGpu|IpcDevice|CudaDevice)", text), path


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
