"""Helpers for sanitizer tests: the planted-bug module and a helper that runs a kernel sanitized."""

from __future__ import annotations

import functools
from pathlib import Path

import pytest

KERNELS = Path(__file__).resolve().parent / "kernels"
PLANTED_CU = KERNELS / "planted.cu"
PLANTED_PTX = KERNELS / "planted.sm_80.O3.ptx"


@functools.cache
def planted_module():
    import ptxforge as pf

    if not PLANTED_PTX.exists():
        pytest.fail("tests/sanitizer/kernels/planted.sm_80.O3.ptx is not generated (run generate.py there)")
    return pf.parse(PLANTED_PTX.read_text(), filename=PLANTED_PTX.name)


@functools.cache
def cu_line(marker: str) -> int:
    """The 1-based line of planted.cu that contains `marker` (a unique fragment)."""
    hits = [i for i, line in enumerate(PLANTED_CU.read_text().splitlines(), 1) if marker in line]
    assert len(hits) == 1, f"marker {marker!r} found {len(hits)} times in planted.cu"
    return hits[0]


def ptx_text(line: int) -> str:
    return PLANTED_PTX.read_text().splitlines()[line - 1].strip()


def launch_sanitized(name, grid, block, args, **kw):
    """Run kernel `name` of the planted module sanitized, with the emulator options `kw` besides; returns the
    SanitizerError or None."""
    from ptxforge.emu.sanitizer import SanitizerError

    k = planted_module().kernel(name)
    try:
        k.launch(grid=grid, block=block, args=args, device="emu", options={"sanitize": True, **kw})
    except SanitizerError as e:
        return e
    return None
