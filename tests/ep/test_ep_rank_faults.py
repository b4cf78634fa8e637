"""Ranks fail together and fast, on both backends: a rank that makes another call, a rank that never comes,
a rank killed in the middle of a dispatch. Every surviving rank raises a named error within its timeout, no
process aborts (run_ranks fails on a rank that ends any other way than planned), and no /dev/shm segment
remains, and no temporary file (the worlds run with a private temporary directory, checked empty after).
Real gloo processes (tests/ep/rank_faults.py runs the scenarios)."""

import os
import tempfile

import ep_warm
import pytest
import rank_faults as F

from ptxforge.emu.ipc import live_segments
from ptxforge.ep.spawn import run_ranks

WORLD = 4


def _segments_of(pids) -> list[str]:
    return [n for n in live_segments() if any(n.startswith(f"ptxforge-emu-{p}-") for p in pids)]


def _world(tmp, *args, **kw) -> list:
    """run_ranks with `tmp` as every process's temporary directory; it must be empty afterwards."""
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(tempfile, "tempdir", str(tmp))
        out = run_ranks(*args, **kw)
    assert os.listdir(tmp) == [], f"left behind: {os.listdir(tmp)}"
    return out


@pytest.fixture(scope="module")
def order(tmp_path_factory):
    ep_warm.warm_comm()  # the 4-rank kernels, traced once before the fork
    res = _world(tmp_path_factory.mktemp("order"), F.order_world, WORLD, timeout_s=300)
    assert _segments_of({p for r in res for p in r["pids"]}) == []
    return res


@pytest.mark.parametrize("backend", ["torch", "kernels"])
def test_a_rank_in_another_call_fails_every_rank_naming_both_calls(order, backend):
    for rank, res in enumerate(order):
        case = res[f"order-{backend}"]
        err = case["mismatch"]["error"]
        assert err is not None and err.startswith("EPCallMismatchError: "), (rank, err)
        assert "rank 1 called get_dispatch_layout" in err and "ranks 0, 2, 3 called combine" in err, err
        assert case["mismatch"]["s"] < 5, case
        assert case["after"], f"rank {rank}: the group did not work after the refused call"
    assert len({res[f"order-{backend}"]["mismatch"]["error"] for res in order}) == 1  # the same text everywhere


def test_a_rank_that_never_comes_is_named_by_the_kernels_backend(order):
    for rank, res in enumerate(order[:-1]):
        case = res["never-kernels"]
        assert case["error"] is not None and case["error"].startswith("EPTimeoutError: "), (rank, case)
        assert "waited 2 s" in case["error"] and f"rank {WORLD - 1} (its last was call 2, get_dispatch_layout)" \
            in case["error"], case["error"]
        assert 1.5 < case["s"] < 15, case


@pytest.mark.parametrize("backend", ["torch", "kernels"])
def test_a_rank_killed_mid_dispatch_fails_the_others_at_once(backend, tmp_path):
    ep_warm.warm_comm()
    victim = 2
    res = _world(tmp_path, F.killed_mid_dispatch, WORLD, backend, victim, timeout_s=120, killed=(victim,))
    assert res[victim] is None
    pids = set()
    for rank, case in enumerate(res):
        if rank == victim:
            continue
        err = case["error"]
        assert err is not None and err.startswith("EPPeerLostError: ptxforge.ep dispatch: "), (rank, err)
        assert f"rank {victim} (pid {case['pids'][victim]}) has exited" in err, err
        assert "waited" not in err, err  # a reset connection is not reported as a timeout
        assert case["s"] < 10, case  # timeout_s is 30: noticed through the process group, not by waiting
        assert case["dead_segments"] == [], case  # reclaimed by the survivor at its failed call
        assert case["destroy"]["error"] is None, case
        pids |= set(case["pids"])
    assert _segments_of(pids) == []
