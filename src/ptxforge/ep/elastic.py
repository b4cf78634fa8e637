"""`ElasticBuffer`: DeepEP V2's expert-parallel API over the normal-mode `Buffer` (its torch transport).

    buffer = deep_ep.ElasticBuffer(group, num_max_tokens_per_rank=4096, hidden=7168)
    recv_x, recv_topk_idx, recv_topk_weights, handle, event = buffer.dispatch(
        x, topk_idx=topk_idx, topk_weights=topk_weights, num_experts=256, do_expand=True, expert_alignment=128)
    combined_x, combined_topk_weights, event = buffer.combine(expert_out, handle, topk_weights=recv_topk_weights)

Each call checks this rank's arguments and agrees on them with the group first (one small all_gather), so bad
input on one rank raises `EPInputError` on every rank before any data moves; the data then moves through the
inner `Buffer`'s dispatch and combine. Every difference from V2 is listed in docs/ep.md ("ElasticBuffer").
"""

from __future__ import annotations

import itertools
import numbers
from typing import Any, TypeAlias

import torch
import torch.distributed as dist

from ptxforge.ep import layout as torch_layout
from ptxforge.ep.buffer import Buffer
from ptxforge.ep.config import EventOverlap
from ptxforge.ep.elastic_layout import (
    BUFFER_ALIGNMENT,
    EPHandle,
    align,
    buffer_size_hint,
    col_major,
    expand,
    expanded_rows,
    expanded_weights,
    pad_to,
    worst_rows,
)
from ptxforge.ep.stats import CallStats
from ptxforge.ep.validate import FORMS, _check_x, check_topk
from ptxforge.plan.deepep_v2 import v2_num_sms

Payload: TypeAlias = "torch.Tensor | tuple[torch.Tensor, torch.Tensor]"
Bias: TypeAlias = "torch.Tensor | tuple[torch.Tensor, torch.Tensor] | None"

DEVICE_SMS = 132  # an H800/H100 SXM, unless the group's CUDA device says otherwise
NVLINK_GBS, RDMA_GBS = 160.0, 50.0  # DeepSeek-V3's H800 figures; V2 asks nvidia-smi and ibstat
_ids = itertools.count(1)


def _int(v: Any) -> bool:
    return isinstance(v, numbers.Integral) and not isinstance(v, bool)


