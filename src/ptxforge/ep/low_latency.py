"""DeepEP's low-latency mode (decode-time dispatch and combine) over the torch transport.

Every (token, chosen expert) pair goes straight to its expert's rank, with no forwarding: FP8 (or BF16) on the
way out, landing in the expert's rows of `recv_x [local experts, num_max * ranks, hidden]`; on the way back each
rank sums the rows of its tokens weighted by `topk_weights` in f32 (top-k order) and rounds once to BF16.

The layout is DeepEP V1's: per local expert, the rows of source rank 0 first, then rank 1, ...;
`layout_range[e][src] = begin << 32 | count` and `src_info[e][row]` is the token's index on its source rank.
The send phase and the receive phase are separate: with `return_recv_hook=True` the call returns once the data
is on its way (its all_to_all runs on gloo's thread) and `hook()` receives it; with `async_finish=True` the
returned event does. DeepEP keeps two buffers, so at most two calls may wait for their receive at a time: a
third call that would reuse a buffer whose receive is still pending is refused on every rank.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import torch

from ptxforge.ep.config import Completion, EventOverlap
from ptxforge.ep.rows import Field, RowFormat
from ptxforge.ep.validate_ll import check_low_latency_combine, check_low_latency_dispatch

if TYPE_CHECKING:
    from ptxforge.ep.stats import CallStats
    from ptxforge.ep.transport import Pending, Transport

FP8_MAX = 448.0
FP8_MARGIN = 1e-4  # the smallest amax a 128-channel group is scaled by (DeepEP's kFP8Margin)
INV_FP8_MAX = torch.tensor(1 / 448.0, dtype=torch.float32)  # a float constant, as DeepEP's kFinfoAmaxInvE4M3
ALIGNMENT = 128  # bytes: DeepEP rounds its buffer sizes up to this


def rdma_size_hint(num_max_dispatch_tokens_per_rank: int, hidden: int, num_ranks: int, num_experts: int) -> int:
    """The bytes DeepEP's low-latency layout takes (two send, two receive and two signalling buffers)."""
    n, num_scales = num_max_dispatch_tokens_per_rank, hidden // 128
    dispatch_msg = 16 + max(hidden * 2, hidden + num_scales * 4)  # an int4 header, then BF16 or FP8 + scales
    combine_msg = num_scales * 4 + hidden * 2
    send = max(n * dispatch_msg, num_experts * n * combine_msg)
    recv = max(num_experts * n * dispatch_msg, num_experts * n * combine_msg)
    signal = -(-num_experts * 4 // 128) * 128
    total = 2 * (send + recv + signal)
    return (total + ALIGNMENT) // ALIGNMENT * ALIGNMENT


def cast_to_fp8(x: torch.Tensor, round_scale: bool) -> tuple[torch.Tensor, torch.Tensor]:
    """DeepEP's low-latency cast: per token and 128 channels, amax = max(1e-4, |x|); scale = 448 / amax and
    scale_inv = amax * (1/448) (or both powers of two, 2^ceil(log2(amax / 448)), with `round_scale`);
    q = e4m3(x * scale) saturated. Returns (q e4m3 [T, H], scale_inv f32 [T, H/128])."""
    t_, h = x.shape
    xf = x.to(torch.float32).view(t_, h // 128, 128)
    amax = xf.abs().amax(-1).clamp(min=FP8_MARGIN)
    if round_scale:
        bits = (amax * INV_FP8_MAX).view(torch.int32)
        exp = ((bits >> 23) & 0xFF) - 127 + ((bits & 0x7FFFFF) != 0).to(torch.int32)
        scale = ((127 - exp) << 23).view(torch.float32)
        scale_inv = ((exp + 127) << 23).view(torch.float32)
    else:
        scale_inv = amax * INV_FP8_MAX
        scale = torch.tensor(FP8_MAX, dtype=torch.float32) / amax
    q = (xf * scale.unsqueeze(-1)).clamp(-FP8_MAX, FP8_MAX).to(torch.float8_e4m3fn)
    return q.view(t_, h), scale_inv


def ue8m0(scale_inv: torch.Tensor) -> torch.Tensor:
    """The exponent byte of power-of-two scales (uint8)."""
    return ((scale_inv.view(torch.int32) >> 23) & 0xFF).to(torch.uint8)


class LowLatencyHandle(tuple):
    """DeepEP's handle `(src_info, layout_range, num_max_dispatch_tokens_per_rank, hidden, num_experts)`,
    carrying what this backend needs to combine (the dispatch's routing, its send order and counts)."""

    _buffer_id: int
    _serial: int
    _topk_idx: torch.Tensor
    _pairs: torch.Tensor  # [P, 2] (token, k) of every valid pair, in the order the dispatch sent them
    _send_counts: list[int]  # pairs sent to each rank (= rows each rank sends back in combine)
    _counts: torch.Tensor  # [local experts, ranks] rows received per (local expert, source rank)
    _received: list[bool]  # [True] once the dispatch's receive has run


@dataclass
class _Slot:
    """One of DeepEP's two buffers: the call whose receive is pending in it, and the zero-copy send buffer."""

    pending: str = ""  # the call whose data waits in this buffer for its hook or event ("" when none)
    combine_send: torch.Tensor | None = None


@dataclass
class LowLatency:
    """The low-latency calls of one Buffer (torch transport)."""

    transport: Transport
    rank: int
    num_ranks: int
    buffer_id: int
    num_rdma_bytes: int
    slot: int = 0
    serial: int = 0
    slots: list[_Slot] = field(default_factory=lambda: [_Slot(), _Slot()])

    # ------------------------------------------------------------------ shared pieces

    def _slot_complaint(self, call: str) -> str:
        s = self.slots[self.slot]
        if s.pending:
            return (f"{call} would reuse low-latency buffer {self.slot}, which still holds the data of {s.pending}, "
                    f"whose receive hook (or event) has not been called: DeepEP keeps two buffers, so at most two "
                    f"low-latency results may wait for their receive; call that hook first")
        return ""

    def _size_complaint(self, n_max: int, hidden: int, num_experts: int) -> str:
        need = rdma_size_hint(n_max, hidden, self.num_ranks, num_experts)
        if self.num_rdma_bytes < need:
            return (f"num_rdma_bytes={self.num_rdma_bytes} is too small for num_max_dispatch_tokens_per_rank="
                    f"{n_max}, hidden={hidden}, {self.num_ranks} ranks, {num_experts} experts: it needs {need} "
                    f"(Buffer.get_low_latency_rdma_size_hint)")
        return ""

    def _finisher(self, call: str, work: Pending, unpack: Callable[[torch.Tensor], None],
                  async_finish: bool, return_recv_hook: bool) -> tuple[EventOverlap, Callable[[], None]]:
        """Receive now, or hand back the event/hook that receives; the buffer is pending until then."""
        slot = self.slots[self.slot]
        slot.pending = call
        done: list[bool] = []

        def receive() -> None:
            if not done:
                done.append(True)
                slot.pending = ""
                unpack(work.wait())

        self.slot ^= 1
        if return_recv_hook:
            return EventOverlap(), receive
        if async_finish:
            return EventOverlap(_Receive(call, receive, work)), _no_hook
        receive()
        return EventOverlap(), _no_hook

    # ------------------------------------------------------------------ dispatch

    def dispatch(self, x: Any, topk_idx: Any, n_max: Any, num_experts: Any, stats_out: torch.Tensor | None,
                 wait_stats: torch.Tensor | None, use_fp8: bool, round_scale: bool, use_ue8m0: bool,
                 async_finish: bool, return_recv_hook: bool, stats: CallStats) -> tuple:
        complaint, facts = check_low_latency_dispatch(x, topk_idx, n_max, num_experts, self.num_ranks, stats_out,
                                                      wait_stats, use_fp8, round_scale, use_ue8m0)
        if not complaint:
            complaint = self._slot_complaint("low_latency_dispatch") or \
                self._size_complaint(n_max, x.shape[1], num_experts)
        self.serial += 1
        self.transport.agree("low_latency_dispatch", dict(facts, serial=self.serial), complaint)
        t_, h = x.shape
        r_, el = self.num_ranks, num_experts // self.num_ranks
        tok, kk = torch.nonzero(topk_idx >= 0, as_tuple=True)
        e = topk_idx[tok, kk]
        dst, le = e // el, e % el
        order = torch.argsort((dst * el + le) * t_ + tok, stable=True)
        tok, kk, dst, le = tok[order], kk[order], dst[order], le[order]
        send_counts = torch.bincount(dst, minlength=r_).tolist()
        if use_fp8:
            q, scale_inv = cast_to_fp8(x, round_scale)
            payload = {"x": q[tok], "scales": scale_inv[tok]}
        else:
            payload = {"x": x[tok]}
        fmt = RowFormat([Field("x", torch.float8_e4m3fn if use_fp8 else torch.bfloat16, h, "payload"),
                         Field("scales", torch.float32, h // 128 if use_fp8 else 0, "scales"),
                         Field("src", torch.int32, 1, "meta"), Field("expert", torch.int32, 1, "meta")])
        rows = fmt.pack(dict(payload, src=tok.to(torch.int32), expert=le.to(torch.int32)), len(tok), x.device)
        recv_counts = self.transport.exchange_counts("low_latency_dispatch", send_counts)
        for peer in range(r_):
            stats.record("sent", peer, send_counts[peer], fmt, True)
            stats.record("recv", peer, recv_counts[peer], fmt, True)
        started = time.perf_counter_ns()
        work = self.transport.exchange_rows_async("low_latency_dispatch", rows, send_counts, recv_counts)
        stats.control_bytes = self.transport.take_control_bytes()

        rows_per_expert = n_max * r_
        # rows past an expert's count are left as they are (unspecified, as DeepEP's)
        recv_x = torch.empty((el, rows_per_expert, h), dtype=torch.float8_e4m3fn if use_fp8 else torch.bfloat16,
                             device=x.device)
        num_scales = h // 128
        if use_fp8 and use_ue8m0:  # [E, packs, rows] int32 of 4 exponent bytes, seen as [E, rows, packs]
            packs = -(-num_scales // 4)
            scale_bytes = torch.empty((el, packs, rows_per_expert, 4), dtype=torch.uint8, device=x.device)
            recv_scales = scale_bytes.view(torch.int32).view(el, packs, rows_per_expert).transpose(1, 2)
        elif use_fp8:  # column-major [E, rows, scales], as DeepEP's TMA-friendly layout
            scale_base = torch.empty((el, num_scales, rows_per_expert), dtype=torch.float32, device=x.device)
            recv_scales = scale_base.transpose(1, 2)
        src_info = torch.full((el, rows_per_expert), -1, dtype=torch.int32, device=x.device)
        layout_range = torch.zeros((el, r_), dtype=torch.int64, device=x.device)
        recv_count = torch.zeros(el, dtype=torch.int32, device=x.device)
        counts = torch.zeros((el, r_), dtype=torch.int64)
        received: list[bool] = []

        def unpack(arrived: torch.Tensor) -> None:
            got = fmt.unpack(arrived)
            src_rank = torch.repeat_interleave(torch.arange(r_), torch.tensor(recv_counts))
            expert = got["expert"].view(-1).to(torch.int64).cpu()
            key = expert * r_ + src_rank
            by = torch.argsort(key, stable=True)  # by (local expert, source rank), tokens in order within
            counts.copy_(torch.bincount(key, minlength=el * r_).view(el, r_))
            per_expert = counts.sum(1)
            begin = torch.cumsum(counts, 1) - counts
            start = torch.cumsum(per_expert, 0) - per_expert
            e_sorted = expert[by]
            row = torch.arange(len(by)) - start[e_sorted]
            recv_x[e_sorted, row] = got["x"][by]
            src_info[e_sorted, row] = got["src"].view(-1)[by]
            if use_fp8 and use_ue8m0:
                exps = ue8m0(got["scales"][by])
                padded = torch.zeros((len(by), packs * 4), dtype=torch.uint8)
                padded[:, :num_scales] = exps
                scale_bytes[e_sorted, :, row] = padded.view(-1, packs, 4)
            elif use_fp8:
                scale_base[e_sorted, :, row] = got["scales"][by]
            layout_range.copy_((begin << 32) | counts)
            recv_count.copy_(per_expert.to(torch.int32))
            received.append(True)
            if stats_out is not None:
                stats_out.add_(per_expert.to(stats_out.dtype).to(stats_out.device))
            if wait_stats is not None:  # the torch transport cannot tell the sources apart: each gets the wait
                waited = time.perf_counter_ns() - started
                wait_stats.add_(waited * (torch.tensor(recv_counts) > 0).to(wait_stats.dtype))

        event, hook = self._finisher(f"low_latency_dispatch #{self.serial}", work, unpack, async_finish,
                                     return_recv_hook)
        handle = LowLatencyHandle((src_info, layout_range, n_max, h, num_experts))
        handle.__dict__.update(_buffer_id=self.buffer_id, _serial=self.serial, _topk_idx=topk_idx.clone(),
                               _pairs=torch.stack([tok, kk], 1), _send_counts=send_counts, _counts=counts,
                               _received=received)
        recv = (recv_x, recv_scales) if use_fp8 else recv_x
        return recv, recv_count, handle, event, hook

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
        self.transport.agree("low_latency_combine", dict(facts, serial=self.serial), complaint)
        src_info, _, n_max, h, num_experts = handle
        r_ = self.num_ranks
        data: torch.Tensor = self.slots[self.slot].combine_send if zero_copy else x  # type: ignore[assignment]
        counts = handle._counts
        # rows back to each source rank, in the order it sent them: by local expert, then token
        rows_for = [torch.cat([data[e, b:b + int(counts[e, s])] for e, b in enumerate(_begins(counts)[:, s])])
                    for s in range(r_)]
        fmt = RowFormat([Field("x", torch.bfloat16, h, "payload")])
        send = torch.cat(rows_for) if rows_for else torch.zeros((0, h), dtype=torch.bfloat16)
        send_counts = [len(rws) for rws in rows_for]
        recv_counts = handle._send_counts
        for peer in range(r_):
            stats.record("sent", peer, send_counts[peer], fmt, True)
            stats.record("recv", peer, recv_counts[peer], fmt, True)
        work = self.transport.exchange_rows_async("low_latency_combine", fmt.pack({"x": send}, len(send), x.device),
                                                  send_counts, recv_counts)
        stats.control_bytes = self.transport.take_control_bytes()
        t_, k = topk_idx.shape
        combined = out if out is not None else torch.empty((t_, h), dtype=torch.bfloat16, device=x.device)
        pairs = handle._pairs
        weights = topk_weights.to(torch.float32)

        def unpack(arrived: torch.Tensor) -> None:
            y = fmt.unpack(arrived)["x"].cpu()  # one row per valid (token, k), in the dispatch's send order
            w = weights.cpu()
            acc = torch.zeros((t_, h), dtype=torch.float32)
            for j in range(k):  # top-k order; a product rounded to f32, then the sum (no fused multiply-add)
                sel = pairs[:, 1] == j
                tokens = pairs[sel, 0]
                acc[tokens] = acc[tokens] + y[sel].to(torch.float32) * w[tokens, j:j + 1]
            combined.copy_(acc.to(torch.bfloat16))

        event, hook = self._finisher(f"low_latency_combine #{self.serial}", work, unpack, async_finish,
                                     return_recv_hook)
        return combined, event, hook

    # ------------------------------------------------------------------ buffers

    def next_combine_buffer(self, handle: Any) -> torch.Tensor:
        """The BF16 [local experts, num_max * ranks, hidden] buffer the next combine sends from (zero_copy)."""
        if not isinstance(handle, LowLatencyHandle) or handle._buffer_id != self.buffer_id:
            raise ValueError("get_next_low_latency_combine_buffer: the handle is not one that "
                             "low_latency_dispatch of this Buffer returned")
        _, _, n_max, h, num_experts = handle
        shape = (num_experts // self.num_ranks, n_max * self.num_ranks, h)
        slot = self.slots[self.slot]
        if slot.combine_send is None or tuple(slot.combine_send.shape) != shape:
            slot.combine_send = torch.zeros(shape, dtype=torch.bfloat16)
        return slot.combine_send

    def clean(self, n_max: int, hidden: int, num_experts: int) -> None:
        """Forget both buffers' contents (DeepEP zeroes its signalling words); refused while a receive waits."""
        pending = [s.pending for s in self.slots if s.pending]
        complaint = self._size_complaint(n_max, hidden, num_experts)
        if pending:
            complaint = (f"clean_low_latency_buffer while {' and '.join(pending)} still wait for their receive "
                         "hook: call it first")
        self.transport.agree("clean_low_latency_buffer", {"num_max": n_max, "hidden": hidden,
                                                          "num_experts": num_experts}, complaint)
        for s in self.slots:
            s.combine_send = None


def _begins(counts: torch.Tensor) -> torch.Tensor:
    """[E, R] first row of each (local expert, source rank) block."""
    return torch.cumsum(counts, 1) - counts


def _no_hook() -> None:
    """The hook of a call made without return_recv_hook: the data has been received (or the event will)."""


class _Receive(Completion):
    """The pending receive behind an `EventOverlap` of an async_finish call: the first `wait()` receives the
    data (an error is raised again at every later wait); `work` is what it waits on."""

    def __init__(self, call: str, receive: Callable[[], None], work: Pending) -> None:
        super().__init__(call, receive)
        self.work = work
