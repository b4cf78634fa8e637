"""Hostile parser input: deep nesting, very long lines, header directives out of ptxas's order."""

from __future__ import annotations

import time

import pytest

import ptxforge as pf
from ptxforge.ptx.parser import MAX_NESTING
from ptxforge.ptx.validator import validate

HEADER = ".version 8.5\n.target sm_90\n.address_size 64\n"


def entry(body: str) -> str:
    return HEADER + ".visible .entry k()\n{\n.reg .b32 %r<4>;\n.reg .pred %p<2>;\n" + body + "\nret;\n}\n"


NESTED = {
    "blocks": lambda n: "{" * n + "}" * n,
    "bang": lambda n: "not.pred %p1, " + "!" * n + "%p1;",
    "braces": lambda n: "mov.b32 %r1, " + "{" * n + "%r1" + "}" * n + ";",
    "parens": lambda n: "call f, " + "(" * n + ")" * n + ";",
    "brackets": lambda n: "ld.u32 %r1, " + "[" * n + "%r1" + "]" * n + ";",
    "pipes": lambda n: "setp.eq.u32 " + "|".join(["%p1"] * n) + ", %r1, 2;",
}


@pytest.mark.parametrize("kind", sorted(NESTED))
@pytest.mark.parametrize("n", [500, 5000])
def test_deep_nesting_is_a_syntax_error_naming_the_depth(kind, n):
    with pytest.raises(pf.PTXSyntaxError) as ei:
        pf.parse(entry(NESTED[kind](n)), filename="deep.ptx")
    assert f"nesting deeper than {MAX_NESTING} levels" in str(ei.value)
    assert ei.value.file == "deep.ptx" and ei.value.line == 8


def test_nesting_at_the_limit_parses_prints_and_validates():
    m = pf.parse(entry(NESTED["blocks"](MAX_NESTING) + "\nnot.pred %p1, " + "!" * (MAX_NESTING - 1) + "%p1;"))
    text = m.to_ptx()
    assert pf.parse(text).to_ptx() == text
    validate(m)  # walks every level without hitting the recursion limit


def test_nesting_error_recovers_and_reports_later_errors():
    e = pytest.raises(pf.PTXSyntaxError, pf.parse,
                      entry("{" * 300 + "}" * 300 + "\nadd.s32 %r1 %r1;")).value
    assert len(e.diagnostics) == 2 and "expected ',' or ';'" in e.diagnostics[1].message


def test_a_long_loc_line_parses_in_linear_time():
    # One 1 MB line: a .loc followed by its trailing tokens (this took minutes when every token
    # counted the newlines back to the .loc).
    head = ".version 8.5 .target sm_90 .address_size 64 .visible .entry k() { .loc 1 1 1, function_name"
    text = head + " x" * 500_000 + "; ret; }"
    t = time.perf_counter()
    m = pf.parse(text)
    assert time.perf_counter() - t < 20
    assert m.kernels[0].body[0].extra.count("x") == 500_000


@pytest.mark.parametrize("loc,extra", [
    (".loc 1 2 3", ""),
    (".loc 1 6 1, function_name $L__info_string0, inlined_at 1 9 2",
     ", function_name $L__info_string0, inlined_at 1 9 2"),
])
def test_a_statement_may_follow_a_loc_on_its_line(loc, extra):
    m = pf.parse(entry(loc + " add.s32 %r1, %r1, 1;"))
    loc_node, add = m.kernels[0].body[2:4]
    assert loc_node.extra == extra and add.opcode == "add"
    canon = m.to_ptx(canonical=True)
    assert pf.parse(canon) == m


@pytest.mark.parametrize("text,line,words", [
    (".target sm_90\n.version 8.5\n.address_size 64\n", 1, "missing .version directive before .target"),
    (".version 8.5\n.version 8.5\n.target sm_90\n", 2, "a second .version"),
    (".version 8.5\n.target sm_90\n.address_size 64\n.version 8.5\n", 4, "a second .version"),
    (".version 8.5\n.target sm_90\n.target sm_90\n", 3, "a second .target"),
    (".version 8.5\n.address_size 64\n.target sm_90\n", 2, ".address_size must come once, right after .target"),
    (".version 8.5\n.target sm_90\n.address_size 64\n.address_size 64\n", 4, ".address_size must come once"),
    (".version 8.5\n.global .b32 g;\n.target sm_90\n", 2, "missing .target directive after .version"),
    (".global .b32 g;\n.version 8.5\n.target sm_90\n", 1, "missing .version directive"),
])
def test_header_directives_in_ptxas_order_and_once(text, line, words):
    e = pytest.raises(pf.PTXSyntaxError, pf.parse, text).value
    assert e.line == line and words in e.msg, str(e)


def test_a_module_prints_its_header_once():
    text = pf.parse(HEADER + ".global .b32 g;\n").to_ptx()
    assert text.count(".version") == 1 and text.count(".target") == 1


def test_a_table_of_numbers_gives_the_tokens_of_its_numbers_and_commas():
    """A run of numbers ("1, 2, 3", compilers' tables) is lexed whole and split; it ends where a number token
    would, so a suffix, exponent or letter after its last number stays that token's."""
    from ptxforge.ptx.lexer import tokenize

    for tail, last in (("", "39"), ("U", "39U"), (".5", "39.5"), ("e2", "39e2"), ("x", "39"), (" ;", "39")):
        text = ", ".join(str(n) for n in range(40)) + tail
        toks = tokenize(text, 0)
        nums = [t for t in toks if t[0] == "num"]
        assert [t[1] for t in nums] == [str(n) for n in range(39)] + [last], tail
        assert all(text.startswith(t[1], t[2]) for t in toks)  # every offset points at its token
        assert [t[1] for t in toks if t[0] == "punct"] == [","] * 39 + ([";"] if tail == " ;" else [])
    m = pf.parse(".version 8.0\n.target sm_80\n.address_size 64\n.global .b8 t[40] = {"
                 + ", ".join(str(n) for n in range(40)) + "};\n")
    assert m.items[0].init.text == "{" + ", ".join(str(n) for n in range(40)) + "}"


def test_a_long_digit_run_lexes_in_linear_time():
    """A 20,000-digit literal (a fuzz input took 6 s when a check for tables of numbers backtracked through the
    run from each of its digits), alone and after a table."""
    text = ".version 8.0\n.target sm_80\nmov.u64 %rd1, " + "9" * 20_000 + ";\n" + ", ".join("7" * 15) + ", " \
        + "9" * 20_000 + ";\n"
    t = time.process_time()
    with pytest.raises(pf.PTXSyntaxError):
        pf.parse(text)
    assert time.process_time() - t < 1.0