class ElasticBuffer:
    """DeepEP V2's `ElasticBuffer` (dispatch, combine, size hints, SM and QP estimates) for the ranks of `group`.

    `num_ranks_per_node` (ours) sets the physical node size as `Buffer` does ($LOCAL_WORLD_SIZE, else min(ranks,
    8)); `num_cpu_timeout_secs` bounds every collective."""

    def __init__(self, group: dist.ProcessGroup | None, num_bytes: int | None = None, num_cpu_bytes: int = 0,
                 num_max_tokens_per_rank: int = 0, hidden: int = 0, num_topk: int = 0,
                 use_fp8_dispatch: bool = False, deterministic: bool = False, allow_hybrid_mode: bool = True,
                 allow_multiple_reduction: bool = True, prefer_overlap_with_compute: bool = True, sl_idx: int = 3,
                 num_allocated_qps: int = 0, num_cpu_timeout_secs: int = 300, num_gpu_timeout_secs: int = 100,
                 explicitly_destroy: bool = False, *, num_ranks_per_node: int | None = None) -> None:
        for name, v in (("num_cpu_bytes", num_cpu_bytes), ("num_max_tokens_per_rank", num_max_tokens_per_rank),
                        ("hidden", hidden), ("num_topk", num_topk), ("num_allocated_qps", num_allocated_qps)):
            if not _int(v) or v < 0:
                raise ValueError(f"ElasticBuffer: {name} must be an int >= 0, got {v!r}")
        for name, size in (("num_bytes", num_bytes), ("num_cpu_bytes", num_cpu_bytes)):
            if size is not None and (not _int(size) or size < 0 or size % BUFFER_ALIGNMENT):
                raise ValueError(f"ElasticBuffer: {name}={size!r} must be a multiple of 2 MiB ({BUFFER_ALIGNMENT})")
        if num_cpu_timeout_secs <= 0:
            raise ValueError(f"ElasticBuffer: num_cpu_timeout_secs must be > 0, got {num_cpu_timeout_secs!r}")
        self.group = group
        self.inner = Buffer(group, 0, 0, num_ranks_per_node=num_ranks_per_node,
                            timeout_s=float(num_cpu_timeout_secs))
        self.transport = self.inner.transport
        self.rank_idx, self.num_ranks = self.inner.rank, self.inner.group_size
        self.id = next(_ids)
        self.allow_hybrid_mode, self.allow_multiple_reduction = bool(allow_hybrid_mode), bool(allow_multiple_reduction)
        self.prefer_overlap_with_compute, self.deterministic = bool(prefer_overlap_with_compute), bool(deterministic)
        self.sl_idx, self.num_gpu_timeout_secs = sl_idx, num_gpu_timeout_secs
        self.num_cpu_timeout_secs = num_cpu_timeout_secs
        self.explicitly_destroy = bool(explicitly_destroy)
        self.num_max_tokens_per_rank = int(num_max_tokens_per_rank)
        self._explicit_bytes = num_bytes is not None
        self.num_bytes = int(num_bytes) if num_bytes is not None else self.get_buffer_size_hint(
            group, num_max_tokens_per_rank, hidden, num_topk, use_fp8_dispatch, allow_hybrid_mode,
            allow_multiple_reduction)
        self.num_cpu_bytes = int(num_cpu_bytes)
        self.num_allocated_qps = num_allocated_qps or (129 if self.allow_hybrid_mode else 17)
        self.num_device_sms = _device_sms(self.transport.device)
        self.num_rdma_ranks, self.num_nvlink_ranks = self.get_physical_domain_size()
        self.num_scaleout_ranks, self.num_scaleup_ranks = self.get_logical_domain_size()
        self.scaleout_rank_idx = self.rank_idx // self.num_scaleup_ranks
        self.scaleup_rank_idx = self.rank_idx % self.num_scaleup_ranks
        self._destroyed = False
        self.barrier()

    # ------------------------------------------------------------------ small API

    def destroy(self) -> None:
        """Release the buffer (V2: only with explicitly_destroy=True); later calls raise."""
        if not self.explicitly_destroy:
            raise RuntimeError("ElasticBuffer.destroy: this buffer was made without explicitly_destroy=True, "
                               "so it is released when it is garbage-collected")
        if not self._destroyed:
            self.inner.destroy()
            self._destroyed = True

    def _alive(self, call: str) -> None:
        if self._destroyed:
            raise RuntimeError(f"ElasticBuffer.{call}: the buffer was destroyed")

    @staticmethod
    def get_buffer_size_hint(group: dist.ProcessGroup | None, num_max_tokens_per_rank: int, hidden: int,
                             num_topk: int = 0, use_fp8_dispatch: bool = False, allow_hybrid_mode: bool = True,
                             allow_multiple_reduction: bool = True) -> int:
        """Bytes (a multiple of 2 MiB) for these MoE settings: `elastic_layout.buffer_size_hint`'s formula."""
        return buffer_size_hint(dist.get_world_size(group), num_max_tokens_per_rank, hidden, num_topk,
                                use_fp8_dispatch, allow_multiple_reduction)

    def barrier(self, use_comm_stream: bool = True, with_cpu_sync: bool = False, sequential: bool = True) -> None:
        """Every rank meets (one bounded collective)."""
        self._alive("barrier")
        self.transport.agree("ElasticBuffer.barrier", {"buffer": self.id})

    @staticmethod
    def capture() -> EventOverlap:
        return EventOverlap()

    def get_physical_domain_size(self) -> tuple[int, int]:
        """(RDMA ranks = nodes, NVLink ranks = ranks per node)."""
        return self.inner.num_nodes, self.inner.ranks_per_node

    def get_logical_domain_size(self) -> tuple[int, int]:
        """(scale-out, scale-up) ranks: the nodes with hybrid mode, else one domain of every rank."""
        if self.allow_hybrid_mode and self.inner.num_nodes > 1:
            return self.inner.num_nodes, self.inner.ranks_per_node
        return 1, self.num_ranks

    def get_theoretical_num_sms(self, num_experts: int, num_topk: int, num_scaleout_topk: int = 0,
                                rdma_gbs: float = 0, nvlink_gbs: float = 0, sm_read_gbs: float = 200,
                                sm_write_gbs: float = 50) -> int:
        """V2's closed form (ptxforge.plan.deepep_v2.v2_num_sms) for a balanced gate; even, at least 4, at most
        the device's SMs (64 at least when prefer_overlap_with_compute is off)."""
        if num_scaleout_topk != 0:
            raise ValueError("get_theoretical_num_sms: num_scaleout_topk is reserved and must be 0 (as in V2)")
        if self.num_ranks == 1:
            return self.num_device_sms  # no traffic
        est = v2_num_sms(num_experts, num_topk, self.num_scaleout_ranks, self.num_scaleup_ranks,
                         rdma_gbs or RDMA_GBS, nvlink_gbs or NVLINK_GBS, self.num_device_sms, sm_read_gbs,
                         sm_write_gbs)
        sms = est.sms if self.prefer_overlap_with_compute else max(est.sms, 64)
        return min(sms, self.num_device_sms)

    def get_theoretical_num_qps(self, num_sms: int) -> int:
        """V2's rule: min(num_sms, 9) QPs, or num_sms * 16 + 1 in hybrid mode, capped by the allocated QPs."""
        num_qps = num_sms * 16 + 1 if self.allow_hybrid_mode else min(num_sms, 9)
        return min(num_qps, self.num_allocated_qps)

    def stats(self, reset: bool = False) -> list[CallStats]:
        """The inner Buffer's record of each transport call (ptxforge.ep.stats)."""
        return self.inner.stats(reset)

    # ------------------------------------------------------------------ dispatch

    def dispatch(self, x: Payload, topk_idx: torch.Tensor | None = None, topk_weights: torch.Tensor | None = None,
                 cumulative_local_expert_recv_stats: torch.Tensor | None = None, num_experts: int | None = None,
                 num_max_tokens_per_rank: int | None = None, expert_alignment: int | None = None,
                 num_sms: int = 0, num_qps: int = 0, previous_event: EventOverlap | None = None,
                 previous_event_before_epilogue: EventOverlap | None = None, async_with_compute_stream: bool = False,
                 allocate_on_comm_stream: bool = False, handle: EPHandle | None = None, do_handle_copy: bool = True,
                 do_cpu_sync: bool | None = None, do_expand: bool = False, do_zero_padding: bool = False,
                 use_tma_aligned_col_major_sf: bool = False
                 ) -> tuple[Payload, torch.Tensor | None, torch.Tensor | None, EPHandle, EventOverlap]:
        """(recv_x, recv_topk_idx (None with do_expand), recv_topk_weights ([rows] with do_expand), handle,
        event). Received rows are sorted by source global token index; with do_expand each (token, local
        expert) has a slot, expert-major, each expert's block starting at a multiple of expert_alignment."""
        self._alive("dispatch")
        cached = handle is not None
        if cached and isinstance(handle, EPHandle) and handle._buffer_id == self.id:
            num_experts = handle.num_experts if num_experts is None else num_experts
            num_max_tokens_per_rank = (handle.num_max_tokens_per_rank if num_max_tokens_per_rank is None
                                       else num_max_tokens_per_rank)
            expert_alignment = handle.expert_alignment if expert_alignment is None else expert_alignment
        m = self.num_max_tokens_per_rank if num_max_tokens_per_rank is None else num_max_tokens_per_rank
        a = 1 if expert_alignment is None else expert_alignment
        sync = (not cached) if do_cpu_sync is None else bool(do_cpu_sync)
        complaint, facts = self._check_dispatch(x, topk_idx, topk_weights, cumulative_local_expert_recv_stats,
                                                num_experts, m, a, num_sms, num_qps, previous_event,
                                                allocate_on_comm_stream, handle, do_cpu_sync, do_expand,
                                                do_zero_padding)
        self.transport.agree("ElasticBuffer.dispatch", facts, complaint)
        if cached:
            assert handle is not None
            return self._cached_dispatch(x, topk_weights, handle, do_expand, use_tma_aligned_col_major_sf)
        assert topk_idx is not None and isinstance(num_experts, int)
        k = topk_idx.shape[1]
        num_sms = num_sms or self.get_theoretical_num_sms(num_experts, k)
        per_rank, _, per_expert, in_rank = torch_layout.dispatch_layout(topk_idx, num_experts, self.num_ranks,
                                                                        self.inner.ranks_per_node)
        recv, recv_idx, recv_w, _, inner, _ = self.inner.dispatch(
            x, num_tokens_per_rank=per_rank, is_token_in_rank=in_rank, num_tokens_per_expert=per_expert,
            topk_idx=topk_idx, topk_weights=topk_weights)
        assert recv_idx is not None and inner is not None
        recv_x, recv_sf = recv if isinstance(recv, tuple) else (recv, None)
        h = self._make_handle(inner, recv_idx, topk_idx, num_experts, m, a, num_sms, sync, do_expand,
                              do_handle_copy, facts, cumulative_local_expert_recv_stats, recv_x.device)
        rows = h._rows
        out = self._shape_outputs(recv_x, recv_sf, recv_w, h, do_expand, use_tma_aligned_col_major_sf)
        recv_topk = None if do_expand else pad_to(recv_idx, rows, -1)
        return out[0], recv_topk, out[1], h, EventOverlap()

    def _make_handle(self, inner, recv_idx, topk_idx, num_experts, m, a, num_sms, sync, do_expand, do_handle_copy,
                     facts, stats, dev) -> EPHandle:
        """V2's handle from the normal-mode dispatch's: global source indices, prefix sums per scale-up rank and
        per expert, the expand slots; V2's worst-case sizes without CPU sync."""
        n, k = recv_idx.shape
        num_local = num_experts // self.num_ranks
        from_rank = torch.diff(inner.rank_prefix_matrix[:, self.rank_idx].to(torch.int64).cpu(),
                               prepend=torch.zeros(1, dtype=torch.int64))
        src_rank = torch.repeat_interleave(torch.arange(self.num_ranks), from_rank)
        ex = expand(recv_idx.cpu(), num_local, a)
        aligned_counts = [align(int(c), a) for c in ex.counts]
        meta = torch.full((n, 2 + k), -1, dtype=torch.int32)
        meta[:, 0] = (src_rank * m + inner.recv_src_idx.cpu().to(torch.int64)).to(torch.int32)
        first_k = torch.argmax((recv_idx.cpu() >= 0).to(torch.int8), dim=1)
        meta[:, 1] = ((src_rank % self.num_scaleup_ranks) * k + first_k).to(torch.int32)
        if do_expand:
            meta[:, 2:] = ex.slots.to(torch.int32)
            psum_expert = (ex.starts + ex.counts).to(torch.int32)
        else:
            psum_expert = torch.cumsum(torch.tensor(aligned_counts, dtype=torch.int64), 0).to(torch.int32)
        g = self.num_scaleup_ranks
        per_scaleup = torch.stack([from_rank[i::g].sum() for i in range(g)])
        if stats is not None:
            stats += ex.counts.to(stats.dtype).to(stats.device)
        worst_expanded = worst_rows(self.num_ranks, m, k, num_local, a, True)
        rows = (ex.total if do_expand else n) if sync else worst_rows(self.num_ranks, m, k, num_local, a, do_expand)
        return EPHandle(
            do_expand=do_expand, num_experts=num_experts, expert_alignment=a, num_max_tokens_per_rank=m,
            num_sms=num_sms, topk_idx=topk_idx.clone() if do_handle_copy else topk_idx,
            num_recv_tokens=n if sync else self.num_ranks * m,
            num_expanded_tokens=ex.total if sync else worst_expanded,
            num_recv_tokens_per_expert_list=aligned_counts if sync else [],
            psum_num_recv_tokens_per_scaleup_rank=torch.cumsum(per_scaleup, 0).to(torch.int32).to(dev),
            psum_num_recv_tokens_per_expert=psum_expert.to(dev),
            num_unaligned_recv_tokens_per_expert=ex.counts.to(torch.int32).to(dev),
            recv_src_metadata=_padded(meta, n if sync else self.num_ranks * m, -1).to(dev),
            dst_buffer_slot_idx=inner.send_head,
            private=dict(_buffer_id=self.id, _inner=inner, _num_actual=n, _form=facts["form"],
                         _hidden=facts["hidden"], _slots=ex.slots, _rows=rows, _recv_topk_idx=recv_idx))

    def _shape_outputs(self, recv_x, recv_sf, recv_w, h: EPHandle, do_expand, col_major_sf):
        """(recv_x or (recv_x, recv_sf), weights) in the handle's layout and row count."""
        rows = h._rows
        if do_expand:
            slots = h._slots.to(recv_x.device)
            recv_x = expanded_rows(recv_x, slots, rows)
            recv_sf = expanded_rows(recv_sf, slots, rows) if recv_sf is not None else None
            recv_w = expanded_weights(recv_w, slots, rows) if recv_w is not None else None
        else:
            recv_x, recv_sf, recv_w = pad_to(recv_x, rows), pad_to(recv_sf, rows), pad_to(recv_w, rows)
        if recv_sf is not None and col_major_sf:
            recv_sf = col_major(recv_sf)
        return ((recv_x, recv_sf) if recv_sf is not None else recv_x), recv_w

    def _cached_dispatch(self, x, topk_weights, h: EPHandle, do_expand, col_major_sf):
        """The rows of the dispatch that made `h` again, with new payload (and weights if given): one cached
        normal-mode dispatch of every field's bytes side by side, so nothing is rounded."""
        q, sf = x if isinstance(x, tuple | list) else (x, None)
        parts = [t.contiguous().view(torch.uint8).reshape(q.shape[0], -1) for t in (q, sf, topk_weights)
                 if t is not None]
        carrier = torch.cat(parts, 1).view(torch.bfloat16)
        recv, *_ = self.inner.dispatch(carrier, handle=h._inner)
        raw = recv.view(torch.uint8) if isinstance(recv, torch.Tensor) else recv[0].view(torch.uint8)
        got: list[torch.Tensor | None] = []
        at = 0
        for t in (q, sf, topk_weights):
            if t is None:
                got.append(None)
                continue
            width = t.shape[1] * t.element_size()
            got.append(raw[:, at:at + width].contiguous().view(t.dtype))
            at += width
        out = self._shape_outputs(got[0], got[1], got[2], h, do_expand, col_major_sf)
        recv_topk = None if do_expand else pad_to(h._recv_topk_idx, h._rows, -1)
        return out[0], recv_topk, out[1], h, EventOverlap()

    def _check_dispatch(self, x, topk_idx, topk_weights, stats, num_experts, m, a, num_sms, num_qps,
                        previous_event, allocate_on_comm_stream, handle, do_cpu_sync, do_expand, do_zero_padding):
        """(complaint, facts) for the agreement step; never raises."""
        bad, form, t_, hidden = _check_x(x)
        problems = [bad] if bad else []
        if not _int(m) or m <= 0:
            problems.append(f"num_max_tokens_per_rank must be > 0 (here or in the constructor), got {m!r}")
        elif t_ > m:
            problems.append(f"x has {t_} tokens, more than num_max_tokens_per_rank={m}")
        if not _int(a) or a < 1:
            problems.append(f"expert_alignment must be an int >= 1, got {a!r}")
        if do_zero_padding and not do_expand:
            problems.append("do_zero_padding needs do_expand=True (it zeroes the expand layout's padding)")
        if previous_event is not None and not allocate_on_comm_stream:
            problems.append("previous_event needs allocate_on_comm_stream=True (as in V2)")
        for name, v in (("num_sms", num_sms), ("num_qps", num_qps)):
            if not _int(v) or v < 0:
                problems.append(f"{name} must be an int >= 0, got {v!r}")
        if _int(num_qps) and num_qps > self.num_allocated_qps:
            problems.append(f"num_qps={num_qps} is more than the {self.num_allocated_qps} allocated QPs")
        if handle is not None:
            if not isinstance(handle, EPHandle) or handle._buffer_id != self.id:
                problems.append("handle is not one that a dispatch of this ElasticBuffer returned")
            else:
                if topk_idx is not None:
                    problems.append("a cached dispatch (handle=...) takes no topk_idx: it reuses the handle's")
                if do_cpu_sync:
                    problems.append("a cached dispatch cannot do_cpu_sync (it reuses the handle's counts)")
                if (num_experts, a, m) != (handle.num_experts, handle.expert_alignment,
                                           handle.num_max_tokens_per_rank):
                    problems.append(f"num_experts, expert_alignment, num_max_tokens_per_rank = {num_experts}, {a}, "
                                    f"{m} differ from the handle's {handle.num_experts}, "
                                    f"{handle.expert_alignment}, {handle.num_max_tokens_per_rank}")
                if do_expand != handle.do_expand:
                    problems.append(f"do_expand={do_expand} but the handle was made with "
                                    f"do_expand={handle.do_expand}")
                if not bad and (FORMS[form], hidden, t_) != (handle._form, handle._hidden, handle.topk_idx.shape[0]):
                    had = next(name for name, v in FORMS.items() if v == handle._form)
                    problems.append(f"x is {form} [{t_}, {hidden}] but the handle's dispatch had "
                                    f"{had} [{handle.topk_idx.shape[0]}, {handle._hidden}]")
                if topk_weights is not None:
                    problems.append(_weights_complaint(topk_weights, tuple(handle.topk_idx.shape)))
        else:
            if num_experts is None:
                problems.append("dispatch needs num_experts (or a handle)")
            elif topk_idx is None:
                problems.append("dispatch needs topk_idx (or a handle)")
            else:
                bad_topk = check_topk(topk_idx, num_experts, t_ if t_ >= 0 else None)
                if bad_topk:
                    problems.append(bad_topk)
                elif num_experts % self.num_ranks:
                    problems.append(f"num_experts={num_experts} is not a multiple of the group's "
                                    f"{self.num_ranks} ranks")
                elif topk_weights is not None:
                    problems.append(_weights_complaint(topk_weights, tuple(topk_idx.shape)))
            if stats is not None and _int(num_experts) and num_experts > 0:
                want = num_experts // self.num_ranks
                if not isinstance(stats, torch.Tensor) or stats.dtype != torch.int32 or tuple(stats.shape) != (want,):
                    problems.append(f"cumulative_local_expert_recv_stats must be int32 [{want}], got "
                                    f"{getattr(stats, 'dtype', type(stats).__name__)} "
                                    f"{list(getattr(stats, 'shape', []))}")
        problems = [p for p in problems if p]
        if self._explicit_bytes and not problems and handle is None:
            need = buffer_size_hint(self.num_ranks, m, hidden, topk_idx.shape[1], form != "bf16",
                                    self.allow_multiple_reduction)
            if need > self.num_bytes:
                problems.append(f"num_bytes={self.num_bytes} is smaller than this dispatch needs ({need}: "
                                f"ElasticBuffer.get_buffer_size_hint)")
        facts = {"buffer": self.id, "hidden": hidden, "form": FORMS[form],
                 "cached": int(handle is not None), "do_expand": int(bool(do_expand)),
                 "num_experts": num_experts if _int(num_experts) else -1,
                 "num_max_tokens_per_rank": m if _int(m) else -1, "expert_alignment": a if _int(a) else -1,
                 "with_weights": int(topk_weights is not None), "do_cpu_sync": int(bool(do_cpu_sync))}
        return "; ".join(problems), facts

    # ------------------------------------------------------------------ combine

    def combine(self, x: torch.Tensor, handle: EPHandle, topk_weights: torch.Tensor | None = None,
                bias: Bias = None, num_sms: int = 0, num_qps: int = 0, previous_event: EventOverlap | None = None,
                previous_event_before_epilogue: EventOverlap | None = None, async_with_compute_stream: bool = False,
                allocate_on_comm_stream: bool = False) -> tuple[torch.Tensor, torch.Tensor | None, EventOverlap]:
        """(combined_x bf16 [T, H], combined_topk_weights f32 [T, K] or None, event). Each token's rows are
        summed in f32 (with do_expand: its slots on each rank first, or, without allow_multiple_reduction,
        every slot once at the source in top-k order), plus the biases, rounded once to BF16. Weights come
        back unchanged: each top-k's from the rank of its expert, 0 where the id was -1."""
        self._alive("combine")
        complaint = self._check_combine(x, handle, topk_weights, bias, num_qps, previous_event,
                                        allocate_on_comm_stream)
        ok = not complaint
        self.transport.agree("ElasticBuffer.combine", {"buffer": self.id, "hidden": x.shape[1] if ok else -1,
                                                       "with_weights": int(topk_weights is not None)}, complaint)
        n, inner = handle._num_actual, handle._inner
        w = _weights_per_row(handle, topk_weights, x.device)
        if not handle.do_expand:
            combined, cw, _ = self.inner.combine(x[:n], inner, topk_weights=w, bias=bias)
            return combined, cw, EventOverlap()
        slots = handle._slots.to(x.device)
        k, hidden = slots.shape[1], x.shape[1]
        if self.allow_multiple_reduction:  # each rank sums its slots of a token (top-k order) before the send
            partial = torch.zeros((n, hidden), dtype=torch.float32, device=x.device)
            for j in range(k):
                rows = torch.nonzero(slots[:, j] >= 0).flatten()
                partial.index_add_(0, rows, x[slots[rows, j]].to(torch.float32))
            combined, cw, _ = self.inner.combine(partial.to(torch.bfloat16), inner, topk_weights=w, bias=bias)
            return combined, cw, EventOverlap()
        picked = torch.zeros((n, k, hidden), dtype=x.dtype, device=x.device)
        for j in range(k):
            rows = torch.nonzero(slots[:, j] >= 0).flatten()
            picked[rows, j] = x[slots[rows, j]]
        wide, cw, _ = self.inner.combine(picked.reshape(n, k * x.shape[1]), inner, topk_weights=w)
        acc = torch.zeros((wide.shape[0], x.shape[1]), dtype=torch.float32, device=x.device)
        for b in (bias if isinstance(bias, tuple | list) else (bias,)):
            if b is not None:
                acc += b.to(torch.float32)
        for j in range(k):  # one reduction, in top-k order, as V2 without allow_multiple_reduction
            acc += wide.view(-1, k, x.shape[1])[:, j].to(torch.float32)
        return acc.to(torch.bfloat16), cw, EventOverlap()

    def _check_combine(self, x, handle, topk_weights, bias, num_qps, previous_event, allocate_on_comm_stream) -> str:
        problems = []
        if not isinstance(handle, EPHandle) or getattr(handle, "_buffer_id", None) != self.id:
            return "handle is not one that a dispatch of this ElasticBuffer returned"
        rows = handle._rows
        if not isinstance(x, torch.Tensor) or x.dtype != torch.bfloat16 or x.dim() != 2:
            return (f"x must be a bfloat16 [rows, hidden] tensor, got {getattr(x, 'dtype', type(x).__name__)} "
                    f"{list(getattr(x, 'shape', []))}")
        if x.shape[0] != rows:
            what = "expanded slots" if handle.do_expand else "received tokens"
            problems.append(f"x has {x.shape[0]} rows but the dispatch that made the handle returned {rows} {what}")
        if topk_weights is not None:
            want = (rows,) if handle.do_expand else (rows, handle.topk_idx.shape[1])
            bad = _weights_complaint(topk_weights, want)
            if bad:
                problems.append(bad + (" (one weight a slot with do_expand)" if handle.do_expand else ""))
        biases = bias if isinstance(bias, tuple | list) else (bias,)
        if len(biases) > 2:
            problems.append(f"bias is at most two tensors, got {len(biases)}")
        for b in biases:
            t_ = handle.topk_idx.shape[0]
            if b is not None and (not isinstance(b, torch.Tensor) or b.dtype != torch.bfloat16
                                  or tuple(b.shape) != (t_, x.shape[1])):
                problems.append(f"bias must be bfloat16 [{t_}, {x.shape[1]}], got "
                                f"{getattr(b, 'dtype', type(b).__name__)} {list(getattr(b, 'shape', []))}")
        if not _int(num_qps) or num_qps < 0 or num_qps > self.num_allocated_qps:
            problems.append(f"num_qps must be 0..{self.num_allocated_qps}, got {num_qps!r}")
        if previous_event is not None and not allocate_on_comm_stream:
            problems.append("previous_event needs allocate_on_comm_stream=True (as in V2)")
        return "; ".join(problems)


