"""`ptxforge plan`: table, derivation, JSON, PNG and errors."""

from __future__ import annotations

import json

import numpy as np
import pytest

from ptxforge.cli.main import main


def test_json_keys(capsys):
    assert main(["plan", "--preset", "deepseek-v3-h800", "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    for k in ("sms", "best_sms", "bottleneck", "dispatch_us", "combine_us", "compute_us"):
        assert k in out
    assert out["bottleneck"] == "ib" and 16 <= out["sms"] <= 24
    assert out["nvlink_scaleout_bandwidth_ratio"] == pytest.approx(3.2)
    assert [b["sms"] for b in out["budgets"]][:3] == [2, 4, 6]


def test_table_and_derivation(capsys):
    assert main(["plan"]) == 0
    out = capsys.readouterr().out
    assert "bottleneck IB" in out
    assert "dispatch: IB carries 3.50 copies x 7,464 B x 4,096 tokens = 107.0 MB per micro-batch; " \
           "at 50 GB/s that is 2,140 us." in out
    assert "so 23.3 SMs keep IB saturated" in out
    assert "DeepEP V2's closed form" in out
    assert "12.8 NVLink copies per token, more than top_k = 8" in out  # the design point is said to be one


def test_parameter_override_and_v2(capsys):
    assert main(["plan", "--preset", "deepep-v2", "--json"]) == 0
    assert 4 <= json.loads(capsys.readouterr().out)["sms"] <= 6
    assert main(["plan", "--scaleout-gbs", "100", "--experts-per-node", "2", "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["params"]["scaleout_gbs"] == 100


def test_routing_file_and_scores(tmp_path, capsys):
    from ptxforge.plan.routing import generate_scores, group_limited_topk

    f = tmp_path / "ids.npy"
    np.save(f, group_limited_topk(generate_scores(1024, 256))[0])
    assert main(["plan", "--routing", str(f), "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["routing"]["tokens"] == 1024 and out["routing"]["nodes_per_token"] <= 4
    assert main(["plan", "--scores", "skewed"]) == 0
    assert "busiest GPU receives" in capsys.readouterr().out


def test_png_written(tmp_path, capsys):
    pytest.importorskip("matplotlib")
    png = tmp_path / "plan.png"
    assert main(["plan", "--png", str(png)]) == 0
    assert png.read_bytes()[:4] == b"\x89PNG"
    assert [p.name for p in tmp_path.iterdir()] == ["plan.png"]  # no temporary left behind


@pytest.mark.parametrize("argv,needle", [
    (["plan", "--preset", "a100"], "choose one of deepseek-v3-h800, deepep-v2, h200, b200"),
    (["plan", "--tokns", "5"], "unknown parameter '--tokns'; valid parameters: --gpus-per-node"),
    (["plan", "--micro-batches", "3"], "micro_batches"),
    (["plan", "--copy-engine", "dma"], "invalid choice"),
    (["plan", "--routing", "/nonexistent.npy"], "error: /nonexistent.npy: no such file\n"),
])
def test_errors_exit_1_without_traceback(argv, needle, capsys):
    try:
        rc = main(argv)
    except SystemExit as e:
        rc = e.code
    assert rc == 1
    err = capsys.readouterr().err
    assert needle in err and "Traceback" not in err


def test_unreadable_routing_file(tmp_path, capsys):
    bad = tmp_path / "ids.npy"
    bad.write_text("not an array")
    assert main(["plan", "--routing", str(bad)]) == 1
    err = capsys.readouterr().err
    assert f"{bad}: not a readable .npy array" in err and "Traceback" not in err


def test_png_to_unwritable_place(capsys):
    pytest.importorskip("matplotlib")
    assert main(["plan", "--png", "/nonexistent/dir/p.png"]) == 1
    err = capsys.readouterr().err  # refused before the plan is made: the folder is checked first
    assert "--png /nonexistent/dir/p.png: the folder /nonexistent/dir does not exist" in err
