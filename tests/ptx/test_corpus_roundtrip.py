"""Every corpus file parses, prints back byte for byte and validates clean; that its canonical form builds
the same cubin is checked in shards (test_corpus_cubins_<k>.py, corpus_cubins.py)."""

from __future__ import annotations

import json
from functools import cache
from pathlib import Path

import pytest
from corpus.known_gaps import xfail_marks

import ptxforge as pf

CORPUS = Path(__file__).resolve().parents[1] / "corpus"
MANIFEST = json.loads((CORPUS / "manifest.json").read_text())["files"]
ENTRIES = {e["path"]: e for e in MANIFEST}
PATHS = sorted(ENTRIES)
@cache  # a file's two tests share its parse where they run on one worker (modules are immutable)
def _parsed(path: str) -> tuple:
    text = (CORPUS / path).read_text()
    return text, pf.parse(text, filename=path)


def test_corpus_is_big_and_varied():
    assert len(PATHS) >= 150
    gens = {e["generator"].split()[0] for e in MANIFEST}
    assert {"nvcc", "triton"} <= gens
    assert {e["arch"] for e in MANIFEST} >= {"sm_80", "sm_89", "sm_90a", "sm_100a"}
    assert any("-G" in e["flags"] for e in MANIFEST)


@pytest.mark.parametrize("path", PATHS)
def test_parse_and_print_back(path):
    text, m = _parsed(path)
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

    _, m = _parsed(path)
    assert [d.format() for d in validate(m)] == []
