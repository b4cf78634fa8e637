"""Executor: runs one rank's op list from `ptxforge.pipeline.schedules` on real modules over torch.distributed.

`DualPipe` and `DualPipeV` are drop-in replacements for deepseek-ai/DualPipe's classes (same constructor,
`step()` and `overlapped_forward_backward` hook, deferred W through `WeightGradStore`); `OneFOneB` and
`ZeroBubbleH1` run the classic schedules on one stage per rank with the same machinery, as baselines.
The op list the executor runs is exactly the one `check()` proves deadlock-free and `simulate()` times.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

import torch
import torch.distributed as dist
import torch.nn as nn

from ptxforge.pipeline import comm
from ptxforge.pipeline.arrival import Arrivals, resolve_timeout
from ptxforge.pipeline.engine import run
from ptxforge.pipeline.ops import FB, RECV_B, RECV_F, SEND_B, SEND_F, B, F, Op, Schedule, W
from ptxforge.pipeline.schedules import dualpipe, dualpipev, one_f_one_b, zb1p
from ptxforge.pipeline.step_check import Abort, PeerFailed, PeerLost, StepArgumentError, agree, describe
from ptxforge.pipeline.weight_grad import WeightGradStore, run_backward
from ptxforge.processes import connection_lost

__all__ = ["DualPipe", "DualPipeV", "OneFOneB", "ZeroBubbleH1", "PipelineExecutor"]


def _as_list(x) -> list[torch.Tensor]:
    return [x] if isinstance(x, torch.Tensor) else list(x)


def _scatter(inputs, chunks: int, dim: int) -> list[tuple]:
    if isinstance(inputs, torch.Tensor):
        inputs = (inputs,)
    for x in inputs:
        if x is not None and not isinstance(x, torch.Tensor):
            raise TypeError(f"pipeline inputs/labels must be tensors or None, got {type(x).__name__}")
    split = [[None] * chunks if x is None else list(x.tensor_split(chunks, dim=dim)) for x in inputs]
    mbs = list(zip(*split, strict=True))
    return mbs if mbs else [() for _ in range(chunks)]


def _gather(micro_outputs: list[list[torch.Tensor]], dim: int):
    cols = list(zip(*micro_outputs, strict=True))
    out: list[torch.Tensor | None] = []
    for col in cols:
        if col[0] is None:
            out.append(None)
        else:
            out.append(col[0] if len(col) == 1 else torch.cat(col, dim=dim))
    return out[0] if len(out) == 1 else tuple(out)


def _as_tuple(x) -> tuple:
    return (x,) if isinstance(x, torch.Tensor) or x is None else tuple(x)


def _split_problems(what: str, xs, chunks: int, dim: int) -> list[str]:
    """Why `xs` cannot be cut into `chunks` equal micro-batches along `dim` (the p2p shapes are per micro-batch)."""
    out = []
    for j, x in enumerate(_as_tuple(xs)):
        if x is None:
            continue
        if not isinstance(x, torch.Tensor):
            out.append(f"{what} {j} is a {type(x).__name__}, not a tensor or None")
        elif x.dim() <= dim or x.shape[dim] < chunks or x.shape[dim] % chunks:
            size = x.shape[dim] if x.dim() > dim else "no such dimension"
            out.append(f"{what} {j} of shape {tuple(x.shape)} does not split into {chunks} equal micro-batches "
                       f"along dimension {dim} (size {size})")
    return out


def _device_of(module: nn.Module) -> torch.device:
    for t in list(module.parameters()) + list(module.buffers()):
        return t.device
    return torch.device("cpu")


class PipelineExecutor(nn.Module):
    """Runs `schedule_fn(num_ranks, num_chunks)`'s op list for this rank over `process_group`."""

    schedule_fn: Callable[[int, int], Schedule]
    modules_per_rank = 2
    _made: dict[tuple[int, ...], int] = {}

    def __init__(self, modules: Any, batch_dim: int = 0, process_group: dist.ProcessGroup | None = None,
                 rank_mapping: list[int] | None = None, *, timeout_s: float | None = None) -> None:
        """`timeout_s` bounds every wait of a step (every rank calling step(), each batch of messages, the
        end of the step): past it a `StepTimeout` names the ranks waited for. None: $PTXFORGE_PIPELINE_TIMEOUT_S,
        else 300 s."""
        super().__init__()
        self.timeout_s = resolve_timeout(timeout_s)
        if self.modules_per_rank == 1 and isinstance(modules, nn.Module):
            modules = (modules,)  # one stage, even if it is an nn.Sequential
        modules = tuple(modules)
        if len(modules) != self.modules_per_rank or not all(isinstance(m, nn.Module) for m in modules):
            raise ValueError(f"{type(self).__name__} takes {self.modules_per_rank} stage module(s) per rank, "
                             f"got {len(modules)}")
        self.module = nn.ModuleList(modules)
        self.device = _device_of(modules[0])
        self.overlapped_forward_backward = (len(modules) == 2 and type(modules[0]) is type(modules[1])
                                            and hasattr(type(modules[0]), "overlapped_forward_backward"))
        self.batch_dim = batch_dim
        if not dist.is_initialized():
            raise RuntimeError("torch.distributed is not initialized: call dist.init_process_group(...) first")
        self.group = process_group or dist.distributed_c10d._get_default_group()
        self.num_ranks = self.group.size()
        comm.check_backend(self.group, self.device)
        if rank_mapping is None:
            rank_mapping = list(range(self.num_ranks))
        if sorted(rank_mapping) != list(range(self.num_ranks)):
            raise ValueError(f"rank_mapping must be a permutation of 0..{self.num_ranks - 1}, got {rank_mapping}")
        self.rank_mapping = list(rank_mapping)
        self._pp_to_group = [0] * self.num_ranks
        for g, pp in enumerate(rank_mapping):
            self._pp_to_group[pp] = g
        self.rank = rank_mapping[self.group.rank()]
        self.is_first_rank = self.rank == 0
        self.is_last_rank = self.rank == self.num_ranks - 1
        self._schedules: dict[tuple[int, bool], Schedule] = {}
        ranks = tuple(dist.get_process_group_ranks(self.group))
        ordinal = PipelineExecutor._made.get(ranks, 0)  # executors on a group are made in the same order on each rank
        PipelineExecutor._made[ranks] = ordinal + 1
        self._abort = Abort(f"{'-'.join(map(str, ranks))}/{ordinal}")
        self._ordinal = ordinal
        self._arrivals = Arrivals(self._abort.store, "-".join(map(str, ranks)), self.group.rank(), self.num_ranks)
        self._steps = 0
        # set to a list to record (op, start, end, cpu) of every compute op of the next steps: wall-clock
        # perf_counter times and the thread's CPU seconds
        self.trace: list[tuple[Op, float, float, float]] | None = None
        self.p2p_waits: list[tuple[float, float]] = []  # with a trace: each commit of p2p messages (start, end)

    # ------------------------------------------------------------------ helpers
    def _schedule(self, num_chunks: int, forward_only: bool) -> Schedule:
        key = (num_chunks, forward_only)
        if key not in self._schedules:
            s = type(self).schedule_fn(self.num_ranks, num_chunks)
            s = s.forward_only() if forward_only else s
            run(s)  # proves the op lists deadlock-free before any message is sent (cached per size)
            self._schedules[key] = s
        return self._schedules[key]

    def _global(self, pp_rank: int) -> int:
        return dist.get_global_rank(self.group, self._pp_to_group[pp_rank])

    def _loc(self, m: int):
        return (self.rank, m)

    # ------------------------------------------------------------------ step
    def step(self, *inputs: torch.Tensor | None, num_chunks: int = 0, criterion: Callable | None = None,
             labels: list[torch.Tensor | None] | tuple = (), return_outputs: bool = False) -> tuple[Any, Any]:
        """Run one training step (or an inference step under torch.no_grad()).

        Inputs go to the rank(s) holding a first stage, labels and criterion to the rank(s) holding a last stage;
        `criterion(*outputs, *labels)` is evaluated per micro-batch. Returns (loss, outputs) on ranks holding a
        last stage (loss stacked per micro-batch, outputs concatenated along batch_dim if return_outputs),
        (None, None) elsewhere.
        """
        self.forward_only = not torch.is_grad_enabled()
        self.return_outputs = return_outputs
        sched, first, last = self._agree(inputs, num_chunks, criterion, labels)
        pl = sched.placement
        self._steps += 1
        self._reset()
        for m in first:
            self.inputs[m] = {i: list(mb) for i, mb in enumerate(_scatter(inputs, pl.streams[self._loc(m)],
                                                                          self.batch_dim))}
        for m in last:
            self.labels[m] = _scatter(labels, pl.streams[self._loc(m)], self.batch_dim)
        self.criterion = criterion
        try:
            self._abort.check()
            for op in sched.rank_ops(self.rank):
                if op.kind in (SEND_F, RECV_F, SEND_B, RECV_B):
                    self._queue(op)
                else:
                    self._commit()
                    if self.trace is None:
                        self._compute(op, pl)
                    else:
                        t0, c0 = time.perf_counter(), time.thread_time()
                        self._compute(op, pl)
                        self.trace.append((op, t0, time.perf_counter(), time.thread_time() - c0))
            self._commit()
            if not WeightGradStore.funcs_queue.empty():
                raise RuntimeError("deferred weight gradients left after the step")
            # a rank that failed after its last message fails us all
            self._abort.finish(self._steps, self.num_ranks, self.timeout_s)
            loss = outputs = None
            if last:
                m = last[0]
                if criterion is not None:
                    loss = torch.stack([self.losses[m][i] for i in range(len(self.losses[m]))])
                if return_outputs:
                    n = pl.streams[self._loc(m)]
                    outputs = _gather([self.outputs[m][i] for i in range(n)], self.batch_dim)
            return loss, outputs
        except BaseException as e:
            if not isinstance(e, PeerFailed) or isinstance(e, PeerLost):
                self._abort.signal(self.rank, e)  # the ranks waiting for this one raise within a moment
            raise
        finally:
            self._reset()

    def _agree(self, inputs, num_chunks: int, criterion, labels):
        """(schedule, first-stage modules, last-stage modules), once every rank's arguments were checked
        against the others' in one collective; otherwise StepArgumentError on every rank."""
        what = f"step {self._steps + 1} of {type(self).__name__} #{self._ordinal} on this group"
        self._arrivals.arrive(what, self.timeout_s, self._abort)
        problems: list[str] = []
        try:
            comm.require_configured()
        except RuntimeError as e:
            problems.append(str(e))
        sched, first, last, error = None, [], [], None
        try:
            sched = self._schedule(num_chunks, self.forward_only)
        except (ValueError, TypeError) as e:
            problems.append(str(e))
            error = e
        mine: dict = {"the executor called (its class #number on the group)": f"{type(self).__name__} "
                      f"#{self._ordinal}", "the step number": self._steps + 1,
                      "num_chunks": num_chunks, "training or inference": "inference" if self.forward_only else
                      "training", "p2p shapes": comm.TENSOR_SHAPES, "p2p dtype": str(comm.TENSOR_DTYPE)}
        if sched is not None:
            pl = sched.placement
            local = range(pl.modules_per_rank)
            first = [m for m in local if pl.is_first_stage(self._loc(m))]
            last = [m for m in local if pl.is_last_stage(self._loc(m))]
            for m in first:
                mine["the inputs (shape, dtype)"] = [describe(x) for x in _as_tuple(inputs)]
                problems += _split_problems("input", inputs, pl.streams[self._loc(m)], self.batch_dim)
            for m in last:
                mine["the labels (shape, dtype)"] = [describe(x) for x in _as_tuple(labels)]
                mine["criterion given"] = criterion is not None
                if not self.forward_only and criterion is None:
                    problems.append("it computes the loss of the last stage: step() needs criterion=")
                problems += _split_problems("label", labels, pl.streams[self._loc(m)], self.batch_dim)
        try:
            agree(self.group, self.rank, mine, problems, same_error=error)
        except RuntimeError as e:
            if isinstance(e, StepArgumentError) or not connection_lost(e):
                raise
            raise self._lost(e, "the argument agreement") from None
        return sched, first, last

    def _lost(self, e: BaseException, where: str) -> PeerLost:
        gone = self._arrivals.gone_ranks() or "a peer's process died or left the group"
        return PeerLost(f"pipeline step stopped: rank {self.rank} lost its connection to a peer in {where} "
                        f"({gone}) ({str(e).strip()[:200]})")

    def _reset(self) -> None:
        WeightGradStore.clear()
        WeightGradStore.enabled = False
        n = len(self.module)
        self.inputs: list[dict[int, list]] = [{} for _ in range(n)]
        self.outputs: list[dict[int, list]] = [{} for _ in range(n)]
        self.in_grads: list[dict[int, list]] = [{} for _ in range(n)]
        self.out_grads: list[dict[int, list]] = [{} for _ in range(n)]
        self.labels: list[list] = [[] for _ in range(n)]
        self.losses: list[dict[int, torch.Tensor]] = [{} for _ in range(n)]
        self.criterion = None
        self.comm_ops: list[dist.P2POp] = []
        self.to_free: list[torch.Tensor] = []

    # ------------------------------------------------------------------ communication
    def _queue(self, op: Op) -> None:
        peer = self._global(op.peer)
        if op.kind == RECV_F:
            bufs = comm.recv_buffers(self.device)
            self.inputs[op.module][op.mb] = bufs
            self.comm_ops += [dist.P2POp(dist.irecv, t, peer, self.group) for t in bufs]
        elif op.kind == RECV_B:
            bufs = comm.recv_buffers(self.device)
            self.out_grads[op.module][op.mb] = bufs
            self.comm_ops += [dist.P2POp(dist.irecv, t, peer, self.group) for t in bufs]
        elif op.kind == SEND_F:
            tensors = self._checked(self.outputs[op.module][op.mb], op, "output")
            self.comm_ops += [dist.P2POp(dist.isend, t, peer, self.group) for t in tensors]
            if not self.return_outputs:
                self.to_free.extend(tensors)
        else:
            tensors = self._checked(self.in_grads[op.module].pop(op.mb), op, "input gradient")
            self.comm_ops += [dist.P2POp(dist.isend, t, peer, self.group) for t in tensors]

    def _checked(self, tensors: list, op: Op, what: str) -> list[torch.Tensor]:
        """The peer posts one receive per shape in set_p2p_tensor_shapes: a missing tensor would hang it."""
        shapes = comm.TENSOR_SHAPES
        assert shapes is not None  # step() checked that the shapes are set
        if len(tensors) != len(shapes) or any(t is None or tuple(t.shape) != s for t, s in zip(tensors, shapes,
                                                                                                  strict=False)):
            raise RuntimeError(
                f"rank {self.rank}, module {op.module}, micro-batch {op.mb}: the {what}s to send are "
                f"{[None if t is None else tuple(t.shape) for t in tensors]} but set_p2p_tensor_shapes declared "
                f"{shapes}; every tensor passed between stages must exist and (for training) require grad")
        return tensors

    def _commit(self) -> None:
        if not self.comm_ops:
            return
        if self.trace is None:
            self._commit_now()
            return
        t0 = time.perf_counter()
        try:
            self._commit_now()
        finally:
            self.p2p_waits.append((t0, time.perf_counter()))

    def _commit_now(self) -> None:
        peers = sorted({self.rank_mapping[dist.get_group_rank(self.group, op.peer)] for op in self.comm_ops})
        waiting = (f"its messages to and from pp rank(s) {', '.join(map(str, peers))} in step {self._steps} "
                   f"(pp rank {self.rank})")
        try:
            self._abort.wait_all(dist.batch_isend_irecv(self.comm_ops), cuda=self.device.type == "cuda",
                                 timeout_s=self.timeout_s, waiting=waiting)
        except RuntimeError as e:
            if isinstance(e, PeerFailed) or not connection_lost(e):
                raise
            raise self._lost(e, "the messages of step " + str(self._steps)) from None
        self.comm_ops = []
        for t in self.to_free:  # the activation left this rank; autograd only needs its metadata
            if t._base is not None:
                raise RuntimeError("a pipeline stage returned a view; return a fresh tensor (e.g. .clone())")
            t.data = torch.empty(0, dtype=t.dtype, device=t.device)
        self.to_free = []

    # ------------------------------------------------------------------ compute
    def _compute(self, op: Op, pl) -> None:
        if op.kind == F:
            self._forward(op.module, op.mb, pl)
        elif op.kind == B:
            self._backward(op.module, op.mb, op.zb, pl)
        elif op.kind == W:
            WeightGradStore.pop()
        elif op.kind == FB:
            if self.overlapped_forward_backward:
                self._overlapped(op, pl)
            else:
                self._forward(op.module, op.mb, pl)
                self._backward(op.bmodule, op.bmb, False, pl)

    def _post_forward(self, m: int, i: int, outputs: list[torch.Tensor], loss, pl) -> None:
        loc = self._loc(m)
        nxt = pl.next[loc]
        if nxt is None:
            if loss is not None:
                self.losses[m][i] = loss
            if self.return_outputs:
                self.outputs[m][i] = outputs
        else:
            self.outputs[m][i] = outputs
            if nxt[0] == self.rank:  # local hand-off to the other module of this rank
                self.inputs[nxt[1]][i] = [o.detach().requires_grad_() for o in outputs]

    def _forward(self, m: int, i: int, pl) -> None:
        x = self.inputs[m][i]
        if self.forward_only:
            del self.inputs[m][i]
        outputs = _as_list(self.module[m](*x))
        loss = None
        if pl.is_last_stage(self._loc(m)) and self.criterion is not None:
            loss = self.criterion(*outputs, *self.labels[m][i])
        self._post_forward(m, i, outputs, loss, pl)

    def _backward_targets(self, m: int, i: int, pl):
        """(loss, outputs, output_grads) to backpropagate for micro-batch i of module m."""
        if pl.is_last_stage(self._loc(m)):
            return self.losses[m][i], [], []
        outs = self.outputs[m][i] if self.return_outputs else self.outputs[m].pop(i)
        grads = self.out_grads[m].pop(i)
        pairs = [(t, g) for t, g in zip(outs, grads, strict=False) if g is not None]
        return None, [t for t, _ in pairs], [g for _, g in pairs]

    def _post_backward(self, m: int, i: int, pl) -> None:
        x = self.inputs[m].pop(i)
        grads = [t.grad if isinstance(t, torch.Tensor) else None for t in x]
        prv = pl.prev[self._loc(m)]
        if prv is None:
            return
        if prv[0] == self.rank:
            self.out_grads[prv[1]][i] = grads
        else:
            self.in_grads[m][i] = grads

    def _backward(self, m: int, i: int, zb: bool, pl) -> None:
        loss, outs, grads = self._backward_targets(m, i, pl)
        WeightGradStore.enabled = zb
        try:
            if loss is not None:
                loss.backward()
                loss.detach_()
            elif outs:
                run_backward(outs, grads)
        finally:
            WeightGradStore.enabled = False
        if zb:
            WeightGradStore.flush()
        self._post_backward(m, i, pl)

    def _overlapped(self, op: Op, pl) -> None:
        m0, i0, m1, i1 = op.module, op.mb, op.bmodule, op.bmb
        inputs0 = self.inputs[m0][i0]
        if pl.is_last_stage(self._loc(m0)) and self.criterion is not None:
            criterion0, labels0 = self.criterion, list(self.labels[m0][i0])
        else:
            criterion0, labels0 = None, []
        loss1, outputs1, grads1 = self._backward_targets(m1, i1, pl)
        module0, module1 = self.module[m0], self.module[m1]
        outputs0, loss0 = type(module0).overlapped_forward_backward(  # type: ignore[attr-defined]  # the user's class
            module0, inputs0, criterion0, labels0, module1, loss1, outputs1, grads1)
        self._post_forward(m0, i0, _as_list(outputs0), loss0, pl)
        self._post_backward(m1, i1, pl)


class DualPipe(PipelineExecutor):
    """DualPipe: `modules=(stage r, stage PP-1-r)` on pp rank r; PP even, num_chunks even and >= 2*PP.

    Rank 0 gets the first half of the batch as inputs and returns the loss/outputs of the second half (which
    entered at the last rank); the last rank the other way round.
    """

    schedule_fn = staticmethod(dualpipe)


class DualPipeV(PipelineExecutor):
    """DualPipeV: `modules=(stage r, stage 2R-1-r)` on rank r of R; inputs, labels and loss on rank 0."""

    schedule_fn = staticmethod(dualpipev)


class OneFOneB(PipelineExecutor):
    """Classic 1F1B with one stage per rank: inputs on rank 0, labels/loss on the last rank."""

    schedule_fn = staticmethod(one_f_one_b)
    modules_per_rank = 1


class ZeroBubbleH1(PipelineExecutor):
    """Zero-bubble H1 with one stage per rank; W is deferred through WeightGradStore (layers must use it)."""

    schedule_fn = staticmethod(zb1p)
    modules_per_rank = 1
