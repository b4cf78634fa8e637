"""Training the small DeepSeek-V3-shaped model with DualPipe x expert parallelism, and the single-process run it
must equal.

World = pp * ep ranks; rank g is pipeline rank g // ep and EP rank g % ep. The ranks of one pipeline rank form an
EP group (a `ptxforge.ep.Buffer`; routed experts split over them, every other weight replicated); the ranks of
one EP rank form a DualPipe group (pipeline rank p holds stages p and pp-1-p). Each EP rank trains on its own
batch of random tokens (the same batch every step, so the loss falls by memorizing it); DualPipe feeds the
first half of it at pipeline rank 0 and the second at the last. After each step every weight's gradient is
summed over its two DualPipe copies and, unless it is a routed expert's, over the EP group; then plain SGD and
the bias balancing on the load summed likewise. `reference_losses` runs the same model, weights and data in one
process (every expert local, the EP traffic's roundings applied by `wire.emulated_moe`).
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import torch
import torch.distributed as dist
from torch import nn

import ptxforge.ep as deep_ep
from ptxforge.ep.errors import EPPeerLostError, EPTimeoutError
from ptxforge.errors import Error
from ptxforge.models import grad64
from ptxforge.models.moe import balance_bias
from ptxforge.models.transformer import ModelConfig, Stage
from ptxforge.pipeline import trace
from ptxforge.pipeline.comm import set_p2p_tensor_dtype, set_p2p_tensor_shapes
from ptxforge.pipeline.executor import DualPipe
from ptxforge.pipeline.step_check import PeerFailed, StepTimeout


@dataclass(frozen=True)
class TrainConfig:
    pp: int = 2
    ep: int = 2
    steps: int = 20
    chunks: int = 4              # micro-batches per step and EP rank (DualPipe: even, >= 2 * pp)
    micro_batch: int = 2         # sequences per micro-batch
    lr: float = 0.2
    fp8: bool = False            # dispatch FP8 1x128 activations (else BF16)
    overlap: bool = True         # DualPipe's forward-and-backward chunk interleaved, calls asynchronous
    backend: str = "torch"       # ptxforge.ep.Buffer's backend
    timeout_s: float = 60.0
    model: ModelConfig = field(default_factory=ModelConfig)
    fail_rank: int | None = None  # fault injection (tests, `ptxforge train --fail-rank`): this rank raises
    fail_step: int = 1            # inside its first overlapped chunk of this step (1-based)

    def problems(self) -> list[str]:
        """What is wrong with this configuration, in words (empty when it can run)."""
        out = []
        if self.pp < 2 or self.pp % 2:
            out.append(f"--pp {self.pp}: DualPipe needs an even number of pipeline ranks (2, 4, ...)")
        if self.ep < 1 or self.model.moe.num_experts % self.ep:
            out.append(f"--ep {self.ep}: the {self.model.moe.num_experts} routed experts do not split evenly "
                       f"over {self.ep} ranks")
        if self.pp >= 2 and self.model.layers % self.pp:
            out.append(f"--layers {self.model.layers}: not a multiple of --pp {self.pp} (layers per stage)")
        if self.chunks < 2 * self.pp or self.chunks % 2:
            out.append(f"--chunks {self.chunks}: DualPipe needs an even number of micro-batches >= 2 * pp "
                       f"= {2 * self.pp}")
        for name in ("steps", "micro_batch"):
            if getattr(self, name) < 1:
                out.append(f"--{name.replace('_', '-')} must be at least 1")
        if self.backend not in ("torch", "kernels"):
            out.append(f"--backend {self.backend!r}: 'torch' or 'kernels'")
        if self.fail_rank is not None and not 0 <= self.fail_rank < self.pp * self.ep:
            out.append(f"--fail-rank {self.fail_rank}: there are {self.pp * self.ep} ranks")
        return out


class TrainingStopped(Error, RuntimeError):
    """A rank failed; raised on every rank, naming the rank that failed first and its error."""


# the errors a rank sees when another rank failed (the others are a failure of its own)
_PEER_ERRORS = (PeerFailed, StepTimeout, EPPeerLostError, EPTimeoutError)
FAILURE_KEY = "ptxforge.train/failed/"
GRACE_S = 5.0  # how long a rank that saw a peer's failure looks for the failing rank's own report


def _store() -> Any:
    try:
        return dist.distributed_c10d._get_default_store()  # private torch API: the rendezvous store
    except Exception:  # noqa: BLE001 - then each rank reports only what it saw
        return None


def _where(cfg: TrainConfig, rank: int) -> str:
    return f"rank {rank} (pp {rank // cfg.ep}, ep {rank % cfg.ep})"


def _stopped(cfg: TrainConfig, rank: int, step: int, e: BaseException) -> TrainingStopped:
    """The error this rank raises: the first rank's own failure, found through the rendezvous store."""
    text = f"{type(e).__name__}: {str(e).strip()}"[:800]
    origin = not isinstance(e, _PEER_ERRORS)
    store = _store()
    if store is not None:
        try:
            store.set(f"{FAILURE_KEY}{rank}", f"{int(origin)} {step} {text}")
        except Exception:  # noqa: BLE001 - a store whose host rank died: report what this rank saw
            store = None
    if origin:
        return TrainingStopped(f"{_where(cfg, rank)} failed in step {step}: {text}")
    deadline = time.monotonic() + GRACE_S
    while store is not None and time.monotonic() < deadline:
        for r in range(cfg.pp * cfg.ep):
            try:
                found = store.check([f"{FAILURE_KEY}{r}"]) and store.get(f"{FAILURE_KEY}{r}").decode()
            except Exception:  # noqa: BLE001 - as above
                store = None
                break
            if found and found.startswith("1 "):
                _, their_step, theirs = found.split(" ", 2)
                return TrainingStopped(f"{_where(cfg, r)} failed in step {their_step}: {theirs} (so "
                                       f"{_where(cfg, rank)} stopped: {text[:300]})")
        time.sleep(0.05)
    return TrainingStopped(f"{_where(cfg, rank)} stopped in step {step}: {text}")


