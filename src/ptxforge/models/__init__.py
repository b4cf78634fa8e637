"""A small DeepSeek-V3-shaped model trained with DualPipe x expert parallelism over ptxforge.ep (docs/models.md):
the MoE block (`moe`), the transformer cut into pipeline stages with DualPipe's overlapped chunk
(`transformer`, `pieces`, `exchange`, `wire`) and the PP x EP training with its single-process reference
(`train`)."""

from ptxforge.models.moe import MoE, MoEConfig, balance_bias, route
from ptxforge.models.train import TrainConfig, TrainingStopped, reference_losses, train_rank
from ptxforge.models.transformer import InjectedFault, ModelConfig, Stage

__all__ = ["InjectedFault", "ModelConfig", "MoE", "MoEConfig", "Stage", "TrainConfig", "TrainingStopped",
           "balance_bias", "reference_losses", "route", "train_rank"]
