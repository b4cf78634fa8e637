"""DualPipeV on CUDA tensors with the NCCL backend, in a real torch.distributed process. One GPU allows one
NCCL rank (NCCL refuses two ranks on one device), so this runs the single-rank V pipeline: both stages on
the GPU, the schedule, the executor's CUDA tensor handling and the backend check, against the
single-process reference (losses and outputs bit-equal, gradients within cosine difference 1e-13)."""

import sys
from pathlib import Path

import pytest

torch = pytest.importorskip("torch")
if not torch.cuda.is_available():
    pytest.skip("torch sees no GPU", allow_module_level=True)

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "pipeline"))
import pipeline_world  # noqa: E402

from ptxforge.pipeline.launch import spawn  # noqa: E402


def one_rank(rank: int, world: int) -> dict:
    return pipeline_world.scenario("dualpipev", 1, 4, pipeline_world.OverlapStage, None, 0, 7, device="cuda")


def test_dualpipev_on_nccl_matches_the_single_process_reference():
    (rep,) = spawn(one_rank, 1, backend="nccl", timeout=240)
    assert rep["train_loss_equal"] and rep["train_outputs_none"] and rep["train_outputs_equal"]
    assert rep["grad_cos_diff"] <= 1e-13
    assert rep["infer_equal"] and rep["infer_no_grads"]
    assert rep["bad_chunks_error"]
