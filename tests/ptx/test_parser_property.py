"""Property tests: any text parses or raises PTXSyntaxError; printing, reparsing and validating hold
(the property of ptxforge.ptx.fuzz, which scripts/fuzz_parser.py checks at length)."""

from __future__ import annotations

import random
from pathlib import Path

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from ptxforge.ptx.fuzz import TOKENS, check_input, mutate, seed_texts

CORPUS = Path(__file__).resolve().parent.parent / "corpus" / "ptx"
SEEDS = seed_texts([p.read_text() for p in sorted(CORPUS.glob("cuda/*.sm_90a.O3.ptx"))[:12]], max_chars=3000)
FAST = settings(max_examples=150, deadline=None, suppress_health_check=list(HealthCheck), derandomize=True)


def test_the_seeds_satisfy_the_property():
    assert len(SEEDS) >= 10
    assert [check_input(s) for s in SEEDS].count("parsed") >= len(SEEDS) * 3 // 4


@FAST
@given(st.text(max_size=400))
def test_arbitrary_text(text):
    check_input(text)


@FAST
@given(st.lists(st.sampled_from(TOKENS), max_size=120).map(" ".join))
def test_token_soup(text):
    check_input(".version 8.5\n.target sm_90\n.address_size 64\n" + text)


@FAST
@given(st.sampled_from(range(len(SEEDS))), st.integers(0, 2**32 - 1))
def test_mutated_corpus_functions(index, seed):
    check_input(mutate(SEEDS[index], random.Random(seed)))
