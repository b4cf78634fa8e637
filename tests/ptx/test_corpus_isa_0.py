"""One shard of the ISA table's check on real PTX: no instruction of nvcc/Triton/numba output raises a
problem (corpus_isa.py; the shard is the number in this file's name)."""

import pytest
from corpus.shards import shard_index
from corpus_isa import check_shard

pytestmark = pytest.mark.slow


def test_corpus_has_no_isa_problems():
    check_shard(shard_index(__file__), min_instructions=3_000)
