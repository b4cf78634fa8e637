"""ptxforge.pipeline.launch.spawn with its default start method: the executor tests fork their worlds
(start="fork", no torch import per rank), so this small world keeps the spawned path under test."""

from __future__ import annotations

import os
import sys

import pytest

torch = pytest.importorskip("torch")

from ptxforge.pipeline.launch import spawn  # noqa: E402

STATE = "as imported"  # the test changes it in this process: a spawned rank imports this module afresh


def _rank(rank: int, world: int) -> dict:
    import torch.distributed as dist

    t = torch.tensor([rank + 1.0])
    dist.all_reduce(t)
    return {"sum": t.item(), "world": dist.get_world_size(), "pid": os.getpid(), "state": STATE}


def test_spawned_ranks_share_a_gloo_group(monkeypatch):
    monkeypatch.setattr(sys.modules[__name__], "STATE", "changed in the parent")
    reps = spawn(_rank, 2, timeout=120)
    assert [r["sum"] for r in reps] == [3.0, 3.0] and [r["world"] for r in reps] == [2, 2]
    assert len({os.getpid(), *(r["pid"] for r in reps)}) == 3
    assert [r["state"] for r in reps] == ["as imported"] * 2  # fresh interpreters, not copies of this one


def test_unknown_start_method_is_refused():
    with pytest.raises(ValueError, match="start must be 'spawn', 'fork' or 'forkserver', got 'thread'"):
        spawn(_rank, 2, start="thread")
