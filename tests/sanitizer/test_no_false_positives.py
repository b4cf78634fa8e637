"""Correct kernels give no report under the sanitizer, and compute exactly what they compute without it:
nvcc -O3 PTX of the conformance corpus (tests/corpus/ptx/cuda/*.sm_80.O3.ptx) and Triton-generated PTX
(tests/corpus/ptx/triton/*.sm_80.ptx); the -G builds are in test_no_false_positives_g.py, the check in
corpus_clean.py (every case runs; known gaps are strict xfails). The correct twins of the planted bugs are
checked in test_planted_bugs.py.
"""

from __future__ import annotations

import numpy as np
import pytest
from corpus_clean import CORPUS, cases, check_clean, gap, module
from corpus_launches import LAUNCHES

pytestmark = pytest.mark.slow  # every corpus launch twice (plain, sanitized)


@pytest.mark.parametrize(("launch", "flavor"), cases(("O3", "triton")))
def test_corpus_kernel_is_clean(launch, flavor):
    check_clean(launch, flavor)


def test_corpus_kernels_clean_in_shuffled_block_order():
    from ptxforge.emu.sanitizer import Sanitizer

    launches = [x for x in LAUNCHES[:12] if not gap(x, "O3")]  # the declared gaps fail in the test above
    assert len(launches) >= 10
    for fname, kname, grid, block, make_args, smem in launches:
        k = module(fname).kernel(kname)
        plain, checked = make_args(), make_args()
        k.launch(grid=grid, block=block, args=plain, device="emu", shared_mem=smem)
        san = Sanitizer(shuffle_seed=7)
        k.launch(grid=grid, block=block, args=checked, device="emu", shared_mem=smem, options={"sanitize": san})
        assert not san.reports, f"{kname}: {san.error()}"
        for a, b in zip(plain, checked, strict=True):
            if isinstance(a, np.ndarray) and a.dtype.kind != "f":  # float atomics may sum in another order
                np.testing.assert_array_equal(a, b)


def test_every_launch_has_its_o3_ptx():
    """Only -G builds may be missing (the corpus caps their size); the -O3 ones must all be there."""
    missing = [x[0] for x in LAUNCHES if not (CORPUS / f"{x[0]}.sm_80.O3.ptx").exists()]
    assert not missing
