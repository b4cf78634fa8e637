"""The planner: how many SMs dispatch/combine need, what that costs the GEMMs, and which budget gives the
shortest DualPipe step.

For each SM budget s (multiples of `sm_granularity`), one layer of one micro-batch costs
    compute(s)  = forward GEMMs on sms_per_gpu - s SMs                       (compute.py)
    dispatch(s) = max(bounding link time, SM copy work / s) + latency         (traffic.py), combine(s) alike
and a pipeline stage of `layers_per_stage` layers costs, for DualPipe's simulator:
    F  = L (compute + dispatch + combine)              a forward chunk alone: its communication is exposed
    B  = L (backward_ratio x compute + dispatch + combine)        backward: dgrad dispatch/combine mirrored
    W  = L (backward_ratio - 1) x compute              the weight-gradient GEMMs, no communication
    FB = L max((1 + backward_ratio) x compute, 2 (dispatch + combine))
         an overlapped forward & backward chunk: one chunk's communication runs under the other's GEMMs,
         so the pair takes the longer of the two (communication hidden when it is the GEMMs).
`sms` is the smallest budget whose copy rate keeps the bounding link saturated (times `headroom`);
`best_sms` is the budget with the shortest simulated step.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import TYPE_CHECKING

from ptxforge.pipeline.engine import Costs, run
from ptxforge.pipeline.ops import Schedule
from ptxforge.pipeline.schedules import build_schedule
from ptxforge.plan import traffic
from ptxforge.plan.compute import Compute, compute
from ptxforge.plan.deepep_v2 import V2Estimate, v2_num_sms
from ptxforge.plan.params import Params

if TYPE_CHECKING:  # the routing module imports the kernels; a plan without routing does not need them
    from ptxforge.plan.routing import RoutingStats


@dataclass(frozen=True)
class BudgetRow:
    """One SM budget: times per layer and micro-batch (us) and the simulated step (us)."""

    sms: int
    compute_us: float
    dispatch_us: float
    combine_us: float
    utilization: dict[str, float]
    hidden: bool
    step_us: float | None


@dataclass
class Plan:
    params: Params
    dispatch: traffic.Phase
    combine: traffic.Phase
    compute: Compute
    sms: int
    sms_exact: float
    best_sms: int | None
    rows: list[BudgetRow]
    v2: V2Estimate
    routing: RoutingStats | None = None
    v2_kernel_sms: int = 0  # this cluster with DeepEP V2's kernel design and per-SM rates (this model)

    @property
    def saturable(self) -> bool:
        """Whether the GPU has enough SMs to saturate the bounding link at all."""
        p = self.params
        return self.sms_exact * p.headroom <= p.sms_per_gpu - p.sm_granularity

    @property
    def bottleneck(self) -> str:
        d, c = self.dispatch, self.combine
        return c.bound_link if c.link_time_us > d.link_time_us else d.bound_link

    def row(self, sms: int) -> BudgetRow:
        return next(r for r in self.rows if r.sms == sms)

    @property
    def compute_slowdown(self) -> float:
        """How much longer the GEMMs take on the SMs left by `sms` (0.18 = 18% longer)."""
        return self.params.sms_per_gpu / (self.params.sms_per_gpu - self.sms) - 1


def saturating_sms(p: Params, phase: traffic.Phase) -> tuple[int, float]:
    """(budget, exact SMs): the smallest budget that keeps `phase`'s bounding link busy."""
    exact = phase.sms_exact(p)
    g = p.sm_granularity
    s = max(p.min_sms, math.ceil(exact * p.headroom - 1e-9))
    s = -(-s // g) * g
    return min(s, p.sms_per_gpu - g), exact


def _row(p: Params, d: traffic.Phase, c: traffic.Phase, comp: Compute, s: int,
         schedule: Schedule | None) -> BudgetRow:
    cu, du, bu = comp.time_us(p, s), d.time_us(p, s), c.time_us(p, s)
    util_d, util_c = d.utilization(p, s), c.utilization(p, s)
    # utilization over dispatch + combine together (time-weighted)
    util = {k: (util_d[k] * du + util_c[k] * bu) / (du + bu) for k in util_d}
    L, r = p.layers_per_stage, p.backward_ratio
    comm = du + bu
    hidden = 2 * comm <= (1 + r) * cu
    step = None
    if schedule is not None:
        costs = Costs(F=L * (cu + comm), B=L * (r * cu + comm), W=L * (r - 1) * cu,
                      FB=L * max((1 + r) * cu, 2 * comm))
        step = run(schedule, costs).makespan
    return BudgetRow(s, cu, du, bu, util, hidden, step)


def budgets(p: Params, sms: int) -> list[int]:
    g = p.sm_granularity
    top = min(p.sms_per_gpu - g, max(64, 2 * sms))
    return list(range(g, top + 1, g))


def plan(p: Params, overlap: bool = True, routing: RoutingStats | None = None) -> Plan:
    """Evaluate `p`: per-link times, the saturating budget, and (with `overlap`) DualPipe step per budget."""
    d, c, comp = traffic.dispatch(p), traffic.combine(p), compute(p)
    (sd, ed), (sc, ec) = saturating_sms(p, d), saturating_sms(p, c)
    sms, exact = (sd, ed) if (sd, ed) >= (sc, ec) else (sc, ec)
    schedule = build_schedule("dualpipe", p.pp, p.micro_batches) if overlap else None
    rows = [_row(p, d, c, comp, s, schedule) for s in budgets(p, sms)]
    best = min(rows, key=lambda r: (r.step_us, r.sms)).sms if overlap else None
    v2 = v2_num_sms(p.experts, p.top_k, p.nodes, p.gpus_per_node, p.scaleout_gbs, p.nvlink_gbs, p.sms_per_gpu,
                    p.tma_read_gbs, p.tma_write_gbs)
    return Plan(p, d, c, comp, sms, exact, best, rows, v2, routing, v2_kernel_sms(p))


def v2_kernel_sms(p: Params) -> int:
    """The saturating budget of this cluster with DeepEP V2's kernel (direct writes, TMA rates, pooled)."""
    q = p.with_(kernel_design="deepep-v2", copy_engine="tma", sm_layout="pooled")
    return max(saturating_sms(q, traffic.dispatch(q))[0], saturating_sms(q, traffic.combine(q))[0])
