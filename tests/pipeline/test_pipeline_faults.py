"""Bad input or a failing stage on one rank is an error on every rank within seconds: real gloo processes,
2 and 4 ranks (tests/pipeline/pipeline_faults_world.py runs the cases)."""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")

import pipeline_faults_world as W  # noqa: E402  (tests/pipeline is on sys.path under pytest)

from ptxforge.pipeline.launch import spawn  # noqa: E402


@pytest.fixture(scope="module")
def reports():
    out: dict = {}
    for reps in spawn(W.run_all, 4, timeout=240, start="fork"):
        for rep in reps:
            out.setdefault((rep["size"], rep["case"]), []).append(rep)
    return out


WORDS = {
    "chunks": ["StepArgumentError", "the ranks disagree on num_chunks", "rank 1: 10"],
    "shape": ["StepArgumentError", "rank 0: input 0 of shape (7, 3, 8) does not split into 4 equal micro-batches"],
    "dtype": ["StepArgumentError", "disagree on the inputs (shape, dtype)", "float32"],
    "labels": ["StepArgumentError", "disagree on the labels (shape, dtype)", "rank 0: []"],
    "criterion": ["StepArgumentError", "needs criterion="],
    "v-chunks": ["StepArgumentError", "the ranks disagree on num_chunks", "rank 1: 10"],
    "other": ["StepArgumentError", "the ranks disagree on the executor called", "rank 1: 'DualPipe #"],
}


@pytest.mark.parametrize("size", [2, 4])
@pytest.mark.parametrize("case", [c[0] for c in W.CASES])
def test_every_rank_raises_within_seconds(reports, size, case):
    reps = reports[(size, case)]
    assert len(reps) == size
    if case == "never":  # the last rank never calls step(): the others stop at the executor's timeout_s
        culprit = size - 1
        assert reps[culprit]["error"] == "absent"
        for rep in reps[:culprit]:
            assert rep["error"].startswith(f"StepTimeout: pipeline step: rank {rep['pp']} waited 2 s for every rank "
                                           f"to call step()"), rep["error"]
            assert f"rank {culprit} never came (its last was step " in rep["error"], rep["error"]
            assert W.NEVER_TIMEOUT_S <= rep["seconds"] < 10, rep
        return
    for rep in reps:
        assert rep["error"] is not None, f"pp rank {rep['pp']} returned normally"
        assert rep["seconds"] < 10, rep
        if case == "forward":
            culprit = W.CASES[[c[0] for c in W.CASES].index(case)][3] % size
            if rep["pp"] == culprit:
                assert rep["error"].startswith("FloatingPointError: planted failure")
            else:
                assert rep["error"].startswith(f"PeerFailed: pipeline step stopped: rank {culprit} failed: "
                                               f"FloatingPointError"), rep["error"]
        else:
            for w in WORDS[case]:
                assert w in rep["error"], rep["error"]
    if case != "forward":
        assert len({r["error"] for r in reps}) == 1  # the same message on every rank


def test_a_rank_killed_mid_step_fails_every_other_rank_naming_it(tmp_path, monkeypatch):
    import os
    import tempfile

    from ptxforge.ep.spawn import run_ranks  # fork-started gloo ranks that may lose one to SIGKILL

    victim, world = 2, 4
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))  # every process's temporary files: checked below
    reps = run_ranks(W.killed_mid_step, world, victim, timeout_s=120, killed=(victim,))
    assert os.listdir(tmp_path) == []
    for rank, rep in enumerate(reps):
        if rank == victim:
            assert rep is None
            continue
        err = rep["error"]
        assert err is not None and ("PeerLost: " in err or "PeerFailed: " in err), (rank, err)
        assert f"rank {victim} (pid " in err and "has exited" in err, (rank, err)
        assert rep["seconds"] < 10, rep  # timeout_s is 60: noticed through the process group


def test_the_executor_timeout_comes_from_the_option_or_the_environment(monkeypatch):
    from ptxforge.pipeline.arrival import DEFAULT_TIMEOUT_S, TIMEOUT_ENV, resolve_timeout

    monkeypatch.delenv(TIMEOUT_ENV, raising=False)
    assert resolve_timeout(None) == DEFAULT_TIMEOUT_S and resolve_timeout(2) == 2.0
    monkeypatch.setenv(TIMEOUT_ENV, "7.5")
    assert resolve_timeout(None) == 7.5 and resolve_timeout(1) == 1.0  # the option wins
    for bad in ("abc", "0", "-1", "nan"):
        monkeypatch.setenv(TIMEOUT_ENV, bad)
        with pytest.raises(ValueError, match=f"\\${TIMEOUT_ENV} must be a"):
            resolve_timeout(None)
    with pytest.raises(ValueError, match="timeout_s must be a positive number of seconds"):
        resolve_timeout(0)
