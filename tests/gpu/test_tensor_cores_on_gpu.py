"""The emulator's tensor-core summation model (fitted to recorded H200 results) on fresh inputs, against the GPU
itself: a check that the model generalizes beyond the data it was fitted on."""

import sys
from pathlib import Path

import numpy as np
import pytest
from conformance import mma_probes

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "emu"))  # emu_corpus, for the wgmma kernels

EXACT_MMA = ["f16_f32", "f16_f32_wide", "f16_f32_k8", "bf16_f32", "tf32_f32", "f16_f16", "s8_s32"]
EXACT_WGMMA = ["wgmma_f16_f32", "wgmma_bf16_f32_k32", "wgmma_tf32", "wgmma_f16acc_f16", "wgmma_f16acc_e4m3"]


@pytest.mark.parametrize("name", EXACT_MMA)
def test_mma_sync_model_on_fresh_inputs(name):
    probe = {p.name: p for p in mma_probes.PROBES}[name]
    emu, gpu = (probe.run(device, seed="/fresh")[1] for device in ("emu", "cuda"))
    assert (emu == gpu).all(), f"{np.count_nonzero(emu != gpu)} of {emu.size} words differ"


@pytest.mark.parametrize("name", EXACT_WGMMA)
def test_wgmma_model_on_fresh_inputs(name):
    probe = {p.name: p for p in mma_probes.WGMMA}[name]
    fresh = range(100, 104)  # seeds the recording did not use
    emu, gpu = (probe.run(device, fresh)[1] for device in ("emu", "cuda"))
    same = emu.view(np.uint8) == gpu.view(np.uint8)
    assert same.all(), f"{np.count_nonzero(~same)} bytes differ"
