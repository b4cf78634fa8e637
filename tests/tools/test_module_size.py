"""Modules stay small and single-purpose (DESIGN.md): none of `src/ptxforge` passes 800 lines, and the
modules split for it keep their public names importable from where they were."""

from __future__ import annotations

import importlib
from pathlib import Path

import pytest

import ptxforge

PACKAGE = Path(ptxforge.__file__).parent
LIMIT = 800


def test_no_module_passes_the_limit():
    big = sorted((len(p.read_text().splitlines()), str(p.relative_to(PACKAGE.parent)))
                 for p in PACKAGE.rglob("*.py"))
    over = [f"{path}: {n} lines" for n, path in big if n > LIMIT]
    assert not over, f"modules over {LIMIT} lines (split them by purpose):\n" + "\n".join(over)


@pytest.mark.parametrize("module, names", [
    ("ptxforge.emu.machine", ["Machine", "LaneState", "LazyLanes", "MAX_CALL_DEPTH", "MAX_WAVE_LOG", "NBARRIERS",
                              "QUANTUM", "RESERVED_SMEM", "STATIC_CACHE_BYTES"]),
    ("ptxforge.ptx.parser", ["Parser", "parse", "parse_file", "MAX_NESTING", "MAX_REGISTER_RANGE",
                             "SPECIAL_REGISTERS", "LINKAGES", "VAR_SPACES", "PERF_DIRECTIVES"]),
    ("ptxforge.emu.sanitizer.core", ["Sanitizer"]),
])
def test_split_modules_keep_their_names(module, names):
    mod = importlib.import_module(module)
    missing = [n for n in names if not hasattr(mod, n)]
    assert not missing, f"{module} lost {missing}"
