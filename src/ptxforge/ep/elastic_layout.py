"""DeepEP V2's dispatch results, built from a normal-mode dispatch: the `EPHandle`, the expand layout (one slot
per (token, local expert), expert-major, each expert's block aligned), the worst-case sizes of a dispatch without
CPU sync, and our buffer-size formula. Pure torch on one rank; `ptxforge.ep.elastic` moves the data."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch

from ptxforge.ep.handle import DispatchHandle

BUFFER_ALIGNMENT = 2 << 20  # V2 aligns every buffer size to 2 MiB


def align(n: int, a: int) -> int:
    return -(-n // a) * a


class EPHandle:
    """What `ElasticBuffer.dispatch` returns for combine and cached dispatch (DeepEP V2's fields).

    recv_src_metadata int32 [num_recv_tokens, 2 + num_topk]: column 0 the source's global token index
    (src_rank * num_max_tokens_per_rank + token), column 1 src_scaleup_rank * num_topk + the first top-k
    position whose expert is on this rank, columns 2: each top-k's slot in the expand layout (-1 none, and
    always -1 without do_expand)."""

    def __init__(self, *, do_expand: bool, num_experts: int, expert_alignment: int, num_max_tokens_per_rank: int,
                 num_sms: int, topk_idx: torch.Tensor, num_recv_tokens: int, num_expanded_tokens: int,
                 num_recv_tokens_per_expert_list: list[int], psum_num_recv_tokens_per_scaleup_rank: torch.Tensor,
                 psum_num_recv_tokens_per_expert: torch.Tensor,
                 num_unaligned_recv_tokens_per_expert: torch.Tensor, recv_src_metadata: torch.Tensor,
                 dst_buffer_slot_idx: torch.Tensor, private: dict[str, Any]) -> None:
        self.do_expand = do_expand
        self.num_experts = num_experts
        self.expert_alignment = expert_alignment
        self.num_max_tokens_per_rank = num_max_tokens_per_rank
        self.num_sms = num_sms
        self.topk_idx = topk_idx
        self.num_recv_tokens = num_recv_tokens
        self.num_expanded_tokens = num_expanded_tokens
        self.num_recv_tokens_per_expert_list = num_recv_tokens_per_expert_list
        self.psum_num_recv_tokens_per_scaleup_rank = psum_num_recv_tokens_per_scaleup_rank
        self.psum_num_recv_tokens_per_expert = psum_num_recv_tokens_per_expert
        self.num_unaligned_recv_tokens_per_expert = num_unaligned_recv_tokens_per_expert
        self.recv_src_metadata = recv_src_metadata
        self.dst_buffer_slot_idx = dst_buffer_slot_idx
        self.token_metadata_at_forward = None  # V2's hybrid-mode kernels only
        self.channel_linked_list = None
        # what combine and cached dispatch read: _buffer_id, _inner (the normal-mode DispatchHandle),
        # _num_actual (rows really received), _recv_topk_idx, _form, _hidden, _slots, _rows
        self.__dict__.update(private)

    _inner: DispatchHandle
    _buffer_id: int
    _num_actual: int
    _recv_topk_idx: torch.Tensor
    _form: int  # validate.FORMS
    _hidden: int
    _slots: torch.Tensor  # [received tokens, K] expand slots (computed for both layouts)
    _rows: int  # rows of recv_x: the layout's, or V2's worst case without CPU sync

    @property
    def num_allocated_rows(self) -> int:
        """Rows of recv_x (and of combine's x): expanded slots with do_expand, received tokens without."""
        return self.num_expanded_tokens if self.do_expand else self.num_recv_tokens


@dataclass
class Expansion:
    """The expand layout of one dispatch: `slots` [n, K] (-1 none), per local expert the unaligned counts and the
    block starts (multiples of the alignment), and the total rows (every block aligned)."""

    slots: torch.Tensor
    counts: torch.Tensor
    starts: torch.Tensor
    total: int


def expand(recv_topk_idx: torch.Tensor, num_local_experts: int, alignment: int) -> Expansion:
    """Slots in expert-major order: expert e's received rows, in row order, from starts[e]."""
    n, k = recv_topk_idx.shape
    valid = recv_topk_idx >= 0
    counts = torch.bincount(recv_topk_idx[valid], minlength=num_local_experts).to(torch.int64)
    aligned = (counts + alignment - 1) // alignment * alignment
    starts = torch.cumsum(aligned, 0) - aligned
    rows, ks = torch.nonzero(valid, as_tuple=True)
    experts = recv_topk_idx[rows, ks]
    order = torch.argsort(experts * max(n, 1) + rows, stable=True)
    firsts = torch.cumsum(counts, 0) - counts  # each expert's first index among the sorted pairs
    pos = torch.arange(order.numel()) - firsts[experts[order]]
    slots = torch.full((n, k), -1, dtype=torch.int64)
    slots[rows[order], ks[order]] = starts[experts[order]] + pos
    return Expansion(slots, counts, starts, int(aligned.sum()))


def expanded_rows(rows: torch.Tensor, slots: torch.Tensor, total: int) -> torch.Tensor:
    """[total, ...] with rows[r] at every slots[r, k] >= 0; padding rows zero."""
    out = torch.zeros((total, *rows.shape[1:]), dtype=rows.dtype, device=rows.device)
    r, k = torch.nonzero(slots >= 0, as_tuple=True)
    out[slots[r, k]] = rows[r]
    return out


def expanded_weights(weights: torch.Tensor, slots: torch.Tensor, total: int) -> torch.Tensor:
    """[total] f32: weights[r, k] at slots[r, k]; padding zero."""
    out = torch.zeros(total, dtype=weights.dtype, device=weights.device)
    r, k = torch.nonzero(slots >= 0, as_tuple=True)
    out[slots[r, k]] = weights[r, k]
    return out


def worst_rows(num_ranks: int, num_max: int, num_topk: int, num_local: int, alignment: int, do_expand: bool) -> int:
    """V2's allocation without CPU sync: every rank's every token, each in min(top-k, local experts) slots."""
    if not do_expand:
        return num_ranks * num_max
    return align(num_ranks * num_max * min(num_topk, num_local) + (alignment - 1) * num_local, alignment)


def pad_to(t: torch.Tensor | None, rows: int, fill: float = 0) -> torch.Tensor | None:
    if t is None or t.shape[0] >= rows:
        return t
    pad = torch.full((rows - t.shape[0], *t.shape[1:]), fill, dtype=t.dtype, device=t.device)
    return torch.cat([t, pad])


def col_major(t: torch.Tensor) -> torch.Tensor:
    """The same values with V2's TMA-aligned column-major strides: (1, rows rounded up to 4)."""
    rows, cols = t.shape
    out = torch.empty_strided((rows, cols), (1, align(max(rows, 1), 4)), dtype=t.dtype, device=t.device)
    out.copy_(t)
    return out


def buffer_size_hint(num_ranks: int, num_max_tokens_per_rank: int, hidden: int, num_topk: int = 0,
                     use_fp8_dispatch: bool = False, allow_multiple_reduction: bool = True) -> int:
    """Our formula (V2's is NCCL-internal): the bytes of one dispatch's or combine's send and receive rows at
    their worst, rounded up to 2 MiB. A token reaches min(top-k, ranks) ranks (all ranks when num_topk is 0) and
    a rank may receive every rank's every token. Dispatch rows: payload (1 or 2 bytes a channel), FP32 scales
    per 128 channels with FP8, top-k ids (8 B) and weights (4 B), source (8 B). Combine rows: BF16 payload and
    weights, times num_topk without allow_multiple_reduction (each slot travels alone)."""
    m, r = num_max_tokens_per_rank, num_ranks
    k = num_topk if num_topk > 0 else r
    dispatch_row = hidden * (1 if use_fp8_dispatch else 2) + (4 * (-(-hidden // 128)) if use_fp8_dispatch else 0)
    dispatch_row += 12 * k + 8
    combine_row = (2 * hidden) * (1 if allow_multiple_reduction else k) + 4 * k
    rows = m * min(k, r) + m * r
    return align(rows * max(dispatch_row, combine_row), BUFFER_ALIGNMENT)
