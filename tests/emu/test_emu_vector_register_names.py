"""Vector registers named without `%` and vector registers passed to `.reg .vN` parameters and results run
on the emulator (the PTX of tests/ptx/test_vector_register_names.py, which ptxas accepts)."""

import numpy as np
import pytest
from vector_register_ptx import BARE, CALLS, MIXED

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


def test_registers_shaped_unlike_their_parameter_pass_their_bits():
    """A scalar for a vector parameter splits, lowest element from the low bits; a vector for a scalar (or
    for a vector of another count) joins its elements, the first lowest; results likewise (mov {lo, hi} order)."""
    out = np.zeros(10, np.uint32)
    out[0] = 0x0005_0002  # .b32 -> .v2 .u16 swap -> .b32, after +1
    out[2:4] = [1 | 2 << 16, 3 | 4 << 16]  # .b64 -> .v4 .u16 sum4, after +1
    out[4:6] = [7, 0x8000_0001]  # .v2 .u32 -> .b64 twice -> .v2 .u32
    out[6:8] = [30 | 10 << 16, 0]  # .v4 .u16 -> .v2 .u32 impl -> .b64
    out[8] = np.float32(2.5).view(np.uint32)  # .f32 -> .v2 .u16 swap -> .f32, after +1.0
    pf.parse(MIXED, filename="m.ptx").kernel("k").launch(grid=(1,), block=(32,), args=[out])
    assert out[0] == 0x0003_0005
    assert out[1] == 2 + 2 + 3 + 4
    assert list(out[4:6]) == [14, 2]  # 2 * 0x80000001_00000007 wraps to 0x00000002_0000000e
    assert list(out[6:8]) == [0x000A_001E, 0x000A_001E]  # a = {0x000a001e, 0}: r = {a.x + a.y, a.x - a.y}
    assert out[8] == 0x0000_4060  # 3.5f is 0x40600000, its halves swapped


def test_a_register_of_another_width_is_named_when_validation_is_off():
    text = MIXED.replace("call (s), sum4, (%rd2);", "call (s), sum4, (s);")
    with pytest.raises(EmulatorError, match=r"call to sum4: s \(32 bits\) is passed for \.reg \.v4 \.u16 h "
                                            r"\(64 bits\)"):
        pf.parse(text, filename="m.ptx").kernel("k").launch(grid=(1,), block=(1,), args=[np.zeros(10, np.uint32)],
                                                             validate=False)
