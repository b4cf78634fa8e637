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
from ptxforge.ptx.ir import Module
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


_TOKEN = re.compile(r"""(?P<comment>//[^\n]*|/\*.*?\*/)|"(?:\\.|[^"\\])*"|[A-Za-z_$%.][\w$.%]*"""
                    r"""|0[xXdDfF][0-9a-fA-F]+|\d+\.?\d*(?:[eE][+-]?\d+)?|\S""", re.S)


def _tokens(text: str) -> list[str]:
    """PTX as ptxas reads it: the tokens (strings whole), without whitespace and comments."""
    return [m.group() for m in _TOKEN.finditer(text) if m.group("comment") is None]


def compare(path: str) -> tuple[str, str]:
    """ptxas on the canonical print of `path` against ptxas on the file itself.

    Where the print has the file's tokens (only whitespace and comments differ) and no debug info (whose cubin
    embeds the text and its line numbers), ptxas reads the same program, so the cubins are the same without
    running it (check_shard still runs ptxas on a few of those, to keep that premise checked).
    Modules with debug info (nvcc -G's `.target ..., debug`, Triton's DWARF sections) embed a copy of the
    PTX text in the cubin (.nv_debug_ptx_txt); for them every other section must be identical. The
    byte-identical text check is in test_corpus_roundtrip.py."""
    text = (CORPUS / path).read_text()
    m = pf.parse(text, filename=path)
    printed = m.to_ptx(canonical=True)
    if not has_debug_info(m) and _tokens(printed) == _tokens(text):
        return path, "identical tokens"
    return path, _assembled(path, text, printed, m)


def _assembled(path: str, text: str, printed: str, m: Module) -> str:
    arch = m.target.arch
    a = assemble_ok(_for_ptxas(text), arch)
    b = assemble_ok(_for_ptxas(printed), arch)
    if a == b:
        return "identical"
    if not has_debug_info(m):
        return "DIFFERENT"
    sa, sb = elf_sections(a), elf_sections(b)
    differ = sorted(n for n in set(sa) | set(sb) if sa.get(n) != sb.get(n))
    return "identical but the PTX copy" if differ == [".nv_debug_ptx_txt"] else f"DIFFERENT {differ}"


def check_shard(k: int) -> None:
    paths = shard_paths(k)
    assert paths
    with ThreadPoolExecutor(2) as pool:  # ptxas runs in a process of its own: two at once use both cores
        results = dict(pool.map(compare, paths))
    assert sorted(results) == paths
    bad = {p: r for p, r in results.items() if "DIFFERENT" in r}
    assert not bad, bad
    # the token shortcut's premise, kept checked: ptxas on a few of the files it passed
    shortcut = [p for p, r in results.items() if r == "identical tokens"]
    for path in shortcut[::max(1, len(shortcut) // 3)][:3]:
        text = (CORPUS / path).read_text()
        m = pf.parse(text, filename=path)
        assert _assembled(path, text, m.to_ptx(canonical=True), m) == "identical", path
