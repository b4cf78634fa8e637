"""The validator against ptxas on mutated corpus instructions (see ptxas_mutants.py).

The verdicts of ptxas on a deterministic sample of mutants are recorded in data/ptxas_mutants.json, so this
runs without ptxas; where ptxas is installed, a spread subset is re-run to show the record still holds.
Every disagreement must be listed, with a reason, in ptxas_differences.txt (and nothing listed may agree).
"""

import json

import pytest
from cubin import have
from ptxas_mutants import (
    CORPUS,
    RECORD,
    corpus_sample,
    load_differences,
    mutant_text,
    ptxas_verdict,
    ptxforge_verdict,
)

import ptxforge as pf
from ptxforge.ptx.validator import validate

DATA = json.loads(RECORD.read_text())
MUTANTS = DATA["mutants"]
# The mutants of the few files over 200 KB (curand's 1 MB of state tables: half of all the text parsed here) are
# checked by the slow test; every other mutant in the default suite.
BIG = 200_000
_SIZE = {f: (CORPUS / f).stat().st_size for f in {m["file"] for m in MUTANTS}}
QUICK = [m for m in MUTANTS if _SIZE[m["file"]] <= BIG]
LARGE = [m for m in MUTANTS if _SIZE[m["file"]] > BIG]


def _verdicts(mutants):
    return {m["id"]: ptxforge_verdict(mutant_text(m), m["file"]) for m in mutants}


@pytest.fixture(scope="module")
def verdicts():
    return _verdicts(QUICK)


def test_the_record_still_matches_the_corpus():
    """Every recorded mutant changes a line the corpus still has (the record stays valid as the corpus grows;
    `python tests/ptx/ptxas_mutants.py` re-draws and re-records the sample)."""
    for m in MUTANTS:
        lines = (CORPUS / m["file"]).read_text().splitlines()
        assert lines[m["line"] - 1].strip() == m["original"].strip(), m["id"]
    drawn = {m["id"] for m in corpus_sample()}
    assert {m["id"] for m in MUTANTS} <= drawn  # the generator's draw (files added since add to it)
    assert len(MUTANTS) >= 300 and len({m["kind"] for m in MUTANTS}) >= 12
    assert sum(not m["ptxas"]["ok"] for m in MUTANTS) > 200  # most mutants are errors ptxas names


def _check_listed(verdicts, mutants):
    listed = {i: why for i, why in load_differences().items() if i in verdicts}
    disagree = {m["id"] for m in mutants if verdicts[m["id"]]["ok"] != m["ptxas"]["ok"]}
    unlisted = sorted(disagree - set(listed))
    assert not unlisted, "validator and ptxas disagree (fix or list in ptxas_differences.txt):\n" + "\n".join(
        f"{i}: ptxas {next(m['ptxas'] for m in mutants if m['id'] == i)}, ptxforge {verdicts[i]}" for i in unlisted)
    stale = sorted(set(listed) - disagree)
    assert not stale, f"listed as differences but now in agreement (remove them): {stale}"
    assert all(listed.values()), "every listed difference needs a reason"
    return disagree


def _check_lines(verdicts, mutants):
    wrong = [(m["id"], verdicts[m["id"]]) for m in mutants
             if not verdicts[m["id"]]["ok"] and verdicts[m["id"]]["line"] != m["line"]]
    assert not wrong, wrong


def test_every_disagreement_is_listed_with_a_reason(verdicts):
    assert set(load_differences()) <= {m["id"] for m in MUTANTS}, "a listed difference names no recorded mutant"
    agreement = 1 - len(_check_listed(verdicts, QUICK)) / len(QUICK)
    assert agreement >= 0.97, agreement


def test_rejections_name_the_mutated_line(verdicts):
    _check_lines(verdicts, QUICK)


@pytest.mark.slow
def test_the_mutants_of_the_biggest_files():
    assert 0 < len(LARGE) < len(MUTANTS) / 20
    verdicts = _verdicts(LARGE)
    _check_listed(verdicts, LARGE)
    _check_lines(verdicts, LARGE)


@pytest.mark.skipif(not have("ptxas"), reason="ptxas is not installed")
def test_ptxas_still_gives_the_recorded_verdicts():
    subset = MUTANTS[:: max(1, len(MUTANTS) // 12)]
    got = [(m["id"], ptxas_verdict(mutant_text(m))["ok"]) for m in subset]
    assert got == [(m["id"], m["ptxas"]["ok"]) for m in subset]


HEADER = ".version 8.0\n.target sm_80\n.address_size 64\n.visible .entry k(.param .u64 p)\n{\n"


def _errors(body: str):
    m = pf.parse(HEADER + body + "\n    ret;\n}\n", filename="k.ptx")
    return [(d.line, d.col, d.message) for d in validate(m) if d.severity == "error"]


def test_the_issues_examples():
    regs = "    .reg .b32 %r<4>;\n    .reg .s32 %q<4>;\n    .reg .b64 %rd<4>;\n"
    assert _errors(regs + "    mad.lo.u32 %r0, %ctaid.x, 256, %tid.x;") == [
        (9, 21, "mad.lo.u32: operand 2 is the special register %ctaid.x, which only mov and cvt may read; copy it "
                "first (mov.u32 %r, %ctaid.x)"),
        (9, 36, "mad.lo.u32: operand 4 is the special register %tid.x, which only mov and cvt may read; copy it "
                "first (mov.u32 %r, %tid.x)")]
    assert [e[0] for e in _errors(regs + "    add.s32 %q1, %q2, %q3;\n    add.s65 %q1, %q2, %q3;")] == [10, 10]
    assert _errors(regs + "    ld.global.u32 %r1, [%r1];")[0][2].startswith("ld.global.u32: address register %r1 "
                                                                          "is 32-bit")
    assert _errors(regs + "    mov.u32 %tid.x, %r1;")[0][2] == ("mov.u32: operand 1 is the result, and the special "
                                                              "register %tid.x is read-only")
    assert _errors(regs + "    add.s32 1, %r1, %r2;")[0][2] == "add.s32: operand 1 is the result; it must be a register"
    assert _errors(regs + "    mov.u32 %r1, %tid.x;\n    cvt.u64.u32 %rd1, %tid.x;") == []
