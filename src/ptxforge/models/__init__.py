"""A small DeepSeek-V3-shaped model over ptxforge.ep (a start: the MoE block, `ptxforge.models.moe`)."""

from ptxforge.models.moe import MoE, MoEConfig, balance_bias, route

__all__ = ["MoE", "MoEConfig", "balance_bias", "route"]
