"""README.md's and the guides' (docs/*.md) python code blocks run as written.

README's blocks run in order in one namespace (the tour builds on itself); each guide's blocks then run in
order in a copy of that namespace, so a guide may use the tour's `a`, `b`, `k`. A block preceded by a line
`<!-- readme-test: skip (REASON) -->` is left out (say why: it needs a GPU, several processes, ...)."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
README = ROOT / "README.md"
GUIDES = sorted((ROOT / "docs").glob("*.md"))
_BLOCK = re.compile(r"(?P<before>[^\n]*)\n```python\n(?P<code>.*?)\n```", re.S)


def blocks(path: Path = README) -> list[tuple[int, str]]:
    text = path.read_text()
    out = []
    for m in _BLOCK.finditer(text):
        if "readme-test: skip" in m.group("before"):
            continue
        out.append((text[: m.start("code")].count("\n") + 1, m.group("code")))
    return out


def run_blocks(path: Path, ns: dict) -> None:
    for line, code in blocks(path):
        try:
            exec(compile(code, f"{path}:{line}", "exec"), ns)
        except Exception as e:  # name the block that broke
            pytest.fail(f"{path.relative_to(ROOT)} block at line {line} raised {type(e).__name__}: {e}")


def test_readme_has_a_tour():
    assert len(blocks()) >= 2


def test_readme_python_blocks_run(tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    run_blocks(README, {"__name__": "__readme__"})
    out = capsys.readouterr().out
    assert "SMs busy" in out and "takes float32 elements; got a numpy array of float64" in out


@pytest.mark.parametrize("guide", [g for g in GUIDES if blocks(g)], ids=lambda g: g.name)
def test_guide_python_blocks_run(guide, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    ns: dict = {"__name__": "__readme__"}
    run_blocks(README, ns)
    run_blocks(guide, ns)


def test_readme_links_resolve():
    """Every relative link of README.md and the guides names a file that exists."""
    missing = []
    for doc in [README, *GUIDES]:
        for target in re.findall(r"\]\(([^)#\s]+)(?:#[^)]*)?\)", doc.read_text()):
            if "://" in target or target.startswith("mailto:"):
                continue
            if not (doc.parent / target).exists():
                missing.append(f"{doc.relative_to(ROOT)}: {target}")
    assert not missing, missing
