"""Correct kernels give no report under the sanitizer: the nvcc -G builds of the conformance corpus
(tests/corpus/ptx/cuda/*.sm_80.G.ptx; the check in corpus_clean.py, the -O3 and Triton builds in
test_no_false_positives.py)."""

import pytest
from corpus_clean import cases, check_clean

pytestmark = pytest.mark.slow  # every corpus launch twice (plain, sanitized)


@pytest.mark.parametrize(("launch", "flavor"), cases(("G",)))
def test_corpus_kernel_is_clean(launch, flavor):
    check_clean(launch, flavor)


def test_most_launches_have_a_debug_build():
    assert len(cases(("G",))) >= 50
