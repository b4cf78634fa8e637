"""The interface behind `Buffer`: what a backend does for each call, once the call's input has been checked and
agreed by every rank (`Buffer` does that, and keeps the stats and serial numbers); a backend moves the rows.

A backend lacking low-latency mode says why in `low_latency_missing` (Buffer raises it as NotImplementedError
when `low_latency_mode=True` asks for it); one that has it returns its `LowLatencyOps` from `low_latency()`.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, ClassVar, Protocol, TypeAlias

import torch
import torch.distributed as dist

from ptxforge.ep.config import Completion, EventOverlap
from ptxforge.ep.errors import EPInputError

if TYPE_CHECKING:
    from ptxforge.ep.config import Config
    from ptxforge.ep.handle import DispatchHandle
    from ptxforge.ep.stats import CallStats
    from ptxforge.ep.transport import Transport

# dispatch's x: BF16 rows, or FP8 rows with their scales; get_dispatch_layout's, dispatch's and combine's results
Payload: TypeAlias = "torch.Tensor | tuple[torch.Tensor, torch.Tensor]"
Received: TypeAlias = "torch.Tensor | tuple[torch.Tensor, torch.Tensor | None]"  # like x: scales when x had them
Layout: TypeAlias = "tuple[torch.Tensor, torch.Tensor | None, torch.Tensor, torch.Tensor]"
LayoutOutput: TypeAlias = "tuple[torch.Tensor, torch.Tensor | None, torch.Tensor, torch.Tensor, EventOverlap]"
DispatchOutput: TypeAlias = ("tuple[Received, torch.Tensor | None, torch.Tensor | None, list[int] | None, "
                             "DispatchHandle | None, EventOverlap]")
CombineOutput: TypeAlias = "tuple[torch.Tensor, torch.Tensor | None, EventOverlap]"
Bias: TypeAlias = "torch.Tensor | tuple[torch.Tensor | None, ...] | None"

NO_KERNELS_YET = ("Buffer.{what}: no dispatch or combine has run the communication kernels yet "
                  "(backend='kernels' on one node)")


@dataclass(frozen=True)
class EPGroup:
    """The facts of a Buffer's group that every backend reads."""

    transport: Transport
    group: dist.ProcessGroup | None
    rank: int
    size: int
    ranks_per_node: int
    buffer_id: int

    @property
    def num_nodes(self) -> int:
        return self.size // self.ranks_per_node

    def node_of(self, rank: int) -> int:
        return rank // self.ranks_per_node


@dataclass
class DispatchCall:
    """One dispatch, checked and agreed: x split into payload and scales; `config` resolved (the call's, else
    the recommended one); `in_rank` / `per_expert` None when the caller gave only topk_idx."""

    x: torch.Tensor
    scales: torch.Tensor | None
    handle: DispatchHandle | None
    in_rank: torch.Tensor | None
    per_expert: torch.Tensor | None
    topk_idx: torch.Tensor | None
    topk_weights: torch.Tensor | None
    num_experts: int
    expert_alignment: int
    num_worst_tokens: int
    config: Config
    async_finish: bool
    previous_event: EventOverlap | None = None  # already waited for, unless the backend orders it itself


@dataclass
class CombineCall:
    """One combine, checked and agreed (`config` resolved; the handle's dispatch has ended)."""

    x: torch.Tensor
    handle: DispatchHandle
    topk_weights: torch.Tensor | None
    bias: Bias
    config: Config
    async_finish: bool
    previous_event: EventOverlap | None = None


class LowLatencyOps(Protocol):
    """A backend's low-latency calls (ptxforge.ep.low_latency.LowLatency is the torch transport's)."""

    def dispatch(self, x: Any, topk_idx: Any, n_max: Any, num_experts: Any, stats_out: torch.Tensor | None,
                 wait_stats: torch.Tensor | None, use_fp8: bool, round_scale: bool, use_ue8m0: bool,
                 async_finish: bool, return_recv_hook: bool, stats: CallStats) -> tuple: ...

    def combine(self, x: Any, topk_idx: Any, topk_weights: Any, handle: Any, use_logfmt: bool, zero_copy: bool,
                async_finish: bool, return_recv_hook: bool, out: Any, stats: CallStats) -> tuple: ...

    def next_combine_buffer(self, handle: Any) -> torch.Tensor: ...

    def clean(self, n_max: int, hidden: int, num_experts: int) -> None: ...


