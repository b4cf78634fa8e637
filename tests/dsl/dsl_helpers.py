"""Helpers for the DSL tests: examples/ on sys.path, assembling with ptxas. (Not a conftest.py: tests/emu
 imports its own conftest by name.)"""

import shutil
import sys
from pathlib import Path

import pytest

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"
if str(EXAMPLES) not in sys.path:
    sys.path.insert(0, str(EXAMPLES))


def _have_ptxas() -> bool:
    try:
        from ptxforge.toolchain import find_tool

        find_tool("ptxas")
        return True
    except Exception:
        return shutil.which("ptxas") is not None


needs_ptxas = pytest.mark.skipif(not _have_ptxas(), reason="ptxas not found (install the dev extra)")


def assemble_ok(text: str, arch: str) -> None:
    """Assert that ptxas accepts `text` for `arch`, showing its messages if not."""
    from ptxforge.toolchain import assemble

    res = assemble(text, arch)
    assert res.ok, f"ptxas -arch={arch} failed:\n{res.stderr}\n{text}"
