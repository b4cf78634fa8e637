"""`Buffer`: DeepEP's expert-parallel API over torch.distributed (see the package docstring).

Buffer checks each call's input, agrees on it with every rank (so bad input raises on all of them before any
data moves), keeps the call's record (`stats()`), and hands the call to its backend (`ptxforge.ep.backends`),
which moves the rows.

With backend="torch", an `async_finish=True` call whose results' sizes are known without asking the other ranks
(a combine; a cached dispatch; a dispatch given `num_worst_tokens`, as DeepEP does without a CPU sync) runs
whole on the Buffer's communication thread (`ptxforge.ep.comm_thread`): its results are allocated at once and
filled there, and its errors (bad input on any rank, a timeout, a lost peer) are raised at the event's wait.
"""

from __future__ import annotations

import itertools
from typing import TYPE_CHECKING, Any

import torch
import torch.distributed as dist

from ptxforge import environment
from ptxforge.ep.backends import Backend, CombineCall, DispatchCall, EPGroup, LowLatencyOps, backend_class
from ptxforge.ep.backends.base import Bias, DispatchOutput, LayoutOutput, Payload, Received
from ptxforge.ep.backends.torch_transport import _rank_bits, _rank_unbits  # noqa: F401 - tests import them here
from ptxforge.ep.comm_thread import CommThread, Job
from ptxforge.ep.config import COMBINE_CONFIGS, DISPATCH_CONFIGS, Config, EventOverlap, recommended
from ptxforge.ep.errors import EPInputError
from ptxforge.ep.handle import DispatchHandle
from ptxforge.ep.low_latency import LowLatencyHandle, rdma_size_hint
from ptxforge.ep.stats import CallStats
from ptxforge.ep.transport import Transport
from ptxforge.ep.validate import check_combine, check_dispatch, check_layout

if TYPE_CHECKING:
    from ptxforge.ep.intranode import CommRank

__all__ = ["Buffer", "DispatchHandle", "DispatchOutput", "LayoutOutput", "Payload", "Received"]

_buffer_ids = itertools.count(1)
MAX_STATS = 1000


