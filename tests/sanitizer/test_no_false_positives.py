"""Correct kernels give no report under the sanitizer, and compute exactly what they compute without it.

The kernels are nvcc -O3 and -G PTX of the conformance corpus (tests/corpus/ptx/cuda/*.sm_80.{O3,G}.ptx)
and Triton-generated PTX (tests/corpus/ptx/triton/*.sm_80.ptx);
the correct twins of the planted bugs are checked in test_planted_bugs.py. A kernel the plain emulator
cannot run yet is skipped with its error.
"""

from __future__ import annotations

import functools
from pathlib import Path

import numpy as np
import pytest
from corpus.known_gaps import known_gap
from corpus_launches import LAUNCHES, TRITON_LAUNCHES

CORPUS = Path(__file__).resolve().parents[1] / "corpus" / "ptx" / "cuda"


@functools.cache
def _module(name: str, flavor: str = "O3"):
    import ptxforge as pf

    path = CORPUS / f"{name}.sm_80.{flavor}.ptx" if flavor != "triton" else \
        CORPUS.parent / "triton" / f"{name}.sm_80.ptx"
    if not path.exists():
        pytest.skip(f"{path.name} is not generated")
    return pf.parse(path.read_text(), filename=path.name)


# The corpus leaves out -G builds over 400 KB (cp_async_sm80's); only generated files are cases.
CASES = [(x, f) for f in ("O3", "G") for x in LAUNCHES if (CORPUS / f"{x[0]}.sm_80.{f}.ptx").exists()] + \
    [(x, "triton") for x in TRITON_LAUNCHES]


def _gap(launch, flavor) -> str | None:
    """A known gap (tests/corpus/known_gaps.py) of the emulator or the sanitizer on this case."""
    path = f"ptx/cuda/{launch[0]}.sm_80.{flavor}.ptx"
    return known_gap(path, "sanitize", launch[1]) or known_gap(path, "emulate", launch[1])


def _case(launch, flavor):
    gap = _gap(launch, flavor)
    return pytest.param(launch, flavor, id=f"{launch[0]}.{launch[1]}.{flavor}",
                        marks=[pytest.mark.xfail(strict=True, reason=gap)] if gap else [])


@pytest.mark.parametrize(("launch", "flavor"), [_case(x, f) for x, f in CASES])
def test_corpus_kernel_is_clean(launch, flavor):
    from ptxforge.emu.sanitizer import SanitizerError

    fname, kname, grid, block, make_args, smem = launch
    k = _module(fname, flavor).kernel(kname)
    plain, checked = make_args(), make_args()
    quiet = lambda s: None  # noqa: E731
    try:
        k.launch(grid=grid, block=block, args=plain, device="emu", shared_mem=smem, printf=quiet)
    except Exception as e:  # the emulator itself cannot run it (yet): not the sanitizer's business
        if _gap(launch, flavor):  # a declared gap fails (strict xfail) rather than skipping
            raise
        pytest.skip(f"plain emulation fails: {type(e).__name__}: {str(e)[:120]}")
    try:
        k.launch(grid=grid, block=block, args=checked, device="emu", shared_mem=smem, sanitize=True,
                 printf=quiet)
    except SanitizerError as e:
        pytest.fail(f"false positive on {fname}.{flavor}.{kname}:\n{e}")
    for a, b in zip(plain, checked, strict=True):
        if isinstance(a, np.ndarray):
            np.testing.assert_array_equal(a, b)


def test_corpus_kernels_clean_in_shuffled_block_order():
    from ptxforge.emu.sanitizer import Sanitizer

    for fname, kname, grid, block, make_args, smem in LAUNCHES[:12]:
        k = _module(fname).kernel(kname)
        plain, checked = make_args(), make_args()
        try:
            k.launch(grid=grid, block=block, args=plain, device="emu", shared_mem=smem)
        except Exception:
            continue
        san = Sanitizer(shuffle_seed=7)
        k.launch(grid=grid, block=block, args=checked, device="emu", shared_mem=smem, sanitize=san)
        assert not san.reports, f"{kname}: {san.error()}"
        for a, b in zip(plain, checked, strict=True):
            if isinstance(a, np.ndarray) and a.dtype.kind != "f":  # float atomics may sum in another order
                np.testing.assert_array_equal(a, b)


def test_every_launch_has_its_o3_ptx():
    """Only -G builds may be missing (the corpus caps their size); the -O3 ones must all be there."""
    missing = [x[0] for x in LAUNCHES if not (CORPUS / f"{x[0]}.sm_80.O3.ptx").exists()]
    assert not missing
