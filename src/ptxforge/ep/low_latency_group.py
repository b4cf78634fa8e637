"""`LowLatencyGroup`: every rank of a low-latency expert-parallel group on one emulated `Cluster`, one process.

    cluster = Cluster(nodes=2, gpus_per_node=2, sms=16, sanitize=True)
    group = LowLatencyGroup(cluster)                       # rank r on cluster.devices[r]
    outs, hook = group.dispatch(xs, idxs, num_max, num_experts, use_fp8=True, return_recv_hook=True)
    hook()                                                 # the receive kernels; outs[r] = (recv, count, handle)
    combined, _ = group.combine(ys, idxs, weights, [o[2] for o in outs])

The kernels and host code of `Buffer(low_latency_mode=True, backend="kernels")` (`LowLatencyRank`), NVLink
peers (the same node) by plain stores and the other nodes by the emulated RDMA puts; each phase queues every
rank's launch and one `cluster.synchronize()` runs them together, so the node-wide sanitizer and the checks
across NICs see every GPU. Inputs are trusted (no agreement step): this is the tool for testing, sanitizing
and measuring the kernels; programs use `Buffer`.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Generator
from typing import TYPE_CHECKING, Any

import numpy as np
import torch

from ptxforge.ep.errors import CommTimeout
from ptxforge.ep.low_latency_kernels import DispatchTensors, bf16_rows, bf16_tensor
from ptxforge.ep.low_latency_rank import DEFAULT_TIMEOUT_S, ClusterFabric, LowLatencyRank
from ptxforge.errors import KernelFault

if TYPE_CHECKING:
    from ptxforge.emu.cluster import Cluster


class LowLatencyGroup:
    def __init__(self, cluster: Cluster, num_sms: int = 16, timeout_s: float = DEFAULT_TIMEOUT_S) -> None:
        self.cluster = cluster
        g = cluster.gpus_per_node
        world = len(cluster.devices)
        self.fabric = ClusterFabric(cluster)
        rdma = world > g
        self.ranks = [LowLatencyRank(r, world, dev, self.fabric, timeout_s, [r // g == p // g for p in range(world)],
                                     rdma, num_sms) for r, dev in enumerate(cluster.devices)]
        self.world = world
        self.epoch = 0
        self.half = 0
        self.links: list = []  # what each link carried in the last phase (Cluster.synchronize's report)
        self.timeline: list[dict] = []  # per phase: call, phase, start and end (perf_counter seconds)

    def _run(self, call: str, phase: str, gens: list[Generator[None, None, Any]], steps: int = 1) -> list[Any]:
        """Resume every rank's generator `steps` times (each queues its next launch, or returns), then run the
        queued launches together."""
        done: list[Any] = [None] * len(gens)
        queued = False
        for _ in range(steps):
            for r, g in enumerate(gens):
                try:
                    next(g)
                    queued = True
                except StopIteration as stop:
                    done[r] = stop.value
        if queued:
            start = time.perf_counter()
            try:
                self.links = self.cluster.synchronize().links
            except KernelFault as e:
                raise self._timed_out(e) from None
            self.timeline.append({"call": call, "phase": phase, "start": start, "end": time.perf_counter()})
        return done

    def _timed_out(self, fault: KernelFault) -> BaseException:
        found = [str(t) for t in (r.last_timeout for r in self.ranks) if t is not None]
        return CommTimeout("; ".join(found)) if found else fault

    def _two_phases(self, call: str, gens: list, finish: Callable[[list], None],
                    return_recv_hook: bool) -> Callable[[], None] | None:
        """With the hook: the send launches run now and the hook runs the receive launches. Without: each
        GPU's stream gets its send then its receive launch, and they all run together (a rank's receive
        overlaps the others' sends, as on GPUs)."""
        if not return_recv_hook:
            self._run(call, "send+receive", gens, steps=2)
            finish(self._run(call, "results", gens))
            return None
        self._run(call, "send", gens)
        called: list[bool] = []

        def hook() -> None:
            if not called:
                called.append(True)
                self._run(call, "receive", gens)
                finish(self._run(call, "results", gens))
        return hook

    def dispatch(self, xs: list[torch.Tensor], topk_idx: list[torch.Tensor], num_max: int, num_experts: int,
                 use_fp8: bool = True, round_scale: bool = False, use_ue8m0: bool = False,
                 return_recv_hook: bool = False, bug: str = "") -> tuple[list[tuple], Callable[[], None] | None]:
        """Per rank (recv_x or (recv_x, scales), recv_count, handle), as `Buffer.low_latency_dispatch`, and the
        receive hook (None when it already ran). `bug` plants a defect (kernels/low_latency.py's BUG)."""
        self.epoch += 1
        half, self.half = self.half, self.half ^ 1
        h = xs[0].shape[1]
        el = num_experts // self.world
        gens = [rk.dispatch(bf16_rows(x), idx.cpu().numpy(), num_max, num_experts, use_fp8, round_scale, use_ue8m0,
                            half, self.epoch, bug) for rk, x, idx in zip(self.ranks, xs, topk_idx, strict=True)]
        outs = [DispatchTensors.empty(el, self.world, num_max * self.world, h, use_fp8, use_ue8m0, "cpu")
                for _ in xs]

        def finish(results: list) -> None:
            for o, got in zip(outs, results, strict=True):
                o.fill(got)
        hook = self._two_phases("low_latency_dispatch", gens, finish, return_recv_hook)
        return [(o.recv, o.recv_count, (o.src_info, o.layout_range, num_max, h, num_experts)) for o in outs], hook

    def combine(self, xs: list[torch.Tensor], topk_idx: list[torch.Tensor], topk_weights: list[torch.Tensor],
                handles: list[tuple], return_recv_hook: bool = False,
                ) -> tuple[list[torch.Tensor], Callable[[], None] | None]:
        """Per rank the combined BF16 [tokens, hidden] (filled by the hook when return_recv_hook)."""
        self.epoch += 1
        half, self.half = self.half, self.half ^ 1
        gens = [rk.combine(bf16_rows(x), hd[1].numpy(), hd[0].numpy(), idx.cpu().numpy(),
                           w.cpu().to(torch.float32).numpy(), hd[2], hd[4], half, self.epoch)
                for rk, x, idx, w, hd in zip(self.ranks, xs, topk_idx, topk_weights, handles, strict=True)]
        outs = [torch.empty((idx.shape[0], x.shape[2]), dtype=torch.bfloat16) for x, idx in zip(xs, topk_idx,
                                                                                                 strict=True)]

        def finish(results: list[np.ndarray]) -> None:
            for o, got in zip(outs, results, strict=True):
                o.copy_(bf16_tensor(got))
        hook = self._two_phases("low_latency_combine", gens, finish, return_recv_hook)
        return outs, hook

    def sm_map(self, rank: int) -> list[dict]:
        """For each launch of rank `rank` (the last 16): call, phase (send / receive), kernel, the SMs its
        blocks ran on and its thread-instructions."""
        rows = []
        for la in self.ranks[rank].launches:
            res = la["pending"].result() if hasattr(la["pending"], "result") else la["pending"]
            per_sm = np.asarray(res.per_sm)
            rows.append({"call": la["call"], "phase": la["phase"], "kernel": la["kernel"],
                         "sms": [int(s) for s in np.flatnonzero(per_sm)],
                         "thread_instructions": int(res.thread_instructions)})
        return rows
