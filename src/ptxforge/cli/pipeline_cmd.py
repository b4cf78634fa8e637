"""`ptxforge pipeline`: simulate pipeline schedules (1F1B, ZB1P, DualPipe, DualPipeV) and compare them with
DeepSeek's bubble/memory table; draw the timeline as PNG or SVG."""

from __future__ import annotations

import argparse

from ptxforge.pipeline.engine import Costs
from ptxforge.pipeline.ops import ScheduleError
from ptxforge.pipeline.schedules import SCHEDULES
from ptxforge.pipeline.simulator import APPROXIMATIONS, compare, format_compare, formula_row, simulate


def _user_error(msg: str) -> Exception:
    from ptxforge.cli.main import UserError

    return UserError(msg)


def parse_costs(text: str, p2p: float = 0.0) -> Costs:
    """'F,B,W' or 'F,B,W,FB' (B = full backward, FB = overlapped forward&backward) -> Costs."""
    parts = [p.strip() for p in text.split(",")]
    if len(parts) not in (3, 4):
        raise _user_error(f"--costs expects F,B,W or F,B,W,FB (e.g. 1,2,1,3), got {text!r}")
    try:
        vals = [float(p) for p in parts]
    except ValueError:
        raise _user_error(f"--costs: every cost must be a number, got {text!r}") from None
    try:
        return Costs(vals[0], vals[1], vals[2], vals[3] if len(vals) == 4 else None, p2p)
    except ValueError as e:
        raise _user_error(f"--costs: {e}") from None


def _cmd_simulate(args: argparse.Namespace) -> int:
    from ptxforge.cli.common import atomic_path, check_writable

    costs = parse_costs(args.costs, args.p2p)
    for opt, path in (("--svg", args.svg), ("--png", args.png)):
        if path:
            check_writable(path, opt)
    try:
        res = simulate(args.schedule, args.pp, args.chunks, costs)
    except ScheduleError as e:
        raise _user_error(str(e)) from None
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
        from ptxforge.pipeline.timeline import to_svg

        with atomic_path(args.svg, "--svg") as tmp:
            to_svg(res, tmp)
        print(f"wrote {args.svg}")
    if args.png:
        from ptxforge.pipeline.timeline import to_png

        try:
            with atomic_path(args.png, "--png") as tmp:
                to_png(res, tmp)
        except ImportError as e:
            raise _user_error(str(e)) from None
        print(f"wrote {args.png}")
    return 0


def _cmd_compare(args: argparse.Namespace) -> int:
    costs = parse_costs(args.costs, args.p2p)
    try:
        rows = compare(args.pp, args.chunks, costs)
    except ScheduleError as e:
        raise _user_error(str(e)) from None
    print(f"PP={args.pp} stages, {args.chunks} micro-batches, costs F={costs.F:g} B={costs.B:g} W={costs.W:g} "
          f"F&B={costs.fb:g} p2p={costs.p2p:g}; bubble = max over ranks of idle time, memory in stage units")
    print(format_compare(rows))
    return 0


def register(subparsers) -> None:
    p = subparsers.add_parser("pipeline", help="simulate and compare pipeline schedules (DualPipe, 1F1B, ...)",
                              description=__doc__)
    sub = p.add_subparsers(dest="pipeline_command", metavar="SUBCOMMAND")

    def common(q: argparse.ArgumentParser, chunks_default: int) -> None:
        q.add_argument("--pp", type=int, default=8, help="pipeline stages (DualPipeV uses PP/2 devices)")
        q.add_argument("--chunks", type=int, default=chunks_default, help="micro-batches per step")
        q.add_argument("--costs", default="1,2,1,3",
                       help="F,B,W[,FB]: forward, full backward, weight-gradient part, overlapped F&B "
                            "(default 1,2,1,3; FB defaults to F+B)")
        q.add_argument("--p2p", type=float, default=0.0, help="latency of one p2p message (default 0)")

    s = sub.add_parser("simulate", help="simulate one schedule; optional timeline picture")
    s.add_argument("--schedule", choices=SCHEDULES, default="dualpipe", type=str.lower)
    common(s, 20)
    s.add_argument("--png", metavar="FILE", help="write the timeline as PNG (needs matplotlib)")
    s.add_argument("--svg", metavar="FILE", help="write the timeline as SVG")
    s.add_argument("--ops", action="store_true", help="also print every rank's compute op list")
    s.set_defaults(func=_cmd_simulate)

    c = sub.add_parser("compare", help="all schedules side by side, with DeepSeek's table formulas")
    common(c, 20)
    c.set_defaults(func=_cmd_compare)

    def no_sub(args: argparse.Namespace) -> int:
        p.print_help()
        return 1

    p.set_defaults(func=no_sub)
