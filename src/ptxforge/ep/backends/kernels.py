"""`backend="kernels"`: the layout by the DSL layout kernel, and on one node dispatch and combine by the intranode
communication kernels (`ptxforge.kernels.comm`) on this process's device: an emulated GPU whose memory the other
ranks' processes map through emulator IPC, or a CUDA GPU (CUDA IPC). Across nodes the internode communication
kernels on this process's GPU of an emulated cluster (`cluster_rank()`; `ptxforge.ep.backends.internode_calls`).
Low-latency mode runs the low-latency kernels (`ptxforge.ep.low_latency_kernels`, on the device worker;
across nodes on the same `cluster_rank()`). The kernels, the runtime and the emulator load at the first call
that needs them (over a second a process), never for the torch backend.

Each call's kernels run on the device's worker thread (`ptxforge.ep.device_worker`), in call order; a call with
`async_finish=True` returns with them pending (a dispatch once its notify step has given the counts that size
its results) and its event's wait fills the returned tensors. Everything that talks to the process group in
step with the other ranks (the agreement, growing the communication buffer) stays on the caller's thread.
"""

from __future__ import annotations

from collections.abc import Callable
from concurrent.futures import Future
from types import ModuleType
from typing import TYPE_CHECKING, Any

import numpy as np
import torch

from ptxforge.ep import peers
from ptxforge.ep.backends import internode_calls
from ptxforge.ep.backends.base import (
    Backend,
    CombineCall,
    CombineOutput,
    DispatchCall,
    DispatchOutput,
    EPGroup,
    Layout,
    LowLatencyOps,
    Received,
    check_worst,
    kernel_dispatch_inputs,
)
from ptxforge.ep.config import EventOverlap
from ptxforge.ep.device_worker import QueuedWork, Worker, worker_for
from ptxforge.ep.errors import CommTimeout, EPError, EPPeerLostError
from ptxforge.ep.peer_watch import PeerWatch
from ptxforge.ep.rows import Field, RowFormat

if TYPE_CHECKING:
    from ptxforge.emu.cluster_procs import ClusterRank
    from ptxforge.ep.handle import DispatchHandle
    from ptxforge.ep.internode_rank import RankGroup
    from ptxforge.ep.intranode import CommRank, Notified
    from ptxforge.ep.low_latency_kernels import LowLatencyKernels
    from ptxforge.ep.stats import CallStats


CLUSTER_SMS = 132  # SMs of a cluster GPU (an H100/H200's); the kernels run num_sms persistent blocks on it
CLUSTER_CAPACITY = 1 << 30  # a cluster GPU's memory (sparse: pages exist once touched), as emulator IPC's default


