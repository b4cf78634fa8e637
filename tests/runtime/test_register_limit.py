"""The register-limited block size under `.maxnreg` on the emulator, from the registers ptxas allocates
(a hand-written kernel keeping 120 loaded values live: 126 registers, so at most 512 threads a block)."""

from pathlib import Path

import numpy as np
import pytest

import ptxforge as pf
from ptxforge.emu.errors import LaunchError
from ptxforge.runtime.register_limit import max_threads
from ptxforge.toolchain import ToolNotFound, find_tool


def have(tool: str) -> bool:
    try:
        find_tool(tool)
        return True
    except ToolNotFound:
        return False

PTX = Path(__file__).parent / "data" / "maxnreg_many_live.ptx"


def test_max_threads_follows_the_driver_rule():
    assert max_threads(255) == 256 and max_threads(128) == 512 and max_threads(126) == 512
    assert max_threads(64) == 1024 and max_threads(32) == 1024 and max_threads(0) == 1024


@pytest.mark.skipif(not have("ptxas"), reason="ptxas not found (install the dev extra)")
def test_a_block_too_large_for_the_registers_ptxas_allocates_is_refused():
    k = pf.parse_file(str(PTX)).kernel("many_regs")
    x = np.arange(120, dtype=np.float32)
    with pytest.raises(LaunchError, match=r"126 registers per thread.*\.maxnreg 255 at .*maxnreg_many_live.ptx:7.*"
                                          r"at most 512 threads; the launch asked for 1024"):
        k.launch(grid=(1,), block=(1024,), args=[x, np.zeros(1024, np.float32)], device="emu")
    out = np.zeros(512, np.float32)
    k.launch(grid=(1,), block=(512,), args=[x, out], device="emu")
    np.testing.assert_array_equal(out, np.float32(sum(i * (119 - i) for i in range(60))))  # exact in f32
