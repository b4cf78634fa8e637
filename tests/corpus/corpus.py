"""Read access to the PTX corpus: the manifest and its files, filtered by generator, arch and flags.

Usage (tests put tests/ on sys.path, or import this file by path):

    from corpus.corpus import corpus_files, manifest
    for path in corpus_files(generator="nvcc", arch="sm_90a", flags="-O3"):
        text = path.read_text()
"""

from __future__ import annotations

import json
from functools import lru_cache
from pathlib import Path

CORPUS_DIR = Path(__file__).resolve().parent
MANIFEST_PATH = CORPUS_DIR / "manifest.json"


@lru_cache(maxsize=1)
def _load() -> tuple[dict, ...]:
    if not MANIFEST_PATH.exists():
        raise FileNotFoundError(f"{MANIFEST_PATH} is missing: run tests/corpus/generate.py to create it")
    return tuple(json.loads(MANIFEST_PATH.read_text())["files"])


def manifest() -> list[dict]:
    """All manifest entries (copies), sorted by path. Each has path (relative to tests/corpus), source,
    generator (e.g. "nvcc 13.0", "triton 3.9.0", "numba-cuda 0.30.4"), generator_version, arch, flags,
    kernels, ptx_version, target and ptxas_ok (whether `ptxas -arch=<target>` accepted it)."""
    return [dict(e) for e in _load()]


def _matches(value: str, wanted: str | None) -> bool:
    return wanted is None or value == wanted or value.split(" ")[0] == wanted


def corpus_files(generator: str | None = None, arch: str | None = None, flags: str | None = None) -> list[Path]:
    """Absolute paths of the corpus PTX files that match every filter given.

    generator: "nvcc", "triton" or "numba-cuda" (the tool name alone) or the full value ("nvcc 13.0").
    arch: exact, e.g. "sm_80", "sm_90a", "sm_100a".
    flags: exact flags string ("-O3", "-G -lineinfo") or its first word ("-G").
    """
    out = []
    for e in _load():
        if _matches(e["generator"], generator) and (arch is None or e["arch"] == arch) \
                and _matches(e.get("flags", ""), flags):
            out.append(CORPUS_DIR / e["path"])
    return out
