"""`ptxforge pipeline simulate|compare`."""

from __future__ import annotations

import pytest

from ptxforge.cli.main import main


def test_simulate_prints_summary_and_writes_pictures(tmp_path, capsys):
    svg, png = tmp_path / "t.svg", tmp_path / "t.png"
    argv = ["pipeline", "simulate", "--schedule", "dualpipe", "--pp", "8", "--chunks", "20",
            "--costs", "1,2,1,3", "--svg", str(svg)]
    try:
        import matplotlib  # noqa: F401

        argv += ["--png", str(png)]
    except ImportError:
        png = None
    assert main(argv) == 0
    out = capsys.readouterr().out
    assert "DualPipe: PP=8 stages on 8 devices, 20 micro-batches" in out
    assert "max bubble 6 (table formula 6)" in out
    assert "peak activations 9 (formula 9)" in out
    assert svg.read_text().startswith("<svg")
    if png is not None:
        assert png.read_bytes()[:4] == b"\x89PNG"


def test_simulate_ops_listing(capsys):
    assert main(["pipeline", "simulate", "--schedule", "1f1b", "--pp", "2", "--chunks", "2", "--ops"]) == 0
    out = capsys.readouterr().out
    assert "rank 0: F(m0:0) F(m0:1) B(m0:0) B(m0:1)" in out


def test_compare_table(capsys):
    assert main(["pipeline", "compare", "--pp", "4", "--chunks", "8", "--costs", "1,2,1"]) == 0
    out = capsys.readouterr().out
    lines = out.splitlines()
    assert lines[1].split()[:5] == ["schedule", "devices", "makespan", "bubble", "formula"]
    names = [ln.split()[0] for ln in lines[3:]]
    assert names == ["1F1B", "ZB1P", "DualPipe", "DualPipeV"]
    assert lines[3].split()[3:5] == ["9", "9"]  # 1F1B: (4-1)(1+2)


@pytest.mark.parametrize("argv,msg", [
    (["pipeline", "simulate", "--pp", "7"], "dualpipe:even-ranks"),
    (["pipeline", "simulate", "--chunks", "9"], "even number of micro-batches"),
    (["pipeline", "simulate", "--costs", "1,x,1"], "must be a number"),
    (["pipeline", "compare", "--costs", "1,2"], "F,B,W or F,B,W,FB"),
    (["pipeline", "simulate", "--costs", "1,1,2"], "cannot exceed"),
])
def test_user_errors(argv, msg, capsys):
    assert main(argv) == 1
    err = capsys.readouterr().err
    assert msg in err and "Traceback" not in err
