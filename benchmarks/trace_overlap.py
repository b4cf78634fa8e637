"""The planner's overlapped chunk against a measured one, with the synchronous chunks as the peer.

2 gloo ranks (expert parallelism on one machine) run, in every round, a forward chunk (attention; dispatch;
experts; combine, every call synchronous), a backward chunk (combine's backward; experts' backward;
dispatch's backward; attention's backward, 2x the forward's compute, synchronous), and an overlapped chunk
pairing a forward with a backward as DualPipe does: each all_to_all issued asynchronously and waited for
after the other micro-batch's next computation. Every span is recorded with ptxforge.pipeline.trace; the
planner (ptxforge.plan.measured) predicts the overlapped chunk and the overlap from the synchronous chunks.

    python benchmarks/trace_overlap.py [--rounds 6] [--rows 16000] [--compute-ms 20] [--compute sleep|matmul]
                                       [--svg timeline.svg] [--png timeline.png]

--compute sleep leaves the cores to gloo's threads, as a GPU's compute SMs leave the communication SMs theirs
(what the planner models); --compute matmul computes on the same cores gloo needs (a fixed number of 256^2
matmuls per piece, sized once per rank to take --compute-ms).
"""

from __future__ import annotations

import argparse
import statistics
import time
from collections import Counter

import torch
import torch.distributed as dist

from ptxforge.pipeline.launch import spawn
from ptxforge.pipeline.trace import Recorder, gather_spans, overlap_fraction, to_png, to_svg
from ptxforge.plan.measured import measured_costs, planner_fb, planner_overlap


def _work(seconds: float, kind: str, a: torch.Tensor, per_matmul: float) -> None:
    if kind == "sleep":
        time.sleep(seconds)
        return
    for _ in range(max(1, round(seconds / per_matmul))):  # a fixed amount of work, however long it takes
        a @ a


def _matmul_time(a: torch.Tensor) -> float:
    """Seconds per matmul of `a` (median of 5 timings of 10), measured once before the rounds."""
    times = []
    for _ in range(5):
        t0 = time.perf_counter()
        for _ in range(10):
            a @ a
        times.append((time.perf_counter() - t0) / 10)
    return statistics.median(times)


def _a2a(rec: Recorder, name: str, mb: int, x: torch.Tensor, async_op: bool):
    out = torch.empty_like(x)
    h = rec.begin(name, "comm", mb=mb)
    work = dist.all_to_all_single(out, x, async_op=True)
    if not async_op:
        work.wait()
        rec.end(h)
        return lambda: out
    work.get_future().then(lambda _: rec.end(h))  # the span ends when the transfer completes

    def wait():
        work.wait()
        return out
    return wait


