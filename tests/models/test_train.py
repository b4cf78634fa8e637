"""Training the DeepSeek-V3-shaped model on 4 real gloo processes (DualPipe PP 2 x EP 2) against the same model,
weights and data in one process (`reference_losses`): the loss of every step, with BF16 and FP8 dispatch, with
the overlapped chunk on and off; a rank raising inside the overlapped chunk stops every rank.

Tolerance: none. The model computes in float32 and the losses of every step are equal bit for bit, BF16 and FP8
dispatch alike (measured over 20 steps, both backends): the reference multiplies each expert's rows one source
rank's micro-batch at a time as the EP ranks do (a float32 matmul's rows depend on how many rows it has), and
both runs sum every weight's per-micro-batch gradients in float64 (`ptxforge.models.grad64`), so the order of
the sums (DualPipe's schedule, the copies, the EP ranks) does not show. The FP8 cast is the same function of
the same rows on both sides, so it adds no difference either (docs/models.md).
"""

from __future__ import annotations

import os
import tempfile
import time
from dataclasses import replace

import pytest
import torch

from ptxforge.ep.spawn import run_ranks
from ptxforge.models.train import TrainConfig, TrainingStopped, reference_losses, train_rank
from ptxforge.models.transformer import ModelConfig

QUICK = TrainConfig(steps=3, model=ModelConfig(), timeout_s=60)  # float32


def _every_rank(cfg: TrainConfig) -> list[float]:
    res = run_ranks(train_rank, cfg.pp * cfg.ep, cfg, timeout_s=240)
    assert all(r["losses"] == res[0]["losses"] for r in res)  # every rank reports the same all-reduced loss
    assert [(r["pp_rank"], r["ep_rank"]) for r in res] == [(0, 0), (0, 1), (1, 0), (1, 1)]
    return res[0]["losses"]


@pytest.mark.parametrize("fp8", [False, True], ids=["bf16", "fp8"])
def test_pp2_ep2_loss_of_every_step_equals_one_process(fp8):
    cfg = replace(QUICK, fp8=fp8)
    losses = _every_rank(cfg)
    assert losses == reference_losses(cfg)  # bit for bit (see the module docstring)
    assert losses[-1] < losses[0] * 0.8  # it trains


def test_fp8_dispatch_changes_the_loss_a_little():
    """The FP8 cast is real: the first step's loss differs from BF16 dispatch's (measured 0.16%)."""
    bf16, fp8 = (reference_losses(replace(QUICK, steps=1, fp8=f))[0] for f in (False, True))
    assert 1e-4 < abs(fp8 - bf16) / bf16 < 1e-2, (bf16, fp8)


def test_pp4_ranks_holding_stages_of_different_sizes_equal_one_process():
    """PP 4: pipeline rank 0 holds the embedding and the head, rank 1 two middle stages (their gradients are
    summed over ranks whose parameter counts differ)."""
    cfg = replace(QUICK, pp=4, ep=1, steps=2, chunks=8, micro_batch=1, model=replace(QUICK.model, layers=4))
    res = run_ranks(train_rank, 4, cfg, timeout_s=240)
    assert res[0]["losses"] == reference_losses(cfg)


@pytest.mark.slow
@pytest.mark.parametrize("fp8, overlap", [(True, True), (False, False)], ids=["overlap-fp8", "synchronous-bf16"])
def test_twenty_steps_equal_one_process(fp8, overlap):
    """Two of the four combinations (each a 4-process world, the suite's largest); the overlapped and the
    synchronous chunk give bit-equal results (test_overlapped_chunk.py), and 3-step runs cover both dtypes."""
    cfg = replace(QUICK, steps=20, fp8=fp8, overlap=overlap)
    losses = _every_rank(cfg)
    assert losses == reference_losses(cfg)  # all 20 steps bit for bit, float32
    assert losses[-1] < losses[0] * 0.1


@pytest.mark.slow
@pytest.mark.parametrize("fp8", [False, True], ids=["bf16", "fp8"])
def test_kernels_backend_equals_one_process(fp8):
    """backend="kernels": the DSL communication kernels on emulated GPUs (synchronous calls)."""
    cfg = replace(QUICK, steps=2, fp8=fp8, backend="kernels", timeout_s=300)
    losses = _every_rank(cfg)
    assert losses == reference_losses(cfg)
    assert losses[-1] < losses[0]


def _failing_rank(rank: int, world: int, cfg: TrainConfig) -> dict:
    t0 = time.monotonic()
    try:
        train_rank(rank, world, cfg)
    except TrainingStopped as e:
        return {"error": str(e), "seconds": time.monotonic() - t0}
    return {"error": None, "seconds": time.monotonic() - t0}


def test_a_rank_raising_inside_the_overlapped_chunk_stops_every_rank(tmp_path, monkeypatch):
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))  # every process's temporary files: checked below
    shm = set(os.listdir("/dev/shm")) if os.path.isdir("/dev/shm") else set()
    cfg = replace(QUICK, fail_rank=3, fail_step=2, timeout_s=30)
    reps = run_ranks(_failing_rank, 4, cfg, timeout_s=120)
    for rank, rep in enumerate(reps):
        err = rep["error"]
        assert err is not None, f"rank {rank} finished its steps"
        assert err.startswith("rank 3 (pp 1, ep 1) failed in step 2: InjectedFault: fault injected on rank 3"), err
        assert rep["seconds"] < cfg.timeout_s, rep
        if rank != 3:
            assert f"so rank {rank} (pp {rank // 2}, ep {rank % 2}) stopped" in err, err
    assert os.listdir(tmp_path) == []
    if os.path.isdir("/dev/shm"):
        assert set(os.listdir("/dev/shm")) - shm == set()


def test_configuration_problems_are_named():
    bad = TrainConfig(pp=3, ep=3, chunks=3, steps=0)
    problems = "\n".join(bad.problems())
    for words in ("--pp 3: DualPipe needs an even number", "--ep 3: the 8 routed experts do not split evenly",
                  "--chunks 3", "--steps must be at least 1"):
        assert words in problems, problems
    assert TrainConfig().problems() == []


def test_the_reference_keeps_torch_threads():
    before = torch.get_num_threads()
    reference_losses(replace(QUICK, steps=1))
    assert torch.get_num_threads() == before
