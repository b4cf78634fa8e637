"""scripts/calibrate_copy.py: its DSL copy kernels are right on the emulator (and assemble where ptxas is),
and the figures it records reach the presets."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest

from ptxforge.plan import calibration, preset
from ptxforge.plan.presets import PRESETS

SCRIPT = Path(__file__).resolve().parents[2] / "scripts" / "calibrate_copy.py"


@pytest.fixture(scope="module")
def script():
    spec = importlib.util.spec_from_file_location("calibrate_copy", SCRIPT)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def test_copy_kernels_move_the_right_bytes(script, capsys):
    assert script.check() == 0
    out = capsys.readouterr().out
    assert out.count("emulator ok") == 6 and "WRONG" not in out and "FAILED" not in out


def test_recorded_figures_reach_the_preset(script, tmp_path, monkeypatch):
    target = tmp_path / "calibration.py"
    target.write_text(Path(calibration.__file__).read_text())
    monkeypatch.setattr(script, "CALIBRATION", target)
    script.write_calibration("h200", {"ldst_read_gbs": 31.5, "ldst_write_gbs": 31.5}, "NVIDIA H200")
    ns: dict = {}
    exec(target.read_text(), ns)
    entry = ns["MEASURED"]["h200"]
    assert entry["device"] == "NVIDIA H200" and entry["date"]
    monkeypatch.setattr(calibration, "MEASURED", ns["MEASURED"])
    p = preset("h200")
    assert p.ldst_read_gbs == 31.5 and p.ldst_write_gbs == 31.5
    assert "measured on NVIDIA H200" in PRESETS["h200"].source("ldst_read_gbs")
    assert preset("b200").ldst_read_gbs == 40.1  # other presets keep their figures


def test_no_gpu_says_so(script, monkeypatch, capsys):
    import ptxforge.runtime.cuda_driver as drv

    if drv.unavailable_reason() is None:
        pytest.skip("a GPU is here: the script would measure")
    monkeypatch.setattr("sys.argv", ["calibrate_copy.py"])
    assert script.main() == 0
    assert "no GPU here" in capsys.readouterr().out
