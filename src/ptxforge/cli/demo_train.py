"""The training section of `ptxforge demo`: the small DeepSeek-V3-shaped model for a few steps on 4 gloo processes
(DualPipe PP 2 x EP 2, FP8 dispatch, the overlapped chunk), its loss against one process running the same
model, weights and data, the overlap fraction and the timeline picture. Needs torch (`ptxforge demo` imports
this module only when torch is installed)."""

from __future__ import annotations

import os
import tempfile
import time

from ptxforge.cli import train_cmd
from ptxforge.models.train import TrainConfig, reference_losses
from ptxforge.models.transformer import ModelConfig

STEPS = 4


def default_timeline_path() -> str:
    return os.path.join(tempfile.gettempdir(), "ptxforge_train_timeline.svg")


def train_section(picture: str | None = None) -> bool:
    """Train for STEPS steps and report; True when every step's loss equals one process's and the loss fell."""
    print("\n== training: DualPipe PP 2 x EP 2 on 4 gloo processes, FP8 dispatch overlapped with compute")
    cfg = TrainConfig(steps=STEPS, fp8=True, model=ModelConfig())  # float32
    ref = reference_losses(cfg)  # first: the ranks, forked from this process, find the routing kernel built
    t0 = time.perf_counter()
    res = train_cmd.spawned(cfg, record_steps=1, quiet=False)
    took = time.perf_counter() - t0
    worst = max(abs(a - b) / abs(b) for a, b in zip(res["losses"], ref, strict=True))
    fell = res["losses"][-1] < res["losses"][0]
    same = res["losses"] == ref  # bit for bit (docs/models.md)
    print(f"{STEPS} steps in {took:.1f} s; every step's loss against one process running the same model, weights "
          f"and data (float32): largest relative difference {worst:.1e} {'(bit-equal)' if same else 'MISMATCH'}; "
          f"the loss {'falls' if fell else 'DOES NOT FALL'}")
    train_cmd.report(res, cfg, picture or default_timeline_path(), None, 1)
    return same and fell
