"""Mutated real PTX must give a clean PTXSyntaxError or a module, never any other exception."""

from __future__ import annotations

from pathlib import Path

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import ptxforge as pf

DATA = Path(pf.__file__).parent / "data" / "demo.sm_90a.ptx"
SEED = DATA.read_text()
FRAGMENTS = ["{", "}", ";", ",", "[", "]", "(", ")", "<", ">", "@", "!", "|", "+", "-", ":", ".reg", ".b32",
             "%r1", "0f", "0x", "999999999999999999999", ".section", ".entry", ".func", ".loc", "\"", "/*",
             "//", "\n", "_", "$L", ".version", ".target", "%tid.x", ".param", "=", "0d1", "1.5e", "\\"]


@st.composite
def mutated(draw):
    text = SEED
    for _ in range(draw(st.integers(1, 4))):
        i = draw(st.integers(0, len(text)))
        kind = draw(st.sampled_from(["delete", "insert", "duplicate", "fragment"]))
        if kind == "delete":
            j = min(len(text), i + draw(st.integers(1, 40)))
            text = text[:i] + text[j:]
        elif kind == "insert":
            text = text[:i] + draw(st.text(min_size=1, max_size=8)) + text[i:]
        elif kind == "duplicate":
            j = min(len(text), i + draw(st.integers(1, 80)))
            text = text[:i] + text[i:j] + text[i:]
        else:
            text = text[:i] + draw(st.sampled_from(FRAGMENTS)) + text[i:]
    return text


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(mutated())
def test_mutated_ptx_parses_or_fails_cleanly(text):
    try:
        m = pf.parse(text, filename="fuzz.ptx")
    except pf.PTXSyntaxError as e:
        assert e.diagnostics and all(d.file == "fuzz.ptx" and d.line >= 1 for d in e.diagnostics)
        assert str(e)
        return
    # whatever parses must print back exactly and re-parse to the same IR in canonical form
    assert m.to_ptx() == text
    assert pf.parse(m.to_ptx(canonical=True)) == m
