"""DualPipe's overlapped forward-and-backward chunk of `ptxforge.models` on 2 gloo ranks (EP 2, one per core):
one micro-batch's forward (attention, dispatch, experts, combine per layer) and another's backward, with the
overlap on (the two interleaved exchange by exchange, every EP call async_finish=True) against every call
synchronous (the forward, then the backward: the peer), in the same run.

Each rank times, in turn in every round so the machine's load falls on each alike: the chunk with overlap on,
the chunk synchronous, the forward alone and the backward alone (synchronous). Times are medians over the
rounds of the slowest rank (a chunk ends when both ranks' exchanges do). The spans of one chunk of each kind
(ptxforge.pipeline.trace) give the overlap fraction: the share of communication time during which the rank
computed. One intra-op thread per rank.
Usage: python benchmarks/train_overlap.py [--tokens 512] [--hidden 512] [--layers 2] [--iters 10] [--fp8]
       [--append]   (--append adds the table to benchmarks/RESULTS.md)
"""

from __future__ import annotations

import argparse
import datetime
import os
import platform
import statistics
import time

from ep_bench import RESULTS

WORLD = 2


def bench_rank(rank, world, args):
    import torch
    import torch.distributed as dist

    import ptxforge.ep as deep_ep
    from ptxforge.models.moe import MoEConfig
    from ptxforge.models.train import criterion
    from ptxforge.models.transformer import ModelConfig, Stage
    from ptxforge.pipeline import trace

    h = args.hidden
    cfg = ModelConfig(vocab=256, hidden=h, heads=8, seq=64, layers=args.layers,
                      moe=MoEConfig(hidden=h, inter=args.inter, num_experts=8, topk=2, n_group=4, topk_group=2))
    buf = deep_ep.Buffer(None, timeout_s=300)
    stages = {on: Stage(cfg, 0, cfg.layers, ep_rank=rank, ep_world=world, buffer=buf, fp8=args.fp8, overlap=on)
              for on in (True, False)}
    seqs = args.tokens // cfg.seq
    g = torch.Generator().manual_seed(rank)
    data = torch.randint(0, cfg.vocab, (seqs, cfg.seq + 1), generator=g)
    x, y = data[:, :-1], data[:, 1:]

    def chunk(on: bool) -> None:
        st = stages[on]
        loss_b = criterion(st(x), y)  # micro-batch B's forward: not timed
        t0 = time.perf_counter()
        out, _ = Stage.overlapped_forward_backward(st, [x], criterion, [y], st, loss_b, [], [])
        times["overlap" if on else "sync"].append(time.perf_counter() - t0)
        out[0].sum().backward()  # micro-batch A's backward: not timed

    def forward_alone() -> None:
        st = stages[False]
        t0 = time.perf_counter()
        loss = criterion(st(x), y)
        times["forward"].append(time.perf_counter() - t0)
        t0 = time.perf_counter()
        loss.backward()
        times["backward"].append(time.perf_counter() - t0)

    times: dict[str, list[float]] = {"overlap": [], "sync": [], "forward": [], "backward": []}
    fns = [lambda: chunk(True), lambda: chunk(False), forward_alone]
    chunk(True), chunk(False)  # warm-up
    times = {k: [] for k in times}
    for i in range(args.iters):
        for f in fns[i % 3:] + fns[:i % 3]:
            dist.barrier()
            f()
    fractions = {}
    for on in (True, False):
        rec = trace.Recorder(rank)
        stages[on].recorder = rec
        dist.barrier()
        chunk(on)
        stages[on].recorder = trace.Recorder(rank, enabled=False)
        fractions[on] = trace.overlap_fraction(rec.spans)
    buf.destroy()
    out = {k: statistics.median(v) for k, v in times.items()}
    return dict(out, frac_on=fractions[True], frac_off=fractions[False])


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--tokens", type=int, default=512, help="tokens per micro-batch and rank")
    ap.add_argument("--hidden", type=int, default=512)
    ap.add_argument("--inter", type=int, default=512)
    ap.add_argument("--layers", type=int, default=2)
    ap.add_argument("--iters", type=int, default=9)
    ap.add_argument("--fp8", action="store_true")
    ap.add_argument("--append", action="store_true")
    args = ap.parse_args()
    from ptxforge.ep.spawn import run_ranks

    res = run_ranks(bench_rank, WORLD, args, timeout_s=1800)

    def slowest(key):
        return max(r[key] for r in res)

    on, off = slowest("overlap"), slowest("sync")
    shape = (f"{WORLD} ranks (EP 2), {args.layers} layers, {args.tokens} tokens per micro-batch and rank, hidden "
             f"{args.hidden}, 8 experts of {args.inter} (top-2) + 1 shared, "
             f"{'FP8' if args.fp8 else 'BF16'} dispatch")
    lines = [
        shape, "",
        "| what (median, slowest rank) | ms |",
        "|---|---|",
        f"| forward of one micro-batch alone (synchronous) | {slowest('forward') * 1e3:.1f} |",
        f"| backward of one micro-batch alone (synchronous) | {slowest('backward') * 1e3:.1f} |",
        f"| forward-and-backward chunk, every call synchronous (the peer) | {off * 1e3:.1f} |",
        f"| forward-and-backward chunk, overlapped (async_finish, interleaved) | {on * 1e3:.1f} |",
        f"| overlapped vs synchronous | {on / off:.2f}x the time |",
        f"| overlap fraction, overlapped chunk (rank 0, rank 1) | {res[0]['frac_on']:.2f}, {res[1]['frac_on']:.2f} |",
        f"| overlap fraction, synchronous chunk (rank 0, rank 1) | {res[0]['frac_off']:.2f}, "
        f"{res[1]['frac_off']:.2f} |",
    ]
    print("\n".join(lines))
    if args.append:
        stamp = datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%d %H:%M UTC")
        load = os.getloadavg()[0]
        head = (f"\n## {stamp}: DualPipe's overlapped chunk of ptxforge.models, overlap on vs every call synchronous "
                f"(`benchmarks/train_overlap.py`; {platform.machine()}, {os.cpu_count()} cores, no GPU, under load "
                f"from other jobs: load average {load:.1f})\n\n")
        with RESULTS.open("a") as f:
            f.write(head + "\n".join(lines) + "\n")


if __name__ == "__main__":
    main()