class Buffer:
    """Expert-parallel dispatch and combine for the ranks of `group` (DeepEP V1 normal and low-latency mode).

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
        kind = backend_class(backend)
        if low_latency_mode and kind.low_latency_missing:
            raise NotImplementedError(kind.low_latency_missing)
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
        self._thread: CommThread | None = None  # started by the first call it can run whole (module docstring)
        self._backend: Backend = kind(EPGroup(self.transport, group, self.rank, self.group_size,
                                              num_ranks_per_node, self.id))
        self.low_latency_mode, self.num_qps_per_rank = bool(low_latency_mode), int(num_qps_per_rank)
        self._ll: LowLatencyOps | None = self._backend.low_latency(self.num_rdma_bytes) if low_latency_mode \
            else None
        self.transport.agree("Buffer()", {"num_ranks_per_node": num_ranks_per_node, "buffer_number": self.id,
                                          "low_latency_mode": int(self.low_latency_mode)})

    # ------------------------------------------------------------------ DeepEP's small API

    def destroy(self) -> None:
        if self._thread is not None:
            self._thread.close()
            self._thread = None
        self._stats.clear()
        self._backend.close()

    def sm_map(self) -> list[dict]:
        """backend="kernels" on the emulator: for each kernel of this rank's last dispatch and last combine,
        per block the SM it ran on, its role (notify, sender, receiver), channel and thread-instructions."""
        return self._backend.sm_map()

    def sm_budget(self) -> dict:
        """backend="kernels": how this rank's last communication kernels were held to `num_sms` SMs:
        {"num_sms", "how", "sms", "why"} with "how" one of "green context" (a CUDA GPU whose driver has
        them; "sms" is what the green context got, the driver's granularity rounding num_sms up),
        "persistent grid" (a grid of num_sms persistent blocks, the only budget; on a GPU "why" says why no
        green context) or "SM partition" (an emulated node's stream on SMs 0..num_sms-1)."""
        return self._backend.sm_budget()

    @property
    def _comm_rank(self) -> CommRank | None:
        """backend="kernels": this rank's side of the communication kernels (None before the first call)."""
        return getattr(self._backend, "comm_rank", None)

    def _comm(self, like: torch.Tensor | None = None) -> CommRank:
        """backend="kernels": this rank's `CommRank`, made at the first call (tests drive it directly)."""
        return self._backend.comm(like)  # type: ignore[attr-defined]  # a KernelsBackend's

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
        if self._thread is not None:
            self._thread.drain()
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
        if self._thread is not None:
            return self._thread.run("get_dispatch_layout", lambda: self._layout_now(  # type: ignore[return-value]
                topk_idx, num_experts, previous_event))
        return self._layout_now(topk_idx, num_experts, previous_event)

    def _layout_now(self, topk_idx: torch.Tensor, num_experts: int,
                    previous_event: EventOverlap | None) -> LayoutOutput:
        if previous_event is not None:
            previous_event.current_stream_wait()  # the layout is computed here, on the caller's thread
        complaint = check_layout(topk_idx, num_experts, self.group_size)
        if not complaint:
            self._last_num_experts = int(num_experts)
        self.transport.agree("get_dispatch_layout", {"num_experts": -1 if complaint else int(num_experts)},
                             complaint)
        return (*self._backend.layout(topk_idx, int(num_experts)), EventOverlap())

    # ------------------------------------------------------------------ dispatch

    def dispatch(self, x: Payload, handle: DispatchHandle | None = None,
                 num_tokens_per_rank: torch.Tensor | None = None, num_tokens_per_rdma_rank: torch.Tensor | None = None,
                 is_token_in_rank: torch.Tensor | None = None, num_tokens_per_expert: torch.Tensor | None = None,
                 topk_idx: torch.Tensor | None = None, topk_weights: torch.Tensor | None = None,
                 expert_alignment: int = 1, num_worst_tokens: int = 0, config: Config | None = None,
                 previous_event: EventOverlap | None = None, async_finish: bool = False,
                 allocate_on_comm_stream: bool = False) -> DispatchOutput:
        """(recv_x, recv_topk_idx, recv_topk_weights, num_recv_tokens_per_expert_list, handle, event)."""
        args = (x, handle, num_tokens_per_rank, num_tokens_per_rdma_rank, is_token_in_rank, num_tokens_per_expert,
                topk_idx, topk_weights, expert_alignment, num_worst_tokens, config, previous_event, async_finish)
        if async_finish and self._deferrable_dispatch(x, handle, topk_idx, num_worst_tokens):
            return self._deferred_dispatch(args)
        if self._thread is not None:
            return self._thread.run("dispatch", lambda: self._dispatch_now(*args))  # type: ignore[return-value]
        return self._dispatch_now(*args)

    def _dispatch_now(self, x: Payload, handle: DispatchHandle | None, num_tokens_per_rank: torch.Tensor | None,
                      num_tokens_per_rdma_rank: torch.Tensor | None, is_token_in_rank: torch.Tensor | None,
                      num_tokens_per_expert: torch.Tensor | None, topk_idx: torch.Tensor | None,
                      topk_weights: torch.Tensor | None, expert_alignment: int, num_worst_tokens: int,
                      config: Config | None, previous_event: EventOverlap | None,
                      async_finish: bool) -> DispatchOutput:
        self._backend.order_after(previous_event)
        if isinstance(handle, DispatchHandle):
            self._backend.wait_for_handle(handle)
        chk = check_dispatch(self, x, handle, num_tokens_per_rank, num_tokens_per_rdma_rank, is_token_in_rank,
                             num_tokens_per_expert, topk_idx, topk_weights, expert_alignment, num_worst_tokens,
                             config)
        self.transport.agree("dispatch", dict(chk.facts, serial=self._serial + 1), chk.complaint)
        stats = self._next("dispatch", chk.form)
        x_payload, x_scales = x if isinstance(x, tuple | list) else (x, None)
        call = DispatchCall(x_payload, x_scales, handle, is_token_in_rank, num_tokens_per_expert, topk_idx,
                            topk_weights, chk.facts["num_experts"], expert_alignment, num_worst_tokens,
                            config or self.get_dispatch_config(self.group_size), async_finish, previous_event)
        return self._backend.dispatch(call, stats)

    # ------------------------------------------------------------------ combine

    def combine(self, x: torch.Tensor, handle: DispatchHandle, topk_weights: torch.Tensor | None = None,
                bias: Bias = None, config: Config | None = None,
                previous_event: EventOverlap | None = None, async_finish: bool = False,
                allocate_on_comm_stream: bool = False) -> tuple[torch.Tensor, torch.Tensor | None, EventOverlap]:
        """(combined_x bf16 [T, H], combined_topk_weights f32 [T, K] or None, event): each token's copies
        summed in f32 in rank order (across nodes: per node first, sent back as BF16, then over nodes)."""
        args = (x, handle, topk_weights, bias, config, previous_event, async_finish)
        if async_finish and self._deferrable_combine(x, handle, topk_weights):
            return self._deferred_combine(args)
        if self._thread is not None:
            return self._thread.run("combine", lambda: self._combine_now(*args))  # type: ignore[return-value]
        return self._combine_now(*args)

    def _combine_now(self, x: torch.Tensor, handle: DispatchHandle, topk_weights: torch.Tensor | None, bias: Bias,
                     config: Config | None, previous_event: EventOverlap | None,
                     async_finish: bool) -> tuple[torch.Tensor, torch.Tensor | None, EventOverlap]:
        self._backend.order_after(previous_event)
        if isinstance(handle, DispatchHandle):
            self._backend.wait_for_handle(handle)
        complaint, facts = check_combine(self, x, handle, topk_weights, bias)
        self.transport.agree("combine", dict(facts, serial=self._serial + 1), complaint)
        stats = self._next("combine", "bf16")
        call = CombineCall(x, handle, topk_weights, bias, config or self.get_combine_config(self.group_size),
                           async_finish, previous_event)
        return self._backend.combine(call, stats)

    # ------------------------------------------------------------------ calls run whole on the comm thread

    def _start_thread(self) -> CommThread:
        if self._thread is None:
            self._thread = CommThread(f"ptxforge.ep buffer {self.id}", self.transport.timeout_s)
        return self._thread

    def _deferrable_dispatch(self, x: object, handle: object, topk_idx: object, num_worst_tokens: int) -> bool:
        """Whether this async dispatch's results can be sized here (else it runs as a synchronous-sized call)."""
        if not self._backend.runs_on_comm_thread or not _rows(x):
            return False
        if isinstance(handle, DispatchHandle):
            self._backend.wait_for_handle(handle)  # a cached dispatch returns as many rows as the first received
            return getattr(handle, "_num_recv", None) is not None
        return handle is None and isinstance(topk_idx, torch.Tensor) and topk_idx.dim() == 2 and num_worst_tokens > 0

    def _deferrable_combine(self, x: object, handle: object, topk_weights: object) -> bool:
        return (self._backend.runs_on_comm_thread and isinstance(x, torch.Tensor) and x.dim() == 2
                and isinstance(handle, DispatchHandle) and getattr(handle, "_num_tokens", None) is not None
                and (topk_weights is None or isinstance(topk_weights, torch.Tensor) and topk_weights.dim() == 2))

    def _deferred_dispatch(self, args: tuple[Any, ...]) -> DispatchOutput:
        x, handle, topk_idx, topk_weights, num_worst, config, previous = (args[0], args[1], args[6], args[7],
                                                                          args[9], args[10], args[11])
        payload, scales = x if isinstance(x, tuple | list) else (x, None)
        cached = handle is not None
        size = handle._num_recv if cached else num_worst
        recv_x = torch.zeros((size, payload.shape[1]), dtype=payload.dtype, device=payload.device)
        recv_scales = None if scales is None else torch.zeros((size, scales.shape[1]), dtype=scales.dtype,
                                                              device=payload.device)
        recv_idx = recv_w = made = None
        if not cached:
            t_, r_, k = payload.shape[0], self.group_size, topk_idx.shape[1]
            recv_idx = torch.full((size, k), -1, dtype=torch.int64, device=payload.device)
            if topk_weights is not None:
                recv_w = torch.zeros((size, k), dtype=torch.float32, device=payload.device)
            c = (config or self.get_dispatch_config(r_)).num_channels
            i32 = torch.int32
            made = DispatchHandle((torch.zeros((r_, r_), dtype=i32), torch.zeros((r_, c), dtype=i32),
                                   torch.zeros((r_, c), dtype=i32), torch.zeros(0, dtype=i32),  # resized below
                                   torch.zeros((t_, r_), dtype=torch.bool), torch.full((t_, r_), -1, dtype=i32)),
                                  _num_tokens=t_, _num_worst=num_worst, _buffer_id=self.id)

        def work() -> None:
            rx, ridx, rw, _, h, _ = self._dispatch_now(*(*args[:11], None, False))
            got_x, got_scales = rx if isinstance(rx, tuple | list) else (rx, None)
            _fill(recv_x, got_x)
            if recv_scales is not None and got_scales is not None:
                _fill(recv_scales, got_scales)
            if made is not None and h is not None:
                for mine, theirs in zip((recv_idx, recv_w), (ridx, rw), strict=True):
                    if mine is not None and theirs is not None:
                        _fill(mine, theirs)
                made.recv_src_idx.resize_(h.recv_src_idx.shape)  # a row per received row, as the call made it
                for mine, theirs in zip(made, h, strict=True):
                    _fill(mine, theirs)
                made.__dict__.update({k: v for k, v in h.__dict__.items() if k != "_pending"})

        self._order_first(previous)
        job = self._start_thread().submit("dispatch", work)
        if made is not None:
            made._pending = job
        recv = (recv_x, recv_scales) if recv_scales is not None else recv_x
        return recv, recv_idx, recv_w, None if cached else [], made, EventOverlap(job, (x, topk_idx, topk_weights))

    def _deferred_combine(self, args: tuple[Any, ...]) -> tuple[torch.Tensor, torch.Tensor | None, EventOverlap]:
        x, handle, topk_weights, previous = args[0], args[1], args[2], args[5]
        combined = torch.zeros((handle._num_tokens, x.shape[1]), dtype=torch.bfloat16, device=x.device)
        combined_w = None if topk_weights is None else torch.zeros((handle._num_tokens, topk_weights.shape[1]),
                                                                   dtype=torch.float32, device=x.device)

        def work() -> None:
            got, got_w, _ = self._combine_now(*(*args[:5], None, False))
            combined.copy_(got)
            if combined_w is not None and got_w is not None:
                combined_w.copy_(got_w)

        self._order_first(previous)
        job = self._start_thread().submit("combine", work)
        return combined, combined_w, EventOverlap(job, (x, topk_weights, args[3]))

    def _order_first(self, previous: EventOverlap | None) -> None:
        """`previous_event`: work queued on the thread is ordered by the queue; other work is waited for here."""
        if previous is not None and _queued(previous) is not None:
            previous.current_stream_wait()

    # ------------------------------------------------------------------ low-latency mode

    @staticmethod
    def get_low_latency_rdma_size_hint(num_max_dispatch_tokens_per_rank: int, hidden: int, num_ranks: int,
                                       num_experts: int) -> int:
        """The num_rdma_bytes low-latency mode needs (DeepEP's layout: two buffers of each kind)."""
        return rdma_size_hint(num_max_dispatch_tokens_per_rank, hidden, num_ranks, num_experts)

    def _low_latency(self, call: str) -> LowLatencyOps:
        if self._thread is not None:
            self._thread.drain()  # the normal-mode calls queued before, then this one on the caller's thread
        if self._ll is None:
            raise EPInputError(f"ptxforge.ep {call}: this Buffer was made without low_latency_mode=True")
        return self._ll

    def low_latency_dispatch(self, x: torch.Tensor, topk_idx: torch.Tensor, num_max_dispatch_tokens_per_rank: int,
                             num_experts: int, cumulative_local_expert_recv_stats: torch.Tensor | None = None,
                             dispatch_wait_recv_cost_stats: torch.Tensor | None = None, use_fp8: bool = True,
                             round_scale: bool = False, use_ue8m0: bool = False, async_finish: bool = False,
                             return_recv_hook: bool = False) -> tuple:
        """(recv_x, recv_count, handle, event, hook): every (token, expert) pair straight to its expert's rows
        of recv_x [local experts, num_max * ranks, hidden] (FP8 with column-major scales, or BF16)."""
        ll = self._low_latency("low_latency_dispatch")
        form = "bf16" if not use_fp8 else "fp8-ue8m0" if use_ue8m0 else "fp8"
        return ll.dispatch(x, topk_idx, num_max_dispatch_tokens_per_rank, num_experts,
                           cumulative_local_expert_recv_stats, dispatch_wait_recv_cost_stats, use_fp8, round_scale,
                           use_ue8m0, async_finish, return_recv_hook, self._next("low_latency_dispatch", form))

    def low_latency_combine(self, x: torch.Tensor, topk_idx: torch.Tensor, topk_weights: torch.Tensor,
                            handle: LowLatencyHandle, use_logfmt: bool = False, zero_copy: bool = False,
                            async_finish: bool = False, return_recv_hook: bool = False,
                            out: torch.Tensor | None = None,
                            combine_wait_recv_cost_stats: torch.Tensor | None = None) -> tuple:
        """(combined_x bf16 [T, H], event, hook): each token's expert outputs summed with its weights in f32."""
        ll = self._low_latency("low_latency_combine")
        return ll.combine(x, topk_idx, topk_weights, handle, use_logfmt, zero_copy, async_finish, return_recv_hook,
                          out, self._next("low_latency_combine", "bf16"))

    def get_next_low_latency_combine_buffer(self, handle: LowLatencyHandle) -> torch.Tensor:
        return self._low_latency("get_next_low_latency_combine_buffer").next_combine_buffer(handle)

    def clean_low_latency_buffer(self, num_max_dispatch_tokens_per_rank: int, hidden: int, num_experts: int) -> None:
        self._low_latency("clean_low_latency_buffer").clean(num_max_dispatch_tokens_per_rank, hidden, num_experts)


def _rows(x: object) -> bool:
    """x is dispatch's rows: a 2-D tensor, or (2-D payload, 2-D scales)."""
    parts = x if isinstance(x, tuple | list) else (x,)
    return 1 <= len(parts) <= 2 and all(isinstance(t, torch.Tensor) and t.dim() == 2 for t in parts)


def _queued(event: EventOverlap | None) -> EventOverlap | None:
    """`event` unless its work is a job on a communication thread (which the queue orders)."""
    return None if event is None or isinstance(event.event, Job) else event


def _fill(mine: torch.Tensor, theirs: torch.Tensor) -> None:
    mine[:theirs.shape[0]].copy_(theirs)
