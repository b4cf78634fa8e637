"""Per-rank code of the pipeline fault tests: bad arguments or a failing stage on one rank must become an
error on every rank within seconds (not a hang until the process group's timeout)."""

from __future__ import annotations

import os
import signal
import time

import torch
import torch.distributed as dist
from pipeline_world import HIDDEN, MB, SEQ, PlainStage, criterion

from ptxforge.pipeline import DualPipe, DualPipeV, set_p2p_tensor_dtype, set_p2p_tensor_shapes


class Exploding(PlainStage):
    """A stage that raises in its forward on the chosen micro-batch."""

    def __init__(self, at: int) -> None:
        super().__init__()
        self.at, self.calls = at, 0

    def forward(self, x):
        self.calls += 1
        if self.calls > self.at:
            raise FloatingPointError("planted failure in this stage's forward")
        return super().forward(x)


def _data(chunks: int, dtype=torch.float64):
    g = torch.Generator().manual_seed(5)
    x = torch.randn(MB * chunks, SEQ, HIDDEN, generator=g, dtype=dtype)
    return x, torch.randn(MB * chunks, SEQ, HIDDEN, generator=g, dtype=dtype)


# (name, kind, chunks, culprit pp rank, what it does wrong)
CASES = [
    ("chunks", "dualpipe", 8, 1, "num_chunks"),
    ("shape", "dualpipe", 8, 0, "shape"),
    ("dtype", "dualpipe", 8, 0, "dtype"),
    ("labels", "dualpipe", 8, 0, "labels"),
    ("criterion", "dualpipe", 8, -1, "criterion"),
    ("v-chunks", "dualpipev", 8, 1, "num_chunks"),
    ("other", "dualpipe", 8, 1, "other"),  # rank 1 calls step() of another executor on the same group
    ("forward", "dualpipe", 8, 1, "forward"),  # leaves the group with pending messages
    ("never", "dualpipe", 8, -1, "never"),  # last: the others count a step the absent rank never began
]
NEVER_TIMEOUT_S = 2.0


def one(kind, chunks, culprit, fault, group, pp: int, size: int) -> dict:
    torch.manual_seed(0)
    set_p2p_tensor_shapes([(MB, SEQ, HIDDEN)])
    set_p2p_tensor_dtype(torch.float64)
    culprit = culprit % size
    stages = [PlainStage().double() for _ in range(2)]
    if fault == "forward" and pp == culprit:
        stages[0] = Exploding(at=2).double()
    cls = DualPipe if kind == "dualpipe" else DualPipeV
    model = cls(tuple(stages), process_group=group, timeout_s=NEVER_TIMEOUT_S if fault == "never" else None)
    if fault == "other":
        other = cls(tuple(PlainStage().double() for _ in range(2)), process_group=group)
        model = other if pp == culprit else model
    x, lab = _data(chunks)
    n = chunks
    crit = criterion
    if kind == "dualpipe":
        holds = pp in (0, size - 1)
        my_x, my_l = (x.chunk(2)[pp != 0],) if holds else (), (lab.chunk(2)[pp == 0],) if holds else ()
    else:
        holds = pp == 0
        my_x, my_l = ((x,), (lab,)) if holds else ((), ())
    if pp == culprit:
        if fault == "num_chunks":
            n = chunks + 2
        elif fault == "shape":
            my_x = (my_x[0][:-1],)  # one row short: the micro-batches no longer split evenly
        elif fault == "dtype":
            my_x = (my_x[0].float(),)
        elif fault == "labels":
            my_l = ()
        elif fault == "criterion":
            crit = None
    if fault == "never" and pp == culprit:
        _meet(f"never-{size}", size - 1)  # stays alive (an exited rank is named as such) until the others failed
        return {"pp": pp, "error": "absent", "seconds": 0.0}
    t0 = time.monotonic()
    try:
        model.step(*my_x, num_chunks=n, criterion=crit, labels=my_l)
        out = {"pp": pp, "error": None, "seconds": time.monotonic() - t0}
    except Exception as e:  # noqa: BLE001 - the report is the test's evidence
        out = {"pp": pp, "error": f"{type(e).__name__}: {e}", "seconds": time.monotonic() - t0}
    if fault == "never":
        dist.distributed_c10d._get_default_store().add(f"never-{size}", 1)
    return out


def _meet(key: str, n: int, timeout_s: float = 30.0) -> None:
    """Wait (bounded) until `n` ranks counted themselves in `key` of the rendezvous store."""
    store = dist.distributed_c10d._get_default_store()
    deadline = time.monotonic() + timeout_s
    while store.add(key, 0) < n and time.monotonic() < deadline:
        time.sleep(0.01)


def run_all(rank: int, world: int) -> list[dict]:
    groups = {size: dist.new_group(list(range(size))) for size in (2, 4)}
    reports = []
    for size, group in groups.items():
        for name, kind, chunks, culprit, fault in CASES:
            if fault in ("forward", "never"):
                group = dist.new_group(list(range(size)))  # a fresh group: the failure leaves messages pending
            if rank < size:
                rep = one(kind, chunks, culprit, fault, group, rank, size)
                rep.update(case=name, size=size)
                reports.append(rep)
    return reports


class Killed(PlainStage):
    """A stage whose process dies (SIGKILL) in its forward of micro-batch `at`."""

    def __init__(self, at: int) -> None:
        super().__init__()
        self.at, self.calls = at, 0

    def forward(self, x):
        self.calls += 1
        if self.calls > self.at:  # `at` counts from the first call of the stage
            os.kill(os.getpid(), signal.SIGKILL)
        return super().forward(x)


def killed_mid_step(rank: int, world: int, victim: int) -> dict:
    """DualPipe on `world` ranks; rank `victim`'s process dies in the middle of the step."""
    torch.manual_seed(0)
    set_p2p_tensor_shapes([(MB, SEQ, HIDDEN)])
    set_p2p_tensor_dtype(torch.float64)
    stages = [PlainStage().double() for _ in range(2)]
    if rank == victim:
        stages[0] = Killed(at=10**9).double()  # armed after the first step
    model = DualPipe(tuple(stages), timeout_s=60)
    x, lab = _data(2 * world)
    holds = rank in (0, world - 1)
    my_x, my_l = ((x.chunk(2)[rank != 0],), (lab.chunk(2)[rank == 0],)) if holds else ((), ())
    model.step(*my_x, num_chunks=2 * world, criterion=criterion, labels=my_l)  # a first step works
    if rank == victim:
        stages[0].at = 1
    t0 = time.monotonic()
    try:
        model.step(*my_x, num_chunks=2 * world, criterion=criterion, labels=my_l)
        out = {"error": None}
    except Exception as e:  # noqa: BLE001 - the report is the test's evidence
        out = {"error": f"{type(e).__name__}: {e}"}
    out["seconds"] = time.monotonic() - t0
    dist.distributed_c10d._get_default_store().add("survivors", 1)
    _meet("survivors", world - 1)  # no survivor exits before every survivor saw the loss (it names who is gone)
    return out