class Backend(ABC):
    """How one Buffer moves rows (normal mode, and low-latency mode where it has one)."""

    name: ClassVar[str]
    low_latency_missing: ClassVar[str | None] = None  # why low-latency mode is absent (None: it is there)
    # whether an async call whose result sizes are known ahead may run whole on the Buffer's communication
    # thread (ep/comm_thread.py): the torch transport's calls are host work; the kernels queue on a device worker
    runs_on_comm_thread: ClassVar[bool] = False

    def __init__(self, group: EPGroup) -> None:
        self.group = group

    @abstractmethod
    def layout(self, topk_idx: torch.Tensor, num_experts: int) -> Layout:
        """(tokens per rank, per node or None, per expert, is_token_in_rank) of `topk_idx`."""

    @abstractmethod
    def dispatch(self, call: DispatchCall, stats: CallStats) -> DispatchOutput:
        """Buffer.dispatch's results; `stats` is the call's record (its serial numbers the handle)."""

    @abstractmethod
    def combine(self, call: CombineCall, stats: CallStats) -> CombineOutput:
        """Buffer.combine's results."""

    def order_after(self, previous_event: EventOverlap | None) -> None:
        """DeepEP's `previous_event`: the next call's work starts after that event's work has ended (here: the
        caller waits for it now; a backend with a queue of its own may order it there instead)."""
        if previous_event is not None:
            previous_event.current_stream_wait()

    def wait_for_handle(self, handle: DispatchHandle) -> None:
        """Before a combine or cached dispatch reads `handle`: wait for the dispatch that made it to fill it."""
        wait_dispatch_of(handle)

    def low_latency(self, num_rdma_bytes: int) -> LowLatencyOps:
        """This backend's low-latency calls; only asked for when `low_latency_missing` is None."""
        raise NotImplementedError(self.low_latency_missing or f"backend {self.name!r} has no low-latency mode")

    def sm_map(self) -> list[dict]:
        raise RuntimeError(NO_KERNELS_YET.format(what="sm_map"))

    def sm_budget(self) -> dict:
        raise RuntimeError(NO_KERNELS_YET.format(what="sm_budget"))

    def close(self) -> None:  # noqa: B027 - not abstract: a backend holding nothing releases nothing
        """Release what the backend holds (Buffer.destroy)."""


def event_for(call: str, finish: Any, async_finish: bool, keep: tuple) -> EventOverlap:
    """A call's event: its pending work `finish` run now (a synchronous call) or at the event's first wait,
    `keep` (its inputs) alive until then."""
    done = Completion(call, finish)
    if not async_finish:
        done.wait()
        return EventOverlap()
    return EventOverlap(done, extra_tensors=keep)


def wait_dispatch_of(handle: DispatchHandle) -> None:
    """Wait for the dispatch that made `handle` (combine and cached dispatch read what it received)."""
    pending = handle.__dict__.get("_pending")
    if pending is not None:
        pending.wait()


def kernel_dispatch_inputs(call: DispatchCall, layout: Callable[[torch.Tensor, int], Layout],
                           tunables: Callable[[Any], Any]) -> tuple[Any, Any, Any, Any, Any]:
    """(is_token_in_rank, per_expert, topk_idx, topk_weights, tunables) a kernels dispatch runs with: a cached
    dispatch takes the handle's (and sends no top-k), a fresh one the call's (the layout computed if missing)."""
    in_rank, per_expert = call.in_rank, call.per_expert
    topk_idx, topk_weights = call.topk_idx, call.topk_weights
    if call.handle is not None:
        return call.handle.is_token_in_rank, per_expert, None, None, call.handle._tunables
    if in_rank is None or per_expert is None:
        _, _, per_expert, in_rank = layout(topk_idx, call.num_experts)  # type: ignore[arg-type]
    return in_rank, per_expert, topk_idx, topk_weights if topk_idx is not None else None, tunables(call.config)


def check_worst(matrix: torch.Tensor, num_worst_tokens: int) -> None:
    """`num_worst_tokens` must hold what each rank receives (`matrix[src, dst]`: every rank sees all of it,
    so every rank raises the same error)."""
    if num_worst_tokens:
        over = [f"rank {r} receives {n}" for r, n in enumerate(matrix.sum(0).tolist()) if n > num_worst_tokens]
        if over:
            raise EPInputError(f"ptxforge.ep dispatch: num_worst_tokens={num_worst_tokens} is too small: "
                               + ", ".join(over))