class KernelsBackend(Backend):
    """The communication kernels (see the module docstring); `comm_rank` is this rank's side of them, made at
    the first dispatch or combine on one node."""

    name = "kernels"

    def __init__(self, group: EPGroup) -> None:
        super().__init__(group)
        self.comm_rank: CommRank | None = None
        self.low_latency_ops: LowLatencyKernels | None = None
        self._watches: list[PeerWatch] = []  # the last calls' peer watches: their answers outlive the call
        self.cluster: ClusterRank | None = None  # this rank's GPU of the emulated cluster, across nodes
        self.internode_rank: RankGroup | None = None  # this rank's side of the internode kernels on it

    def layout(self, topk_idx: torch.Tensor, num_experts: int) -> Layout:
        from ptxforge.kernels import ops  # the DSL layout kernel: heavy, as the module docstring says

        g = self.group
        return ops.get_dispatch_layout(topk_idx, num_experts, g.size, g.ranks_per_node)

    def sm_map(self) -> list[dict]:
        """On the emulator: per block of this rank's last dispatch's and last combine's kernels, its SM, role
        (notify, sender, receiver), channel and thread-instructions."""
        if self.internode_rank is not None:
            self._drain()
            return self.internode_rank.sm_map()
        if self.comm_rank is None:
            return super().sm_map()
        self._drain()
        return self.comm_rank.sm_map()

    def sm_budget(self) -> dict:
        self._drain()
        if self.comm_rank is None or self.comm_rank.sm_budget is None:
            return super().sm_budget()
        return dict(self.comm_rank.sm_budget)

    def low_latency(self, num_rdma_bytes: int) -> LowLatencyOps:
        """The low-latency calls by the low-latency kernels (`ptxforge.ep.low_latency_kernels`)."""
        from ptxforge.ep.low_latency_kernels import LowLatencyKernels  # heavy on first call, as the module says

        g = self.group
        self.low_latency_ops = LowLatencyKernels(g.transport, g.rank, g.size, g.buffer_id, num_rdma_bytes,
                                                 group=g.group, timeout_s=g.transport.timeout_s,
                                                 ranks_per_node=g.ranks_per_node, cluster_rank=self.cluster_rank)
        return self.low_latency_ops

    def cluster_rank(self) -> ClusterRank:
        """This Buffer's GPU of an emulated cluster (`ptxforge.emu.cluster_procs.ClusterRank`: `ranks_per_node`
        GPUs a node, the NIC model between nodes, emulator IPC inside one), made at the first call that needs it
        and kept until `close()`. Making it is a collective over the group: every rank asks at the same call, on
        the caller's thread. Its watchdog, and the bound on every wait for another rank, is the group's
        timeout_s; its NIC transport is PTXFORGE_NIC_TRANSPORT's (default shared memory)."""
        if self.cluster is None:
            from ptxforge.emu.cluster_procs import ClusterRank  # heavy: the emulator (see the docstring)

            g = self.group
            self.cluster = ClusterRank(g.group, num_ranks_per_node=g.ranks_per_node, sms=CLUSTER_SMS,
                                       watchdog_s=g.transport.timeout_s, capacity=CLUSTER_CAPACITY)
        return self.cluster

    def internode(self) -> RankGroup:
        """This rank's side of the internode kernels (`ptxforge.ep.internode_rank.RankGroup`) on
        `cluster_rank()`, made at the first dispatch or combine across nodes."""
        if self.internode_rank is None:
            from ptxforge.ep.internode_rank import RankGroup  # heavy: the internode kernels

            self.internode_rank = RankGroup(self.cluster_rank(), timeout_s=self.group.transport.timeout_s)
        return self.internode_rank

    def _drain(self) -> None:
        """Wait until this rank's device workers have ended every call queued so far."""
        if self.comm_rank is not None:
            worker_for(self.comm_rank.device).drain()
        if self.cluster is not None:
            worker_for(self.cluster.device).drain()

    def close(self) -> None:
        self._drain()
        if self.low_latency_ops is not None:  # the low-latency buffer
            self.low_latency_ops.release()
        if self.comm_rank is not None:  # the communication buffer (the IPC device stays for other Buffers)
            self.comm_rank.close_streams()  # a GPU's green contexts
            self.comm_rank.fabric.release()
            self.comm_rank = None
        if self.cluster is not None:  # the cluster GPU, its symmetric buffers and its NIC transport
            try:  # every rank is past its last NIC wait (which reads the others' rings) before any closes
                self.group.transport.agree("Buffer.destroy", {})
            except Exception:  # noqa: BLE001 - a broken group (a peer's error, its death): close this rank's alone
                pass
            self.cluster.close()
            self.cluster = self.internode_rank = None

    def comm(self, like: torch.Tensor | None = None) -> CommRank:
        """This rank's `CommRank`, made at the first call: on GPUs (an NCCL group, or CUDA inputs `like`), the
        rank's CUDA GPU, its buffer shared with the other ranks' processes by CUDA IPC handles (several ranks
        may share one GPU) and the kernels confined to `num_sms` SMs (a green context where the driver has
        them, else a grid of `num_sms` persistent blocks: `sm_budget()`); on CPU (gloo), an emulated GPU whose
        memory the other ranks' processes map through emulator IPC handles."""
        if self.comm_rank is None:
            KB, g = _kernel_backend(), self.group
            on_gpu = g.transport.device.type == "cuda" or (like is not None and like.device.type == "cuda")
            ordinal = like.device.index if like is not None and like.device.type == "cuda" else None
            dev = KB.comm_device(g.rank, g.size, "cuda" if on_gpu else "emu", ordinal)
            self.comm_rank = KB.CommRank(g.rank, g.size, dev, KB.IpcFabric(dev, g.group, g.size),
                                         timeout_s=g.transport.timeout_s)
        return self.comm_rank

    def order_after(self, previous_event: EventOverlap | None) -> None:
        """A call's kernels run on this rank's device worker in call order, so an event of earlier work queued
        there needs no wait here (the new call's work is not run if that work failed); any other is waited for."""
        if previous_event is not None and not self._queued_here(previous_event.event):
            previous_event.current_stream_wait()

    def wait_for_handle(self, handle: DispatchHandle) -> None:
        """Combine and cached dispatch read only the handle's counts, filled when the dispatch returned: its
        data phase, queued on this worker, needs no wait here."""
        if not self._queued_here(handle.__dict__.get("_pending")):
            super().wait_for_handle(handle)

    def _queued_here(self, work: object) -> bool:
        sides = [s for s in (self.comm_rank, self.cluster) if s is not None]
        return isinstance(work, QueuedWork) and any(work.worker is worker_for(s.device) for s in sides)

    # ------------------------------------------------------------------ running a call on the worker

    def _start(self, call: str, name: str, side_of: Callable[[], Any], layout_of: Callable[[Any], Any],
               run: Callable[[Any], Any], after: list[QueuedWork]) -> tuple[Worker, Future]:
        """Queue `run(comm)` on this rank's device worker, watched (`PeerWatch`): a dead peer raises
        `EPPeerLostError` at once, also from inside a kernel spinning on it (an emulated GPU's launches run the
        watch's check), and its /dev/shm segment is reclaimed. Here, on the caller's thread: the rank's side of
        the kernels (`side_of()`: its `CommRank` on one node, its `RankGroup` across nodes) and, when
        `layout_of(side)` needs a larger buffer, the collective that grows it (after the worker has ended every
        earlier call). `after`: queued work this call's work must not run without."""
        g, KB = self.group, _kernel_backend()
        try:
            comm = side_of()
            worker = worker_for(comm.device)
            layout = layout_of(comm)
            if comm.grows(layout):
                worker.drain()  # no kernel of this rank still uses the buffer the growth frees
                comm.ensure(layout)
        except RuntimeError as e:
            raise self._lost(call, e, "its IPC set-up") from None
        watch = PeerWatch(g.transport, call, g.buffer_id * 1_000_003 + g.transport.entered)
        self._watches = [*self._watches[-7:], watch]  # their answers must outlive the call (gloo sends)

        def watched() -> Any:
            KB.check_peers_during_launches(watch.check)
            try:
                for work in after:
                    failed = work.failure()
                    if failed is not None:
                        raise EPError(f"ptxforge.ep {name}: not run: it was ordered after {work.call}, which "
                                      f"failed ({type(failed).__name__}: {failed})")
                return run(comm)
            except CommTimeout as e:  # its text names rank, kernel and role: add the call, for an async wait
                raise CommTimeout(_named(str(e), name)) from None
            except RuntimeError as e:
                raise self._lost(call, e, "its communication kernels") from None
            finally:
                KB.check_peers_during_launches(None)
                watch.finish()

        return worker, worker.submit(watched)

    def _lost(self, call: str, e: RuntimeError, what: str) -> RuntimeError:
        """`e` itself, or the `EPPeerLostError` it stands for (a peer's connection closed: its segment is
        reclaimed and close() frees only this rank's buffer)."""
        if not (isinstance(e, EPPeerLostError) or peers.connection_lost(e)):
            return e
        if self.comm_rank is not None:
            self.comm_rank.fabric.peer_lost = True
        peers.reclaim_segments()
        return e if isinstance(e, EPPeerLostError) else self.group.transport.lost(call, what, e)

    def _after(self, pending: object, previous_event: EventOverlap | None) -> list[QueuedWork]:
        """The queued work (the handle's dispatch, `previous_event`'s) a call's work must not run without."""
        works = [pending, previous_event.event if previous_event is not None else None]
        return [w for w in works if isinstance(w, QueuedWork) and self._queued_here(w)]

    # ------------------------------------------------------------------ dispatch

    def dispatch(self, call: DispatchCall, stats: CallStats) -> DispatchOutput:
        if self.group.num_nodes > 1:
            return internode_calls.dispatch(self, call, stats, _kernel_backend())
        KB, g, handle = _kernel_backend(), self.group, call.handle
        x, scales = call.x, call.scales
        in_rank, per_expert, topk_idx, topk_weights, tun = kernel_dispatch_inputs(call, self.layout, KB.tunables)
        if handle is not None:
            per_expert = torch.zeros(call.num_experts, dtype=torch.int32)
        told: Future = Future()  # the notify step's counts: the caller sizes the results by them

        def notified(n: Notified) -> None:
            check_worst(torch.from_numpy(n.matrix), call.num_worst_tokens)
            told.set_result(n)

        def run(comm: CommRank) -> tuple:
            try:
                gen = KB.start_dispatch(comm, x, scales, topk_idx, topk_weights, in_rank, per_expert,
                                        call.num_experts, tun, on_notified=notified)
                return KB.finish_dispatch(KB.drive(gen, comm.device, comm), x, scales, in_rank, call.expert_alignment)
            except BaseException as e:
                if not told.done():
                    told.set_exception(e)
                raise

        def layout_of(comm: CommRank) -> Any:
            return comm.dispatch_layout(_row_bytes(x), _row_bytes(scales) // 4, topk_idx.shape[1] if topk_idx is not
                                        None else 0, topk_weights is not None, call.num_experts, tun)

        name = f"dispatch #{stats.serial}"
        worker, future = self._start("dispatch", name, lambda: self.comm(x), layout_of, run, self._after(
            handle.__dict__.get("_pending") if handle is not None else None, call.previous_event))
        fmt = KB.dispatch_format(x, scales, topk_idx, topk_weights)
        keep = (x, scales, topk_idx, topk_weights)
        if handle is not None:  # the counts are the handle's: nothing to wait for here
            _record(stats, g, _matrix(handle.rank_prefix_matrix), fmt, dispatch=True)
            cached, fill_cached = _received(x, scales, handle._num_recv, handle._num_recv)
            return (cached, None, None, None, None,
                    self._event(name, worker, future, lambda res: fill_cached(res[0]), call.async_finish, keep))
        try:
            counts: Notified = told.result()  # waits for the notify step (DeepEP's CPU waits for the counts too)
        except BaseException:
            future.result()  # the call's own error (the same one), after its watch has been answered
            raise
        n = int(counts.rank_prefix[-1, g.rank])
        _record(stats, g, torch.from_numpy(counts.matrix), fmt, dispatch=True)
        stats.control_bytes = g.transport.take_control_bytes()
        size = max(n, call.num_worst_tokens)
        recv, fill_recv = _received(x, scales, n, size)
        k = topk_idx.shape[1] if topk_idx is not None else 0
        idx = torch.full((size, k), -1, dtype=torch.int64, device=x.device) if topk_idx is not None else None
        w = torch.zeros((size, k), dtype=torch.float32, device=x.device) if topk_weights is not None else None
        dev = x.device
        as_t = lambda a: torch.from_numpy(np.ascontiguousarray(a, np.int32)).to(dev)  # noqa: E731
        fields = (as_t(counts.rank_prefix), as_t(counts.chan_prefix), as_t(counts.recv_chan),
                  torch.zeros(n, dtype=torch.int32, device=dev), in_rank,
                  torch.zeros((x.shape[0], g.size), dtype=torch.int32, device=dev))
        made = KB.make_handle(fields, n, x.shape[0], call.num_experts, call.num_worst_tokens, tun, g.buffer_id,
                              stats.serial)
        per_expert_recv = [] if call.num_worst_tokens else \
            [-(-int(c) // call.expert_alignment) * call.expert_alignment for c in counts.expert_recv.tolist()]

        def fill(res: tuple) -> None:
            got, got_idx, got_w, _, got_fields, _ = res
            fill_recv(got)
            for mine, theirs in ((idx, got_idx), (w, got_w)):
                if mine is not None:
                    mine[:n].copy_(theirs)
            made.recv_src_idx.copy_(got_fields[3])
            made.send_head.copy_(got_fields[5])

        event = self._event(name, worker, future, fill, call.async_finish, keep)
        made._pending = event.event
        return recv, idx, w, per_expert_recv, made, event

    # ------------------------------------------------------------------ combine

    def combine(self, call: CombineCall, stats: CallStats) -> CombineOutput:
        if self.group.num_nodes > 1:
            return internode_calls.combine(self, call, stats, _kernel_backend())
        KB, g, handle, w = _kernel_backend(), self.group, call.handle, call.topk_weights
        tun = KB.tunables(call.config, handle._tunables.num_sms)
        h, k = call.x.shape[1], w.shape[1] if w is not None else 0

        def run(comm: CommRank) -> tuple:
            gen = KB.start_combine(comm, call.x, w, call.bias, handle, tun)
            return KB.finish_combine(KB.drive(gen, comm.device, comm), call.x)

        name = f"combine #{stats.serial}"
        worker, future = self._start("combine", name, lambda: self.comm(call.x),
                                     lambda comm: comm.combine_layout(h, k, handle._num_experts, tun), run,
                                     self._after(handle.__dict__.get("_pending"), call.previous_event))
        fmt = RowFormat([Field("x", torch.bfloat16, h, "payload"), Field("w", torch.float32, k, "meta")])
        _record(stats, g, _matrix(handle.rank_prefix_matrix), fmt, dispatch=False)
        stats.control_bytes = g.transport.take_control_bytes()
        t_ = handle._num_tokens
        out = torch.empty((t_, h), dtype=torch.bfloat16, device=call.x.device)
        out_w = torch.empty((t_, k), dtype=torch.float32, device=call.x.device) if w is not None else None

        def fill(res: tuple) -> None:
            out.copy_(res[0])
            if out_w is not None:
                out_w.copy_(res[1])

        event = self._event(name, worker, future, fill, call.async_finish,
                            (call.x, w, call.bias))
        return out, out_w, event

    @staticmethod
    def _event(name: str, worker: Worker, future: Future, fill: Callable[[Any], None], async_finish: bool,
               keep: tuple) -> EventOverlap:
        """The call's event: its queued work waited for now (a synchronous call) or at the event's first wait."""
        work = QueuedWork(name, worker, future, fill)
        if not async_finish:
            work.wait()
            return EventOverlap()
        return EventOverlap(work, extra_tensors=keep)


def _named(text: str, name: str) -> str:
    """An error's text naming the call `name` ("ptxforge.ep dispatch #3: ...")."""
    return text.replace("ptxforge.ep: ", f"ptxforge.ep {name}: ", 1) if "ptxforge.ep: " in text else \
        f"ptxforge.ep {name}: {text}"


def _row_bytes(t: torch.Tensor | None) -> int:
    return t.shape[1] * t.element_size() if t is not None else 0


def _matrix(rank_prefix: torch.Tensor) -> torch.Tensor:
    """Tokens rank src sends rank dst (int64 [R, R]) from a handle's rank_prefix_matrix."""
    rp = rank_prefix.cpu().to(torch.int64)
    return torch.diff(rp, dim=0, prepend=torch.zeros((1, rp.shape[1]), dtype=torch.int64))


def _record(stats: CallStats, g: EPGroup, matrix: torch.Tensor, fmt: RowFormat, dispatch: bool) -> None:
    """The call's rows to and from each peer (`matrix[src, dst]`; a combine sends back what its dispatch got)."""
    for peer in range(g.size):
        out, back = int(matrix[g.rank, peer]), int(matrix[peer, g.rank])
        stats.record("sent", peer, out if dispatch else back, fmt, True)
        stats.record("recv", peer, back if dispatch else out, fmt, True)


def _received(x: torch.Tensor, scales: torch.Tensor | None, n: int,
              size: int) -> tuple[Received, Callable[[Received], None]]:
    """recv_x (and its scales) of `size` rows in x's form, zero past row `n`, and what fills its first n rows."""
    recv_x = torch.zeros((size, x.shape[1]), dtype=x.dtype, device=x.device)
    recv_s = torch.zeros((size, scales.shape[1]), dtype=scales.dtype, device=x.device) if scales is not None else None

    def fill(got: Received) -> None:
        if isinstance(got, tuple):
            recv_x[:n].copy_(got[0])
            if recv_s is not None and got[1] is not None:
                recv_s[:n].copy_(got[1])
        else:
            recv_x[:n].copy_(got)

    return ((recv_x, recv_s) if recv_s is not None else recv_x), fill


def _kernel_backend() -> ModuleType:
    """`ptxforge.ep.kernel_backend`, loaded at the first call that runs the kernels: it brings the DSL
    communication kernels, the runtime and the emulator, which the torch backend never needs."""
    from ptxforge.ep import kernel_backend  # heavy, for backend="kernels" only (see the docstring)

    return kernel_backend
