"""The emulator against results recorded on a real GPU (tests/conformance/data/hw_reference_h200.npz, written
by scripts/gpu_collect.py on an H200): every fully specified instruction, video instruction and warp
operation bit for bit; mma.sync's and wgmma's f16/bf16/tf32 accumulation into f32 and f16, and fp8 wgmma into
f16, bit for bit; the forms whose summation is not fully fitted (fp8 into f32) by the share of results that
already agree.

Inputs are regenerated from the seeds the recording used; a digest of them, stored beside each result,
proves they are the same inputs.
"""

from pathlib import Path

import numpy as np
import pytest
from conformance import hw_ops, mma_probes

DATA = Path(__file__).resolve().parents[1] / "conformance" / "data" / "hw_reference_h200.npz"
HW = np.load(DATA)
N = hw_ops.REFERENCE_N


def recorded(key: str, inputs) -> np.ndarray:
    if key not in HW.files:
        pytest.fail(f"{key} is not in {DATA.name}: record it with scripts/gpu_collect.py on a GPU")
    dkey = "in/" + key.removeprefix("op/")  # gpu_collect.py's names for the input digests
    assert bytes(HW[dkey]).decode() == hw_ops.digest(inputs), f"{key}: the regenerated inputs differ"
    return HW[key]


def test_the_recording_names_its_gpu():
    assert bytes(HW["meta/gpu"]).decode().startswith("NVIDIA H200|sm_90a")


@pytest.mark.parametrize("case", hw_ops.EXACT, ids=lambda c: c.name)
def test_instruction_matches_the_h200(case):
    ins, got = hw_ops.run_case(case, "emu")
    want = recorded(f"op/{case.name}", ins)
    assert hw_ops.same_bits(got, want).all(), hw_ops.mismatch_report(case.name, ins, got, want)


@pytest.mark.parametrize("case", hw_ops.APPROX, ids=lambda c: c.name)
def test_approximate_instruction_recording_meets_the_manual(case):
    """The recorded H200 results of the approximate instructions meet the manual's bounds (the emulator's
    own results are checked against the same bounds in test_hw_op_kernels.py; their bits differ)."""
    ins = case.make_inputs(N, hw_ops.case_rng(case.name))
    want = recorded(f"op/{case.name}", ins)
    exact = hw_ops.reference(case, ins)
    ok = hw_ops.checkable(case, exact)
    assert ok.sum() > N // 2 and hw_ops.within_bound(case, want, exact)[ok].all()


@pytest.mark.parametrize("name", sorted(hw_ops.WARP_BODIES))
def test_warp_operation_matches_the_h200(name):
    ins, got = hw_ops.run_warp(name, "emu")
    want = recorded(f"warp/{name}", ins)
    assert (got == want).all(), hw_ops.mismatch_report(name, ins, got, want)


RECORDED_MMA = [p for p in mma_probes.PROBES if f"mma/{p.name}" in HW.files and "e4m3" not in p.name]


@pytest.mark.parametrize("probe", RECORDED_MMA, ids=lambda p: p.name)
def test_mma_sync_matches_the_h200(probe):
    regs, got = probe.run("emu")
    want = recorded(f"mma/{probe.name}", regs)
    assert (got == want).all(), f"{probe.name}: {np.count_nonzero(got != want)} of {got.size} words differ"


def test_recording_covers_the_main_mma_forms():
    assert {p.name for p in RECORDED_MMA} >= {"f16_f32", "f16_f32_wide", "f16_f32_k8", "bf16_f32", "tf32_f32",
                                               "f16_f16", "s8_s32"}


@pytest.mark.parametrize("H, pad", hw_ops.TMA_PADDINGS)
def test_tma_store_padding_matches_the_h200(H, pad):
    """A TMA tile store writes dimension 0 in 16-byte pieces: past a 70-float row, 2 more floats are written."""
    got, want = hw_ops.run_tma_transpose(H, pad, "emu"), HW[f"tma/transpose_{H}_{pad}"]
    np.testing.assert_array_equal(got, want)
    assert (want[:100, H:-(-H // 4) * 4] == 0).all() and (want[:100, -(-H // 4) * 4:] == -7.5).all()


def _run_wgmma(probe):
    ins, got = probe.run("emu")
    want = recorded(f"wgmma/{probe.name}", ins)
    same = (got.view(np.uint8).reshape(got.size, -1) == want.view(np.uint8).reshape(want.size, -1)).all(1)
    return same.mean()


WGMMA = {p.name: p for p in mma_probes.WGMMA}


@pytest.mark.parametrize("name", ["wgmma_f16_f32", "wgmma_bf16_f32_k32", "wgmma_tf32", "wgmma_f16acc_f16",
                                  "wgmma_f16acc_e4m3"])
def test_wgmma_matches_the_h200(name):
    assert _run_wgmma(WGMMA[name]) == 1.0


# Forms whose hardware summation is not yet fitted: the share of the recorded results the emulator gives bit
# for bit, so that a change that moves the emulator away from the hardware fails here.
PARTIAL = {"wgmma_e4m3_e5m2": 0.77, "wgmma_e4m3_e5m2_structured": 0.98}


@pytest.mark.parametrize("name", sorted(PARTIAL))
def test_wgmma_forms_not_yet_fitted_stay_close(name):
    assert _run_wgmma(WGMMA[name]) >= PARTIAL[name]


@pytest.mark.parametrize("name, share", [("e4m3_f32", 0.55), ("e5m2_e4m3_f32", 0.55)])
def test_fp8_mma_sync_not_yet_fitted_stays_close(name, share):
    regs, got = {p.name: p for p in mma_probes.PROBES}[name].run("emu")
    assert (got == recorded(f"mma/{name}", regs)).mean() >= share
