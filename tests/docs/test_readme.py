"""README.md's python code blocks run as written, in order, in one namespace (a tour builds on itself).

A block preceded by a line `<!-- readme-test: skip (REASON) -->` is left out (say why: it needs a GPU,
several processes, ...)."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

README = Path(__file__).resolve().parents[2] / "README.md"
_BLOCK = re.compile(r"(?P<before>[^\n]*)\n```python\n(?P<code>.*?)\n```", re.S)


def blocks() -> list[tuple[int, str]]:
    text = README.read_text()
    out = []
    for m in _BLOCK.finditer(text):
        if "readme-test: skip" in m.group("before"):
            continue
        out.append((text[: m.start("code")].count("\n") + 1, m.group("code")))
    return out


def test_readme_has_a_tour():
    assert len(blocks()) >= 2


def test_readme_python_blocks_run(tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    ns: dict = {"__name__": "__readme__"}
    for line, code in blocks():
        try:
            exec(compile(code, f"{README}:{line}", "exec"), ns)
        except Exception as e:  # name the block that broke
            pytest.fail(f"README.md block at line {line} raised {type(e).__name__}: {e}")
    out = capsys.readouterr().out
    assert "SMs busy" in out and "takes float32 elements; got a numpy array of float64" in out
