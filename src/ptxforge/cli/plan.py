"""`ptxforge plan`: how many SMs expert-parallel dispatch/combine need on a cluster, and why.

Its usage and arguments (every model parameter is an option) are in commands.py.
"""

from __future__ import annotations

import argparse
import json
import sys

from ptxforge.cli import plan_measured
from ptxforge.cli.errors import UserError
from ptxforge.outputs import check_output
from ptxforge.plan import model
from ptxforge.plan.params import PARAM_NAMES, Params
from ptxforge.plan.plot import to_png
from ptxforge.plan.presets import PRESETS, UnknownPreset, preset
from ptxforge.plan.report import derivation, table, to_dict
from ptxforge.plan.routing import RoutingStats, apply, generate_scores, group_limited_topk, load_topk_ids, routing_stats


def _load(args: argparse.Namespace) -> tuple[Params, RoutingStats | None]:
    overrides = {n: getattr(args, n) for n in PARAM_NAMES if getattr(args, n) is not None}
    try:
        params = preset(args.preset, **overrides)
    except UnknownPreset as e:
        raise UserError(f"{e}") from None
    except (ValueError, TypeError) as e:
        raise UserError(f"preset {args.preset}: {e}") from None
    stats = None
    if args.routing or args.scores:
        try:
            if args.routing:
                ids = load_topk_ids(args.routing)
            else:
                scores = generate_scores(params.tokens, params.experts, args.scores, args.seed)
                groups = min(params.node_limit or params.nodes, params.nodes)
                ids, _ = group_limited_topk(scores, n_group=params.nodes, topk_group=groups, top_k=params.top_k)
            stats = routing_stats(ids, params.experts, params.gpus_per_node, params.nodes)
            params = apply(params, stats)
        except ValueError as e:
            where = args.routing or f"--scores {args.scores}"
            msg = str(e) if str(e).startswith(str(where)) else f"{where}: {e}"
            raise UserError(msg) from None
    return params, stats


def run(args: argparse.Namespace) -> int:
    if args.list:
        return _list()
    if args.measured:
        return plan_measured.run(args)
    if args.svg or args.schedule:
        raise UserError(f"{'--svg' if args.svg else '--schedule'} goes with --measured SPANS.json")
    inputs = {args.routing: "--routing"} if args.routing else {}
    if args.png:
        check_output(args.png, "--png", inputs)
    params, stats = _load(args)
    try:
        res = model.plan(params, routing=stats)
    except ValueError as e:  # a pipeline the simulator rejects, named by its rule
        raise UserError(f"preset {args.preset}: {e}") from None
    if args.png:
        try:
            to_png(res, args.png, inputs=inputs)
        except ImportError as e:
            raise UserError(str(e)) from None
    if args.json:
        json.dump(to_dict(res, args.preset), sys.stdout, indent=1)
        sys.stdout.write("\n")
        return 0
    print(f"preset {args.preset}" + (f" with {args.routing or args.scores + ' scores'} routing" if stats else ""))
    if stats is not None:
        print(f"routing: {stats.nodes_per_token:.2f} nodes per token ({stats.remote_nodes_per_token:.2f} remote), "
              f"{stats.gpus_per_node_copy:.2f} GPUs per node copy; node dedup keeps "
              f"{100 * stats.saved_fraction:.0f}% of {stats.remote_expert_copies:.2f} remote expert copies off "
              f"{params.scaleout_name}; busiest GPU receives {stats.imbalance_gpu:.2f}x the mean "
              f"(node {stats.imbalance_node:.2f}x)")
    print(table(res))
    print()
    for line in derivation(res):
        print(line)
    if args.png:
        print(f"wrote {args.png}")
    return 0


def _list() -> int:
    for p in PRESETS.values():
        print(f"{p.name}: {p.description}")
        for k, v in p.changes.items():
            print(f"    --{k.replace('_', '-')} {v}   ({p.source(k)})")
    base = PRESETS["deepseek-v3-h800"]
    print("\nparameters (deepseek-v3-h800 values and sources):")
    params = base.params
    for n in PARAM_NAMES:
        print(f"  --{n.replace('_', '-')} {getattr(params, n)}   ({base.source(n)})")
    return 0