def tokens(cfg: TrainConfig, ep_rank: int) -> torch.Tensor:
    """EP rank `ep_rank`'s batch: int64 [chunks * micro_batch, seq + 1] random tokens."""
    g = torch.Generator().manual_seed(10_000 + 97 * cfg.model.seed + ep_rank)
    return torch.randint(0, cfg.model.vocab, (cfg.chunks * cfg.micro_batch, cfg.model.seq + 1), generator=g)


def criterion(logits: torch.Tensor, labels: torch.Tensor) -> torch.Tensor:
    return nn.functional.cross_entropy(logits.reshape(-1, logits.shape[-1]), labels.reshape(-1))


def _stage_layers(cfg: TrainConfig, stage: int) -> tuple[int, int]:
    per = cfg.model.layers // cfg.pp
    return stage * per, (stage + 1) * per


def _sgd(modules: list[Stage], grads: list[list[torch.Tensor]], loads: list[list[torch.Tensor]],
         cfg: TrainConfig) -> None:
    with torch.no_grad():
        for m, gs, ls in zip(modules, grads, loads, strict=True):
            for p, g in zip(m.parameters(), gs, strict=True):
                p.sub_(cfg.lr * g.to(p.dtype))  # the float64 sum rounded once, as the PP x EP ranks do
            for b, load in zip(m.block_list, ls, strict=True):
                balance_bias(b.moe.bias, load, cfg.model.moe.bias_rate)
                b.step_load.zero_()


def _grads(m: Stage) -> list[torch.Tensor]:
    """Every weight's gradient summed over its uses in float64 (`ptxforge.models.grad64`)."""
    return [grad64.take(p) for p in m.parameters()]


def _zero(m: Stage) -> None:
    m.zero_grad()
    grad64.clear(m.parameters())


def reference_losses(cfg: TrainConfig) -> list[float]:
    """The loss of every step of the same training in one process (see the module docstring)."""
    model = Stage(cfg.model, 0, cfg.model.layers, ep_world=cfg.ep, fp8=cfg.fp8)
    data = [tokens(cfg, e) for e in range(cfg.ep)]
    out: list[float] = []
    threads = torch.get_num_threads()
    torch.set_num_threads(1)  # small matmuls: more threads only contend with the machine's other work
    try:
        _reference_steps(cfg, model, data, out)
    finally:
        torch.set_num_threads(threads)
    return out


