"""Simulate schedules and set them next to DeepSeek's bubble/memory table.

The table (DeepSeek-V3 report, deepseek-ai/DualPipe README), PP = pipeline stages, B = full backward:

    1F1B       bubble (PP-1)(F+B)            params 1x  activations PP    devices PP
    ZB1P       bubble (PP-1)(F+B-2W)         params 1x  activations PP    devices PP
    DualPipe   bubble (PP/2-1)(F&B+B-3W)     params 2x  activations PP+1  devices PP
    DualPipeV  bubble (PP/2-1)(F&B+B-3W)     params 2x  activations PP+1  devices PP/2

Our simulator reproduces it as follows (bubble = max over ranks of makespan - busy time, p2p latency 0,
micro-batches >= 2*PP; memory = peak over ranks, in units of one stage's activations per micro-batch and one
stage's parameters). Where the formula is an approximation, APPROXIMATIONS says so:
"""

from __future__ import annotations

from dataclasses import dataclass

from ptxforge.pipeline.engine import Costs, SimResult, run
from ptxforge.pipeline.ops import Schedule
from ptxforge.pipeline.schedules import SCHEDULES, build_schedule

APPROXIMATIONS = {
    "1f1b": "exact for all costs",
    "zb1p": "exact when W <= F; otherwise W no longer fits the gaps and the bubble is (PP-1)(F+B-W-min(F,W))",
    "dualpipe": "exact when F = B-W (forward and backward-for-input take equal time, as in DeepSeek's figure); "
                "with F&B = F+B and F > B-W the bubble is larger by (PP/2)(F-(B-W)), with F < B-W it is smaller; "
                "with F&B < F+B the formula is the largest per-rank bubble (the turning ranks overlap one pair "
                "less, so ranks differ)",
    "dualpipev": "as DualPipe, with PP counting stages (PP/2 ranks)",
}
__doc__ += "\n".join(f"    {k}: {v}" for k, v in APPROXIMATIONS.items())


@dataclass(frozen=True)
class FormulaRow:
    """One row of DeepSeek's table evaluated for concrete costs."""

    schedule: str
    bubble: float
    param_memory: int
    activation_memory: int
    devices: int


def _key(name: str) -> str:
    key = name.lower().replace("-", "").replace("_", "")
    return "zb1p" if key == "zbh1" else key


def formula_row(name: str, pp: int, costs: Costs) -> FormulaRow:
    """DeepSeek's table row for schedule `name` with `pp` stages."""
    key = _key(name)
    F, B, W, FB = costs.F, costs.B, costs.W, costs.fb
    if key == "1f1b":
        return FormulaRow(key, (pp - 1) * (F + B), 1, pp, pp)
    if key == "zb1p":
        return FormulaRow(key, (pp - 1) * (F + B - 2 * W), 1, pp, pp)
    if key in ("dualpipe", "dualpipev"):
        return FormulaRow(key, (pp / 2 - 1) * (FB + B - 3 * W), 2, pp + 1, pp if key == "dualpipe" else pp // 2)
    raise ValueError(f"unknown schedule {name!r}; choose one of {', '.join(SCHEDULES)}")


def simulate(schedule: str | Schedule, pp: int | None = None, num_chunks: int | None = None,
             costs: Costs | None = None) -> SimResult:
    """Check and simulate a schedule (a Schedule, or a name with pp stages and num_chunks micro-batches)."""
    if isinstance(schedule, str):
        if pp is None or num_chunks is None:
            raise ValueError("simulate(name, pp, num_chunks): pp and num_chunks are required with a name")
        schedule = build_schedule(schedule, pp, num_chunks)
    return run(schedule, costs or Costs())


@dataclass(frozen=True)
class CompareRow:
    schedule: str
    devices: int
    makespan: float
    bubble: float
    formula_bubble: float
    bubble_ratio: float
    param_memory: int
    activation_memory: int
    formula_activation: int


def compare(pp: int, num_chunks: int, costs: Costs | None = None,
            schedules: tuple[str, ...] = SCHEDULES) -> list[CompareRow]:
    """Simulate every schedule for `pp` stages and `num_chunks` micro-batches, with the table's formulas."""
    costs = costs or Costs()
    rows = []
    for name in schedules:
        res = simulate(name, pp, num_chunks, costs)
        f = formula_row(name, pp, costs)
        rows.append(CompareRow(res.schedule.name, res.schedule.num_ranks, res.makespan, res.max_bubble,
                               f.bubble, res.bubble_ratio, max(res.param_memory), max(res.peak_activation),
                               f.activation_memory))
    return rows


def format_compare(rows: list[CompareRow]) -> str:
    """A fixed-width table of `compare()` rows."""
    head = ("schedule", "devices", "makespan", "bubble", "formula", "bubble%", "params", "act", "act formula")
    body = [(r.schedule, str(r.devices), f"{r.makespan:g}", f"{r.bubble:g}", f"{r.formula_bubble:g}",
             f"{100 * r.bubble_ratio:.1f}", f"{r.param_memory}x", str(r.activation_memory),
             str(r.formula_activation)) for r in rows]
    widths = [max(len(h), *(len(b[i]) for b in body)) for i, h in enumerate(head)]
    lines = ["  ".join(h.ljust(w) for h, w in zip(head, widths, strict=True))]
    lines.append("  ".join("-" * w for w in widths))
    lines += ["  ".join(c.ljust(w) for c, w in zip(b, widths, strict=True)) for b in body]
    return "\n".join(lines)
