"""DeepSeek's DualPipe and friends: pipeline schedules, a checker/simulator with timeline pictures, and an
executor over torch.distributed that is a drop-in for deepseek-ai/DualPipe.

    from ptxforge.pipeline import DualPipe, DualPipeV, WeightGradStore, set_p2p_tensor_shapes, set_p2p_tensor_dtype

    # on every rank of an initialized process group (gloo for CPU stages, NCCL for CUDA stages):
    set_p2p_tensor_shapes([(micro_batch, seq, hidden)]); set_p2p_tensor_dtype(torch.float32)
    model = DualPipe((stage_r, stage_pp_minus_1_minus_r))
    loss, outputs = model.step(x, num_chunks=20, criterion=crit, labels=(y,))

    simulate("dualpipe", pp=8, num_chunks=20, costs=Costs(F=1, B=2, W=1, FB=3))   # no torch needed
    ptxforge.pipeline.timeline.to_svg(result, "dualpipe.svg")

`ptxforge.pipeline.launch.spawn(fn, world_size)` starts a local gloo world for trying it on one machine.
Schedules and the simulator need no torch; the executor names import torch on first use.
"""

from __future__ import annotations

import importlib

from ptxforge.pipeline.engine import Costs, SimResult, check, run
from ptxforge.pipeline.ops import Op, Schedule, ScheduleError
from ptxforge.pipeline.schedules import SCHEDULES, build_schedule, dualpipe, dualpipev, one_f_one_b, zb1p
from ptxforge.pipeline.simulator import compare, formula_row, simulate

_TORCH_NAMES = {
    "DualPipe": "ptxforge.pipeline.executor",
    "DualPipeV": "ptxforge.pipeline.executor",
    "OneFOneB": "ptxforge.pipeline.executor",
    "ZeroBubbleH1": "ptxforge.pipeline.executor",
    "PipelineExecutor": "ptxforge.pipeline.executor",
    "WeightGradStore": "ptxforge.pipeline.weight_grad",
    "run_backward": "ptxforge.pipeline.weight_grad",
    "set_p2p_tensor_shapes": "ptxforge.pipeline.comm",
    "set_p2p_tensor_dtype": "ptxforge.pipeline.comm",
}

__all__ = ["Costs", "SimResult", "check", "run", "Op", "Schedule", "ScheduleError", "SCHEDULES",
           "build_schedule", "dualpipe", "dualpipev", "one_f_one_b", "zb1p", "simulate", "compare",
           "formula_row", *_TORCH_NAMES]


def __getattr__(name: str):
    if name in _TORCH_NAMES:
        value = getattr(importlib.import_module(_TORCH_NAMES[name]), name)
        globals()[name] = value
        return value
    raise AttributeError(f"module 'ptxforge.pipeline' has no attribute {name!r}")
