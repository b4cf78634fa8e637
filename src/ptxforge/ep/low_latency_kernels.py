"""`Buffer(low_latency_mode=True, backend="kernels")`: the low-latency calls by the communication kernels.

The same checks, agreement, double buffering, handle and tensors as the torch backend (`LowLatency`, whose
calls this subclass replaces), with the data moved by `ptxforge.kernels.low_latency` on this process's
emulated GPU: on one node an IPC GPU (every rank's buffer mapped through emulator IPC), across nodes the
backend's `ClusterRank` (the same node's buffers by pointer, the other nodes' by the NIC's RDMA puts). Both
phases run on the device's worker thread (`ptxforge.ep.device_worker`), in call order: the send phase is
queued by the call, the receive phase by the call too (`async_finish`: the event's wait fills the tensors; a
synchronous call waits) or by the hook (`return_recv_hook=True`). The agreement and the buffer's set-up stay on
the caller's thread. The Buffer's agreed call number is the kernels' signal epoch.

A peer that dies is noticed through the process group (`PeerWatch`): a receive kernel spinning on its count
stops and the call raises `EPPeerLostError` naming it.
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Callable, Generator, Iterator
from concurrent.futures import Future
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import numpy as np
import torch

from ptxforge.ep import peers as peer_procs
from ptxforge.ep.device_worker import Worker, worker_for
from ptxforge.ep.errors import CommTimeout, EPError, EPPeerLostError
from ptxforge.ep.low_latency import LowLatency, LowLatencyHandle
from ptxforge.ep.peer_watch import PeerWatch
from ptxforge.ep.rows import Field, RowFormat
from ptxforge.ep.stats import CallStats
from ptxforge.ep.validate_ll import check_low_latency_combine, check_low_latency_dispatch

if TYPE_CHECKING:
    from ptxforge.emu.cluster_procs import ClusterRank


@dataclass
class DispatchTensors:
    """The torch tensors a low-latency dispatch returns, made before its receive and filled by it."""

    recv_x: torch.Tensor
    scale_base: torch.Tensor | None  # f32 [E, scales, rows] or uint8 [E, packs, rows, 4]
    recv_scales: torch.Tensor | None
    src_info: torch.Tensor
    layout_range: torch.Tensor
    recv_count: torch.Tensor

    @classmethod
    def empty(cls, el: int, ranks: int, rows: int, h: int, use_fp8: bool, use_ue8m0: bool,
              device: Any) -> DispatchTensors:
        recv_x = torch.empty((el, rows, h), dtype=torch.float8_e4m3fn if use_fp8 else torch.bfloat16, device=device)
        base = scales = None
        ns = h // 128
        if use_fp8 and use_ue8m0:
            packs = -(-ns // 4)
            base = torch.zeros((el, packs, rows, 4), dtype=torch.uint8, device=device)
            scales = base.view(torch.int32).view(el, packs, rows).transpose(1, 2)
        elif use_fp8:
            base = torch.empty((el, ns, rows), dtype=torch.float32, device=device)
            scales = base.transpose(1, 2)
        return cls(recv_x, base, scales, torch.full((el, rows), -1, dtype=torch.int32, device=device),
                   torch.zeros((el, ranks), dtype=torch.int64, device=device),
                   torch.zeros(el, dtype=torch.int32, device=device))

    def fill(self, got: dict[str, np.ndarray]) -> None:
        self.recv_x.view(torch.uint8).copy_(torch.from_numpy(got["recv_x"]))
        if self.scale_base is not None:
            src = torch.from_numpy(got["scales"])
            self.scale_base.copy_(src if self.scale_base.dtype == torch.uint8 else src.view(torch.float32))
        self.src_info.copy_(torch.from_numpy(got["src_info"]))
        self.layout_range.copy_(torch.from_numpy(got["layout_range"]))
        self.recv_count.copy_(torch.from_numpy(got["recv_count"]))

    @property
    def recv(self) -> torch.Tensor | tuple[torch.Tensor, torch.Tensor]:
        return (self.recv_x, self.recv_scales) if self.recv_scales is not None else self.recv_x


def bf16_rows(t: torch.Tensor) -> np.ndarray:
    """A BF16 tensor's bits as uint16 (a copy on the host)."""
    return t.detach().cpu().contiguous().view(torch.int16).numpy().view(np.uint16).copy()


