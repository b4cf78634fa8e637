"""The tool locator: explicit path, CUDA_HOME, PATH, then the pip wheel, in that order."""

from __future__ import annotations

import os
import stat

import pytest

from ptxforge import toolchain
from ptxforge.toolchain import ToolNotFound, assemble, find_tool


def fake_tool(dir_, name="ptxas"):
    dir_.mkdir(parents=True, exist_ok=True)
    p = dir_ / name
    p.write_text("#!/bin/sh\necho fake\n")
    p.chmod(p.stat().st_mode | stat.S_IEXEC)
    return p


def test_explicit_path_wins(tmp_path, monkeypatch):
    p = fake_tool(tmp_path / "x")
    monkeypatch.setenv("CUDA_HOME", str(tmp_path / "cuda"))
    fake_tool(tmp_path / "cuda" / "bin")
    assert find_tool("ptxas", p) == p
    assert find_tool("ptxas", tmp_path / "x") == p  # a folder works too


def test_explicit_path_that_is_not_a_tool_is_an_error(tmp_path):
    with pytest.raises(ToolNotFound, match="is not an executable"):
        find_tool("ptxas", tmp_path / "nothing")


def test_cuda_home_before_path(tmp_path, monkeypatch):
    home = fake_tool(tmp_path / "cuda" / "bin")
    fake_tool(tmp_path / "onpath")
    monkeypatch.setenv("CUDA_HOME", str(tmp_path / "cuda"))
    monkeypatch.setenv("PATH", str(tmp_path / "onpath"))
    assert find_tool("ptxas") == home


def test_path_before_wheel(tmp_path, monkeypatch):
    monkeypatch.delenv("CUDA_HOME", raising=False)
    monkeypatch.delenv("CUDA_PATH", raising=False)
    on_path = fake_tool(tmp_path / "onpath")
    monkeypatch.setenv("PATH", str(tmp_path / "onpath"))
    assert find_tool("ptxas") == on_path


def test_pip_wheel_is_the_last_resort(tmp_path, monkeypatch):
    monkeypatch.delenv("CUDA_HOME", raising=False)
    monkeypatch.delenv("CUDA_PATH", raising=False)
    monkeypatch.setenv("PATH", str(tmp_path / "empty"))
    wheel = [p for p in toolchain._wheel_candidates("ptxas") if p.is_file()]
    if not wheel:
        pytest.skip("the nvidia-cuda-nvcc wheel is not installed")
    assert find_tool("ptxas") == wheel[0]


def test_not_found_says_where_it_looked(tmp_path, monkeypatch):
    monkeypatch.setenv("CUDA_HOME", str(tmp_path / "cuda"))
    monkeypatch.setenv("PATH", str(tmp_path / "empty"))
    with pytest.raises(ToolNotFound) as ei:
        find_tool("no-such-tool-xyz")
    msg = str(ei.value)
    assert str(tmp_path / "cuda" / "bin" / "no-such-tool-xyz") in msg and "PATH" in msg and "tools extra" in msg


def test_wheel_ptxas_assembles(monkeypatch, tmp_path):
    """The dev extra's ptxas alone (no CUDA install on PATH) can build a cubin."""
    wheel = [p for p in toolchain._wheel_candidates("ptxas") if p.is_file()]
    if not wheel:
        pytest.skip("the nvidia-cuda-nvcc wheel is not installed")
    monkeypatch.delenv("CUDA_HOME", raising=False)
    monkeypatch.setenv("PATH", os.defpath)
    res = assemble(".version 8.0\n.target sm_80\n.address_size 64\n.visible .entry k()\n{\n\tret;\n}\n",
                   "sm_80", ptxas=str(wheel[0]))
    assert res.ok and res.cubin[:4] == b"\x7fELF"
