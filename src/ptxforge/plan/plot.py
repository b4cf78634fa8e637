"""The planner's picture: step time and link utilization against the SM budget (matplotlib, on demand)."""

from __future__ import annotations

from pathlib import Path

from ptxforge import _optional
from ptxforge.outputs import output_path
from ptxforge.plan.model import Plan
from ptxforge.plan.report import link_name


def to_png(res: Plan, path: str | Path, title: str | None = None, dpi: int = 100,
           inputs: dict[str, str] | None = None) -> None:
    """Write the plot to `path` as ptxforge.outputs does (atomically; never over one of `inputs`, {path: what}).
    `res` is a plan made with overlap (its step time per budget is what the plot shows)."""
    steps_us = [r.step_us for r in res.rows if r.step_us is not None]
    if res.best_sms is None or len(steps_us) != len(res.rows):
        raise ValueError("to_png plots the DualPipe step time per SM budget: make the plan with overlap=True")
    try:
        plt = _optional.pyplot()
    except ImportError as e:  # pragma: no cover - depends on the environment
        raise ImportError("--png needs matplotlib (pip install matplotlib)") from e
    xs = [r.sms for r in res.rows]
    fig, (top, bottom) = plt.subplots(2, 1, figsize=(8, 6.4), sharex=True,
                                      gridspec_kw={"height_ratios": [3, 2]})
    steps = [us / 1e3 for us in steps_us]
    top.plot(xs, steps, color="#1f4e79", marker="o", markersize=3, label="DualPipe step (ms)")
    lo = min(steps)
    top.set_ylim(lo * 0.95, min(max(steps), lo * 2.0))
    top.set_ylabel("step time (ms)")
    marks = [(res.sms, "#c0392b", f"sms={res.sms}: link saturated")]
    if res.best_sms == res.sms:
        marks = [(res.sms, "#c0392b", f"sms = best_sms = {res.sms}: link saturated, shortest step")]
    else:
        marks.append((res.best_sms, "#27ae60", f"best_sms={res.best_sms}: shortest step"))
    for i, (x, color, text) in enumerate(marks):
        for ax in (top, bottom):
            ax.axvline(x, color=color, linestyle="--", linewidth=1.2)
        top.text(x + 0.8, 0.93 - 0.09 * i, text, transform=top.get_xaxis_transform(), color=color, fontsize=9,
                 va="top", bbox={"facecolor": "white", "edgecolor": "none", "alpha": 0.8})
    hidden = [r.sms for r in res.rows if r.hidden]
    if hidden:
        top.axvspan(min(hidden) - 1, max(hidden) + 1, color="#eafaf1", zorder=0,
                    label="communication hidden in F&B")
    top.legend(loc="lower right", fontsize=9)
    top.grid(alpha=0.3)
    styles = [("#c0392b", "-", 3.0), ("#2e86c1", "--", 1.6), ("#8e44ad", ":", 1.6)]
    links = list(res.rows[0].utilization)
    series = {k: [100 * r.utilization[k] for r in res.rows] for k in links}
    same = len(links) == 2 and max(abs(a - b) for a, b in zip(*series.values(), strict=True)) < 0.5
    for i, k in enumerate(links):
        color, dash, width = styles[i % 3]
        label = f"{link_name(k)} busy"
        if same and i == 1:
            label += f" (same as {link_name(links[0])}: both links take equal time)"
        bottom.plot(xs, series[k], color=color, linestyle=dash, linewidth=width, label=label)
    bottom.set_ylim(0, 105)
    bottom.set_ylabel("link utilization (%)")
    bottom.set_xlabel("SMs given to dispatch/combine")
    bottom.legend(loc="lower right", fontsize=9)
    bottom.grid(alpha=0.3)
    p = res.params
    fig.suptitle(title or f"{p.gpus_per_node}x{p.nodes} GPUs, {p.tokens} tokens, top-{p.top_k} of {p.experts}: "
                          f"sms={res.sms}, best_sms={res.best_sms}, bottleneck {link_name(res.bottleneck)}",
                 fontsize=11)
    fig.tight_layout()
    try:
        with output_path(path, "--png", inputs) as out:
            fig.savefig(out, dpi=dpi, format="png")
    finally:
        plt.close(fig)
