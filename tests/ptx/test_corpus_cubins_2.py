"""One shard of the corpus cubin check: ptxas builds the same cubin from the canonical print as from the
original file (corpus_cubins.py; the shard is the number in this file's name)."""

import pytest
from corpus.shards import shard_index
from corpus_cubins import check_shard, needs_ptxas

pytestmark = [pytest.mark.slow, needs_ptxas]


def test_canonical_text_builds_identical_cubins():
    check_shard(shard_index(__file__))

