"""A stage's work for one micro-batch as a list of pieces, run forward and backward as generators that pause at
every exchange between EP ranks, so that two micro-batches' pieces can be interleaved (`interleave`): while one
micro-batch's dispatch or combine is on the wire, the other's attention or experts compute.

- `Compute(name, inputs, fn)`: `fn(tensors) -> dict` on this rank; its inputs enter as fresh autograd leaves, so
  its backward is one `run_backward` from its outputs to those leaves.
- an exchange (`ptxforge.models.exchange`): `issue(env, mb)` starts the transfer and returns what `finish` needs;
  `finish(...)` waits and returns the received tensors; `issue_backward` / `finish_backward` do the same for
  the gradients.

Values flow between pieces by name in an environment (a dict); the `Tape` of a forward keeps each piece's
leaves and outputs for its backward. A `Recorder` (`ptxforge.pipeline.trace`) may time every piece: compute
pieces as spans, exchanges as asynchronous spans from issue to the end of the wait, and inside those, as "wait"
spans, the time the rank's thread spent in the exchange's issue and in its wait (blocked, computing nothing).
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Generator, Iterator
from dataclasses import dataclass, field
from typing import Any, Protocol

import torch

from ptxforge.pipeline.weight_grad import run_backward

Env = dict[str, Any]
Run = Generator[None, None, None]


class Exchange(Protocol):
    name: str
    inputs: tuple[str, ...]
    outputs: tuple[str, ...]

    def issue(self, env: Env, state: dict) -> None: ...
    def finish(self, state: dict) -> Env: ...
    def issue_backward(self, grads: Env, state: dict) -> None: ...
    def finish_backward(self, state: dict) -> Env: ...


@dataclass
class Compute:
    """A piece that runs on this rank (see the module docstring)."""

    name: str
    inputs: tuple[str, ...]
    fn: Callable[[Env], Env]


@dataclass
class Tape:
    """One micro-batch's forward: per piece, (piece, leaves, outputs) for a Compute or (piece, state) for an
    exchange; `mb` (the micro-batch's number on its stage) and `stage` label the spans."""

    mb: int
    stage: str = ""
    records: list[tuple] = field(default_factory=list)


class _NoRecorder:
    @contextlib.contextmanager
    def span(self, name: str, kind: str, mb: Any = None, **attrs: Any) -> Iterator[None]:
        yield

    def begin(self, name: str, kind: str, mb: Any = None, **attrs: Any) -> Any:
        return None

    def end(self, token: Any, **attrs: Any) -> None:
        pass


NO_RECORDER = _NoRecorder()


def _leaf(t: Any) -> Any:
    if isinstance(t, torch.Tensor) and t.is_floating_point():
        return t.detach().requires_grad_()
    return t


def run_forward(pieces: list[Compute | Exchange], env: Env, tape: Tape, rec: Any = NO_RECORDER,
                grad: bool = True) -> Run:
    """Run `pieces` on `env` (updated in place), recording `tape`; pauses once per exchange, after its issue.
    `grad`: build the autograd graph (also when resumed inside another micro-batch's backward, where autograd
    has turned it off)."""
    for p in pieces:
        if isinstance(p, Compute):
            with rec.span(p.name, "compute", mb=tape.mb, stage=tape.stage, phase="forward"), \
                    torch.set_grad_enabled(grad):
                leaves = {n: _leaf(env[n]) for n in p.inputs}
                outs = p.fn(leaves)
            tape.records.append((p, leaves, outs))
            env.update({n: (t.detach() if isinstance(t, torch.Tensor) else t) for n, t in outs.items()})
        else:
            state: dict = {}
            token = rec.begin(p.name, "comm", mb=tape.mb, stage=tape.stage)
            with rec.span(p.name + " issue", "wait", mb=tape.mb, stage=tape.stage):
                p.issue(env, state)
            yield
            with rec.span(p.name + " wait", "wait", mb=tape.mb, stage=tape.stage):
                env.update(p.finish(state))
            rec.end(token)
            tape.records.append((p, state))


def _add(grads: Env, name: str, g: torch.Tensor | None) -> None:
    if g is not None:
        grads[name] = g if name not in grads else grads[name] + g


def run_backward_pieces(tape: Tape, grads: Env, rec: Any = NO_RECORDER) -> Run:
    """The backward of `tape` from the gradients of its outputs in `grads` (updated in place: the stage input's
    gradient is left there); pauses once per exchange, after its issue."""
    while tape.records:
        record = tape.records.pop()  # a piece's activations go as soon as its backward ran
        p = record[0]
        if isinstance(p, Compute):
            _, leaves, outs = record
            pairs = [(t, grads.pop(n)) for n, t in outs.items()
                     if n in grads and isinstance(t, torch.Tensor) and t.requires_grad]
            with rec.span(p.name + " backward", "compute", mb=tape.mb, stage=tape.stage, phase="backward"):
                if pairs:
                    run_backward([t for t, _ in pairs], [g for _, g in pairs])
            for n, leaf in leaves.items():
                if isinstance(leaf, torch.Tensor) and leaf.requires_grad:
                    _add(grads, n, leaf.grad)
        else:
            state = record[1]
            token = rec.begin(p.name + " backward", "comm", mb=tape.mb, stage=tape.stage)
            with rec.span(p.name + " backward issue", "wait", mb=tape.mb, stage=tape.stage):
                p.issue_backward({n: grads.pop(n, None) for n in p.outputs}, state)
            yield
            with rec.span(p.name + " backward wait", "wait", mb=tape.mb, stage=tape.stage):
                done = p.finish_backward(state)
            for n, g in done.items():
                _add(grads, n, g)
            rec.end(token)


def drain(run: Run) -> None:
    for _ in run:
        pass


def interleave(first: Run, second: Run) -> None:
    """Run both to the end, switching at every pause: while one's exchange is in flight the other computes."""
    active = [first, second]
    while active:
        for r in list(active):
            try:
                next(r)
            except StopIteration:
                active.remove(r)
