"""Step time of the pipeline executor on CPU ranks (gloo): DualPipe vs 1F1B (and ZB1P, DualPipeV) on the same
model in the same run, with the measured bubble ratio next to the simulated one.

The model is L identical MLP blocks (SplitGradLinear, so W can be deferred). 1F1B/ZB1P/DualPipe split it into
R stages (DualPipe keeps two of them per rank), DualPipeV into 2R stages on R ranks; every schedule sees the
same global batch cut into the same micro-batches.

measured bubble = 1 - sum over ranks of time inside compute ops / (ranks * step time);
simulated bubble = the simulator's idle share for the same schedule with the per-op costs measured here.

    python benchmarks/pipeline_step.py [--ranks 4] [--chunks 16] [--hidden 256] [--steps 3]
"""

from __future__ import annotations

import argparse
import os
import platform
import statistics
import sys
import time

SCHEDULES = ("1f1b", "zb1p", "dualpipe", "dualpipev")


def _model(blocks: int, hidden: int, seed: int):
    import torch
    import torch.nn as nn
    import torch.nn.functional as F

    from ptxforge.pipeline.layers import SplitGradLinear

    class Block(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.up = SplitGradLinear(hidden, 4 * hidden, bias=False)
            self.down = SplitGradLinear(4 * hidden, hidden, bias=False)

        def forward(self, x):
            return x + self.down(F.gelu(self.up(x)))

    torch.manual_seed(seed)
    return [Block() for _ in range(blocks)]


def _stage(blocks):
    import torch.nn as nn

    class Stage(nn.Sequential):
        pass

    return Stage(*blocks)


def bench_rank(rank: int, world: int, cfg: dict) -> dict:
    import torch
    import torch.distributed as dist
    import torch.nn.functional as F

    from ptxforge.pipeline import (
        DualPipe,
        DualPipeV,
        OneFOneB,
        ZeroBubbleH1,
        set_p2p_tensor_dtype,
        set_p2p_tensor_shapes,
    )

    mb, seq, hidden, chunks = cfg["micro_batch"], cfg["seq"], cfg["hidden"], cfg["chunks"]
    blocks = _model(2 * world, hidden, seed=1)
    set_p2p_tensor_shapes([(mb, seq, hidden)])
    set_p2p_tensor_dtype(torch.float32)
    g = torch.Generator().manual_seed(2)
    x = torch.randn(chunks * mb, seq, hidden, generator=g)
    y = torch.randn(chunks * mb, seq, hidden, generator=g)

    def criterion(out, target):
        return F.mse_loss(out, target).clone()

    models: dict = {}
    for name in cfg["schedules"]:
        if name in ("1f1b", "zb1p"):  # R stages of 2 blocks, one per rank
            stage = _stage(blocks[2 * rank: 2 * rank + 2])
            model = (OneFOneB if name == "1f1b" else ZeroBubbleH1)(stage)
            args = dict(inp=x if rank == 0 else None, lab=y if rank == world - 1 else None)
        elif name == "dualpipe":  # R stages of 2 blocks, stages r and R-1-r on rank r
            s0 = _stage(blocks[2 * rank: 2 * rank + 2])
            o = world - 1 - rank
            s1 = _stage(blocks[2 * o: 2 * o + 2])
            model = DualPipe((s0, s1))
            half = lambda t, i: t.chunk(2)[i]  # noqa: E731
            args = dict(inp=half(x, 0) if rank == 0 else half(x, 1) if rank == world - 1 else None,
                        lab=half(y, 1) if rank == 0 else half(y, 0) if rank == world - 1 else None)
        else:  # dualpipev: 2R stages of 1 block, stages r and 2R-1-r on rank r
            model = DualPipeV((_stage([blocks[rank]]), _stage([blocks[2 * world - 1 - rank]])))
            args = dict(inp=x if rank == 0 else None, lab=y if rank == 0 else None)
        models[name] = (model, args)
    # interleave the schedules step by step so that background load hits them alike; step 0 warms up
    times: dict[str, list[float]] = {name: [] for name in models}
    for step in range(cfg["steps"] + 1):
        for name, (model, args) in models.items():
            model.zero_grad(set_to_none=True)
            model.trace = [] if step == cfg["steps"] else None
            dist.barrier()
            t0 = time.perf_counter()
            model.step(args["inp"], num_chunks=chunks, criterion=criterion, labels=(args["lab"],))
            dist.barrier()
            times[name].append(time.perf_counter() - t0)
    out: dict = {}
    for name, (model, _) in models.items():
        trace = [(op.kind, op.zb, t1 - t0_, cpu) for op, t0_, t1, cpu in model.trace]
        start = min(t for _, t, _, _ in model.trace)
        out[name] = {"times": times[name][1:], "trace": trace,
                     "trace_span": max(e for _, _, e, _ in model.trace) - start}
    return out


def _costs_from_traces(traces: list[list[tuple[str, bool, float, float]]], field: int):
    """Mean per-op costs; field 2 = wall-clock seconds, 3 = CPU seconds of the rank's thread."""
    from ptxforge.pipeline import Costs

    def mean(sel):
        vals = [e[field] for tr in traces for e in tr if sel(e[0], e[1])]
        return statistics.fmean(vals) if vals else None

    f = mean(lambda k, zb: k == "F")
    b_full = mean(lambda k, zb: k == "B" and not zb)
    b_in = mean(lambda k, zb: k == "B" and zb)
    w = mean(lambda k, zb: k == "W")
    fb = mean(lambda k, zb: k == "FB")
    if b_full is None:
        b_full = (b_in or 0) + (w or 0)
    w = w if w is not None else max(0.0, b_full - (b_in if b_in is not None else b_full))
    return Costs(f, max(b_full, w), w, fb)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--ranks", type=int, default=4)
    ap.add_argument("--chunks", type=int, default=16)
    ap.add_argument("--micro-batch", type=int, default=4)
    ap.add_argument("--seq", type=int, default=64)
    ap.add_argument("--hidden", type=int, default=256)
    ap.add_argument("--steps", type=int, default=3)
    ap.add_argument("--threads", type=int, default=1, help="torch threads per rank")
    ap.add_argument("--schedules", default=",".join(SCHEDULES))
    args = ap.parse_args(argv)
    sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "src"))
    from ptxforge.pipeline import simulate
    from ptxforge.pipeline.launch import spawn

    cfg = dict(micro_batch=args.micro_batch, seq=args.seq, hidden=args.hidden, chunks=args.chunks,
               steps=args.steps, schedules=args.schedules.split(","))
    t0 = time.time()
    load0 = os.getloadavg()[0]
    per_rank = spawn(bench_rank, args.ranks, cfg, threads=args.threads, timeout=1800)
    wall = time.time() - t0
    R = args.ranks
    print(f"pipeline_step: {R} gloo ranks x {args.threads} thread(s) on {os.cpu_count()} CPUs "
          f"({platform.processor() or platform.machine()}), {args.chunks} micro-batches of "
          f"{args.micro_batch}x{args.seq}x{args.hidden} fp32, model = {2 * R} MLP blocks, {args.steps} timed steps, "
          f"load average before/after {load0:.1f}/{os.getloadavg()[0]:.1f}")
    head = ("schedule", "ranks", "stages", "step ms", "vs 1F1B", "meas. bubble%", "sim bubble%", "sim ms",
            "op wall ms F/B/W/F&B", "sim(cpu) bubble%", "sim(cpu) ms", "op cpu ms F/B/W/F&B")
    rows = []
    base = None
    for name in cfg["schedules"]:
        step = statistics.median(max(r[name]["times"][i] for r in per_rank) for i in range(args.steps))
        base = base or (step if name == "1f1b" else None)
        traces = [r[name]["trace"] for r in per_rank]
        busy = [sum(e[2] for e in tr) for tr in traces]
        span = max(r[name]["trace_span"] for r in per_rank)
        measured = 1 - sum(busy) / (R * span)
        costs = _costs_from_traces(traces, 2)
        cpu_costs = _costs_from_traces(traces, 3)
        pp = 2 * R if name == "dualpipev" else R
        sim = simulate(name, pp, args.chunks, costs)
        sim_cpu = simulate(name, pp, args.chunks, cpu_costs)
        rows.append((name, str(R), str(pp), f"{1e3 * step:.1f}", f"{base / step:.2f}x" if base else "-",
                     f"{100 * measured:.1f}", f"{100 * sim.bubble_ratio:.1f}", f"{1e3 * sim.makespan:.1f}",
                     "/".join(f"{1e3 * v:.1f}" for v in (costs.F, costs.B, costs.W, costs.fb)),
                     f"{100 * sim_cpu.bubble_ratio:.1f}", f"{1e3 * sim_cpu.makespan:.1f}",
                     "/".join(f"{1e3 * v:.1f}" for v in (cpu_costs.F, cpu_costs.B, cpu_costs.W, cpu_costs.fb))))
    widths = [max(len(h), *(len(r[i]) for r in rows)) for i, h in enumerate(head)]
    print("  ".join(h.ljust(w) for h, w in zip(head, widths, strict=True)))
    for r in rows:
        print("  ".join(c.ljust(w) for c, w in zip(r, widths, strict=True)))
    print(f"(total wall {wall:.1f} s. meas. bubble: idle share of the traced step; sim: the simulator with the "
          "mean wall-clock op costs measured in this run; sim(cpu): with the ops' CPU-time costs, i.e. the "
          "same schedule on ranks that do not share cores)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
