"""Vector registers named without `%` and vector registers passed to `.reg .vN` parameters and results run
on the emulator (the PTX of tests/ptx/test_vector_register_names.py, which ptxas accepts)."""

import numpy as np
import pytest
from vector_register_ptx import BARE, CALLS

import ptxforge as pf
from ptxforge.emu import EmulatorError


def test_bare_vector_register_names_run():
    out = np.zeros(8, np.uint32)
    pf.parse(BARE, filename="v.ptx").kernel("k").launch(grid=(1,), block=(1,), args=[out])
    assert out[0] == 9 and out[1] & 0xFFFF == 5
    assert list(out[4:8]) == [7, 0, 0, 9]  # temp.a is temp.w


def test_vector_registers_as_call_arguments_and_results():
    out = np.zeros(8, np.uint32)
    out[:2] = [10, 3]
    out[4:6] = [1 | 2 << 16, 3 | 40 << 16]  # the .v4 .u16 {1, 2, 3, 40}
    pf.parse(CALLS, filename="v.ptx").kernel("k").launch(grid=(1,), block=(32,), args=[out])
    assert list(out[:3]) == [13, 7, 46]


def test_a_scalar_for_a_vector_parameter_is_named():
    text = CALLS.replace("call (s), sum4, (h);", "call (s), sum4, (%rd1);")  # ptxas takes it; the emulator not yet
    with pytest.raises(EmulatorError, match=r"call to sum4: %rd1 is passed for \.reg \.v4 \.u16 h, which takes "
                                            r"a \.v4 vector register"):
        pf.parse(text, filename="v.ptx").kernel("k").launch(grid=(1,), block=(1,), args=[np.zeros(8, np.uint32)])