def rank_main(rank: int, world: int, rounds: int, rows: int, c: float, kind: str):
    torch.manual_seed(rank)
    rec = Recorder(rank)
    x = torch.randn(rows, 64)
    a = torch.randn(256, 256)
    dist.all_to_all_single(torch.empty_like(x), x)  # warm-up: gloo connects its pairs on the first call
    per = _matmul_time(a) if kind == "matmul" else 0.0
    for r in range(rounds):
        f, b = 2 * r, 2 * r + 1
        dist.barrier()
        with rec.span("F", "chunk", mb=f, round=r):
            with rec.span("attention", "compute", mb=f):
                _work(c, kind, a, per)
            y = _a2a(rec, "dispatch", f, x, False)()
            with rec.span("experts", "compute", mb=f):
                _work(c, kind, a, per)
            _a2a(rec, "combine", f, y, False)()
        dist.barrier()
        with rec.span("B", "chunk", mb=b, round=r):
            g = _a2a(rec, "combine.backward", b, x, False)()
            with rec.span("experts.backward", "compute", mb=b):
                _work(2 * c, kind, a, per)
            _a2a(rec, "dispatch.backward", b, g, False)()
            with rec.span("attention.backward", "compute", mb=b):
                _work(2 * c, kind, a, per)
        dist.barrier()
        with rec.span("FB", "chunk", mb=f + 2, bmb=b, round=r):
            wait = _a2a(rec, "combine.backward", b, x, True)
            with rec.span("attention", "compute", mb=f + 2):
                _work(c, kind, a, per)
            g = wait()
            wait = _a2a(rec, "dispatch", f + 2, x, True)
            with rec.span("experts.backward", "compute", mb=b):
                _work(2 * c, kind, a, per)
            y = wait()
            wait = _a2a(rec, "dispatch.backward", b, g, True)
            with rec.span("experts", "compute", mb=f + 2):
                _work(c, kind, a, per)
            wait()
            wait = _a2a(rec, "combine", f + 2, y, True)
            with rec.span("attention.backward", "compute", mb=b):
                _work(2 * c, kind, a, per)
            wait()
    return gather_spans(rec)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--rounds", type=int, default=6)
    ap.add_argument("--rows", type=int, default=16000, help="rows of 64 floats per all_to_all (default 4 MB)")
    ap.add_argument("--compute-ms", type=float, default=20.0, help="forward compute per half chunk")
    ap.add_argument("--compute", choices=("sleep", "matmul"), default="sleep")
    ap.add_argument("--svg")
    ap.add_argument("--png")
    args = ap.parse_args()
    spans = spawn(rank_main, 2, args.rounds, args.rows, args.compute_ms / 1e3, args.compute, start="fork",
                  timeout=600)[0]
    mc = measured_costs(spans)
    f, b, fb = mc.ops["F"], mc.ops["B"], mc.ops["FB"]
    chunks = [s for s in spans if s.kind == "chunk"]
    pairs = [sum(s.duration for s in chunks if s.rank == r and s.attrs["round"] == k and s.name in ("F", "B"))
             for r in (0, 1) for k in range(args.rounds)]
    fbs = [s.duration for s in chunks if s.name == "FB"]
    fb_spans = [s for s in spans if any(c.name == "FB" and c.rank == s.rank and c.start <= s.start < c.end
                                        for c in chunks)]
    ms = 1e3
    print(f"2 ranks, {args.rounds} rounds, all_to_all of {args.rows} x 64 float32 ({args.rows * 256 / 1e6:.1f} MB), "
          f"compute {args.compute} {args.compute_ms:g} ms (backward 2x); means over both ranks")
    print("| what | planner | measured (mean) | measured (median) |")
    print("|---|---|---|---|")
    print(f"| F chunk, every call synchronous | | {f.duration * ms:.1f} ms | |")
    print(f"| B chunk, every call synchronous | | {b.duration * ms:.1f} ms | |")
    print(f"| F + B, every call synchronous (the peer) | | {statistics.fmean(pairs) * ms:.1f} ms | "
          f"{statistics.median(pairs) * ms:.1f} ms |")
    print(f"| FB, overlapped | {planner_fb(mc) * ms:.1f} ms | {fb.duration * ms:.1f} ms | "
          f"{statistics.median(fbs) * ms:.1f} ms |")
    print(f"| FB / (F + B) | {planner_fb(mc) / (f.duration + b.duration):.2f} | "
          f"{fb.duration / (f.duration + b.duration):.2f} | |")
    print(f"| FB's communication hidden | {min(1.0, (f.compute + b.compute) / max(f.comm + b.comm, 1e-12)):.0%} | "
          f"{overlap_fraction(fb_spans):.0%} | |")
    counts = Counter({"F": 2 * args.rounds, "B": 2 * args.rounds, "FB": 2 * args.rounds})
    print(f"| overlap fraction, whole run | {planner_overlap(mc, counts):.0%} | {overlap_fraction(spans):.0%} | |")
    print(f"communication per chunk (synchronous): F {f.comm * ms:.1f} ms, B {b.comm * ms:.1f} ms; "
          f"computation: F {f.compute * ms:.1f} ms, B {b.compute * ms:.1f} ms")
    caption = [f"FB overlapped: planner {planner_fb(mc) * ms:.1f} ms, measured {fb.duration * ms:.1f} ms; "
               f"every call synchronous (F + B): {statistics.fmean(pairs) * ms:.1f} ms",
               f"overlap: planner {planner_overlap(mc, counts):.0%}, measured {overlap_fraction(spans):.0%}"]
    if args.svg:
        to_svg(spans, args.svg, caption=caption)
    if args.png:
        to_png(spans, args.png, caption=caption)


if __name__ == "__main__":
    main()
