"""GEMM time of one MoE layer's forward on the SMs the communication kernel leaves free.

Roofline: FLOPs / (peak of the dtype x efficiency x free SMs / all SMs). Measured figures (`expert_us`,
`attention_us`, on all SMs) replace the roofline where given; either way the time scales with the share of
SMs left. Expert FLOPs: 2 x 3 GEMMs (gate, up, down) x hidden x moe_intermediate per token copy, for the
top_k routed copies the busiest GPU receives (x imbalance) plus the shared experts of its own tokens.
"""

from __future__ import annotations

from dataclasses import dataclass

from ptxforge.plan.params import Params


@dataclass(frozen=True)
class Compute:
    expert_flops: float
    attention_flops: float
    expert_us_full: float      # on all SMs
    attention_us_full: float

    def time_us(self, p: Params, comm_sms: int) -> float:
        """Forward GEMM time when `comm_sms` SMs are taken by communication."""
        free = p.sms_per_gpu - comm_sms
        if free <= 0:
            return float("inf")
        return (self.expert_us_full + self.attention_us_full) * p.sms_per_gpu / free


def _peak(p: Params, dtype: str) -> float:
    return (p.fp8_tflops if dtype == "fp8" else p.bf16_tflops) * 1e12


def compute(p: Params) -> Compute:
    copies = p.tokens * (p.top_k * p.imbalance + p.shared_experts)
    expert_flops = 2.0 * 3 * p.hidden * p.moe_intermediate * copies
    attention_flops = p.tokens * p.attention_gflop_per_token * 1e9
    expert_us = p.expert_us or expert_flops / (_peak(p, p.expert_dtype) * p.gemm_efficiency) * 1e6
    attention_us = p.attention_us or attention_flops / (_peak(p, p.attention_dtype) * p.attention_efficiency) * 1e6
    return Compute(expert_flops, attention_flops, expert_us, attention_us)
