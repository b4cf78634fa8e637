"""`Buffer`: DeepEP's normal-mode expert-parallel API over torch.distributed (see the package docstring)."""

from __future__ import annotations

import contextlib
import itertools
from collections.abc import Iterator
from typing import TYPE_CHECKING, TypeAlias

import torch
import torch.distributed as dist

from ptxforge import environment
from ptxforge.ep import layout as torch_layout
from ptxforge.ep import peers
from ptxforge.ep.config import COMBINE_CONFIGS, DISPATCH_CONFIGS, Completion, Config, EventOverlap, recommended
from ptxforge.ep.errors import EPInputError, EPPeerLostError
from ptxforge.ep.handle import DispatchHandle
from ptxforge.ep.low_latency import LowLatency, LowLatencyHandle, rdma_size_hint
from ptxforge.ep.low_latency_kernels import LowLatencyKernels
from ptxforge.ep.peer_watch import PeerWatch
from ptxforge.ep.plan import Hop, reduce_back
from ptxforge.ep.rows import Field, RowFormat
from ptxforge.ep.stats import CallStats
from ptxforge.ep.transport import Pending, Transport
from ptxforge.ep.validate import check_combine, check_dispatch, check_layout

if TYPE_CHECKING:
    from ptxforge.ep.intranode import CommRank

# dispatch's x: BF16 rows, or FP8 rows with their scales; get_dispatch_layout's, dispatch's and combine's results
Payload: TypeAlias = "torch.Tensor | tuple[torch.Tensor, torch.Tensor]"
Received: TypeAlias = "torch.Tensor | tuple[torch.Tensor, torch.Tensor | None]"  # like x: scales when x had them
LayoutOutput: TypeAlias = "tuple[torch.Tensor, torch.Tensor | None, torch.Tensor, torch.Tensor, EventOverlap]"
DispatchOutput: TypeAlias = ("tuple[Received, torch.Tensor | None, torch.Tensor | None, list[int] | None, "
                             "DispatchHandle | None, EventOverlap]")

_buffer_ids = itertools.count(1)
MAX_STATS = 1000


