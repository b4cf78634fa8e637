"""Tools are found in explicit options, CUDA_HOME, PATH (absolute entries) and the installed NVIDIA wheels,
never in the current directory or other sys.path entries."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from ptxforge.toolchain import ToolNotFound, find_tool

SRC = Path(__file__).resolve().parents[2] / "src"
VADD = ".version 8.5\n.target sm_90\n.address_size 64\n.visible .entry k()\n{\nret;\n}\n"


def plant(where: Path) -> Path:
    """A fake ptxas that leaves a mark when run."""
    marker = where / "PLANTED_PTXAS_RAN"
    for sub in ("nvidia/cu13/bin", "nvidia/cuda_nvcc/bin", "."):
        fake = where / sub / "ptxas"
        fake.parent.mkdir(parents=True, exist_ok=True)
        fake.write_text(f"#!/bin/sh\ntouch {marker}\nexit 0\n")
        fake.chmod(0o755)
    return marker


def test_a_ptxas_planted_in_the_working_directory_is_not_run(tmp_path):
    marker = plant(tmp_path)
    (tmp_path / "k.ptx").write_text(VADD)
    # PATH without a real ptxas but with '' and '.' (both mean the current directory to a shell)
    env = {k: v for k, v in os.environ.items() if k not in ("CUDA_HOME", "CUDA_PATH")}
    env["PATH"] = os.pathsep.join(["", ".", str(Path(sys.executable).parent), "/usr/bin", "/bin"])
    env["PYTHONPATH"] = str(SRC)
    r = subprocess.run([sys.executable, "-m", "ptxforge.cli.main", "check", "--ptxas", "k.ptx"], cwd=tmp_path,
                       env=env, capture_output=True, text=True, timeout=120)
    assert "Traceback" not in r.stderr
    assert not marker.exists(), "the planted ptxas ran"
    # either the wheel's ptxas assembled it, or no ptxas was found and the error says where it looked
    assert r.returncode == 0 or "ptxas not found" in r.stderr, r.stderr


def test_find_tool_ignores_the_cwd_and_sys_path(tmp_path, monkeypatch):
    plant(tmp_path)
    monkeypatch.chdir(tmp_path)
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.setenv("PATH", os.pathsep.join(["", ".", "/nonexistent"]))
    monkeypatch.delenv("CUDA_HOME", raising=False)
    monkeypatch.delenv("CUDA_PATH", raising=False)
    try:
        found = find_tool("ptxas")
    except ToolNotFound as e:
        assert str(tmp_path) not in str(e)
    else:
        assert tmp_path not in found.resolve().parents and "site-packages" in str(found)


def test_explicit_and_cuda_home_still_work(tmp_path, monkeypatch):
    plant(tmp_path)
    assert find_tool("ptxas", explicit=tmp_path / "nvidia/cu13/bin") == tmp_path / "nvidia/cu13/bin/ptxas"
    monkeypatch.setenv("CUDA_HOME", str(tmp_path / "nvidia/cu13"))
    assert find_tool("ptxas") == tmp_path / "nvidia/cu13/bin/ptxas"
    with pytest.raises(ToolNotFound, match="is not an executable"):
        find_tool("ptxas", explicit=tmp_path / "missing")