def _reference_steps(cfg: TrainConfig, model: Stage, data: list[torch.Tensor], out: list[float]) -> None:
    for _ in range(cfg.steps):
        _zero(model)
        losses = []
        for batch in data:
            for mb in batch.split(cfg.micro_batch):
                loss = criterion(model(mb[:, :-1]), mb[:, 1:])
                loss.backward()
                losses.append(float(loss.detach()))
        _sgd([model], [_grads(model)], [[b.step_load.clone() for b in model.block_list]], cfg)
        out.append(sum(losses) / len(losses))


@dataclass
class RankWorld:
    """This rank's place: pipeline and EP rank and their process groups."""

    rank: int
    pp_rank: int
    ep_rank: int
    pp_group: Any
    ep_group: Any


def make_world(cfg: TrainConfig, rank: int) -> RankWorld:
    """The DualPipe and EP groups (every rank makes every group, in the same order)."""
    pp_groups = [dist.new_group([e + k * cfg.ep for k in range(cfg.pp)]) for e in range(cfg.ep)]
    ep_groups = [dist.new_group([p * cfg.ep + e for e in range(cfg.ep)]) for p in range(cfg.pp)]
    p, e = divmod(rank, cfg.ep)
    return RankWorld(rank, p, e, pp_groups[e], ep_groups[p])


def _sum_copies(w: RankWorld, cfg: TrainConfig, mine: list[list[torch.Tensor]],
                replicated: list[list[bool]]) -> list[list[torch.Tensor]]:
    """Per module, its tensors summed with the other DualPipe copy of the same stage (pipeline rank pp-1-p)
    and, where `replicated`, over the EP group."""
    flat = [torch.cat([t.reshape(-1).to(torch.float64) for t in ts]) for ts in mine]
    both = torch.cat(flat)
    sizes = [torch.zeros(1, dtype=torch.int64) for _ in range(cfg.pp)]  # ranks hold stages of different sizes
    dist.all_gather(sizes, torch.tensor([both.numel()]), group=w.pp_group)
    longest = int(max(sizes))
    everyone = [torch.empty(longest, dtype=torch.float64) for _ in range(cfg.pp)]
    dist.all_gather(everyone, torch.cat([both, both.new_zeros(longest - both.numel())]), group=w.pp_group)
    # the partner holds (stage pp-1-p, stage p): its second module is our first and the other way round
    partner = everyone[cfg.pp - 1 - w.pp_rank][:both.numel()].split([flat[1].numel(), flat[0].numel()])
    summed = [flat[0] + partner[1], flat[1] + partner[0]]
    out = []
    for ts, s, rep in zip(mine, summed, replicated, strict=True):
        parts = list(s.split([t.numel() for t in ts]))
        if cfg.ep > 1:
            shared = torch.cat([x for x, r in zip(parts, rep, strict=True) if r])
            dist.all_reduce(shared, group=w.ep_group)
            it = iter(shared.split([x.numel() for x, r in zip(parts, rep, strict=True) if r]))
            parts = [next(it) if r else x for x, r in zip(parts, rep, strict=True)]
        out.append([x.view(t.shape).to(t.dtype) for x, t in zip(parts, ts, strict=True)])
    return out


def _replicated(m: Stage) -> list[bool]:
    return [".experts." not in name for name, _ in m.named_parameters()]


