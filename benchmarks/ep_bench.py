"""What the expert-parallel benchmarks share: each rank's random MoE inputs and a barrier-aligned median timer.

Imported by ep_dispatch.py, ep_elastic.py, ep_low_latency.py and ep_overlap.py (run as scripts from this folder,
so it is on sys.path; their rank processes are forked and inherit it)."""

from __future__ import annotations

import statistics
import time
from pathlib import Path

RESULTS = Path(__file__).resolve().parent / "RESULTS.md"


def median_time(fn, iters: int) -> float:
    """Median seconds of `fn()` over `iters` calls after one warm-up, every call started at a group barrier."""
    import torch.distributed as dist

    fn()  # warm-up
    times = []
    for _ in range(iters):
        dist.barrier()
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return statistics.median(times)


def moe_inputs(rank: int, tokens: int, hidden: int, experts: int, topk: int):
    """(x bf16 [T, H], top-k ids [T, K], weights f32 [T, K]) of one rank, seeded by its rank."""
    import torch

    g = torch.Generator().manual_seed(rank)
    x = torch.randn((tokens, hidden), generator=g).to(torch.bfloat16)
    idx = torch.topk(torch.rand((tokens, experts), generator=g), topk, dim=-1).indices
    w = torch.rand((tokens, topk), generator=g)
    return x, idx, w
