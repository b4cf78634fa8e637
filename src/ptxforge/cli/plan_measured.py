"""`ptxforge plan --measured spans.json`: a measured run's per-op costs, the step and overlap the planner and
the pipeline simulator predict from them, and the measured ones beside them (text, JSON, picture)."""

from __future__ import annotations

import argparse
import json
import sys
from typing import Any

from ptxforge.cli.errors import UserError
from ptxforge.outputs import check_output, output_path
from ptxforge.pipeline.ops import ScheduleError
from ptxforge.pipeline.trace_spans import TraceFileError, load_trace, overlap_fraction
from ptxforge.pipeline.trace_timeline import to_png, to_svg
from ptxforge.plan.measured import (
    MeasuredCosts,
    Prediction,
    Replay,
    caption,
    measured_costs,
    predict,
    replay,
    report,
)


def _size(args: argparse.Namespace, meta: dict[str, Any], flag: str, key: str, *meta_keys: str) -> int | None:
    value = getattr(args, key)
    if value is not None:
        return value
    for k in meta_keys:
        v = meta.get(k)
        if v is not None:
            if not isinstance(v, int) or isinstance(v, bool):
                raise UserError(f"{args.measured}: meta {k} must be an integer, got {v!r} (or give {flag})")
            return v
    return None


def run(args: argparse.Namespace) -> int:
    path = args.measured
    outputs = {path: "--measured"}
    if args.svg:
        check_output(args.svg, "--svg", outputs)
        outputs[args.svg] = "--svg"
    if args.png:
        check_output(args.png, "--png", outputs)
    try:
        spans, meta = load_trace(path)
    except TraceFileError as e:
        raise UserError(str(e)) from None
    if args.warmup_steps < 0:
        raise UserError(f"--warmup-steps must be >= 0, got {args.warmup_steps}")
    steps = meta.get("steps")
    mc = measured_costs(spans, args.warmup_steps, steps if isinstance(steps, int) and steps > 0 else None)
    schedule = args.schedule or str(meta.get("schedule", "dualpipev"))
    pp = _size(args, meta, "--pp", "pp", "pp", "pp_ranks")
    chunks = _size(args, meta, "--micro-batches", "micro_batches", "num_chunks", "micro_batches")
    pred = None
    rp: Replay | None = None
    if pp is None or chunks is None:
        missing = " and ".join(f for f, v in (("--pp", pp), ("--micro-batches", chunks)) if v is None)
        note = f"no prediction: give {missing} (the spans file's meta does not say)"
    else:
        try:
            pred = predict(mc, schedule, pp, chunks)
            ep = meta.get("ep", 1)
            rp = replay(spans, mc, schedule, pp, chunks, ep if isinstance(ep, int) and ep > 0 else 1,
                        args.warmup_steps)
            note = ""
        except (ValueError, ScheduleError) as e:
            raise UserError(f"{path}: {schedule} with {pp} pipeline ranks and {chunks} micro-batches: {e}") from None
    if args.json:
        json.dump(_as_dict(mc, pred, spans, rp), sys.stdout, indent=1)
        sys.stdout.write("\n")
    else:
        print(f"{path}: {len(spans)} spans")
        print("\n".join(report(mc, pred, spans, rp)))
        if note:
            print(note)
    lines = caption(mc, pred, spans) if pred is not None else []
    if args.svg:
        with output_path(args.svg, "--svg", {path: "--measured"}) as tmp:
            to_svg(spans, tmp, caption=lines)
        if not args.json:
            print(f"wrote {args.svg}")
    if args.png:
        try:
            with output_path(args.png, "--png", outputs) as tmp:
                to_png(spans, tmp, caption=lines)
        except ImportError as e:
            raise UserError(str(e)) from None
        if not args.json:
            print(f"wrote {args.png}")
    return 0


def _as_dict(mc: MeasuredCosts, pred: Prediction | None, spans, rp: Replay | None = None) -> dict[str, Any]:
    ops = {k: {"count": c.count, "duration_s": c.duration, "compute_s": c.compute, "comm_s": c.comm,
               "exposed_s": c.exposed, "dispatch_calls": c.dispatch_calls, "combine_calls": c.combine_calls}
           for k, c in mc.ops.items()}
    out: dict[str, Any] = {"ops": ops, "dispatch_s": mc.dispatch, "combine_s": mc.combine,
                           "measured_step_s": mc.step, "steps": mc.steps, "gap_s": mc.gap, "ranks": mc.ranks,
                           "measured_overlap": overlap_fraction(spans), "notes": mc.notes, "prediction": None}
    if pred is not None:
        out["prediction"] = {"schedule": pred.schedule, "pp": pred.pp, "num_chunks": pred.num_chunks,
                             "step_s": pred.step, "step_measured_fb_s": pred.step_measured_fb,
                             "step_planner_s": pred.step_planner, "step_serial_s": pred.step_serial,
                             "fb_planner_s": pred.fb_planner, "overlap": pred.overlap_planner}
    if rp is not None:
        out["replay"] = {"step_s": rp.step, "steps_s": rp.steps, "ep_wait_s": rp.ep_wait, "p2p_wait_s": rp.p2p_wait,
                         "p2p_wait_replayed_s": rp.p2p_wait_replayed}
    return out
