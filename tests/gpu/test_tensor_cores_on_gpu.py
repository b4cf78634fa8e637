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
    regs = probe.inputs(seed="/fresh")
    outs = []
    for device in ("emu", "cuda"):
        d = np.zeros(probe.d_words, np.uint32)
        probe.kernel().launch(grid=(probe.warps,), block=(32,), args=[*regs, d], device=device)
        outs.append(d)
    assert (outs[0] == outs[1]).all(), f"{np.count_nonzero(outs[0] != outs[1])} of {outs[0].size} words differ"


@pytest.mark.parametrize("name", EXACT_WGMMA)
def test_wgmma_model_on_fresh_inputs(name):
    probe = {p.name: p for p in mma_probes.WGMMA}[name]
    k = probe.kernel()
    for repeat in range(100, 104):  # seeds the recording did not use
        outs = []
        for device in ("emu", "cuda"):
            args = probe.inputs(repeat)
            k.launch(grid=(1,), block=(128,), args=args, device=device)
            outs.append(args[probe.out])
        same = outs[0].view(np.uint8) == outs[1].view(np.uint8)
        assert same.all(), f"repeat {repeat}: {np.count_nonzero(~same)} bytes differ"
