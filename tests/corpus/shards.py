"""Split a long check over the corpus into shards kept in separate test files, so that `pytest -n 2` runs
them side by side (also with `--dist loadfile`, which sends each file to one worker).

`shard(items, k, n, size)` is deterministic: largest items first, each to the shard with the least total
size so far; the n shards are disjoint and together hold every item (tests/ptx/test_corpus_shards.py
checks that for each sharded check)."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from pathlib import Path


def shard(items: Sequence, k: int, n: int, size: Callable[[object], int]) -> list:
    """The `k`-th of `n` shards of `items`, balanced by `size` (e.g. the file size in bytes)."""
    if not 0 <= k < n:
        raise ValueError(f"shard {k} of {n}")
    bins: list[list] = [[] for _ in range(n)]
    load = [0] * n
    for item in sorted(items, key=lambda x: (-size(x), str(x))):
        i = min(range(n), key=lambda j: (load[j], j))
        bins[i].append(item)
        load[i] += size(item)
    return sorted(bins[k], key=str)


def shard_index(test_file: str) -> int:
    """The shard a test file runs: the number its name ends with (test_corpus_isa_2.py -> 2)."""
    return int(Path(test_file).stem.rsplit("_", 1)[1])


def shard_files(folder: Path, prefix: str) -> list[Path]:
    """The test files of one sharded check, by name: <prefix>_0.py, <prefix>_1.py, ..."""
    return sorted(folder.glob(f"{prefix}_[0-9]*.py"), key=shard_index)
