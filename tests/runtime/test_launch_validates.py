"""Kernel.launch validates the module before its first launch: PTX ptxas refuses raises before anything
runs (nothing copied back, no thread run); validate=False or PTXFORGE_VALIDATE=0 skips it."""

import numpy as np
import pytest

import ptxforge as pf
from ptxforge.runtime.validation import problems_of

V4_U64 = """.version 8.0
.target sm_90a
.address_size 64
.visible .entry k(.param .u64 out)
{
    .reg .b64 %rd<6>;
    ld.param.u64 %rd1, [out];
    mov.u64 %rd2, 1;
    mov.u64 %rd3, 2;
    mov.u64 %rd4, 3;
    mov.u64 %rd5, 4;
    st.global.v4.u64 [%rd1], {%rd2, %rd3, %rd4, %rd5};
    ret;
}
"""


def _kernel():
    return pf.parse(V4_U64, filename="v4.ptx").kernel("k")


def test_a_launch_of_ptx_the_validator_refuses_raises_before_running():
    out = np.full(4, 7, np.uint64)
    with pytest.raises(pf.PTXValidationError) as e:
        _kernel().launch(grid=(1,), block=(1,), args=[out], device="emu")
    assert (e.value.file, e.value.line, e.value.col) == ("v4.ptx", 12, 5)
    assert "needs sm_100; this module targets sm_90a" in str(e.value)
    assert (out == 7).all()  # nothing ran, nothing came back


def test_validate_false_and_the_environment_switch_skip_it(monkeypatch):
    out = np.zeros(4, np.uint64)
    _kernel().launch(grid=(1,), block=(1,), args=[out], device="emu", validate=False)
    assert list(out) == [1, 2, 3, 4]
    monkeypatch.setenv("PTXFORGE_VALIDATE", "0")
    out[:] = 0
    _kernel().launch(grid=(1,), block=(1,), args=[out], device="emu")
    assert list(out) == [1, 2, 3, 4]


def test_the_verdict_is_kept_with_the_module():
    k = _kernel()
    first = problems_of(k.module)
    assert first and problems_of(k.module) is first  # computed once per module
    clean = pf.parse(V4_U64.replace("st.global.v4.u64 [%rd1], {%rd2, %rd3, %rd4, %rd5};",
                                    "st.global.v2.u64 [%rd1], {%rd2, %rd3};"), filename="v2.ptx")
    assert problems_of(clean) == []
    out = np.zeros(4, np.uint64)
    clean.kernel("k").launch(grid=(1,), block=(1,), args=[out], device="emu")
    assert list(out) == [1, 2, 0, 0]
