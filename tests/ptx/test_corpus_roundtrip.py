"""Every corpus file parses, prints back byte for byte, and its canonical form builds the same cubin."""

from __future__ import annotations

import json
import re
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest
from corpus.known_gaps import xfail_marks
from cubin import assemble_ok, elf_sections, have

import ptxforge as pf
from ptxforge.ptx.printer import has_debug_info

CORPUS = Path(__file__).resolve().parents[1] / "corpus"
MANIFEST = json.loads((CORPUS / "manifest.json").read_text())["files"]
ENTRIES = {e["path"]: e for e in MANIFEST}
PATHS = sorted(ENTRIES)
# ptxas 13.0 accepts PTX ISA up to 9.0; newer generators' files are assembled with .version 9.0
PTXAS_MAX_VERSION = "9.0"


def test_corpus_is_big_and_varied():
    assert len(PATHS) >= 150
    gens = {e["generator"].split()[0] for e in MANIFEST}
    assert {"nvcc", "triton"} <= gens
    assert {e["arch"] for e in MANIFEST} >= {"sm_80", "sm_89", "sm_90a", "sm_100a"}
    assert any("-G" in e["flags"] for e in MANIFEST)


@pytest.mark.parametrize("path", PATHS)
def test_parse_and_print_back(path):
    text = (CORPUS / path).read_text()
    m = pf.parse(text, filename=path)
    assert m.to_ptx() == text  # lossless: byte for byte
    assert sorted(k.name for k in m.kernels) == sorted(ENTRIES[path]["kernels"])
    canon = m.to_ptx(canonical=True)
    again = pf.parse(canon, filename=path)
    assert again == m
    assert again.to_ptx(canonical=True) == canon


@pytest.mark.parametrize("path", [pytest.param(p, marks=xfail_marks(p, "check")) for p in PATHS])
def test_validates_clean(path):
    """No false positives: real compiler output passes the validator."""
    from ptxforge.ptx.validator import validate

    m = pf.parse((CORPUS / path).read_text(), filename=path)
    assert [d.format() for d in validate(m)] == []


def _for_ptxas(text: str) -> str:
    return re.sub(r"^\.version\s+9\.[1-9]\d*", f".version {PTXAS_MAX_VERSION}", text, count=1, flags=re.M)


def _arch(entry) -> str:
    return entry["target"] if entry.get("target") else entry["arch"]


@pytest.mark.skipif(not have("ptxas"), reason="ptxas not found (install the dev extra)")
def test_canonical_text_builds_identical_cubins():
    """ptxas on the canonical print == ptxas on the original, for the whole corpus.

    Modules with debug info (nvcc -G's `.target ..., debug`, Triton's DWARF sections) embed a copy of the
    PTX text in the cubin (.nv_debug_ptx_txt); for them every other section must be identical. The
    byte-identical text check is above.
    """
    def one(path):
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
    with ThreadPoolExecutor(2) as pool:
        results = dict(pool.map(one, PATHS))
    bad = {p: r for p, r in results.items() if "DIFFERENT" in r}
    assert not bad, bad
