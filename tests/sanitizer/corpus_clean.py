"""The no-false-positive check of test_no_false_positives*.py: a correct corpus kernel gives no report
under the sanitizer and computes exactly what it computes without it. The cases are split over two files
(-O3 and Triton; -G) so that `pytest -n 2` runs them side by side.

Every case runs: a kernel the emulator or the sanitizer cannot handle yet must be declared in
tests/corpus/known_gaps.py, which makes it a strict xfail (so its fix shows up as an XPASS); nothing is
skipped."""

from __future__ import annotations

import functools
from pathlib import Path

import numpy as np
import pytest
from corpus.known_gaps import known_gap
from corpus_launches import LAUNCHES, TRITON_LAUNCHES

CORPUS = Path(__file__).resolve().parents[1] / "corpus" / "ptx" / "cuda"


@functools.cache
def module(name: str, flavor: str = "O3"):
    import ptxforge as pf

    path = CORPUS / f"{name}.sm_80.{flavor}.ptx" if flavor != "triton" else \
        CORPUS.parent / "triton" / f"{name}.sm_80.ptx"
    if not path.exists():
        pytest.fail(f"{path} is not generated (tests/corpus/generate.py writes it)")
    return pf.parse(path.read_text(), filename=path.name)


# The corpus leaves out -G builds over 400 KB (cp_async_sm80's); only generated files are cases.
CASES = [(x, f) for f in ("O3", "G") for x in LAUNCHES if (CORPUS / f"{x[0]}.sm_80.{f}.ptx").exists()] + \
    [(x, "triton") for x in TRITON_LAUNCHES]


def gap(launch, flavor) -> str | None:
    """A known gap (tests/corpus/known_gaps.py) of the emulator or the sanitizer on this case."""
    path = f"ptx/cuda/{launch[0]}.sm_80.{flavor}.ptx"
    return known_gap(path, "sanitize", launch[1]) or known_gap(path, "emulate", launch[1])


def cases(flavors) -> list:
    """pytest params of the cases of `flavors`, a declared gap as a strict xfail."""
    out = []
    for launch, flavor in CASES:
        if flavor in flavors:
            g = gap(launch, flavor)
            out.append(pytest.param(launch, flavor, id=f"{launch[0]}.{launch[1]}.{flavor}",
                                    marks=[pytest.mark.xfail(strict=True, reason=g)] if g else []))
    return out


def check_clean(launch, flavor) -> None:
    from ptxforge.emu.sanitizer import SanitizerError

    fname, kname, grid, block, make_args, smem = launch
    k = module(fname, flavor).kernel(kname)
    plain, checked = make_args(), make_args()
    quiet = lambda s: None  # noqa: E731
    k.launch(grid=grid, block=block, args=plain, device="emu", shared_mem=smem, options={"printf": quiet})
    try:
        k.launch(grid=grid, block=block, args=checked, device="emu", shared_mem=smem,
                 options={"sanitize": True, "printf": quiet})
    except SanitizerError as e:
        pytest.fail(f"false positive on {fname}.{flavor}.{kname}:\n{e}")
    for a, b in zip(plain, checked, strict=True):
        if isinstance(a, np.ndarray):
            np.testing.assert_array_equal(a, b)
