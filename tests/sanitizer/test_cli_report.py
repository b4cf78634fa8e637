"""`ptxforge run --sanitize --report FILE`: JSON for CI, exit status 1 on findings, outputs still saved."""

from __future__ import annotations

import json

import numpy as np
from san_helpers import PLANTED_PTX


def run_cli(*argv) -> int:
    from ptxforge.cli.main import main

    return main(["run", str(PLANTED_PTX), *argv])


def test_findings_fail_the_run_and_land_in_the_json(tmp_path, capsys):
    n = 300
    a = np.arange(n, dtype=np.float32)
    np.save(tmp_path / "a.npy", a)
    report = tmp_path / "report.json"
    rc = run_cli("--kernel", "oob_global_write", "--grid", "2", "--block", "256",
                 "--arg", str(tmp_path / "a.npy"), "--arg", f"{tmp_path / 'out.npy'}=zeros:{n}:float32",
                 "--arg", str(n), "--report", str(report))
    assert rc == 1
    err = capsys.readouterr().err
    assert "Invalid __global__ write of size 4 bytes" in err and "ERROR SUMMARY" in err
    data = json.loads(report.read_text())
    assert data["kernel"] == "oob_global_write" and data["error_sites"] == 1
    r = data["reports"][0]
    assert (r["kind"], r["access"], r["thread"], r["block"]) == ("out-of-bounds", "write", [43, 0, 0], [1, 0, 0])
    out = np.load(tmp_path / "out.npy")  # the in-bounds results were saved
    np.testing.assert_array_equal(out[1:], 2 * a[:-1])


def test_clean_run_writes_an_empty_report(tmp_path):
    n = 300
    np.save(tmp_path / "a.npy", np.ones(n, np.float32))
    report = tmp_path / "report.json"
    rc = run_cli("--kernel", "oob_global_write_ok", "--grid", "2", "--block", "256",
                 "--arg", str(tmp_path / "a.npy"), "--arg", f"{tmp_path / 'out.npy'}=zeros:{n}:float32",
                 "--arg", str(n), "--sanitize", "--report", str(report))
    assert rc == 0
    data = json.loads(report.read_text())
    assert data["error_sites"] == 0 and data["reports"] == []
