"""`backend="torch"`: rows packed as bytes and moved by `all_to_all_single` over the process group.

One hop inside a node; across nodes two, as DeepSeek-V3 does: a token crosses to each destination node once,
to the rank with its own local index, which forwards it inside the node; combine runs the hops backwards,
summing per node first. With `async_finish=True` the last hop's all_to_all stays pending on gloo's thread and
the event's first wait receives it into the tensors the call returned.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING

import torch

from ptxforge.ep import layout as torch_layout
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
    event_for,
)
from ptxforge.ep.handle import DispatchHandle
from ptxforge.ep.low_latency import LowLatency
from ptxforge.ep.plan import Hop, reduce_back
from ptxforge.ep.rows import Field, RowFormat

if TYPE_CHECKING:
    from ptxforge.ep.config import Config
    from ptxforge.ep.stats import CallStats
    from ptxforge.ep.transport import Pending

LayoutFn = Callable[[torch.Tensor, int], Layout]


class TorchBackend(Backend):
    """The torch transport (see the module docstring). `layout` computes a dispatch's layout when the caller
    gave only topk_idx (default: vectorized torch; the kernels backend passes its layout kernel)."""

    name = "torch"
    runs_on_comm_thread = True

    def __init__(self, group: EPGroup, layout: LayoutFn | None = None) -> None:
        super().__init__(group)
        self._layout_fn = layout

    def layout(self, topk_idx: torch.Tensor, num_experts: int) -> Layout:
        if self._layout_fn is not None:
            return self._layout_fn(topk_idx, num_experts)
        g = self.group
        return torch_layout.dispatch_layout(topk_idx, num_experts, g.size, g.ranks_per_node)

    def low_latency(self, num_rdma_bytes: int) -> LowLatencyOps:
        g = self.group
        return LowLatency(g.transport, g.rank, g.size, g.buffer_id, num_rdma_bytes)

    # ------------------------------------------------------------------ dispatch

    def dispatch(self, call: DispatchCall, stats: CallStats) -> DispatchOutput:
        g, handle = self.group, call.handle
        x, scales, topk_idx, topk_weights = call.x, call.scales, call.topk_idx, call.topk_weights
        cached = handle is not None
        counts: torch.Tensor | None
        if handle is not None:
            in_rank, hops, counts = handle.is_token_in_rank, handle._hops, None
        else:
            per_expert = call.per_expert
            in_rank = call.in_rank
            if in_rank is None or per_expert is None:
                _, _, per_expert, in_rank = self.layout(topk_idx, call.num_experts)  # type: ignore[arg-type]
            counts = self._gather_layout(in_rank, per_expert)
            check_worst(counts[:, :g.size], call.num_worst_tokens)
            hops = self._first_hops(in_rank, counts)
        with_topk = not cached and topk_idx is not None
        fmt, rows = self._pack(x, scales, in_rank, topk_idx if with_topk else None,
                               topk_weights if with_topk else None)
        if g.num_nodes > 1:  # the first hop completes here: the second needs what it delivered
            arrived = self._run_hop("dispatch", rows, fmt, hops[0], stats).wait()
            if len(hops) == 1:
                hops = [hops[0], self._second_hop(fmt.unpack(arrived)["dest"], counts)]
            rows = arrived
        last = hops[-1]
        pending = self._run_hop("dispatch", rows, fmt, last, stats)
        stats.control_bytes = g.transport.take_control_bytes()
        n = sum(last.recv_counts)
        size = max(n, call.num_worst_tokens) if not cached else n
        recv_x = torch.empty((size, x.shape[1]), dtype=x.dtype, device=x.device)
        recv_scales = None if scales is None else torch.empty((size, scales.shape[1]), dtype=scales.dtype,
                                                              device=x.device)
        recv = (recv_x, recv_scales) if scales is not None else recv_x
        keep = (x, scales, topk_idx, topk_weights)
        name = f"dispatch #{stats.serial}"
        if handle is not None:  # a cached dispatch delivers in the same order as the one it repeats
            order = handle._order

            def finish_cached() -> None:
                out = fmt.unpack(pending.wait())
                recv_x.copy_(out["x"][order])
                if recv_scales is not None:
                    recv_scales.copy_(out["scales"][order])

            return recv, None, None, None, None, event_for(name, finish_cached, call.async_finish, keep)
        assert counts is not None
        k = topk_idx.shape[1] if with_topk and topk_idx is not None else 0
        recv_idx = torch.full((size, k), -1, dtype=torch.int64, device=x.device) if with_topk else None
        recv_w = torch.zeros((size, k), dtype=torch.float32, device=x.device) \
            if with_topk and topk_weights is not None else None
        for t in (recv_x, recv_scales):
            if t is not None:
                t[n:].zero_()  # num_worst_tokens padding rows
        per_expert_recv = [] if call.num_worst_tokens else self._expert_counts(counts, call.num_experts,
                                                                                call.expert_alignment)
        handle = self._make_handle(in_rank, counts[:, :g.size], hops, call.config, x.shape[0], n, stats.serial)
        handle.__dict__.update(_num_experts=call.num_experts, _num_worst=call.num_worst_tokens)

        def finish() -> None:
            out = fmt.unpack(pending.wait())
            src = out["src"].to(torch.int64)
            order = torch.argsort(src[:, 0] * (1 << 32) + src[:, 1], stable=True)  # by source rank, then token
            out = {key: v[order] for key, v in out.items()}
            recv_x[:n].copy_(out["x"])
            if recv_scales is not None:
                recv_scales[:n].copy_(out["scales"])
            if with_topk:
                idx, w = self._local_topk(out, call.num_experts)
                assert recv_idx is not None
                recv_idx[:n].copy_(idx)
                if recv_w is not None and w is not None:
                    recv_w[:n].copy_(w)
            self._fill_handle(handle, src[order], order)

        event = event_for(name, finish, call.async_finish, keep)
        handle._pending = event.event
        return recv, recv_idx, recv_w, per_expert_recv, handle, event

    def _pack(self, x, scales, in_rank, topk_idx, topk_weights) -> tuple[RowFormat, torch.Tensor]:
        """One byte row per token: payload | scales | top-k ids | weights | (source rank, token) | dest ranks."""
        t_, dev = x.shape[0], x.device
        fmt = self._dispatch_format(x, scales, topk_idx, topk_weights)
        fields = {"x": x, "scales": scales, "topk_idx": topk_idx, "topk_weights": topk_weights,
                  "src": torch.stack([torch.full((t_,), self.group.rank, dtype=torch.int32),
                                      torch.arange(t_, dtype=torch.int32)], 1).to(dev),
                  "dest": _rank_bits(in_rank) if self.group.num_nodes > 1 else None}
        return fmt, fmt.pack({k: v for k, v in fields.items() if v is not None}, t_, dev)

    def _local_topk(self, out, num_experts):
        """Received global expert ids -> ids local to this rank (-1 elsewhere); weights of the others zeroed."""
        epr, me = num_experts // self.group.size, self.group.rank
        g = out["topk_idx"]
        local = (g >= me * epr) & (g < (me + 1) * epr)
        idx = torch.where(local, g - me * epr, torch.full_like(g, -1))
        w = out.get("topk_weights")
        return idx, (torch.where(local, w, torch.zeros_like(w)) if w is not None else None)

    def _expert_counts(self, counts, num_experts, alignment) -> list[int]:
        """Tokens each local expert receives, from every rank's tokens per expert, rounded up to `alignment`."""
        g = self.group
        epr = num_experts // g.size
        per_expert = counts[:, g.size + g.num_nodes:]
        mine = per_expert[:, g.rank * epr:(g.rank + 1) * epr].sum(0)
        return [-(-int(c) // alignment) * alignment for c in mine.tolist()]

    def _gather_layout(self, in_rank, num_tokens_per_expert) -> torch.Tensor:
        """Every rank's [tokens per rank | tokens per node | tokens per expert]: int64 [ranks, R + N + E]."""
        t_, g = in_rank.shape[0], self.group
        per_rank = in_rank.sum(0, dtype=torch.int64)
        per_node = in_rank.view(t_, g.num_nodes, g.ranks_per_node).any(-1).sum(0, dtype=torch.int64)
        mine = torch.cat([per_rank.cpu(), per_node.cpu(), num_tokens_per_expert.to(torch.int64).cpu()])
        return g.transport.gather_counts("dispatch", mine.tolist())

    def _first_hops(self, in_rank, counts) -> list[Hop]:
        """One hop inside a node; across nodes, the first of two (to the same local index on each node)."""
        g = self.group
        size, me, rpn = g.size, g.rank, g.ranks_per_node
        if g.num_nodes == 1:
            return [Hop.from_mask(in_rank, list(range(size)), size, counts[:, me].tolist())]
        local, node = me % rpn, g.node_of(me)
        to_node = in_rank.view(-1, g.num_nodes, rpn).any(-1)
        rail = [b * rpn + local for b in range(g.num_nodes)]
        recv = [int(counts[r, size + node]) if r in rail else 0 for r in range(size)]
        return [Hop.from_mask(to_node, rail, size, recv)]

    def _second_hop(self, dest_bits, counts) -> Hop:
        """Forward what hop 1 delivered to the ranks of this node that need it."""
        g = self.group
        size, me, rpn = g.size, g.rank, g.ranks_per_node
        node = g.node_of(me)
        peers = [node * rpn + j for j in range(rpn)]
        in_rank = _rank_unbits(dest_bits, size)
        recv = [0] * size
        for i in range(rpn):  # forwarder (node, i) passes on what every (a, i) sends me
            recv[node * rpn + i] = int(sum(counts[a * rpn + i, me] for a in range(g.num_nodes)))
        return Hop.from_mask(in_rank[:, peers], peers, size, recv)

    def _run_hop(self, call, rows, fmt, hop: Hop, stats: CallStats, reverse: bool = False) -> Pending:
        """One hop's all_to_all, started on gloo's thread."""
        g = self.group
        send_counts = hop.recv_counts if reverse else hop.send_counts
        recv_counts = hop.send_counts if reverse else hop.recv_counts
        for peer in range(g.size):
            same = g.node_of(peer) == g.node_of(g.rank)
            stats.record("sent", peer, send_counts[peer], fmt, same)
            stats.record("recv", peer, recv_counts[peer], fmt, same)
        send = rows if reverse else rows[hop.send_index.to(rows.device)]
        return g.transport.exchange_rows_async(call, send, send_counts, recv_counts)

    def _dispatch_format(self, x, scales, topk_idx, topk_weights) -> RowFormat:
        k = topk_idx.shape[1] if topk_idx is not None else 0
        g = self.group
        return RowFormat([
            Field("x", x.dtype, x.shape[1], "payload"),
            Field("scales", scales.dtype if scales is not None else torch.float32,
                  scales.shape[1] if scales is not None else 0, "scales"),
            Field("topk_idx", torch.int64, k, "meta"),
            Field("topk_weights", torch.float32, k if topk_weights is not None else 0, "meta"),
            Field("src", torch.int32, 2, "meta"),
            Field("dest", torch.int64, -(-g.size // 32) if g.num_nodes > 1 else 0, "meta")])

    def _make_handle(self, in_rank, matrix, hops, config: Config, t_, n, serial: int) -> DispatchHandle:
        """The handle, but for what depends on the received rows (`_fill_handle` fills those when they arrive)."""
        size, me = self.group.size, self.group.rank
        channels = config.num_channels
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
        return DispatchHandle(fields, _buffer_id=self.group.buffer_id, _serial=serial, _hops=hops, _num_tokens=t_,
                              _num_recv=n, _per=per)

    def _fill_handle(self, handle: DispatchHandle, recv_src: torch.Tensor, order: torch.Tensor) -> None:
        """The handle's fields that depend on the received rows: (source rank, token) of each, sorted."""
        per, channels = handle._per, handle.recv_channel_prefix_matrix.shape[1]
        src_chan = recv_src[:, 1].cpu() // per
        src_rank = recv_src[:, 0].cpu()
        recv_chan = torch.stack([torch.stack([((src_rank == s) & (src_chan <= c)).sum().to(torch.int32)
                                              for c in range(channels)]) for s in range(self.group.size)])
        handle.recv_channel_prefix_matrix.copy_(recv_chan)
        handle.recv_src_idx.copy_(recv_src[:, 1].to(torch.int32))
        handle._order = order

    # ------------------------------------------------------------------ combine

    def combine(self, call: CombineCall, stats: CallStats) -> CombineOutput:
        g, handle = self.group, call.handle
        n = handle._num_recv
        x = call.x[:n]
        w = call.topk_weights[:n].to(torch.float32) if call.topk_weights is not None else None
        fmt = RowFormat([Field("x", torch.bfloat16, x.shape[1], "payload"),
                         Field("w", torch.float32, w.shape[1] if w is not None else 0, "meta")])
        parts = {"x": _unorder(x, handle._order)}
        if w is not None:
            parts["w"] = _unorder(w, handle._order)
        rows = fmt.pack(parts, n, x.device)
        hops = handle._hops
        for i in range(len(hops) - 1, 0, -1):  # across nodes: every hop but the first completes here
            back = fmt.unpack(self._run_hop("combine", rows, fmt, hops[i], stats, reverse=True).wait())
            parts = _reduce_hop(back, hops[i], sum(hops[i - 1].recv_counts), None)
            rows = fmt.pack(parts, sum(hops[i - 1].recv_counts), x.device)
        pending = self._run_hop("combine", rows, fmt, hops[0], stats, reverse=True)
        stats.control_bytes = g.transport.take_control_bytes()
        t_ = handle._num_tokens
        combined = torch.empty((t_, x.shape[1]), dtype=torch.bfloat16, device=x.device)
        combined_w = torch.empty((t_, w.shape[1]), dtype=torch.float32, device=x.device) if w is not None else None

        def finish() -> None:
            done = _reduce_hop(fmt.unpack(pending.wait()), hops[0], t_, call.bias)
            combined.copy_(done["x"])
            if combined_w is not None:
                combined_w.copy_(done["w"])

        event = event_for(f"combine #{stats.serial}", finish, call.async_finish,
                          (call.x, call.topk_weights, call.bias))
        return combined, combined_w, event


def _reduce_hop(back: dict[str, torch.Tensor], hop: Hop, num_local: int, bias) -> dict[str, torch.Tensor]:
    """The rows a combine hop brought back summed per local row (x to BF16, weights in f32); `bias` (the last
    hop's) added in f32 before rounding."""
    acc = reduce_back(back["x"], hop, num_local)
    for b in (bias if isinstance(bias, tuple | list) else (bias,)):
        if b is not None:
            acc += b.to(torch.float32)
    parts = {"x": acc.to(torch.bfloat16)}
    if "w" in back and back["w"].shape[1]:
        parts["w"] = reduce_back(back["w"], hop, num_local)
    return parts


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
