"""`backend="kernels"`: the layout by the DSL layout kernel, and on one node dispatch and combine by the intranode
communication kernels (`ptxforge.kernels.comm`) on this process's device: an emulated GPU whose memory the other
ranks' processes map through emulator IPC, or a CUDA GPU (CUDA IPC). Across nodes the torch transport moves
the data. Low-latency mode runs the low-latency kernels (`ptxforge.ep.low_latency_kernels`). The kernels, the
runtime and the emulator load at the first call that needs them (over a second a process), never for the torch
backend.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from types import ModuleType
from typing import TYPE_CHECKING

import torch

from ptxforge.ep import peers
from ptxforge.ep.backends.base import (
    Backend,
    CombineCall,
    CombineOutput,
    DispatchCall,
    DispatchOutput,
    EPGroup,
    Layout,
    LowLatencyOps,
    check_worst,
)
from ptxforge.ep.backends.torch_transport import TorchBackend
from ptxforge.ep.config import EventOverlap
from ptxforge.ep.errors import EPPeerLostError
from ptxforge.ep.peer_watch import PeerWatch
from ptxforge.ep.rows import Field, RowFormat

if TYPE_CHECKING:
    from ptxforge.ep.intranode import CommRank
    from ptxforge.ep.low_latency_kernels import LowLatencyKernels
    from ptxforge.ep.stats import CallStats



class KernelsBackend(Backend):
    """The communication kernels (see the module docstring); `comm_rank` is this rank's side of them, made at
    the first dispatch or combine on one node."""

    name = "kernels"

    def __init__(self, group: EPGroup) -> None:
        super().__init__(group)
        self.comm_rank: CommRank | None = None
        self.low_latency_ops: LowLatencyKernels | None = None
        self._watches: list[PeerWatch] = []  # the last calls' peer watches: their answers outlive the call
        self._across_nodes = TorchBackend(group, layout=self.layout)

    def layout(self, topk_idx: torch.Tensor, num_experts: int) -> Layout:
        from ptxforge.kernels import ops  # the DSL layout kernel: heavy, as the module docstring says

        g = self.group
        return ops.get_dispatch_layout(topk_idx, num_experts, g.size, g.ranks_per_node)

    def sm_map(self) -> list[dict]:
        """On the emulator: per block of this rank's last dispatch's and last combine's kernels, its SM, role
        (notify, sender, receiver), channel and thread-instructions."""
        if self.comm_rank is None:
            return super().sm_map()
        return self.comm_rank.sm_map()

    def sm_budget(self) -> dict:
        if self.comm_rank is None or self.comm_rank.sm_budget is None:
            return super().sm_budget()
        return dict(self.comm_rank.sm_budget)

    def low_latency(self, num_rdma_bytes: int) -> LowLatencyOps:
        """The low-latency calls by the low-latency kernels (`ptxforge.ep.low_latency_kernels`)."""
        from ptxforge.ep.low_latency_kernels import LowLatencyKernels  # heavy on first call, as the module says

        g = self.group
        self.low_latency_ops = LowLatencyKernels(g.transport, g.rank, g.size, g.buffer_id, num_rdma_bytes,
                                                 group=g.group, timeout_s=g.transport.timeout_s)
        return self.low_latency_ops

    def close(self) -> None:
        if self.low_latency_ops is not None:  # the low-latency buffer
            self.low_latency_ops.release()
        if self.comm_rank is not None:  # the communication buffer (the IPC device stays for other Buffers)
            self.comm_rank.close_streams()  # a GPU's green contexts
            self.comm_rank.fabric.release()
            self.comm_rank = None

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

    @contextlib.contextmanager
    def _watched(self, call: str, like: torch.Tensor) -> Iterator[CommRank]:
        """This rank's `CommRank` for one call, its peers watched through the process group (`PeerWatch`): a
        dead peer raises `EPPeerLostError` at once, also from inside a kernel spinning on it (an emulated GPU's
        launches run the watch's check), and its /dev/shm segment is reclaimed."""
        g = self.group
        watch = PeerWatch(g.transport, call, g.buffer_id * 1_000_003 + g.transport.entered)
        self._watches = [*self._watches[-7:], watch]
        KB = _kernel_backend()
        try:
            comm = self.comm(like)
            KB.check_peers_during_launches(watch.check)
            yield comm
        except RuntimeError as e:
            if isinstance(e, EPPeerLostError) or peers.connection_lost(e):
                if self.comm_rank is not None:
                    self.comm_rank.fabric.peer_lost = True  # close() then frees only this rank's buffer
                peers.reclaim_segments()
                raise (e if isinstance(e, EPPeerLostError) else g.transport.lost(call, "its IPC set-up", e)) \
                    from None
            raise
        finally:
            KB.check_peers_during_launches(None)
            watch.finish()

    # ------------------------------------------------------------------ dispatch

    def dispatch(self, call: DispatchCall, stats: CallStats) -> DispatchOutput:
        if self.group.num_nodes > 1:
            return self._across_nodes.dispatch(call, stats)
        with self._watched("dispatch", call.x) as comm:
            return self._dispatch_on(comm, call, stats)

    def _dispatch_on(self, comm: CommRank, call: DispatchCall, stats: CallStats) -> DispatchOutput:
        KB, g = _kernel_backend(), self.group
        x, scales, in_rank, per_expert = call.x, call.scales, call.in_rank, call.per_expert
        topk_idx, topk_weights = call.topk_idx, call.topk_weights
        cached = call.handle is not None
        if call.handle is not None:
            in_rank, per_expert, tun = (call.handle.is_token_in_rank,
                                        torch.zeros(call.num_experts, dtype=torch.int32), call.handle._tunables)
            topk_idx = topk_weights = None
        else:
            if in_rank is None or per_expert is None:
                _, _, per_expert, in_rank = self.layout(topk_idx, call.num_experts)  # type: ignore[arg-type]
            tun = KB.tunables(call.config)
            if topk_idx is None:
                topk_weights = None
        matrix = []

        def counts(m):
            matrix.append(m)
            check_worst(torch.from_numpy(m), call.num_worst_tokens)

        gen = KB.start_dispatch(comm, x, scales, topk_idx, topk_weights, in_rank, per_expert, call.num_experts, tun,
                                on_counts=counts)
        out = KB.drive(gen, comm.device, comm)
        fmt = KB.dispatch_format(x, scales, topk_idx, topk_weights)
        for peer in range(g.size):
            stats.record("sent", peer, int(matrix[0][g.rank, peer]), fmt, True)
            stats.record("recv", peer, int(matrix[0][peer, g.rank]), fmt, True)
        stats.control_bytes = g.transport.take_control_bytes()
        recv, idx, w, per_expert_recv, fields, n = KB.finish_dispatch(out, x, scales, in_rank, call.expert_alignment)
        if cached:
            return recv, None, None, None, None, EventOverlap()
        handle = KB.make_handle(fields, n, x.shape[0], call.num_experts, call.num_worst_tokens, tun, g.buffer_id,
                                stats.serial)
        if call.num_worst_tokens:
            recv, idx, w = KB.pad_worst(call.num_worst_tokens, recv, idx, w)
            per_expert_recv = []
        return recv, idx, w, per_expert_recv, handle, EventOverlap()

    # ------------------------------------------------------------------ combine

    def combine(self, call: CombineCall, stats: CallStats) -> CombineOutput:
        if self.group.num_nodes > 1:
            return self._across_nodes.combine(call, stats)
        with self._watched("combine", call.x) as comm:
            return self._combine_on(comm, call, stats)

    def _combine_on(self, comm: CommRank, call: CombineCall, stats: CallStats) -> CombineOutput:
        KB, g, handle = _kernel_backend(), self.group, call.handle
        tun = KB.tunables(call.config, handle._tunables.num_sms)
        result = KB.drive(KB.start_combine(comm, call.x, call.topk_weights, call.bias, handle, tun), comm.device,
                          comm)
        w = call.topk_weights
        fmt = RowFormat([Field("x", torch.bfloat16, call.x.shape[1], "payload"),
                         Field("w", torch.float32, w.shape[1] if w is not None else 0, "meta")])
        rank_prefix = handle.rank_prefix_matrix.cpu().to(torch.int64)
        matrix = torch.diff(rank_prefix, dim=0, prepend=torch.zeros((1, g.size), dtype=torch.int64))
        for peer in range(g.size):
            stats.record("sent", peer, int(matrix[peer, g.rank]), fmt, True)
            stats.record("recv", peer, int(matrix[g.rank, peer]), fmt, True)
        stats.control_bytes = g.transport.take_control_bytes()
        out, out_w = KB.finish_combine(result, call.x)
        return out, out_w, EventOverlap()


def _kernel_backend() -> ModuleType:
    """`ptxforge.ep.kernel_backend`, loaded at the first call that runs the kernels: it brings the DSL
    communication kernels, the runtime and the emulator, which the torch backend never needs."""
    from ptxforge.ep import kernel_backend  # heavy, for backend="kernels" only (see the docstring)

    return kernel_backend
