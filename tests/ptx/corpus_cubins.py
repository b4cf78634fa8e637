"""The canonical-print cubin check of test_corpus_roundtrip.py, sharded over test_corpus_cubins_<k>.py
(ptxas on the whole corpus takes minutes; the shards spread it over the workers of `pytest -n`)."""

from __future__ import annotations

import json
import re
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest
from corpus.shards import shard
from cubin import assemble_ok, elf_sections, have

import ptxforge as pf
from ptxforge.ptx.printer import has_debug_info

CORPUS = Path(__file__).resolve().parents[1] / "corpus"
PATHS = sorted(e["path"] for e in json.loads((CORPUS / "manifest.json").read_text())["files"])
SHARDS = 4  # the files test_corpus_cubins_0.py .. _3.py
# ptxas 13.0 accepts PTX ISA up to 9.0; newer generators' files are assembled with .version 9.0
PTXAS_MAX_VERSION = "9.0"

needs_ptxas = pytest.mark.skipif(not have("ptxas"), reason="ptxas not found (install the dev extra)")


def shard_paths(k: int) -> list[str]:
    return shard(PATHS, k, SHARDS, size=lambda p: (CORPUS / p).stat().st_size)


def _for_ptxas(text: str) -> str:
    return re.sub(r"^\.version\s+9\.[1-9]\d*", f".version {PTXAS_MAX_VERSION}", text, count=1, flags=re.M)


def compare(path: str) -> tuple[str, str]:
    """ptxas on the canonical print of `path` against ptxas on the file itself.

    Modules with debug info (nvcc -G's `.target ..., debug`, Triton's DWARF sections) embed a copy of the
    PTX text in the cubin (.nv_debug_ptx_txt); for them every other section must be identical. The
    byte-identical text check is in test_corpus_roundtrip.py."""
    text = (CORPUS / path).read_text()
    m = pf.parse(text, filename=path)
    arch = m.target.arch
    a = assemble_ok(_for_ptxas(text), arch)
    b = assemble_ok(_for_ptxas(m.to_ptx(canonical=True)), arch)
    if a == b:
        return path, "identical"
    if not has_debug_info(m):
        return path, "DIFFERENT"
    sa, sb = elf_sections(a), elf_sections(b)
    differ = sorted(n for n in set(sa) | set(sb) if sa.get(n) != sb.get(n))
    return path, "identical but the PTX copy" if differ == [".nv_debug_ptx_txt"] else f"DIFFERENT {differ}"


def check_shard(k: int) -> None:
    paths = shard_paths(k)
    assert paths
    with ThreadPoolExecutor(2) as pool:  # ptxas runs in a process of its own: two at once use both cores
        results = dict(pool.map(compare, paths))
    assert sorted(results) == paths
    bad = {p: r for p, r in results.items() if "DIFFERENT" in r}
    assert not bad, bad