def bf16_tensor(a: np.ndarray, device: Any = "cpu") -> torch.Tensor:
    return torch.from_numpy(np.ascontiguousarray(a).view(np.int16)).view(torch.bfloat16).to(device)


class _Phase:
    """The receive half of a call on the device worker, as the `Pending` `LowLatency._finisher` waits on:
    queued at once (`queue()`, a call without the hook) or by the first `wait()` (the hook), which waits for it
    and returns its results (its error, raised here, names the call)."""

    def __init__(self, worker: Worker, run: Callable[[], Any]) -> None:
        self._worker, self._run = worker, run
        self._future: Future | None = None

    def queue(self) -> None:
        if self._future is None:
            self._future = self._worker.submit(self._run)

    @property
    def ended(self) -> bool:
        """The receive phase has run (well or not)."""
        return self._future is not None and self._future.done()

    def wait(self) -> Any:
        self.queue()
        assert self._future is not None
        return self._future.result()


def _last(gen: Generator[None, None, Any]) -> Any:
    """Run a low-latency generator's receive phase and return its results."""
    next(gen)
    try:
        next(gen)
    except StopIteration as stop:
        return stop.value
    raise AssertionError("a low-latency generator has two phases")  # pragma: no cover


@dataclass
class LowLatencyKernels(LowLatency):
    """The low-latency calls of one Buffer, backend="kernels" (see the module docstring). `ranks_per_node`
    below the group's size puts the ranks on several nodes: this process's GPU is then `cluster_rank()`'s (a
    `ClusterRank`, made and closed by the backend)."""

    group: Any = None
    timeout_s: float = 60.0
    ranks_per_node: int = 0
    cluster_rank: Callable[[], ClusterRank] | None = None
    rank_side: Any = None
    watches: list = field(default_factory=list)

    @property
    def across_nodes(self) -> bool:
        return 0 < self.ranks_per_node < self.num_ranks

    def _rank(self) -> Any:
        """This rank's `LowLatencyRank`, made at the first call (on the caller's thread: its set-up talks to the
        process group)."""
        if self.rank_side is None:
            from ptxforge.ep.low_latency_rank import LowLatencyRank, RankGpuFabric  # the DSL kernels: heavy

            if self.across_nodes:
                assert self.cluster_rank is not None, "several nodes need the backend's cluster_rank"
                g = self.ranks_per_node
                fabric = RankGpuFabric(self.cluster_rank())
                reachable = [p // g == self.rank // g for p in range(self.num_ranks)]
                self.rank_side = LowLatencyRank(self.rank, self.num_ranks, fabric.rank.device, fabric,
                                                timeout_s=self.timeout_s, reachable=reachable, rdma=True)
            else:
                from ptxforge.ep import kernel_backend as KB  # heavy (the emulator), as Buffer's _kernel_backend

                dev = KB.comm_device(self.rank, self.num_ranks, "emu")
                self.rank_side = LowLatencyRank(self.rank, self.num_ranks, dev, KB.IpcFabric(dev, self.group,
                                                                                             self.num_ranks),
                                                timeout_s=self.timeout_s)
        return self.rank_side

    def _worker(self) -> Worker:
        return worker_for(self._rank().device)

    def release(self) -> None:
        if self.rank_side is not None:
            self._worker().drain()
            self.rank_side.fabric.release()
            self.rank_side = None

    @contextlib.contextmanager
    def _peer_loss(self, call: str, what: str) -> Iterator[None]:
        """A connection to a dead peer (gloo's error, or the watch's) raised as the `EPPeerLostError` naming it;
        this rank's buffer is then released without the group."""
        try:
            yield
        except RuntimeError as e:
            if isinstance(e, EPPeerLostError) or peer_procs.connection_lost(e):
                if self.rank_side is not None:
                    self.rank_side.fabric.peer_lost = True
                peer_procs.reclaim_segments()
                raise (e if isinstance(e, EPPeerLostError) else self.transport.lost(call, what, e)) from None
            raise

    def _agree(self, call: str, facts: dict, complaint: str) -> None:
        with self._peer_loss(call, "the agreement on its arguments"):
            self.transport.agree(call, facts, complaint)

    def _growth_complaint(self, call: str, n_max: int, hidden: int, num_experts: int) -> str:
        """Why the buffer cannot grow now: a call whose receive is still pending reads the one it would free."""
        from ptxforge.kernels.low_latency import LowLatencyLayout  # the DSL kernels: heavy

        pending = [s.pending for s in self.slots if s.pending]
        if self.rank_side is None or not pending:
            return ""
        nbytes = LowLatencyLayout(self.num_ranks, num_experts, n_max, hidden).nbytes
        if nbytes <= self.rank_side.fabric.size:
            return ""
        return (f"{call} needs a larger low-latency buffer ({nbytes} bytes, made at the largest shape used so "
                f"far) while {pending[0]} still waits for its receive hook, which reads the present one: call "
                f"that hook first")

    def _grow(self, call: str, n_max: int, hidden: int, num_experts: int) -> None:
        """Make the buffer (or grow it) on the caller's thread, a collective, once the worker has ended every
        earlier call (none of its kernels still uses the buffer a growth frees)."""
        from ptxforge.kernels.low_latency import LowLatencyLayout  # the DSL kernels: heavy

        rank = self._rank()
        nbytes = LowLatencyLayout(self.num_ranks, num_experts, n_max, hidden).nbytes
        if nbytes > rank.fabric.size:
            self._worker().drain()
            with self._peer_loss(call, "its low-latency buffer's set-up"):
                rank.fabric.ensure(self.rank, nbytes)

    def _start(self, call: str, name: str, gen: Generator[None, None, Any], hook: bool) -> _Phase:
        """Queue the send phase on this rank's device worker, and the receive phase after it (now, or at the
        hook's call). One `PeerWatch` covers both: this rank answers it when its send phase is done (what the
        peers' receives wait for), so a peer that dies before its send makes a receive spinning on it raise, and
        one that exits after it does not. An error of either phase is raised at the wait, naming the call."""
        from ptxforge.ep import kernel_backend as KB  # heavy (the emulator), as Buffer's kernels backend

        with self._peer_loss(call, "its low-latency kernels"):
            watch = PeerWatch(self.transport, call, self.buffer_id * 1_000_003 + 500_000 + self.serial)
        self.watches = [*self.watches[-7:], watch]  # their answers must outlive the call (gloo sends)
        sent: Future = Future()

        def named(step: Callable[[], Any]) -> Any:
            KB.check_peers_during_launches(watch.check)
            try:
                with self._peer_loss(call, "its low-latency kernels"):
                    return step()
            except CommTimeout as e:  # its text names rank, kernel and phase: add the call, for a later wait
                raise CommTimeout(str(e).replace("ptxforge.ep: ", f"ptxforge.ep {name}: ", 1)) from None
            except EPError:
                raise
            except Exception as e:  # a fault, another rank's stop: named for the wait that raises it
                raise EPError(f"ptxforge.ep {name}: {type(e).__name__}: {e}") from e
            finally:
                KB.check_peers_during_launches(None)

        def send() -> None:
            try:
                named(lambda: next(gen))
                sent.set_result(None)
            except BaseException as e:
                sent.set_exception(e)
                raise
            finally:
                watch.finish()

        def receive() -> Any:
            if sent.exception() is not None:
                raise sent.exception()  # type: ignore[misc]
            return named(lambda: _last(gen))

        worker = self._worker()
        worker.submit(send)
        phase = _Phase(worker, receive)
        if not hook:
            phase.queue()
        return phase

    # ------------------------------------------------------------------ dispatch
    def dispatch(self, x: Any, topk_idx: Any, n_max: Any, num_experts: Any, stats_out: torch.Tensor | None,
                 wait_stats: torch.Tensor | None, use_fp8: bool, round_scale: bool, use_ue8m0: bool,
                 async_finish: bool, return_recv_hook: bool, stats: CallStats) -> tuple:
        complaint, facts = check_low_latency_dispatch(x, topk_idx, n_max, num_experts, self.num_ranks, stats_out,
                                                      wait_stats, use_fp8, round_scale, use_ue8m0)
        if not complaint:
            complaint = self._slot_complaint("low_latency_dispatch") or \
                self._size_complaint(n_max, x.shape[1], num_experts) or \
                self._growth_complaint("low_latency_dispatch", n_max, x.shape[1], num_experts)
        self.serial += 1
        self._agree("low_latency_dispatch", dict(facts, serial=self.serial), complaint)
        t_, h = x.shape
        r_, el = self.num_ranks, num_experts // self.num_ranks
        valid = topk_idx >= 0
        send_counts = torch.bincount(topk_idx[valid] // el, minlength=r_).tolist()
        fmt = RowFormat([Field("x", torch.float8_e4m3fn if use_fp8 else torch.bfloat16, h, "payload"),
                         Field("scales", torch.float32, h // 128 if use_fp8 else 0, "scales"),
                         Field("src", torch.int32, 1, "meta")])
        for peer in range(r_):
            stats.record("sent", peer, send_counts[peer], fmt, True)
        out = DispatchTensors.empty(el, r_, n_max * r_, h, use_fp8, use_ue8m0, x.device)
        started = time.perf_counter_ns()
        self._grow("low_latency_dispatch", n_max, h, num_experts)
        gen = self._rank().dispatch(bf16_rows(x), topk_idx.detach().cpu().numpy(), n_max, num_experts, use_fp8,
                                    round_scale, use_ue8m0, self.slot, self.serial)
        work = self._start("low_latency_dispatch", f"low_latency_dispatch #{self.serial}", gen, return_recv_hook)
        stats.control_bytes = self.transport.take_control_bytes()
        counts = torch.zeros((el, r_), dtype=torch.int64)
        received: list[bool] = []

        def unpack(got: dict[str, np.ndarray]) -> None:
            out.fill(got)
            counts.copy_(out.layout_range & 0xFFFFFFFF)
            for peer in range(r_):
                stats.record("recv", peer, int(counts[:, peer].sum()), fmt, True)
            received.append(True)
            if stats_out is not None:
                stats_out.add_(out.recv_count.to(stats_out.dtype).to(stats_out.device))
            if wait_stats is not None:  # the send-to-receive time, for each source that sent something
                waited = time.perf_counter_ns() - started
                wait_stats.add_(waited * (counts.sum(0) > 0).to(wait_stats.dtype))

        event, hook = self._finisher(f"low_latency_dispatch #{self.serial}", work, unpack, async_finish,  # type: ignore[arg-type]
                                     return_recv_hook)
        handle = LowLatencyHandle((out.src_info, out.layout_range, n_max, h, num_experts))
        handle.__dict__.update(_buffer_id=self.buffer_id, _serial=self.serial, _topk_idx=topk_idx.clone(),
                               _pairs=None, _send_counts=send_counts, _counts=counts, _received=received)
        return out.recv, out.recv_count, handle, event, hook

    # ------------------------------------------------------------------ combine
    def combine(self, x: Any, topk_idx: Any, topk_weights: Any, handle: Any, use_logfmt: bool, zero_copy: bool,
                async_finish: bool, return_recv_hook: bool, out: Any, stats: CallStats) -> tuple:
        complaint, facts = check_low_latency_combine(x, topk_idx, topk_weights, handle, use_logfmt, zero_copy, out,
                                                     self.buffer_id, self.num_ranks)
        if not complaint and zero_copy and self.slots[self.slot].combine_send is None:
            complaint = ("zero_copy=True needs the data in the buffer get_next_low_latency_combine_buffer(handle) "
                         "returned just before this call")
        complaint = complaint or self._slot_complaint("low_latency_combine")
        self.serial += 1
        self._agree("low_latency_combine", dict(facts, serial=self.serial), complaint)
        src_info, layout_range, n_max, h, num_experts = handle
        data: torch.Tensor = self.slots[self.slot].combine_send if zero_copy else x  # type: ignore[assignment]
        fmt = RowFormat([Field("x", torch.bfloat16, h, "payload")])
        counts = handle._counts
        for peer in range(self.num_ranks):
            stats.record("sent", peer, int(counts[:, peer].sum()), fmt, True)
            stats.record("recv", peer, handle._send_counts[peer], fmt, True)
        t_ = topk_idx.shape[0]
        combined = out if out is not None else torch.empty((t_, h), dtype=torch.bfloat16, device=x.device)
        self._grow("low_latency_combine", n_max, h, num_experts)
        gen = self._rank().combine(bf16_rows(data), layout_range.cpu().numpy(), src_info.cpu().numpy(),
                                   topk_idx.detach().cpu().numpy(), topk_weights.detach().cpu().to(torch.float32)
                                   .numpy(), n_max, num_experts, self.slot, self.serial)
        work = self._start("low_latency_combine", f"low_latency_combine #{self.serial}", gen, return_recv_hook)
        stats.control_bytes = self.transport.take_control_bytes()

        def unpack(got: np.ndarray) -> None:
            combined.copy_(bf16_tensor(got))

        event, hook = self._finisher(f"low_latency_combine #{self.serial}", work, unpack, async_finish,  # type: ignore[arg-type]
                                     return_recv_hook)
        return combined, event, hook
