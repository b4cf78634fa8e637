"""Per-rank code of the pipeline fault tests: bad arguments or a failing stage on one rank must become an
error on every rank within seconds (not a hang until the process group's timeout)."""

from __future__ import annotations

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
    ("forward", "dualpipe", 8, 1, "forward"),  # last: leaves the group with pending messages
]


def one(kind, chunks, culprit, fault, group, pp: int, size: int) -> dict:
    torch.manual_seed(0)
    set_p2p_tensor_shapes([(MB, SEQ, HIDDEN)])
    set_p2p_tensor_dtype(torch.float64)
    culprit = culprit % size
    stages = [PlainStage().double() for _ in range(2)]
    if fault == "forward" and pp == culprit:
        stages[0] = Exploding(at=2).double()
    cls = DualPipe if kind == "dualpipe" else DualPipeV
    model = cls(tuple(stages), process_group=group)
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
    t0 = time.monotonic()
    try:
        model.step(*my_x, num_chunks=n, criterion=crit, labels=my_l)
        return {"pp": pp, "error": None, "seconds": time.monotonic() - t0}
    except Exception as e:  # noqa: BLE001 - the report is the test's evidence
        return {"pp": pp, "error": f"{type(e).__name__}: {e}", "seconds": time.monotonic() - t0}


def run_all(rank: int, world: int) -> list[dict]:
    groups = {size: dist.new_group(list(range(size))) for size in (2, 4)}
    reports = []
    for size, group in groups.items():
        for name, kind, chunks, culprit, fault in CASES:
            if fault == "forward":
                group = dist.new_group(list(range(size)))  # a fresh group: the failure leaves messages pending
            if rank < size:
                rep = one(kind, chunks, culprit, fault, group, rank, size)
                rep.update(case=name, size=size)
                reports.append(rep)
    return reports
