"""`backend="kernels"` across nodes: dispatch and combine by the internode communication kernels
(`ptxforge.kernels.internode_*`, DeepEP V1's internode structure) on this process's GPU of an emulated cluster
(`KernelsBackend.cluster_rank()`, run by `ptxforge.ep.internode_rank.RankGroup`), in the torch backend's formats.

The call runs on the cluster GPU's device worker like an intranode call: a dispatch returns once its notify
step has given the counts that size its results; `async_finish=True` leaves the data phase pending on the
event. The handle is the intranode-form `DispatchHandle` the torch backend also returns across nodes, with
the internode kernels' own handle (per-node channel counts, what each forwarded token wanted) kept private
for the combine and cached dispatches (docs/internode.md lists the differences from DeepEP's internode
handle). The call's record gets `links`: the bytes this rank's dispatch or combine kernel sent each peer over
RDMA and NVLink, measured by the NIC model and by counting the kernel's stores into peers' memory, once the
call's kernels end; `notify_links`: the total of its notify kernel's (the count exchange).
"""

from __future__ import annotations

from collections.abc import Callable
from concurrent.futures import Future
from types import ModuleType
from typing import TYPE_CHECKING, Any, Protocol

import numpy as np
import torch

from ptxforge.ep.backends.base import (
    CombineCall,
    CombineOutput,
    DispatchCall,
    DispatchOutput,
    EPGroup,
    Layout,
    check_worst,
    kernel_dispatch_inputs,
)
from ptxforge.ep.config import EventOverlap
from ptxforge.ep.rows import Field, RowFormat

if TYPE_CHECKING:
    from ptxforge.ep.backends.base import Received
    from ptxforge.ep.internode_cluster import InternodeDispatch
    from ptxforge.ep.internode_rank import RankGroup
    from ptxforge.ep.stats import CallStats


class Host(Protocol):
    """What these calls use of the `KernelsBackend` that runs them (its device worker, events and sides)."""

    group: EPGroup

    def layout(self, topk_idx: torch.Tensor, num_experts: int) -> Layout: ...

    def internode(self) -> RankGroup: ...

    def _start(self, call: str, name: str, side_of: Callable[[], Any], layout_of: Callable[[Any], Any],
               run: Callable[[Any], Any], after: list) -> tuple[Any, Future]: ...

    def _after(self, pending: object, previous_event: EventOverlap | None) -> list: ...

    def _event(self, name: str, worker: Any, future: Future, fill: Callable[[Any], None], async_finish: bool,
               keep: tuple) -> EventOverlap: ...


