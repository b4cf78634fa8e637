"""`ptxforge plan`: how many SMs expert-parallel dispatch/combine need on a cluster, and why.

    ptxforge plan --preset deepseek-v3-h800 [--PARAM VALUE ...] [--routing FILE | --scores random|skewed]
                  [--json] [--png FILE]

Every model parameter is an option (`--tokens 8192`, `--scaleout-gbs 100`); `--list` shows the presets and
the parameters with their values and sources.
"""

from __future__ import annotations

import argparse
import json
import sys

from ptxforge.plan.params import CHOICES, PARAM_NAMES


def _user_error(msg: str) -> Exception:
    from ptxforge.cli.main import UserError

    return UserError(msg)


class _StrictParams:
    """Mixed into the plan parser: an unknown `--PARAM` is an error that lists the valid ones."""

    def parse_known_args(self, args=None, namespace=None):
        ns, extras = super().parse_known_args(args, namespace)
        if extras:
            bad = next((a for a in extras if a.startswith("-")), extras[0])
            valid = ", ".join("--" + n.replace("_", "-") for n in PARAM_NAMES)
            self.exit(1, f"{self.prog}: error: unknown parameter {bad!r}; valid parameters: {valid} "
                         f"(and --preset, --routing, --scores, --seed, --json, --png, --list)\n")
        return ns, []


def _load(args: argparse.Namespace):
    from ptxforge.plan.presets import UnknownPreset, preset
    from ptxforge.plan.routing import apply, generate_scores, group_limited_topk, load_topk_ids, routing_stats

    overrides = {n: getattr(args, n) for n in PARAM_NAMES if getattr(args, n) is not None}
    try:
        params = preset(args.preset, **overrides)
    except UnknownPreset as e:
        raise _user_error(f"{e}") from None
    except (ValueError, TypeError) as e:
        raise _user_error(f"preset {args.preset}: {e}") from None
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
            raise _user_error(msg) from None
    return params, stats


def _cmd(args: argparse.Namespace) -> int:
    from ptxforge.plan.model import plan
    from ptxforge.plan.report import derivation, table, to_dict

    if args.list:
        return _list()
    params, stats = _load(args)
    try:
        res = plan(params, routing=stats)
    except ValueError as e:  # a pipeline the simulator rejects, named by its rule
        raise _user_error(f"preset {args.preset}: {e}") from None
    if args.png:
        from ptxforge.plan.plot import to_png

        try:
            to_png(res, args.png)
        except ImportError as e:
            raise _user_error(str(e)) from None
        except OSError as e:
            raise _user_error(f"cannot write {args.png}: {e.strerror or e}") from None
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
    from ptxforge.plan.presets import PRESETS

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


def register(subparsers) -> None:
    from ptxforge.plan.params import PARAM_TYPES
    from ptxforge.plan.presets import PRESETS

    p = subparsers.add_parser("plan", help="SMs for expert-parallel dispatch/combine: cost model and DualPipe overlap",
                              description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter,
                              allow_abbrev=False)
    p.__class__ = type("PlanParser", (_StrictParams, type(p)), {})
    p.add_argument("--preset", default="deepseek-v3-h800", metavar="NAME",
                   help=f"one of {', '.join(PRESETS)} (default deepseek-v3-h800)")
    p.add_argument("--json", action="store_true", help="print a JSON object instead of the table")
    p.add_argument("--png", metavar="FILE", help="write step time and link utilization vs SM budget (matplotlib)")
    p.add_argument("--routing", metavar="FILE", help="top-k expert ids (.npy or .pt, [T, k] or [R, T, k])")
    p.add_argument("--scores", choices=("random", "skewed"), help="route generated scores with the group-limited "
                                                                  "top-k instead of the average-case formula")
    p.add_argument("--seed", type=int, default=0, help="seed of --scores (default 0)")
    p.add_argument("--list", action="store_true", help="list the presets and parameters with their sources")
    g = p.add_argument_group("model parameters (default: the preset's)")
    for n in PARAM_NAMES:
        kind = PARAM_TYPES[n]
        dashed = "--" + n.replace("_", "-")
        names = [dashed] if "_" not in n else [dashed, "--" + n]
        g.add_argument(*names, dest=n, type=kind, default=None, metavar=kind.__name__.upper(),
                       choices=CHOICES.get(n))
    p.set_defaults(func=_cmd)
