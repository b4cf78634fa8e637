"""`ptxforge pipeline`: simulate pipeline schedules (1F1B, ZB1P, DualPipe, DualPipeV) and compare them with
DeepSeek's bubble/memory table; draw the timeline as PNG or SVG. (Its arguments and help: commands.py.)"""

from __future__ import annotations

import argparse

from ptxforge.cli.errors import UserError
from ptxforge.outputs import check_output, output_path
from ptxforge.pipeline import simulator
from ptxforge.pipeline.engine import Costs
from ptxforge.pipeline.ops import ScheduleError
from ptxforge.pipeline.simulator import APPROXIMATIONS, format_compare, formula_row
from ptxforge.pipeline.timeline import to_png, to_svg


def parse_costs(text: str, p2p: float = 0.0) -> Costs:
    """'F,B,W' or 'F,B,W,FB' (B = full backward, FB = overlapped forward&backward) -> Costs."""
    parts = [p.strip() for p in text.split(",")]
    if len(parts) not in (3, 4):
        raise UserError(f"--costs expects F,B,W or F,B,W,FB (e.g. 1,2,1,3), got {text!r}")
    try:
        vals = [float(p) for p in parts]
    except ValueError:
        raise UserError(f"--costs: every cost must be a number, got {text!r}") from None
    try:
        return Costs(vals[0], vals[1], vals[2], vals[3] if len(vals) == 4 else None, p2p)
    except ValueError as e:
        raise UserError(f"--costs: {e}") from None


def simulate(args: argparse.Namespace) -> int:
    """`ptxforge pipeline simulate`."""
    costs = parse_costs(args.costs, args.p2p)
    if args.svg:
        check_output(args.svg, "--svg")
    if args.png:
        check_output(args.png, "--png", {args.svg: "--svg"} if args.svg else {})
    try:
        res = simulator.simulate(args.schedule, args.pp, args.chunks, costs)
    except ScheduleError as e:
        raise UserError(str(e)) from None
    s = res.schedule
    f = formula_row(args.schedule, args.pp, costs)
    print(f"{s.name}: PP={args.pp} stages on {s.num_ranks} devices, {s.num_chunks} micro-batches, "
          f"costs F={costs.F:g} B={costs.B:g} W={costs.W:g} F&B={costs.fb:g} p2p={costs.p2p:g}")
    print(f"makespan {res.makespan:g}, bubble ratio {100 * res.bubble_ratio:.1f}%")
    print(f"max bubble {res.max_bubble:g} (table formula {f.bubble:g})")
    print(f"peak activations {max(res.peak_activation)} (formula {f.activation_memory}), "
          f"parameters {max(res.param_memory)}x (formula {f.param_memory}x)")
    print("rank  busy      bubble    peak-act")
    for r in range(s.num_ranks):
        print(f"{r:<5} {res.busy[r]:<9g} {res.bubble[r]:<9g} {res.peak_activation[r]}")
    print(f"note: {APPROXIMATIONS[args.schedule.lower().replace('-', '')]}")
    if args.ops:
        print(s.format())
    if args.svg:
        with output_path(args.svg, "--svg") as tmp:
            to_svg(res, tmp)
        print(f"wrote {args.svg}")
    if args.png:
        try:
            with output_path(args.png, "--png", {args.svg: "--svg"} if args.svg else {}) as tmp:
                to_png(res, tmp)
        except ImportError as e:
            raise UserError(str(e)) from None
        print(f"wrote {args.png}")
    return 0


def compare(args: argparse.Namespace) -> int:
    """`ptxforge pipeline compare`."""
    costs = parse_costs(args.costs, args.p2p)
    try:
        rows = simulator.compare(args.pp, args.chunks, costs)
    except ScheduleError as e:
        raise UserError(str(e)) from None
    print(f"PP={args.pp} stages, {args.chunks} micro-batches, costs F={costs.F:g} B={costs.B:g} W={costs.W:g} "
          f"F&B={costs.fb:g} p2p={costs.p2p:g}; bubble = max over ranks of idle time, memory in stage units")
    print(format_compare(rows))
    return 0
