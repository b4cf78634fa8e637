"""Cooperative launches (cuLaunchCooperativeKernel) on the emulator: cooperative groups' grid.sync() from
real nvcc output (tests/corpus/src/cuda/coop_groups.cu, kernel cg_grid_sync_shift: each block writes its
half, the grid syncs, each thread reads the other block's element)."""

import numpy as np
import pytest
from emu_corpus import corpus_module

from ptxforge.emu import Node
from ptxforge.emu.errors import EmulatorError, LaunchError
from ptxforge.emu.sanitizer import Sanitizer

rng = np.random.default_rng(0)


def _kernel(flavor="sm_80.O3"):
    return corpus_module("coop_groups", flavor).kernel("cg_grid_sync_shift")


def _args(n=256):
    x = rng.integers(-100, 100, n).astype(np.int32)
    return x, [x, np.zeros(n, np.int32), np.zeros(n, np.int32), np.int32(n)]


@pytest.mark.parametrize("flavor", ["sm_80.O3", "sm_80.G"])
def test_grid_sync_orders_the_blocks_and_is_clean_under_the_sanitizer(flavor):
    x, args = _args()
    _kernel(flavor).launch(grid=(2,), block=(128,), args=args, cooperative=True, options={"sanitize": Sanitizer()})
    np.testing.assert_array_equal(args[2], np.roll(2 * x, -128))


def test_grid_sync_without_a_cooperative_launch_traps_as_on_a_gpu():
    _, args = _args()
    with pytest.raises(EmulatorError, match="trap executed") as e:
        _kernel().launch(grid=(2,), block=(128,), args=args, device="emu")
    assert "only a cooperative launch provides" in str(e.value) and "cooperative=True" in str(e.value)


def test_a_grid_too_large_to_be_resident_is_refused_before_running():
    _, args = _args(8 * 1024)
    with pytest.raises(LaunchError, match="COOPERATIVE_LAUNCH_TOO_LARGE") as e:
        _kernel().launch(grid=(64,), block=(128,), args=args, cooperative=True, options={"num_sms": 2})
    assert "64 blocks" in str(e.value) and "on 2 SMs" in str(e.value)


def test_cooperative_launches_on_a_stream_are_refused():
    node = Node(gpus=1, sms=4)
    _, args = _args()
    with pytest.raises(LaunchError, match="stream"):
        _kernel().launch(grid=(2,), block=(128,), args=args, device=node.devices[0],
                         stream=node.devices[0].stream(), cooperative=True)