class Buffer:
    """Expert-parallel dispatch and combine for the ranks of `group` (DeepEP V1 normal mode).

    `timeout_s` bounds every wait: the transport's collectives (an `EPTimeoutError`) and, with
    `backend="kernels"`, each spin of the communication kernels on a peer's counter (the kernel traps and
    the call raises a `CommTimeout` naming the rank, kernel, role, channel and counters)."""

    num_sms: int = 20

    def __init__(self, group: dist.ProcessGroup | None = None, num_nvl_bytes: int = 0, num_rdma_bytes: int = 0,
                 low_latency_mode: bool = False,
                 num_qps_per_rank: int = 24, allow_nvlink_for_low_latency_mode: bool = True,
                 allow_mnnvl: bool = False, explicitly_destroy: bool = False, enable_shrink: bool = False,
                 comm: object = None, *, num_ranks_per_node: int | None = None, backend: str = "torch",
                 timeout_s: float = 60.0) -> None:
        if backend not in ("torch", "kernels"):
            raise ValueError(f"backend must be 'torch' or 'kernels', got {backend!r}")
        if not dist.is_initialized():
            raise RuntimeError("ptxforge.ep.Buffer needs torch.distributed initialized (init_process_group)")
        self.group = group
        self.backend = backend
        self.num_nvl_bytes, self.num_rdma_bytes = int(num_nvl_bytes), int(num_rdma_bytes)
        self.id = next(_buffer_ids)
        self.transport = Transport(group, timeout_s, tag=f"buffer{self.id}")
        self.rank, self.group_size = self.transport.rank, self.transport.size
        if num_ranks_per_node is None:
            env = environment.local_world_size()
            num_ranks_per_node = env if env and self.group_size % env == 0 else min(self.group_size, 8)
        if num_ranks_per_node <= 0 or self.group_size % num_ranks_per_node:
            raise ValueError(f"num_ranks_per_node={num_ranks_per_node} does not divide the group's "
                             f"{self.group_size} ranks")
        self.ranks_per_node = num_ranks_per_node
        self.num_nodes = self.group_size // num_ranks_per_node
        self._serial = 0
        self._stats: list[CallStats] = []
        self._comm_rank = None  # backend="kernels": this rank's side of the communication kernels
        self._watches: list[PeerWatch] = []  # backend="kernels": the last calls' peer watches
        self.low_latency_mode, self.num_qps_per_rank = bool(low_latency_mode), int(num_qps_per_rank)
        self._ll: LowLatency
        if backend == "kernels" and self.low_latency_mode:  # the low-latency communication kernels
            self._ll = LowLatencyKernels(self.transport, self.rank, self.group_size, self.id, self.num_rdma_bytes,
                                         group=group, timeout_s=timeout_s)
        else:
            self._ll = LowLatency(self.transport, self.rank, self.group_size, self.id, self.num_rdma_bytes)
        self.transport.agree("Buffer()", {"num_ranks_per_node": num_ranks_per_node, "buffer_number": self.id,
                                          "low_latency_mode": int(self.low_latency_mode)})

    # ------------------------------------------------------------------ DeepEP's small API

    def destroy(self) -> None:
        self._stats.clear()
        if isinstance(self._ll, LowLatencyKernels):
            self._ll.release()
        if self._comm_rank is not None:  # the communication buffer (the IPC device stays for other Buffers)
            self._comm_rank.close_streams()  # a GPU's green contexts
            self._comm_rank.fabric.release()
            self._comm_rank = None

    def sm_map(self) -> list[dict]:
        """backend="kernels" on the emulator: for each kernel of this rank's last dispatch and last combine,
        per block the SM it ran on, its role (notify, sender, receiver), channel and thread-instructions."""
        if self._comm_rank is None:
            raise RuntimeError("Buffer.sm_map: no dispatch or combine has run the communication kernels yet "
                               "(backend='kernels' on one node)")
        return self._comm_rank.sm_map()

    def sm_budget(self) -> dict:
        """backend="kernels": how this rank's last communication kernels were held to `num_sms` SMs:
        {"num_sms", "how", "sms", "why"} with "how" one of "green context" (a CUDA GPU whose driver has
        them; "sms" is what the green context got, the driver's granularity rounding num_sms up),
        "persistent grid" (a grid of num_sms persistent blocks, the only budget; on a GPU "why" says why no
        green context) or "SM partition" (an emulated node's stream on SMs 0..num_sms-1)."""
        if self._comm_rank is None or self._comm_rank.sm_budget is None:
            raise RuntimeError("Buffer.sm_budget: no dispatch or combine has run the communication kernels yet "
                               "(backend='kernels' on one node)")
        return dict(self._comm_rank.sm_budget)

    def _comm(self, like=None):
        """This rank's `CommRank`, made at the first dispatch: on GPUs (an NCCL group, or CUDA inputs `like`),
        the rank's CUDA GPU, its buffer shared with the other ranks' processes by CUDA IPC handles (several
        ranks may share one GPU) and the kernels confined to `num_sms` SMs (a green context where the driver
        has them, else a grid of `num_sms` persistent blocks: `sm_budget()`); on CPU (gloo), an
        emulated GPU whose memory the other ranks' processes map through emulator IPC handles."""
        if self._comm_rank is None:
            KB = _kernel_backend()
            on_gpu = self.transport.device.type == "cuda" or (like is not None and like.device.type == "cuda")
            ordinal = like.device.index if like is not None and like.device.type == "cuda" else None
            dev = KB.comm_device(self.rank, self.group_size, "cuda" if on_gpu else "emu", ordinal)
            self._comm_rank = KB.CommRank(self.rank, self.group_size, dev,
                                          KB.IpcFabric(dev, self.group, self.group_size),
                                          timeout_s=self.transport.timeout_s)
        return self._comm_rank

    @staticmethod
    def is_sm90_compiled() -> bool:
        return True  # FP8 dispatch works on every device here

    @staticmethod
    def set_num_sms(new_num_sms: int) -> None:
        if new_num_sms <= 0 or new_num_sms % 2:
            raise ValueError(f"set_num_sms: the SM count must be positive and even, got {new_num_sms}")
        Buffer.num_sms = new_num_sms

    @staticmethod
    def capture() -> EventOverlap:
        return EventOverlap()

    @staticmethod
    def get_dispatch_config(num_ranks: int) -> Config:
        return recommended(DISPATCH_CONFIGS, num_ranks, Buffer.num_sms)

    @staticmethod
    def get_combine_config(num_ranks: int) -> Config:
        return recommended(COMBINE_CONFIGS, num_ranks, Buffer.num_sms)

    def get_num_rdma_ranks(self) -> int:
        return self.num_nodes

    def get_rdma_rank(self) -> int:
        return self.rank // self.ranks_per_node

    def node_of(self, rank: int) -> int:
        return rank // self.ranks_per_node

    def stats(self, reset: bool = False) -> list[CallStats]:
        """This rank's record of each dispatch/combine (the last 1000), oldest first."""
        out = list(self._stats)
        if reset:
            self._stats.clear()
        return out

    def _next(self, call: str, form: str) -> CallStats:
        self._serial += 1
        s = CallStats(call, self._serial, form, self.rank)
        self._stats.append(s)
        del self._stats[:-MAX_STATS]
        return s

    # ------------------------------------------------------------------ layout

    def get_dispatch_layout(self, topk_idx: torch.Tensor, num_experts: int,
                            previous_event: EventOverlap | None = None, async_finish: bool = False,
                            allocate_on_comm_stream: bool = False) -> LayoutOutput:
        """(tokens per rank int32 [R], per node int32 [N] or None, per expert int32 [E], is_token_in_rank
        bool [T, R], event). Agrees on validity with the group first (one small collective)."""
        _wait_previous(previous_event)
        complaint = check_layout(topk_idx, num_experts, self.group_size)
        if not complaint:
            self._last_num_experts = int(num_experts)
        self.transport.agree("get_dispatch_layout", {"num_experts": -1 if complaint else int(num_experts)},
                             complaint)
        return (*self._layout(topk_idx, int(num_experts)), EventOverlap())

    def _layout(self, topk_idx, num_experts):
        if self.backend == "kernels":
            from ptxforge.kernels import ops  # the DSL layout kernel: heavy, as _kernel_backend says

            return ops.get_dispatch_layout(topk_idx, num_experts, self.group_size, self.ranks_per_node)
        return torch_layout.dispatch_layout(topk_idx, num_experts, self.group_size, self.ranks_per_node)

    # ------------------------------------------------------------------ dispatch

    def dispatch(self, x: Payload, handle: DispatchHandle | None = None,
                 num_tokens_per_rank: torch.Tensor | None = None, num_tokens_per_rdma_rank: torch.Tensor | None = None,
                 is_token_in_rank: torch.Tensor | None = None, num_tokens_per_expert: torch.Tensor | None = None,
                 topk_idx: torch.Tensor | None = None, topk_weights: torch.Tensor | None = None,
                 expert_alignment: int = 1, num_worst_tokens: int = 0, config: Config | None = None,
                 previous_event: EventOverlap | None = None, async_finish: bool = False,
                 allocate_on_comm_stream: bool = False) -> DispatchOutput:
        """(recv_x, recv_topk_idx, recv_topk_weights, num_recv_tokens_per_expert_list, handle, event)."""
        _wait_previous(previous_event)
        if isinstance(handle, DispatchHandle):
            self._finished(handle)
        chk = check_dispatch(self, x, handle, num_tokens_per_rank, num_tokens_per_rdma_rank, is_token_in_rank,
                             num_tokens_per_expert, topk_idx, topk_weights, expert_alignment, num_worst_tokens,
                             config)
        self.transport.agree("dispatch", dict(chk.facts, serial=self._serial + 1), chk.complaint)
        stats = self._next("dispatch", chk.form)
        num_experts = chk.facts["num_experts"]
        x_payload, x_scales = x if isinstance(x, tuple | list) else (x, None)
        if self.backend == "kernels" and self.num_nodes == 1:
            return self._dispatch_kernels(x_payload, x_scales, handle, is_token_in_rank, num_tokens_per_expert,
                                          topk_idx, topk_weights, num_experts, expert_alignment, num_worst_tokens,
                                          config, stats)
        cached = handle is not None
        counts: torch.Tensor | None
        if handle is not None:
            in_rank, hops, counts = handle.is_token_in_rank, handle._hops, None
        else:
            if is_token_in_rank is None:
                _, _, num_tokens_per_expert, is_token_in_rank = self._layout(topk_idx, num_experts)
            in_rank = is_token_in_rank
            counts = self._gather_layout(in_rank, num_tokens_per_expert)
            self._check_worst(counts[:, :self.group_size], num_worst_tokens)
            hops = self._first_hops(in_rank, counts)
        with_topk = not cached and topk_idx is not None
        fmt, rows = self._pack(x_payload, x_scales, in_rank, topk_idx if with_topk else None,
                               topk_weights if with_topk else None)
        if self.num_nodes > 1:  # the first hop completes here: the second needs what it delivered
            arrived = self._run_hop("dispatch", rows, fmt, hops[0], stats).wait()
            if len(hops) == 1:
                hops = [hops[0], self._second_hop(fmt.unpack(arrived)["dest"], counts)]
            rows = arrived
        last = hops[-1]
        pending = self._run_hop("dispatch", rows, fmt, last, stats)
        stats.control_bytes = self.transport.take_control_bytes()
        n = sum(last.recv_counts)
        size = max(n, num_worst_tokens) if not cached else n
        recv_x = torch.empty((size, x_payload.shape[1]), dtype=x_payload.dtype, device=x_payload.device)
        recv_scales = None if x_scales is None else \
            torch.empty((size, x_scales.shape[1]), dtype=x_scales.dtype, device=x_payload.device)
        recv = (recv_x, recv_scales) if x_scales is not None else recv_x
        keep = (x_payload, x_scales, topk_idx, topk_weights)
        if handle is not None:  # a cached dispatch delivers in the same order as the one it repeats
            order = handle._order

            def finish_cached() -> None:
                out = fmt.unpack(pending.wait())
                recv_x.copy_(out["x"][order])
                if recv_scales is not None:
                    recv_scales.copy_(out["scales"][order])

            return recv, None, None, None, None, self._event("dispatch", finish_cached, async_finish, keep)
        assert counts is not None
        k = topk_idx.shape[1] if with_topk and topk_idx is not None else 0
        recv_idx = torch.full((size, k), -1, dtype=torch.int64, device=x_payload.device) if with_topk else None
        recv_w = torch.zeros((size, k), dtype=torch.float32, device=x_payload.device) \
            if with_topk and topk_weights is not None else None
        for t in (recv_x, recv_scales):
            if t is not None:
                t[n:].zero_()  # num_worst_tokens padding rows
        per_expert = [] if num_worst_tokens else self._expert_counts(counts, num_experts, expert_alignment)
        handle = self._make_handle(in_rank, counts[:, :self.group_size], hops, config, x_payload.shape[0], n)
        handle.__dict__.update(_num_experts=num_experts, _num_worst=num_worst_tokens)

        def finish() -> None:
            out = fmt.unpack(pending.wait())
            src = out["src"].to(torch.int64)
            order = torch.argsort(src[:, 0] * (1 << 32) + src[:, 1], stable=True)  # by source rank, then token
            out = {key: v[order] for key, v in out.items()}
            recv_x[:n].copy_(out["x"])
            if recv_scales is not None:
                recv_scales[:n].copy_(out["scales"])
            if with_topk:
                idx, w = self._local_topk(out, num_experts)
                assert recv_idx is not None
                recv_idx[:n].copy_(idx)
                if recv_w is not None and w is not None:
                    recv_w[:n].copy_(w)
            self._fill_handle(handle, src[order], order)

        event = self._event("dispatch", finish, async_finish, keep)
        handle._pending = event.event
        return recv, recv_idx, recv_w, per_expert, handle, event

    def _event(self, call: str, finish, async_finish: bool, keep: tuple) -> EventOverlap:
        """The call's event: its pending work finished now (a synchronous call) or at the event's first wait."""
        done = Completion(f"{call} #{self._serial}", finish)
        if not async_finish:
            done.wait()
            return EventOverlap()
        return EventOverlap(done, extra_tensors=keep)

    @staticmethod
    def _finished(handle: DispatchHandle) -> None:
        """Wait for the dispatch that made `handle` (combine and cached dispatch read what it received)."""
        pending = handle.__dict__.get("_pending")
        if pending is not None:
            pending.wait()

    def _pack(self, x, scales, in_rank, topk_idx, topk_weights) -> tuple[RowFormat, torch.Tensor]:
        """One byte row per token: payload | scales | top-k ids | weights | (source rank, token) | dest ranks."""
        t_, dev = x.shape[0], x.device
        fmt = self._dispatch_format(x, scales, topk_idx, topk_weights)
        fields = {"x": x, "scales": scales, "topk_idx": topk_idx, "topk_weights": topk_weights,
                  "src": torch.stack([torch.full((t_,), self.rank, dtype=torch.int32),
                                      torch.arange(t_, dtype=torch.int32)], 1).to(dev),
                  "dest": _rank_bits(in_rank) if self.num_nodes > 1 else None}
        return fmt, fmt.pack({k: v for k, v in fields.items() if v is not None}, t_, dev)

    def _local_topk(self, out, num_experts):
        """Received global expert ids -> ids local to this rank (-1 elsewhere); weights of the others zeroed."""
        epr = num_experts // self.group_size
        g = out["topk_idx"]
        local = (g >= self.rank * epr) & (g < (self.rank + 1) * epr)
        idx = torch.where(local, g - self.rank * epr, torch.full_like(g, -1))
        w = out.get("topk_weights")
        return idx, (torch.where(local, w, torch.zeros_like(w)) if w is not None else None)

    def _expert_counts(self, counts, num_experts, alignment) -> list[int]:
        """Tokens each local expert receives, from every rank's tokens per expert, rounded up to `alignment`."""
        epr = num_experts // self.group_size
        per_expert = counts[:, self.group_size + self.num_nodes:]
        mine = per_expert[:, self.rank * epr:(self.rank + 1) * epr].sum(0)
        return [-(-int(c) // alignment) * alignment for c in mine.tolist()]

    def _gather_layout(self, in_rank, num_tokens_per_expert) -> torch.Tensor:
        """Every rank's [tokens per rank | tokens per node | tokens per expert]: int64 [ranks, R + N + E]."""
        t_ = in_rank.shape[0]
        per_rank = in_rank.sum(0, dtype=torch.int64)
        per_node = in_rank.view(t_, self.num_nodes, self.ranks_per_node).any(-1).sum(0, dtype=torch.int64)
        mine = torch.cat([per_rank.cpu(), per_node.cpu(), num_tokens_per_expert.to(torch.int64).cpu()])
        return self.transport.gather_counts("dispatch", mine.tolist())

    def _check_worst(self, matrix: torch.Tensor, num_worst_tokens: int) -> None:
        if num_worst_tokens:
            over = [f"rank {r} receives {n}" for r, n in enumerate(matrix.sum(0).tolist()) if n > num_worst_tokens]
            if over:  # every rank sees the whole matrix, so every rank raises the same error
                raise EPInputError(f"ptxforge.ep dispatch: num_worst_tokens={num_worst_tokens} is too small: "
                                   + ", ".join(over))

    def _first_hops(self, in_rank, counts) -> list[Hop]:
        """One hop inside a node; across nodes, the first of two (to the same local index on each node)."""
        size, me, rpn = self.group_size, self.rank, self.ranks_per_node
        if self.num_nodes == 1:
            return [Hop.from_mask(in_rank, list(range(size)), size, counts[:, me].tolist())]
        local, node = me % rpn, self.node_of(me)
        to_node = in_rank.view(-1, self.num_nodes, rpn).any(-1)
        rail = [b * rpn + local for b in range(self.num_nodes)]
        recv = [int(counts[r, size + node]) if r in rail else 0 for r in range(size)]
        return [Hop.from_mask(to_node, rail, size, recv)]

    def _second_hop(self, dest_bits, counts) -> Hop:
        """Forward what hop 1 delivered to the ranks of this node that need it."""
        size, me, rpn = self.group_size, self.rank, self.ranks_per_node
        node = self.node_of(me)
        peers = [node * rpn + j for j in range(rpn)]
        in_rank = _rank_unbits(dest_bits, size)
        recv = [0] * size
        for i in range(rpn):  # forwarder (node, i) passes on what every (a, i) sends me
            recv[node * rpn + i] = int(sum(counts[a * rpn + i, me] for a in range(self.num_nodes)))
        return Hop.from_mask(in_rank[:, peers], peers, size, recv)

    def _run_hop(self, call, rows, fmt, hop: Hop, stats: CallStats, reverse: bool = False) -> Pending:
        """One hop's all_to_all, started on gloo's thread."""
        send_counts = hop.recv_counts if reverse else hop.send_counts
        recv_counts = hop.send_counts if reverse else hop.recv_counts
        for peer in range(self.group_size):
            same = self.node_of(peer) == self.node_of(self.rank)
            stats.record("sent", peer, send_counts[peer], fmt, same)
            stats.record("recv", peer, recv_counts[peer], fmt, same)
        send = rows if reverse else rows[hop.send_index.to(rows.device)]
        return self.transport.exchange_rows_async(call, send, send_counts, recv_counts)

    def _dispatch_format(self, x, scales, topk_idx, topk_weights) -> RowFormat:
        k = topk_idx.shape[1] if topk_idx is not None else 0
        return RowFormat([
            Field("x", x.dtype, x.shape[1], "payload"),
            Field("scales", scales.dtype if scales is not None else torch.float32,
                  scales.shape[1] if scales is not None else 0, "scales"),
            Field("topk_idx", torch.int64, k, "meta"),
            Field("topk_weights", torch.float32, k if topk_weights is not None else 0, "meta"),
            Field("src", torch.int32, 2, "meta"),
            Field("dest", torch.int64, -(-self.group_size // 32) if self.num_nodes > 1 else 0, "meta")])

    def _make_handle(self, in_rank, matrix, hops, config, t_, n) -> DispatchHandle:
        """The handle, but for what depends on the received rows (`_fill_handle` fills those when they arrive)."""
        size, me = self.group_size, self.rank
        channels = (config or self.get_dispatch_config(size)).num_channels
        per = max(1, -(-t_ // channels))  # tokens per channel: channel c holds tokens [c*per, (c+1)*per)
        ir = in_rank.cpu()
        chan_of_token = torch.arange(t_) // per
        chan_prefix = torch.stack([ir[chan_of_token <= c].sum(0, dtype=torch.int32) for c in range(channels)], 1)
        rank_prefix = torch.cumsum(matrix, 0).to(torch.int32)
        starts = rank_prefix[me - 1] if me else torch.zeros(size, dtype=torch.int32)
        send_head = torch.full((t_, size), -1, dtype=torch.int32)
        for r in range(size):
            rows = torch.nonzero(ir[:, r]).flatten()
            send_head[rows, r] = int(starts[r]) + torch.arange(rows.numel(), dtype=torch.int32)
        dev = in_rank.device
        recv_chan = torch.zeros((size, channels), dtype=torch.int32, device=dev)
        recv_src_idx = torch.zeros(n, dtype=torch.int32, device=dev)
        fields = (rank_prefix.to(dev), chan_prefix.to(dev), recv_chan, recv_src_idx, in_rank, send_head.to(dev))
        return DispatchHandle(fields, _buffer_id=self.id, _serial=self._serial, _hops=hops, _num_tokens=t_,
                              _num_recv=n, _per=per)

    def _fill_handle(self, handle: DispatchHandle, recv_src: torch.Tensor, order: torch.Tensor) -> None:
        """The handle's fields that depend on the received rows: (source rank, token) of each, sorted."""
        per, channels = handle._per, handle.recv_channel_prefix_matrix.shape[1]
        src_chan = recv_src[:, 1].cpu() // per
        src_rank = recv_src[:, 0].cpu()
        recv_chan = torch.stack([torch.stack([((src_rank == s) & (src_chan <= c)).sum().to(torch.int32)
                                              for c in range(channels)]) for s in range(self.group_size)])
        handle.recv_channel_prefix_matrix.copy_(recv_chan)
        handle.recv_src_idx.copy_(recv_src[:, 1].to(torch.int32))
        handle._order = order

    # ------------------------------------------------------------------ combine

    def combine(self, x: torch.Tensor, handle: DispatchHandle, topk_weights: torch.Tensor | None = None,
                bias: torch.Tensor | tuple[torch.Tensor | None, ...] | None = None, config: Config | None = None,
                previous_event: EventOverlap | None = None, async_finish: bool = False,
                allocate_on_comm_stream: bool = False) -> tuple[torch.Tensor, torch.Tensor | None, EventOverlap]:
        """(combined_x bf16 [T, H], combined_topk_weights f32 [T, K] or None, event): each token's copies
        summed in f32 in rank order (across nodes: per node first, sent back as BF16, then over nodes)."""
        _wait_previous(previous_event)
        if isinstance(handle, DispatchHandle):
            self._finished(handle)
        complaint, facts = check_combine(self, x, handle, topk_weights, bias)
        self.transport.agree("combine", dict(facts, serial=self._serial + 1), complaint)
        stats = self._next("combine", "bf16")
        if self.backend == "kernels" and self.num_nodes == 1:
            return self._combine_kernels(x, handle, topk_weights, bias, config, stats)
        n = handle._num_recv
        x = x[:n]
        w = topk_weights[:n].to(torch.float32) if topk_weights is not None else None
        fmt = RowFormat([Field("x", torch.bfloat16, x.shape[1], "payload"),
                         Field("w", torch.float32, w.shape[1] if w is not None else 0, "meta")])
        parts = {"x": _unorder(x, handle._order)}
        if w is not None:
            parts["w"] = _unorder(w, handle._order)
        rows = fmt.pack(parts, n, x.device)
        hops = handle._hops
        for i in range(len(hops) - 1, 0, -1):  # across nodes: every hop but the first completes here
            back = fmt.unpack(self._run_hop("combine", rows, fmt, hops[i], stats, reverse=True).wait())
            parts = self._reduce_hop(back, hops[i], sum(hops[i - 1].recv_counts), None)
            rows = fmt.pack(parts, sum(hops[i - 1].recv_counts), x.device)
        pending = self._run_hop("combine", rows, fmt, hops[0], stats, reverse=True)
        stats.control_bytes = self.transport.take_control_bytes()
        t_ = handle._num_tokens
        combined = torch.empty((t_, x.shape[1]), dtype=torch.bfloat16, device=x.device)
        combined_w = torch.empty((t_, w.shape[1]), dtype=torch.float32, device=x.device) if w is not None else None

        def finish() -> None:
            done = self._reduce_hop(fmt.unpack(pending.wait()), hops[0], t_, bias)
            combined.copy_(done["x"])
            if combined_w is not None:
                combined_w.copy_(done["w"])

        event = self._event("combine", finish, async_finish, (x, topk_weights, bias))
        return combined, combined_w, event

    @staticmethod
    def _reduce_hop(back: dict[str, torch.Tensor], hop: Hop, num_local: int, bias) -> dict[str, torch.Tensor]:
        """The rows a combine hop brought back summed per local row (x to BF16, weights in f32); `bias`
        (the last hop's) added in f32 before rounding."""
        acc = reduce_back(back["x"], hop, num_local)
        for b in (bias if isinstance(bias, tuple | list) else (bias,)):
            if b is not None:
                acc += b.to(torch.float32)
        parts = {"x": acc.to(torch.bfloat16)}
        if "w" in back and back["w"].shape[1]:
            parts["w"] = reduce_back(back["w"], hop, num_local)
        return parts

    # ------------------------------------------------------------------ low-latency mode

    @staticmethod
    def get_low_latency_rdma_size_hint(num_max_dispatch_tokens_per_rank: int, hidden: int, num_ranks: int,
                                       num_experts: int) -> int:
        """The num_rdma_bytes low-latency mode needs (DeepEP's layout: two buffers of each kind)."""
        return rdma_size_hint(num_max_dispatch_tokens_per_rank, hidden, num_ranks, num_experts)

    def _ll_mode(self, call: str) -> None:
        if not self.low_latency_mode:
            raise EPInputError(f"ptxforge.ep {call}: this Buffer was made without low_latency_mode=True")

    def low_latency_dispatch(self, x: torch.Tensor, topk_idx: torch.Tensor, num_max_dispatch_tokens_per_rank: int,
                             num_experts: int, cumulative_local_expert_recv_stats: torch.Tensor | None = None,
                             dispatch_wait_recv_cost_stats: torch.Tensor | None = None, use_fp8: bool = True,
                             round_scale: bool = False, use_ue8m0: bool = False, async_finish: bool = False,
                             return_recv_hook: bool = False) -> tuple:
        """(recv_x, recv_count, handle, event, hook): every (token, expert) pair straight to its expert's rows
        of recv_x [local experts, num_max * ranks, hidden] (FP8 with column-major scales, or BF16)."""
        self._ll_mode("low_latency_dispatch")
        form = "bf16" if not use_fp8 else "fp8-ue8m0" if use_ue8m0 else "fp8"
        return self._ll.dispatch(x, topk_idx, num_max_dispatch_tokens_per_rank, num_experts,
                                 cumulative_local_expert_recv_stats, dispatch_wait_recv_cost_stats, use_fp8,
                                 round_scale, use_ue8m0, async_finish, return_recv_hook,
                                 self._next("low_latency_dispatch", form))

    def low_latency_combine(self, x: torch.Tensor, topk_idx: torch.Tensor, topk_weights: torch.Tensor,
                            handle: LowLatencyHandle, use_logfmt: bool = False, zero_copy: bool = False,
                            async_finish: bool = False, return_recv_hook: bool = False,
                            out: torch.Tensor | None = None,
                            combine_wait_recv_cost_stats: torch.Tensor | None = None) -> tuple:
        """(combined_x bf16 [T, H], event, hook): each token's expert outputs summed with its weights in f32."""
        self._ll_mode("low_latency_combine")
        return self._ll.combine(x, topk_idx, topk_weights, handle, use_logfmt, zero_copy, async_finish,
                                return_recv_hook, out, self._next("low_latency_combine", "bf16"))

    def get_next_low_latency_combine_buffer(self, handle: LowLatencyHandle) -> torch.Tensor:
        self._ll_mode("get_next_low_latency_combine_buffer")
        return self._ll.next_combine_buffer(handle)

    def clean_low_latency_buffer(self, num_max_dispatch_tokens_per_rank: int, hidden: int, num_experts: int) -> None:
        self._ll_mode("clean_low_latency_buffer")
        self._ll.clean(num_max_dispatch_tokens_per_rank, hidden, num_experts)

    # ------------------------------------------------------------------ backend="kernels" (one node)

    @contextlib.contextmanager
    def _watched(self, call: str, like: torch.Tensor) -> Iterator[CommRank]:
        """This rank's `CommRank` for one kernels call, its peers watched through the process group
        (`PeerWatch`): a dead peer raises `EPPeerLostError` at once, also from inside a kernel spinning on it
        (an emulated GPU's launches run the watch's check), and its /dev/shm segment is reclaimed."""
        watch = PeerWatch(self.transport, call, self.id * 1_000_003 + self.transport.entered)
        self._watches = [*self._watches[-7:], watch]  # their answers must outlive the call (gloo sends)
        KB = _kernel_backend()
        try:
            comm = self._comm(like)
            KB.check_peers_during_launches(watch.check)
            yield comm
        except RuntimeError as e:
            if isinstance(e, EPPeerLostError) or peers.connection_lost(e):
                if self._comm_rank is not None:
                    self._comm_rank.fabric.peer_lost = True  # destroy() then frees only this rank's buffer
                peers.reclaim_segments()
                raise (e if isinstance(e, EPPeerLostError) else self.transport.lost(call, "its IPC set-up", e)) \
                    from None
            raise
        finally:
            KB.check_peers_during_launches(None)
            watch.finish()

    def _dispatch_kernels(self, x, scales, handle, in_rank, per_expert, topk_idx, topk_weights, num_experts,
                          expert_alignment, num_worst_tokens, config, stats):
        with self._watched("dispatch", x) as comm:
            return self._dispatch_on(comm, x, scales, handle, in_rank, per_expert, topk_idx, topk_weights,
                                     num_experts, expert_alignment, num_worst_tokens, config, stats)

    def _dispatch_on(self, comm, x, scales, handle, in_rank, per_expert, topk_idx, topk_weights, num_experts,
                     expert_alignment, num_worst_tokens, config, stats):
        KB = _kernel_backend()
        cached = handle is not None
        if cached:
            in_rank, per_expert, tun = handle.is_token_in_rank, torch.zeros(num_experts, dtype=torch.int32), \
                handle._tunables
            topk_idx = topk_weights = None
        else:
            if in_rank is None:
                _, _, per_expert, in_rank = self._layout(topk_idx, num_experts)
            tun = KB.tunables(config or self.get_dispatch_config(self.group_size))
            if topk_idx is None:
                topk_weights = None
        matrix = []

        def counts(m):
            matrix.append(m)
            self._check_worst(torch.from_numpy(m), num_worst_tokens)

        gen = KB.start_dispatch(comm, x, scales, topk_idx, topk_weights, in_rank, per_expert, num_experts, tun,
                                on_counts=counts)
        out = KB.drive(gen, comm.device, comm)
        fmt = KB.dispatch_format(x, scales, topk_idx, topk_weights)
        for peer in range(self.group_size):
            stats.record("sent", peer, int(matrix[0][self.rank, peer]), fmt, True)
            stats.record("recv", peer, int(matrix[0][peer, self.rank]), fmt, True)
        stats.control_bytes = self.transport.take_control_bytes()
        recv, idx, w, per_expert_recv, fields, n = KB.finish_dispatch(out, x, scales, in_rank, expert_alignment)
        if cached:
            return recv, None, None, None, None, EventOverlap()
        handle = KB.make_handle(fields, n, x.shape[0], num_experts, num_worst_tokens, tun, self.id, self._serial)
        if num_worst_tokens:
            recv, idx, w = KB.pad_worst(num_worst_tokens, recv, idx, w)
            per_expert_recv = []
        return recv, idx, w, per_expert_recv, handle, EventOverlap()

    def _combine_kernels(self, x, handle, topk_weights, bias, config, stats):
        with self._watched("combine", x) as comm:
            return self._combine_on(comm, x, handle, topk_weights, bias, config, stats)

    def _combine_on(self, comm, x, handle, topk_weights, bias, config, stats):
        KB = _kernel_backend()
        tun = KB.tunables(config or self.get_combine_config(self.group_size), handle._tunables.num_sms)
        result = KB.drive(KB.start_combine(comm, x, topk_weights, bias, handle, tun), comm.device, comm)
        fmt = RowFormat([Field("x", torch.bfloat16, x.shape[1], "payload"),
                         Field("w", torch.float32, topk_weights.shape[1] if topk_weights is not None else 0, "meta")])
        rank_prefix = handle.rank_prefix_matrix.cpu().to(torch.int64)
        matrix = torch.diff(rank_prefix, dim=0, prepend=torch.zeros((1, self.group_size), dtype=torch.int64))
        for peer in range(self.group_size):
            stats.record("sent", peer, int(matrix[peer, self.rank]), fmt, True)
            stats.record("recv", peer, int(matrix[self.rank, peer]), fmt, True)
        stats.control_bytes = self.transport.take_control_bytes()
        out, w = KB.finish_combine(result, x)
        return out, w, EventOverlap()


def _wait_previous(previous_event: EventOverlap | None) -> None:
    """DeepEP's `previous_event`: the call is issued after that event's work has ended."""
    if previous_event is not None:
        previous_event.current_stream_wait()


def _unorder(t: torch.Tensor, order: torch.Tensor) -> torch.Tensor:
    """Rows in the order they arrived, from rows sorted by `order` (sorted = arrived[order])."""
    out = torch.empty_like(t)
    out[order.to(t.device)] = t
    return out


def _rank_bits(in_rank: torch.Tensor) -> torch.Tensor:
    """[T, R] bool -> [T, ceil(R/32)] int64, 32 ranks a word."""
    t_, r_ = in_rank.shape
    words = -(-r_ // 32)
    padded = torch.zeros((t_, words * 32), dtype=torch.int64, device=in_rank.device)
    padded[:, :r_] = in_rank.to(torch.int64)
    weights = torch.tensor([1 << b for b in range(32)], dtype=torch.int64, device=in_rank.device)
    return (padded.view(t_, words, 32) * weights).sum(-1)


def _rank_unbits(bits: torch.Tensor, num_ranks: int) -> torch.Tensor:
    shifts = torch.arange(32, dtype=torch.int64, device=bits.device)
    return (((bits.unsqueeze(-1) >> shifts) & 1).reshape(bits.shape[0], -1)[:, :num_ranks]).bool()


def _kernel_backend():
    """`ptxforge.ep.kernel_backend`, loaded at the first backend="kernels" call: it brings the DSL
    communication kernels, the runtime and the emulator (over a second a process), which the torch backend
    never needs."""
    from ptxforge.ep import kernel_backend  # heavy, for backend="kernels" only (see the docstring)

    return kernel_backend
