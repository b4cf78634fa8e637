"""The sharded corpus checks leave no file out: for each, the shards are disjoint, together hold the whole
corpus, and each shard has its test file (tests/corpus/shards.py)."""

from pathlib import Path

import corpus_cubins
import corpus_isa
import pytest
from corpus.shards import shard, shard_files

HERE = Path(__file__).resolve().parent


@pytest.mark.parametrize(("check", "prefix"), [(corpus_cubins, "test_corpus_cubins"),
                                               (corpus_isa, "test_corpus_isa")])
def test_the_shards_cover_every_corpus_file_once(check, prefix):
    shards = [check.shard_paths(k) for k in range(check.SHARDS)]
    everything = [p for s in shards for p in s]
    assert len(check.PATHS if check is corpus_cubins else check.CORPUS) > 150
    assert sorted(everything) == sorted(check.PATHS if check is corpus_cubins else check.CORPUS)
    assert len(set(everything)) == len(everything)
    files = shard_files(HERE, prefix)
    assert [f.name for f in files] == [f"{prefix}_{k}.py" for k in range(check.SHARDS)]
    assert all(shards), "an empty shard"


def test_shards_are_balanced_and_deterministic():
    sizes = {f"f{i}": s for i, s in enumerate([90, 70, 50, 40, 30, 20, 10, 5])}
    got = [shard(list(sizes), k, 3, size=sizes.get) for k in range(3)]
    assert got == [shard(list(reversed(sizes)), k, 3, size=sizes.get) for k in range(3)]
    loads = [sum(sizes[x] for x in s) for s in got]
    assert max(loads) - min(loads) <= 10 and sorted(x for s in got for x in s) == sorted(sizes)
    with pytest.raises(ValueError):
        shard(list(sizes), 3, 3, size=sizes.get)