def train_rank(rank: int, world: int, cfg: TrainConfig, recorder: Any = None,
               on_step: Callable[[int, float, float], None] | None = None, record_steps: int | None = None) -> dict:
    """One rank's training (call on every rank of an initialized gloo world of pp * ep ranks). Returns
    {"losses": the mean loss of every step over all micro-batches and ranks, "seconds": per step}.
    `recorder` (a `ptxforge.pipeline.trace.Recorder`) times every piece (of the last `record_steps` steps
    only, if given); `on_step(step, loss, seconds)` is called on every rank after each step."""
    if world != cfg.pp * cfg.ep:
        raise ValueError(f"train_rank: the world has {world} ranks, pp * ep = {cfg.pp * cfg.ep}")
    w = make_world(cfg, rank)
    buffer = deep_ep.Buffer(w.ep_group, backend=cfg.backend, timeout_s=cfg.timeout_s) if cfg.ep > 1 else None
    mods = [Stage(cfg.model, *_stage_layers(cfg, s), ep_rank=w.ep_rank, ep_world=cfg.ep, buffer=buffer,
                  fp8=cfg.fp8, overlap=cfg.overlap) for s in (w.pp_rank, cfg.pp - 1 - w.pp_rank)]
    if recorder is not None:
        for m in mods:
            m.recorder = recorder
    model = DualPipe(tuple(mods), process_group=w.pp_group, timeout_s=cfg.timeout_s)
    set_p2p_tensor_shapes([(cfg.micro_batch, cfg.model.seq, cfg.model.hidden)])
    set_p2p_tensor_dtype(cfg.model.torch_dtype)
    data = tokens(cfg, w.ep_rank)
    half = data.shape[0] // 2
    first, second = data[:half], data[half:]
    if w.pp_rank == 0:
        x, labels = first[:, :-1], second[:, 1:]
    elif w.pp_rank == cfg.pp - 1:
        x, labels = second[:, :-1], first[:, 1:]
    else:
        x = labels = None  # type: ignore[assignment]  # a middle pipeline rank gets neither
    replicated = [_replicated(m) for m in mods]
    losses: list[float] = []
    seconds: list[float] = []
    step = 0
    try:
        for step in range(1, cfg.steps + 1):
            t0 = time.perf_counter()
            for m in mods:
                _zero(m)
                m.calls = 0
                m.fault = (f"fault injected on rank {rank} (pp {w.pp_rank}, ep {w.ep_rank}) in step {step}"
                           if rank == cfg.fail_rank and step == cfg.fail_step else None)
            if recorder is not None and record_steps is not None and step == cfg.steps - record_steps + 1:
                recorder.clear()  # the spans of the steps before are not kept
            loss = _step(model, x, labels, cfg, recorder, step)
            grads = _sum_copies(w, cfg, [_grads(m) for m in mods], replicated)
            loads = _sum_copies(w, cfg, [[b.step_load for b in m.block_list] for m in mods],
                                [[True] * len(m.block_list) for m in mods])
            _sgd(mods, grads, loads, cfg)
            total = torch.tensor([float(loss.double().sum()) if loss is not None else 0.0,
                                  float(loss.numel()) if loss is not None else 0.0], dtype=torch.float64)
            dist.all_reduce(total)
            losses.append(float(total[0] / total[1]))
            seconds.append(time.perf_counter() - t0)
            if on_step is not None:
                on_step(step, losses[-1], seconds[-1])
    except BaseException as e:
        if isinstance(e, KeyboardInterrupt):
            raise
        raise _stopped(cfg, rank, step, e) from e
    finally:
        if buffer is not None:
            buffer.destroy()
    return {"losses": losses, "seconds": seconds, "pp_rank": w.pp_rank, "ep_rank": w.ep_rank}


def _step(model: DualPipe, x: torch.Tensor | None, labels: torch.Tensor | None, cfg: TrainConfig, recorder: Any,
          step: int) -> torch.Tensor | None:
    """One DualPipe step; with a recorder, also a "step" span, one "chunk" span per F, B, W or FB op and a
    "wait" span per commit of p2p messages between ops (what `ptxforge plan --measured` reads)."""
    if recorder is None:
        return model.step(x, num_chunks=cfg.chunks, criterion=criterion, labels=(labels,))[0]
    model.trace, model.p2p_waits = [], []
    with recorder.span("step", "step", step=step):
        loss = model.step(x, num_chunks=cfg.chunks, criterion=criterion, labels=(labels,))[0]
    recorder.add(trace.executor_spans(model.trace, recorder.rank, step=step))
    recorder.add(trace.TraceSpan(recorder.rank, "p2p wait", "wait", t0, t1, None, {"step": step})
                 for t0, t1 in model.p2p_waits)
    model.trace = None
    return loss
