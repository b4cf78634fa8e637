"""A green context on the GPU (ptxforge.runtime.cuda_green): a kernel of many long-running blocks launched on a
green stream of 16 SMs runs on at most the SMs the green context got (each block records its %smid), while
the same launch on the primary context spreads over more; the primary context is current again after it."""

from pathlib import Path

import numpy as np
import pytest

import ptxforge as pf
from ptxforge.errors import LaunchError
from ptxforge.runtime import to_device
from ptxforge.runtime.cuda_device import cuda_device
from ptxforge.runtime.cuda_driver import check, driver
from ptxforge.runtime.cuda_green import FIRST_DRIVER, GreenContextsUnavailable, green_stream, sm_group_size

pytestmark = pytest.mark.gpu
SMID = Path(__file__).resolve().parents[1] / "runtime" / "data" / "record_smid.ptx"
SPIN = 200_000  # clock cycles each block waits before it writes: the grid's blocks are resident together


@pytest.fixture(scope="module")
def kernel():
    return pf.parse(SMID.read_text(), filename=SMID.name).kernel("record_smid")


def _green(dev, *counts):
    """Green streams of these SM counts; a skip only on a driver older than green contexts (12.4), where the
    persistent grid is the budget (tests/runtime): on a newer one, unavailability is a failure."""
    try:
        return [green_stream(dev, n) for n in counts]
    except GreenContextsUnavailable as e:
        if int(dev.driver_version) >= FIRST_DRIVER:
            raise
        pytest.skip(str(e))


def _smids(kernel, dev, blocks, **kw):
    out = to_device(np.full(blocks, 0xFFFFFFFF, np.uint32), device=dev)
    kernel.launch(grid=(blocks,), block=(128,), args=[out, np.uint64(SPIN)], **kw)
    got = out.to_host()
    out.free()
    assert (got != 0xFFFFFFFF).all(), "a block did not write its SM"
    return set(got.tolist())


def test_a_green_stream_of_16_sms_confines_the_kernel(kernel):
    dev = cuda_device(0)
    (gs,) = _green(dev, 16)
    with gs:
        assert gs.sms >= sm_group_size(16, dev.capability) and gs.sms < dev.num_sms, gs
        blocks = 4 * dev.num_sms
        confined = _smids(kernel, dev, blocks, stream=gs)
        whole = _smids(kernel, dev, blocks, device=dev)
        print(f"{dev}: green context of {gs.sms} SMs: {len(confined)} distinct SMs ran; the primary context: "
              f"{len(whole)}")
        assert len(confined) <= gs.sms
        assert len(whole) > gs.sms  # the launch could have spread further: the bound above is the green context's
        current = check(driver().cuCtxGetCurrent(), "cuCtxGetCurrent")
        assert int(current) == int(dev.context)  # the primary context is current again
    with pytest.raises(LaunchError, match="was closed"):
        _smids(kernel, dev, 1, stream=gs)


def test_two_green_streams_each_keep_their_modules(kernel):
    dev = cuda_device(0)
    a, b = _green(dev, 8, 32)
    with a, b:
        assert len(_smids(kernel, dev, 2 * dev.num_sms, stream=a)) <= a.sms
        assert len(_smids(kernel, dev, 2 * dev.num_sms, stream=b)) <= b.sms
        assert len(a.view.modules) == 1 and len(b.view.modules) == 1
