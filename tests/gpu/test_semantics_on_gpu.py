"""The emulator's instruction semantics against the GPU, one instruction at a time (tests/conformance/hw_ops.py).

Fully specified instructions must give the GPU's bits on every input. Approximate ones must meet (4x) the
manual's bound on the GPU too (a check of the harness); how often the emulator's bits equal the GPU's is
written to $OUT/approx_vs_gpu.tsv (or the temp folder) for the notes.
"""

import os
import tempfile
from pathlib import Path

import numpy as np
import pytest
from conformance.hw_ops import (
    APPROX,
    EXACT,
    WARP_BODIES,
    checkable,
    mismatch_report,
    reference,
    run_case,
    run_warp,
    same_bits,
    unwritten,
    within_bound,
)

N = 1 << 16
REPORT = Path(os.environ.get("OUT") or tempfile.gettempdir()) / "approx_vs_gpu.tsv"


def run_both(case, seed):
    ins = case.make_inputs(N, np.random.default_rng(seed))
    outs = []
    for device in ("emu", "cuda"):
        out = run_case(case, device, ins)[1]
        assert unwritten(out) <= 2, f"{device}: results missing"
        outs.append(out)
    return ins, outs[0], outs[1]


@pytest.mark.parametrize("case", EXACT, ids=lambda c: c.name)
def test_exact_instruction_matches_the_gpu_bit_for_bit(case):
    ins, emu, gpu = run_both(case, 11)
    assert same_bits(emu, gpu).all(), mismatch_report(case.name, ins, emu, gpu, "emu", "gpu")


@pytest.mark.parametrize("case", APPROX, ids=lambda c: c.name)
def test_approx_instruction_on_the_gpu_meets_the_bound(case):
    ins, emu, gpu = run_both(case, 12)
    exact = reference(case, ins)
    ok = checkable(case, exact)
    assert within_bound(case, gpu, exact, slack=4)[ok].all()
    equal = same_bits(emu, gpu)
    with np.errstate(all="ignore"):
        err_ulp = np.abs(gpu.astype(np.float64) - exact) / np.spacing(np.abs(exact).astype(np.float32))
    new = not REPORT.exists()
    with REPORT.open("a") as f:
        if new:
            f.write("instruction\tsame bits as emulator\tGPU max error (ulp)\tGPU within bound\n")
        f.write(f"{case.name}\t{equal.mean():.4f}\t{np.nanmax(err_ulp[ok]):.2f}\t"
                f"{within_bound(case, gpu, exact)[ok].mean():.4f}\n")


@pytest.mark.parametrize("name", sorted(WARP_BODIES))
def test_warp_operation_matches_the_gpu(name):
    rng = np.random.default_rng(13)
    ins = tuple(rng.integers(0, 2**32, N, dtype=np.uint32) for _ in range(2))
    emu, gpu = (run_warp(name, device, ins)[1] for device in ("emu", "cuda"))
    assert (emu == gpu).all(), mismatch_report(name, ins, emu, gpu, "emu", "gpu")