def _weights_complaint(w: Any, shape: tuple[int, ...]) -> str:
    if not isinstance(w, torch.Tensor) or w.dtype != torch.float32 or tuple(w.shape) != shape:
        return (f"topk_weights must be float32 {list(shape)}, got {getattr(w, 'dtype', type(w).__name__)} "
                f"{list(getattr(w, 'shape', []))}")
    return ""


def _weights_per_row(h: EPHandle, w: torch.Tensor | None, device: torch.device) -> torch.Tensor | None:
    """[received tokens, K] f32: each top-k's weight where its expert is on this rank, else 0, so that summing
    over ranks returns every weight unchanged (V2 takes each from its expert's rank)."""
    if w is None:
        return None
    n, ids = h._num_actual, h._recv_topk_idx.to(device)
    if h.do_expand:
        slots = h._slots.to(device)
        return torch.where(slots >= 0, w[slots.clamp(min=0)], torch.zeros((), dtype=w.dtype))
    return w[:n].masked_fill(ids < 0, 0.0)


def _padded(t: torch.Tensor, rows: int, fill: float) -> torch.Tensor:
    out = pad_to(t, rows, fill)
    assert out is not None
    return out


def _device_sms(device: torch.device) -> int:
    if device.type == "cuda":
        return int(torch.cuda.get_device_properties(device).multi_processor_count)
    return DEVICE_SMS
