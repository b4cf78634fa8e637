"""The one hook interface (emu/hooks.py): a check written in a few lines sees the events it overrides, on a real
launch, beside the sanitizer or alone; a check that watches no memory leaves the fast paths on."""

from __future__ import annotations

import numpy as np
import pytest

import ptxforge as pf
from ptxforge.emu import hooks
from ptxforge.runtime.launch_config import EmulatorOptions

# out[i] = 2 * i for i < n, after a converged bar.sync; 256 threads per block
FILL = """.version 8.0
.target sm_80
.address_size 64
.visible .entry fill(.param .u64 out, .param .u32 n)
{
    .reg .pred %p<2>;
    .reg .b32 %r<7>;
    .reg .b64 %rd<4>;
    ld.param.u64 %rd1, [out];
    ld.param.u32 %r5, [n];
    mov.u32 %r1, %tid.x;
    mov.u32 %r2, %ctaid.x;
    mov.u32 %r3, %ntid.x;
    mad.lo.u32 %r4, %r2, %r3, %r1;
    bar.sync 0;
    setp.ge.u32 %p1, %r4, %r5;
    @%p1 bra DONE;
    shl.b32 %r6, %r4, 1;
    mul.wide.u32 %rd2, %r4, 4;
    add.u64 %rd3, %rd1, %rd2;
    st.global.u32 [%rd3], %r6;
DONE:
    ret;
}
"""


class StoreCounter(hooks.Check):
    """Counts the lanes that store, keeps the stored values, and the blocks of each wave."""

    def __init__(self):
        self.lanes = 0
        self.values: list[np.ndarray] = []
        self.waves: list[list[int]] = []
        self.barriers = 0

    def on_access(self, mem, space, addr, nbytes, lanes, write):
        if write:
            self.lanes += mem.nlanes if lanes is None else len(lanes)

    def on_store(self, mem, dtype, values):
        self.values.append(np.atleast_1d(np.asarray(values[0], dtype)))

    def on_wave(self, machine, st):
        self.waves.append(machine.block_ids.tolist())

    def on_barrier_all(self, machine):
        self.barriers += 1


def _fill(n, grid, checks, **kw):
    k = pf.parse(FILL, filename="fill.ptx").kernel("fill")
    out = np.zeros(grid * 256, np.uint32)
    k.launch(grid=(grid,), block=(256,), args=[out, np.uint32(n)], device="emu",
             options=EmulatorOptions(checks=checks, num_sms=1, **kw))
    return out


def test_a_check_sees_the_stores_waves_and_barriers_it_asks_for():
    c = StoreCounter()
    out = _fill(2500, 10, [c])  # 8 blocks of 256 threads fit one SM: two waves, the last one diverged
    assert out[:2500].tolist() == list(range(0, 5000, 2)) and not out[2500:].any()
    assert c.lanes == 2500
    assert np.sort(np.concatenate(c.values)).tolist() == list(range(0, 5000, 2))
    assert c.waves == [list(range(8)), [8, 9]]
    assert c.barriers == 2  # one converged bar.sync per wave


def test_beside_the_sanitizer_both_see_the_launch():
    c = StoreCounter()
    _fill(2500, 10, [c], sanitize=True)
    assert c.lanes == 2500 and c.barriers == 2


class Reversed(hooks.Check):
    """Runs the blocks last first; watches no memory."""

    def __init__(self):
        self.plain: list[bool] = []
        self.waves: list[list[int]] = []

    def block_order(self, nblocks):
        return np.arange(nblocks)[::-1]

    def on_wave(self, machine, st):
        self.waves.append(machine.block_ids.tolist())
        self.plain.append(st.mem.hooks is None)


def test_a_check_that_watches_no_memory_keeps_the_fast_paths():
    c = Reversed()
    out = _fill(2560, 10, [c])
    assert out.tolist() == list(range(0, 5120, 2))
    assert c.waves == [[9, 8, 7, 6, 5, 4, 3, 2], [1, 0]]
    assert c.plain == [True, True]  # memory.plain: the whole-wave paths skip resolve


def test_only_checks_are_accepted():
    with pytest.raises(pf.LaunchError, match="checks must be ptxforge.emu.hooks.Check"):
        EmulatorOptions(checks=[lambda *a: None])


def test_a_check_on_a_node_stream_launch_beside_the_node_sanitizer():
    from ptxforge.emu import Node

    node = Node(gpus=2, sms=4, sanitize=True)  # the per-launch sanitizer and the node-wide race check are checks too
    k = pf.parse(FILL, filename="fill.ptx").kernel("fill")
    out = np.zeros(2560, np.uint32)
    c = StoreCounter()
    d = node.devices[1]
    k.launch((10,), (256,), [out, np.uint32(2500)], device=d, stream=d.stream(), options=EmulatorOptions(checks=[c]))
    node.synchronize()
    assert out[:2500].tolist() == list(range(0, 5000, 2))
    assert c.lanes == 2500 and c.barriers == 1 and c.waves == [list(range(10))]  # 4 SMs hold all 10 blocks


def test_a_finished_sanitized_launch_leaves_no_wave_memory_to_the_cyclic_gc():
    import gc

    from ptxforge.emu.memory import LaneMemory

    gc.collect()
    gc.disable()
    try:
        _fill(2500, 10, [StoreCounter()], sanitize=True)
        alive = sum(isinstance(o, LaneMemory) for o in gc.get_objects())
    finally:
        gc.enable()
    assert alive == 0  # (a checking `resolve` bound into the memory kept every wave's memory in a cycle)


def test_no_emulator_module_calls_into_the_sanitizer():
    """The sanitizer enters only as a Check through hooks.py: outside emu/sanitizer/ no module of the emulator
    imports it, but node.py, which makes the node-wide race check for a sanitized Node, and cluster.py, which
    makes the check across a sanitized Cluster's NICs (each attaches a Check to each launch's machine,
    `machine.add_check`)."""
    import ast
    from pathlib import Path

    import ptxforge.emu

    root = Path(ptxforge.emu.__file__).parent
    importers = set()
    for path in sorted(root.rglob("*.py")):
        if path.parent.name == "sanitizer":
            continue
        for n in ast.walk(ast.parse(path.read_text())):
            names = [n.module or ""] if isinstance(n, ast.ImportFrom) else \
                [a.name for a in n.names] if isinstance(n, ast.Import) else []
            if any(x.startswith("ptxforge.emu.sanitizer") for x in names) or \
                    isinstance(n, ast.ImportFrom) and n.module == "ptxforge.emu" and \
                    any(a.name == "sanitizer" for a in n.names):
                importers.add(str(path.relative_to(root)))
    assert importers == {"node.py", "cluster.py"}
    from ptxforge.emu.sanitizer import node_races, remote_order

    assert issubclass(node_races._Launch, hooks.Check)
    assert issubclass(remote_order._RemoteLaunch, hooks.Check)
