"""The one-instruction kernels the GPU conformance run uses (tests/conformance/hw_ops.py): each validates,
assembles with ptxas, and runs on the emulator; the approximate ones meet the manual's bound there."""

import numpy as np
import pytest
from conformance.hw_ops import (
    APPROX,
    EXACT,
    WARP_BODIES,
    checkable,
    reference,
    run_case,
    run_warp,
    unwritten,
    warp_case_ptx,
    within_bound,
)

import ptxforge as pf
from ptxforge.ptx.validator import validate
from ptxforge.toolchain import assemble

N = 2048


def run_emu(case, rng):
    return run_case(case, "emu", case.make_inputs(N, rng))


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


@pytest.mark.parametrize("name", sorted(WARP_BODIES))
def test_warp_case_is_valid_and_runs_on_the_emulator(name):
    text = warp_case_ptx(name)
    m = pf.parse(text, filename=f"{name}.ptx")
    assert not [d for d in validate(m) if d.severity == "error"]
    assert assemble(text, "sm_90a").ok
    rng = np.random.default_rng(3)
    _, out = run_warp(name, "emu", tuple(rng.integers(0, 2**32, N, dtype=np.uint32) for _ in range(2)))
    assert np.count_nonzero(out == 0xA5A5A5A5) <= 2
