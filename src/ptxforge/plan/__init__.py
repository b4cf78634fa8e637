"""The planner: a cost model of one MoE layer's dispatch/combine on a cluster that says how many SMs the
communication kernel needs to saturate its links, what the GEMMs lose, and which budget gives the
shortest DualPipe step.

    from ptxforge.plan import PRESETS, plan, preset
    result = plan(preset("deepseek-v3-h800"))
    result.sms, result.best_sms, result.bottleneck        # 24, ..., "ib"

Modules: params (named parameters), presets (figures with sources), traffic (bytes per link and per SM
role), compute (GEMM roofline), model (budgets and the DualPipe simulation), routing (DeepSeek-V3's
group-limited top-k and routing statistics), report (table, derivation in words, JSON), plot (PNG).
See docs/plan.md for the derivations.
"""

from ptxforge.plan.model import BudgetRow, Plan, plan
from ptxforge.plan.params import PARAM_NAMES, Params
from ptxforge.plan.presets import PRESETS, preset

__all__ = ["BudgetRow", "Plan", "plan", "Params", "PARAM_NAMES", "PRESETS", "preset"]