def dispatch(be: Host, call: DispatchCall, stats: CallStats, KB: ModuleType) -> DispatchOutput:
    """Buffer.dispatch across nodes (see the module docstring); `KB`: `ptxforge.ep.kernel_backend`, which the
    backend loads at its first kernels call."""
    g, handle = be.group, call.handle
    x, scales = call.x, call.scales
    in_rank, per_expert, topk_idx, topk_weights, tun = kernel_dispatch_inputs(call, be.layout, KB.tunables)
    xb = KB._bytes(x)
    sw = KB._words(scales) if scales is not None else None
    idx_np = topk_idx.detach().cpu().to(torch.int64).numpy() if topk_idx is not None else None
    w_np = topk_weights.detach().cpu().to(torch.float32).numpy() if topk_weights is not None else None
    in_np = in_rank.detach().cpu().numpy().astype(bool)
    told: Future = Future()  # the notify step's counts: the caller sizes the results by them
    ih: Future = Future()  # the internode kernels' handle, for the combine and cached dispatches

    def notified(counts: list[dict]) -> None:
        check_worst(_matrix(counts[0]["rank_prefix"]), call.num_worst_tokens)
        told.set_result(counts[0])

    def run(side: RankGroup) -> tuple[InternodeDispatch, dict]:
        try:
            [out] = side.dispatch(
                [xb], [sw] if sw is not None else None, [idx_np] if idx_np is not None else None,
                [w_np] if w_np is not None else None, call.num_experts, tun.num_sms,
                handles=[handle._internode.result()] if handle is not None else None,
                in_ranks=[in_np], per_experts=[per_expert.detach().cpu().numpy()] if per_expert is not None else None,
                on_notified=notified if handle is None else None)
        except BaseException as e:
            if not told.done():
                told.set_exception(e)
            if not ih.done():
                ih.set_exception(e)
            raise
        if not ih.done():
            ih.set_result(out.handle)
        stats.links, stats.notify_links = side.link_bytes(), side.notify_bytes()
        return out, stats.links

    def layout_of(side: RankGroup) -> Any:
        k = idx_np.shape[1] if idx_np is not None else 0
        return side.dispatch_layouts(xb.shape[1], sw.shape[1] if sw is not None else 0, k, w_np is not None,
                                     call.num_experts, tun.num_sms)

    name = f"dispatch #{stats.serial}"
    worker, future = be._start("dispatch", name, be.internode, layout_of, run, be._after(
        handle.__dict__.get("_pending") if handle is not None else None, call.previous_event))
    fmt = KB.dispatch_format(x, scales, topk_idx, topk_weights)
    keep = (x, scales, topk_idx, topk_weights)
    if handle is not None:  # the counts are the handle's: nothing to wait for here
        record(stats, be, _matrix(handle.rank_prefix_matrix.cpu().numpy()), fmt, dispatch=True)
        n = handle._num_recv
        cached, fill_cached = _received(x, scales, n, KB)
        return (cached, None, None, None, None,
                be._event(name, worker, future, lambda res: fill_cached(res[0]), call.async_finish, keep))
    try:
        counts = told.result()  # waits for the notify step (DeepEP's CPU waits for the counts too)
    except BaseException:
        future.result()  # the call's own error (the same one), after its watch has been answered
        raise
    n = int(counts["rank_prefix"][-1, g.rank])
    record(stats, be, _matrix(counts["rank_prefix"]), fmt, dispatch=True)
    stats.control_bytes = g.transport.take_control_bytes()
    size = max(n, call.num_worst_tokens)
    recv, fill_recv = _received(x, scales, size, KB)
    k = topk_idx.shape[1] if topk_idx is not None else 0
    idx = torch.full((size, k), -1, dtype=torch.int64, device=x.device) if topk_idx is not None else None
    w = torch.zeros((size, k), dtype=torch.float32, device=x.device) if topk_weights is not None else None
    made = KB.make_handle(_handle_fields(counts, in_rank, g.rank, n), n, x.shape[0], call.num_experts,
                          call.num_worst_tokens, tun, g.buffer_id, stats.serial)
    made._internode = ih
    per_expert_recv = [] if call.num_worst_tokens else \
        [-(-int(c) // call.expert_alignment) * call.expert_alignment for c in counts["expert_recv"].tolist()]

    def fill(res: tuple[InternodeDispatch, dict]) -> None:
        out = res[0]
        fill_recv(out)
        if idx is not None and out.recv_idx is not None:
            idx[:n].copy_(torch.from_numpy(out.recv_idx))
        if w is not None and out.recv_w is not None:
            w[:n].copy_(torch.from_numpy(out.recv_w))
        made.recv_src_idx.copy_(torch.from_numpy(out.recv_src.astype(np.int32)))

    event = be._event(name, worker, future, fill, call.async_finish, keep)
    made._pending = event.event
    return recv, idx, w, per_expert_recv, made, event


def combine(be: Host, call: CombineCall, stats: CallStats, KB: ModuleType) -> CombineOutput:
    """Buffer.combine across nodes (see the module docstring; `KB` as for dispatch)."""
    handle, w = call.handle, call.topk_weights
    n, h = handle._num_recv, call.x.shape[1]
    k = w.shape[1] if w is not None else 0
    num_sms = handle._tunables.num_sms
    x_np = KB._bf16_np(call.x[:n])
    w_np = w[:n].detach().cpu().to(torch.float32).numpy() if w is not None else None
    biases = [KB._bf16_np(b) for b in (call.bias if isinstance(call.bias, tuple | list) else (call.bias,))
              if b is not None]

    def run(side: RankGroup) -> tuple:
        [(out, out_w)] = side.combine([x_np], [handle._internode.result()], [w_np] if w_np is not None else None,
                                      [tuple(biases)] if biases else None, num_sms)
        stats.links, stats.notify_links = side.link_bytes(), side.notify_bytes()
        return out, out_w

    name = f"combine #{stats.serial}"
    worker, future = be._start("combine", name, be.internode,
                               lambda side: side.combine_layouts(h, k, handle._num_experts, num_sms), run,
                               be._after(handle.__dict__.get("_pending"), call.previous_event))
    fmt = RowFormat([Field("x", torch.bfloat16, h, "payload"), Field("w", torch.float32, k, "meta")])
    record(stats, be, _matrix(handle.rank_prefix_matrix.cpu().numpy()), fmt, dispatch=False)
    stats.control_bytes = be.group.transport.take_control_bytes()
    t_ = handle._num_tokens
    out = torch.empty((t_, h), dtype=torch.bfloat16, device=call.x.device)
    out_w = torch.empty((t_, k), dtype=torch.float32, device=call.x.device) if w is not None else None

    def fill(res: tuple) -> None:
        out.copy_(KB._bf16_torch(res[0], out.device))
        if out_w is not None:
            out_w.copy_(torch.from_numpy(res[1]))

    return out, out_w, be._event(name, worker, future, fill, call.async_finish, (call.x, w, call.bias))


def record(stats: CallStats, be: Host, matrix: torch.Tensor, fmt: RowFormat, dispatch: bool) -> None:
    """The call's rows to and from each peer (`matrix[src, dst]`; a combine sends back what its dispatch got),
    split by whether the peer is on this node. The bytes the links carried are `stats.links` (measured)."""
    g = be.group
    for peer in range(g.size):
        out, back = int(matrix[g.rank, peer]), int(matrix[peer, g.rank])
        same = g.node_of(peer) == g.node_of(g.rank)
        stats.record("sent", peer, out if dispatch else back, fmt, same)
        stats.record("recv", peer, back if dispatch else out, fmt, same)


def _matrix(rank_prefix: np.ndarray) -> torch.Tensor:
    """Tokens rank src sends rank dst (int64 [R, R]) from the inclusive prefix over source ranks."""
    rp = np.asarray(rank_prefix, np.int64)
    return torch.from_numpy(np.diff(rp, axis=0, prepend=np.zeros((1, rp.shape[1]), np.int64)))


def _handle_fields(counts: dict, in_rank: torch.Tensor, me: int, n: int) -> tuple[torch.Tensor, ...]:
    """The intranode-form handle's fields from the notified counts: rank_prefix_matrix, channel_prefix_matrix,
    recv_channel_prefix_matrix, recv_src_idx (filled when the rows arrive), is_token_in_rank and send_head
    (the row each token takes at each destination, -1 where it does not go: as the torch backend's)."""
    dev = in_rank.device
    rank_prefix = np.asarray(counts["rank_prefix"], np.int32)
    mine = in_rank.detach().cpu().numpy().astype(bool)
    starts = rank_prefix[me - 1] if me else np.zeros(rank_prefix.shape[1], np.int32)
    send_head = np.where(mine, starts + np.cumsum(mine, 0, dtype=np.int32) - 1, -1).astype(np.int32)
    as_t = lambda a: torch.from_numpy(np.ascontiguousarray(a, np.int32)).to(dev)  # noqa: E731
    return (as_t(rank_prefix), as_t(counts["chan_prefix"]), as_t(counts["recv_chan"]),
            torch.zeros(n, dtype=torch.int32, device=dev), in_rank, as_t(send_head))


def _received(x: torch.Tensor, scales: torch.Tensor | None, size: int, KB: ModuleType) -> tuple[Received, Any]:
    """recv_x (and its scales) of `size` rows in x's form, zeros, and what fills its first rows from a result."""
    recv_x = torch.zeros((size, x.shape[1]), dtype=x.dtype, device=x.device)
    recv_s = torch.zeros((size, scales.shape[1]), dtype=scales.dtype, device=x.device) if scales is not None else None

    def fill(out: InternodeDispatch) -> None:
        rows = out.recv_x.shape[0]
        recv_x[:rows].copy_(KB._from_bytes(out.recv_x, x.dtype, x.device))
        if recv_s is not None and out.recv_scales is not None:
            raw = np.ascontiguousarray(out.recv_scales).view(np.uint8).reshape(rows, -1)
            recv_s[:rows].copy_(KB._from_bytes(raw, recv_s.dtype, x.device))

    return ((recv_x, recv_s) if recv_s is not None else recv_x), fill
