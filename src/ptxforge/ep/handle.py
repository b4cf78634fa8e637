"""The handle a dispatch returns (DeepEP's intranode tuple) and the padding of its results to a fixed row count;
shared by both backends of `Buffer`."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import torch

if TYPE_CHECKING:
    from ptxforge.ep.plan import Hop


class DispatchHandle(tuple):
    """DeepEP's intranode handle (rank_prefix_matrix, channel_prefix_matrix, recv_channel_prefix_matrix,
    recv_src_idx, is_token_in_rank, send_head), plus what combine and cached dispatch need (private)."""

    # what combine and cached dispatch read (set by the backend that made the handle; a kernels-backend
    # handle has no _hops or _order, which only the torch backend reads)
    _buffer_id: int
    _serial: int
    _hops: list[Hop]
    _order: torch.Tensor
    _num_tokens: int
    _num_recv: int
    _num_experts: int
    _num_worst: int
    _tunables: Any
    _per: int  # tokens per channel
    _internode: Any  # across nodes, backend="kernels": a Future of the internode kernels' own handle
    _pending: Any  # the Completion of an async_finish dispatch that made it (waited before the handle is read)

    def __new__(cls, fields: tuple[torch.Tensor, ...], **private: Any) -> DispatchHandle:
        h = super().__new__(cls, fields)
        h.__dict__.update(private)
        return h

    rank_prefix_matrix = property(lambda self: self[0])
    channel_prefix_matrix = property(lambda self: self[1])
    recv_channel_prefix_matrix = property(lambda self: self[2])
    recv_src_idx = property(lambda self: self[3])
    is_token_in_rank = property(lambda self: self[4])
    send_head = property(lambda self: self[5])


def pad_rows(n: int, *ts: torch.Tensor | None) -> list[Any]:  # each as it came: a tensor, or None
    """Each tensor of `ts` (or None) padded with rows to `n`: zeros, -1 for int64 ids."""
    out: list[Any] = []
    for t in ts:
        if t is None:
            out.append(None)
            continue
        pad = torch.zeros((n - t.shape[0], *t.shape[1:]), dtype=t.dtype, device=t.device)
        if t.dtype == torch.int64:
            pad.fill_(-1)
        out.append(torch.cat([t, pad]))
    return out
