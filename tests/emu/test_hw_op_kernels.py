"""The one-instruction kernels the GPU conformance run uses (tests/conformance/hw_ops.py): each validates,
assembles with ptxas, and runs on the emulator; the approximate ones meet the manual's bound there."""

import numpy as np
import pytest
from conformance.hw_ops import APPROX, EXACT, checkable, poisoned_output, reference, unwritten, within_bound

import ptxforge as pf
from ptxforge.ptx.validator import validate
from ptxforge.toolchain import assemble

N = 2048


def run_emu(case, rng):
    ins = case.make_inputs(N, rng)
    out = poisoned_output(case, N)
    pad = [np.zeros(N, np.uint32)] * (3 - len(ins))
    m = pf.parse(case.ptx(), filename=f"{case.name}.ptx")
    m.kernel("k").launch(grid=(N // 256,), block=(256,), args=[*ins, *pad, out, np.uint32(N)], device="emu")
    return ins, out


def _out_dtype(case):
    from conformance.hw_ops import _TYPES

    return _TYPES[case.out][1]


@pytest.mark.parametrize("case", EXACT + APPROX, ids=lambda c: c.name)
def test_kernel_is_valid_ptx_for_ptxas(case):
    m = pf.parse(case.ptx(), filename=f"{case.name}.ptx")
    assert not [d for d in validate(m) if d.severity == "error"]
    res = assemble(case.ptx(), "sm_90a")
    assert res.ok, res.stderr


@pytest.mark.parametrize("case", EXACT, ids=lambda c: c.name)
def test_exact_case_runs_on_the_emulator(case):
    ins, out = run_emu(case, np.random.default_rng(1))
    assert out.dtype == np.dtype(_out_dtype(case))
    assert unwritten(out) <= 2  # every thread wrote its result (a few may equal the poison by chance)


@pytest.mark.parametrize("case", APPROX, ids=lambda c: c.name)
def test_approx_case_meets_the_bound_on_the_emulator(case):
    ins, out = run_emu(case, np.random.default_rng(2))
    exact = reference(case, ins)
    ok = checkable(case, exact)
    assert ok.sum() > N // 2
    assert within_bound(case, out, exact)[ok].all()
