"""Per-rank code of the measured-run tests: real gloo ranks whose work has known durations (sleeps, which
leave the cores to the other ranks and to gloo's threads, so the timings hold on a loaded 2-core machine).

- `pipeline_run`: DualPipeV on 2 ranks through the real executor; every stage's forward, backward-for-input
  and deferred weight gradient sleep for given times; the executor's op timings become chunk spans.
- `ep_run`: 2 EP ranks run DualPipe's chunk pattern by hand: forward chunks with a synchronous dispatch and
  combine (gloo all_to_all), then overlapped chunks in which one micro-batch's dispatch and combine are
  issued asynchronously while the other micro-batch computes.
"""

from __future__ import annotations

import time

import torch
import torch.distributed as dist
import torch.nn as nn

from ptxforge.pipeline import DualPipeV, WeightGradStore, set_p2p_tensor_dtype, set_p2p_tensor_shapes
from ptxforge.pipeline.trace import Recorder, executor_spans, gather_spans

HIDDEN, MB = 8, 2


class _Timed(torch.autograd.Function):
    """Identity whose forward sleeps f seconds, backward b, and whose weight-gradient part sleeps w (deferred
    to the schedule's W while WeightGradStore is enabled)."""

    @staticmethod
    def forward(ctx, x, f, b, w):
        ctx.b, ctx.w = b, w
        time.sleep(f)
        return x.clone()

    @staticmethod
    def backward(ctx, g):
        time.sleep(ctx.b)
        w = ctx.w
        if WeightGradStore.enabled:
            WeightGradStore.put(lambda: time.sleep(w))
        else:
            time.sleep(w)
        return g, None, None, None


class TimedStage(nn.Module):
    def __init__(self, f: float, b: float, w: float) -> None:
        super().__init__()
        self.lin = nn.Linear(HIDDEN, HIDDEN)
        self.f, self.b, self.w = f, b, w

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return _Timed.apply(self.lin(x), self.f, self.b, self.w)


def pipeline_run(rank: int, world: int, chunks: int, f: float, b: float, w: float, steps: int):
    """Spans (on rank 0) and the measured wall time of each step."""
    torch.manual_seed(0)
    set_p2p_tensor_shapes([(MB, HIDDEN)])
    set_p2p_tensor_dtype(torch.float32)
    stages = (TimedStage(f, b, w), TimedStage(f, b, w))
    model = DualPipeV(stages, timeout_s=60)
    x = torch.randn(chunks * MB, HIDDEN) if rank == 0 else None
    y = torch.randn(chunks * MB, HIDDEN) if rank == 0 else None
    rec = Recorder(rank)
    walls = []
    for step in range(steps):
        model.trace = []
        dist.barrier()
        with rec.span("step", "step", step=step):
            t0 = time.perf_counter()
            model.step(x, num_chunks=chunks, criterion=nn.functional.mse_loss if rank == 0 else None,
                       labels=(y,) if rank == 0 else ())
            walls.append(time.perf_counter() - t0)
        rec.add(executor_spans(model.trace, rank, step=step))
    return gather_spans(rec), walls


def _all_to_all(rec: Recorder, name: str, mb: int, x: torch.Tensor, async_op: bool):
    """A gloo all_to_all of `x`, recorded as a comm span from issue to completion; returns a waiter."""
    out = torch.empty_like(x)
    h = rec.begin(name, "comm", mb=mb, bytes=x.numel() * x.element_size())
    work = dist.all_to_all_single(out, x, async_op=True)
    if not async_op:
        work.wait()
        rec.end(h)
        return lambda: out

    # the span ends when the transfer completes (gloo's completion callback), not when it is waited for
    work.get_future().then(lambda _: rec.end(h))

    def wait():
        work.wait()
        return out
    return wait


def ep_run(rank: int, world: int, rows: int, compute_s: float, chunks: int, overlapped_chunks: int):
    """Spans on rank 0. `chunks` F chunks (attention; dispatch; experts; combine, all synchronous), `chunks` B
    chunks (combine's backward; experts' backward; dispatch's backward; attention's backward, 2x the
    forward's compute), then `overlapped_chunks` FB chunks pairing a forward with a backward as DualPipe's
    overlapped chunk does: each all_to_all is issued asynchronously and waited for after the other
    micro-batch's next computation."""
    rec = Recorder(rank)
    x = torch.randn(rows, 64)
    c = compute_s
    dist.all_to_all_single(torch.empty_like(x), x)  # warm-up: gloo connects its pairs on the first call
    for mb in range(chunks):
        dist.barrier()  # each chunk starts together on both ranks: a call's span is its transfer, not skew
        with rec.span("F", "chunk", mb=mb):
            with rec.span("attention", "compute", mb=mb):
                time.sleep(c)
            y = _all_to_all(rec, "dispatch", mb, x, False)()
            with rec.span("experts", "compute", mb=mb):
                time.sleep(c)
            _all_to_all(rec, "combine", mb, y, False)()
    for mb in range(chunks):
        dist.barrier()
        with rec.span("B", "chunk", mb=mb):
            g = _all_to_all(rec, "combine.backward", mb, x, False)()
            with rec.span("experts.backward", "compute", mb=mb):
                time.sleep(2 * c)
            _all_to_all(rec, "dispatch.backward", mb, g, False)()
            with rec.span("attention.backward", "compute", mb=mb):
                time.sleep(2 * c)
    for k in range(overlapped_chunks):
        f, b = chunks + k, chunks + k
        dist.barrier()
        with rec.span("FB", "chunk", mb=f, bmb=b):
            wait = _all_to_all(rec, "combine.backward", b, x, True)
            with rec.span("attention", "compute", mb=f):
                time.sleep(c)
            g = wait()
            wait = _all_to_all(rec, "dispatch", f, x, True)
            with rec.span("experts.backward", "compute", mb=b):
                time.sleep(2 * c)
            y = wait()
            wait = _all_to_all(rec, "dispatch.backward", b, g, True)
            with rec.span("experts", "compute", mb=f):
                time.sleep(c)
            wait()
            wait = _all_to_all(rec, "combine", f, y, True)
            with rec.span("attention.backward", "compute", mb=b):
                time.sleep(2 * c)
            wait()
    return gather_spans(rec)
