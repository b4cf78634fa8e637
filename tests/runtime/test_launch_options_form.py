"""`Kernel.launch` has one documented form for the emulator's options, `options=EmulatorOptions(...)` (or a
dict of its fields): the loose keywords (`sanitize=`, `num_sms=`, `watchdog_s=`, `time_limit_s=`, `printf=`)
still work but warn, naming the replacement; ptxforge's own code uses the documented form."""

from __future__ import annotations

import ast
import warnings
from pathlib import Path

import numpy as np
import pytest

import ptxforge as pf
from ptxforge.runtime import EmulatorOptions
from ptxforge.runtime.kernel import DEPRECATED_LAUNCH_KEYWORDS

ROOT = Path(pf.__file__).resolve().parents[2]

OOB = """.version 8.0
.target sm_80
.address_size 64
.visible .entry oob(.param .u64 out)
{
    .reg .b32 %r<2>;
    .reg .b64 %rd<4>;
    ld.param.u64 %rd1, [out];
    mov.u32 %r1, %tid.x;
    mul.wide.u32 %rd2, %r1, 4;
    add.u64 %rd3, %rd1, %rd2;
    st.global.u32 [%rd3], %r1;
    ret;
}
"""


@pytest.fixture(scope="module")
def oob():
    return pf.parse(OOB, filename="oob.ptx").kernel("oob")


def test_the_options_form_does_not_warn(oob):
    out = np.zeros(64, np.uint32)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        oob.launch(grid=(1,), block=(64,), args=[out], device="emu", options=EmulatorOptions(num_sms=4))
        oob.launch(grid=(1,), block=(64,), args=[out], device="emu", options={"watchdog_s": 30.0})
    assert np.array_equal(out, np.arange(64))
    with pytest.raises(pf.SanitizerError), warnings.catch_warnings():
        warnings.simplefilter("error")
        oob.launch(grid=(1,), block=(64,), args=[np.zeros(32, np.uint32)], device="emu",
                   options=EmulatorOptions(sanitize=True))


@pytest.mark.parametrize("kwargs", [{"sanitize": True}, {"num_sms": 4, "watchdog_s": 30.0},
                                    {"time_limit_s": 60.0}, {"printf": print}])
def test_a_loose_keyword_warns_naming_the_replacement(oob, kwargs):
    out = np.zeros(64, np.uint32)
    with pytest.warns(DeprecationWarning) as got:
        oob.launch(grid=(1,), block=(64,), args=[out], device="emu", **kwargs)
    msg = str(got[0].message)
    kws = ", ".join(f"{k}=..." for k in kwargs)
    assert f"Kernel.launch({kws}) is deprecated: pass options=EmulatorOptions({kws})" in msg, msg
    assert got[0].filename == __file__  # it points at the caller's line
    assert np.array_equal(out, np.arange(64))


def test_a_loose_keyword_still_does_what_it_did(oob):
    with pytest.warns(DeprecationWarning), pytest.raises(pf.SanitizerError) as e:
        oob.launch(grid=(1,), block=(64,), args=[np.zeros(32, np.uint32)], device="emu", sanitize=True)
    assert e.value.reports[0].kind


def test_a_loose_keyword_beside_options_is_still_refused(oob):
    with pytest.warns(DeprecationWarning), pytest.raises(pf.LaunchError, match="num_sms given beside options="):
        oob.launch(grid=(1,), block=(64,), args=[np.zeros(64, np.uint32)], device="emu", num_sms=4,
                   options=EmulatorOptions(sanitize=True))


def _loose_launches(path: Path) -> list[str]:
    found = []
    for node in ast.walk(ast.parse(path.read_text(), filename=str(path))):
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute | ast.Name):
            name = node.func.attr if isinstance(node.func, ast.Attribute) else node.func.id
            loose = sorted({k.arg for k in node.keywords} & set(DEPRECATED_LAUNCH_KEYWORDS))
            if name == "launch" and loose:
                found.append(f"{path.relative_to(ROOT)}:{node.lineno}: {', '.join(loose)}")
    return found


def test_ptxforge_and_its_benchmarks_use_the_documented_form():
    found = [f for d in ("src/ptxforge", "benchmarks") for p in sorted((ROOT / d).rglob("*.py"))
             for f in _loose_launches(p)]
    assert not found, "launches with the deprecated loose keywords:\n" + "\n".join(found)


def test_the_warning_points_at_the_users_call_also_through_another_front_door(oob):
    out = np.zeros(64, np.uint32)
    with pytest.warns(DeprecationWarning) as got:
        oob((1,), (64,), (out,), device="emu", num_sms=4)  # CuPy's spelling, forwarding to launch
    assert got[0].filename == __file__ and "options=EmulatorOptions(num_sms=...)" in str(got[0].message)
