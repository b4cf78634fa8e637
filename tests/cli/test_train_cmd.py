"""`ptxforge train`: 4 gloo processes (DualPipe PP 2 x EP 2) started by the command itself, run as a user runs it
(a subprocess: the ranks' progress lines go to the real stdout); option mistakes and a failing rank as errors."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from ptxforge.cli.main import main
from ptxforge.cli.train_cmd import progress_line

SRC = os.path.join(os.path.dirname(__file__), "..", "..", "src")


def _ptxforge(*argv: str, cwd) -> subprocess.CompletedProcess:
    env = dict(os.environ, PYTHONPATH=os.path.abspath(SRC))
    return subprocess.run([sys.executable, "-m", "ptxforge", *argv], capture_output=True, text=True, cwd=cwd,
                          env=env, timeout=240)


def test_train_prints_every_step_the_overlap_and_draws_the_timeline(tmp_path, capsys):
    svg, spans = tmp_path / "t.svg", tmp_path / "s.json"
    r = _ptxforge("train", "--steps", "3", "--timeline", str(svg), "--spans", str(spans), "--check",
                  cwd=tmp_path)
    assert r.returncode == 0, r.stderr
    out = r.stdout
    assert "DualPipe PP 2 x EP 2 = 4 gloo processes" in out
    for step in (1, 2, 3):
        assert f"step {step}/3 [" in out
    assert "overlap fraction (communication time hidden behind computation, last 2 step(s)):" in out
    assert svg.read_text().startswith("<svg")
    doc = json.loads(spans.read_text())
    got = {(s["rank"], s["kind"]) for s in doc["spans"]}
    assert got == {(r, k) for r in range(4) for k in ("compute", "comm", "chunk", "step", "wait")}
    assert {"p2p wait", "dispatch 0 wait"} <= {s["name"] for s in doc["spans"] if s["kind"] == "wait"}
    assert {s["name"] for s in doc["spans"] if s["kind"] == "chunk"} >= {"F", "B", "FB"}  # DualPipe's ops
    names = {s["name"].split()[0] for s in doc["spans"]}
    assert {"attention", "experts", "head", "dispatch", "combine"} <= names
    largest = float(out.split("largest relative difference ")[1].split(";")[0])
    assert largest == 0 and "3 of 3 steps equal bit for bit" in out  # float32: the same as one process
    assert "Traceback" not in r.stderr
    # the planner reads the spans (schedule and sizes from the file's meta)
    assert main(["plan", "--measured", str(spans), "--warmup-steps", "2"]) == 0
    plan_out = capsys.readouterr().out
    assert "DualPipe, 2 pipeline ranks, 4 micro-batches: predicted vs measured" in plan_out
    for line in ("step (ms), replay of each step's ops", "p2p waits per rank and step (ms)",
                 "EP exchange waits per rank and step (ms), measured, inside the ops: "):
        assert line in plan_out, plan_out


def test_a_failing_rank_is_an_error_naming_it(tmp_path):
    r = _ptxforge("train", "--steps", "2", "--fail-rank", "1", "--fail-step", "2", "--quiet",
                  "--timeline", str(tmp_path / "t.svg"), "--timeout", "20", cwd=tmp_path)
    assert r.returncode == 1
    assert r.stderr.startswith("ptxforge: error: rank 1 (pp 0, ep 1) failed in step 2: InjectedFault: fault "
                               "injected on rank 1"), r.stderr
    assert "Traceback" not in r.stderr
    assert not (tmp_path / "t.svg").exists()


@pytest.mark.parametrize("argv, words", [
    (["--pp", "3"], "--pp 3: DualPipe needs an even number of pipeline ranks"),
    (["--ep", "3"], "--ep 3: the 8 routed experts do not split evenly over 3 ranks"),
    (["--chunks", "2"], "--chunks 2: DualPipe needs an even number of micro-batches >= 2 * pp = 4"),
    (["--hidden", "100"], "hidden=100 must be a multiple of 128"),
    (["--layers", "3"], "--layers 3: not a multiple of --pp 2"),
    (["--topk", "9"], "--topk 9 of --experts 8"),
    (["--steps", "0"], "--steps must be at least 1"),
])
def test_bad_options_are_named_before_any_process_starts(capsys, argv, words):
    assert main(["train", *argv]) == 1
    err = capsys.readouterr().err
    assert err.startswith("ptxforge: error: ") and words in err, err


def test_progress_line():
    assert progress_line(5, 20, 1.25, 0.5) == "step  5/20 [#####...............] loss 1.250000  0.50 s"


def test_a_bad_torchrun_environment_is_named(monkeypatch, capsys):
    monkeypatch.setenv("RANK", "5")
    monkeypatch.setenv("WORLD_SIZE", "4")
    assert main(["train"]) == 1
    err = capsys.readouterr().err
    assert "RANK" in err and "below WORLD_SIZE=4" in err and "Traceback" not in err, err
