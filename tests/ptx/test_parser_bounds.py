"""Bounds on literals and on the nesting of constant expressions: a precise error at FILE:LINE:COL, never a
Python limit (int-to-str conversion, recursion) escaping from parse, validate, print, `check` or `fmt`."""

from __future__ import annotations

import time

import pytest

import ptxforge as pf
from ptxforge.cli.main import main
from ptxforge.ptx.const_expr import ConstExprError, evaluate
from ptxforge.ptx.literals import LiteralOverflow, int_value
from ptxforge.ptx.parser import MAX_NESTING
from ptxforge.ptx.validator import validate

HEADER = ".version 8.5\n.target sm_90\n.address_size 64\n"
HUGE = "0x" + "f" * 4000  # 4,000 hex digits: about 4,800 decimal ones, past Python's int-to-str limit


def entry(line: str) -> str:
    head = HEADER + ".global .u64 g;\n.visible .entry k()\n{\n.reg .b64 %rd<4>;\n.reg .b32 %r<4>;\n"
    return head + line + "\nret;\n}\n"


# (text, line, col) of each place a literal appears: an operand, a symbol offset, an address offset, a register
# count, an array size, a directive's number, .loc
HUGE_PLACES = [
    (entry(f"mov.u64 %rd1, {HUGE};"), 9, 15),
    (entry(f"mov.u64 %rd1, g+{HUGE};"), 9, 17),
    (entry(f"mov.u64 %rd1, -{HUGE};"), 9, 16),
    (entry(f"ld.global.u64 %rd1, [%rd1+{HUGE}];"), 9, 27),
    (entry(f"ld.global.u64 %rd1, [g+{HUGE}];"), 9, 24),
    (entry(f"ld.global.u64 %rd1, [{HUGE}];"), 9, 22),
    (entry(f"mov.u64 %rd1, {HUGE}*2;"), 9, 15),
    (entry(f".reg .b32 %q<{HUGE}>;"), 9, 14),
    (HEADER + f".global .u8 arr[{HUGE}];\n", 4, 17),
    (HEADER + f".visible .entry k() .maxntid {HUGE}\n{{\nret;\n}}\n", 4, 30),
    (entry(f".loc 1 {HUGE} 1"), 9, 8),
    (HEADER + f".global .align {HUGE} .u8 arr[4];\n", 4, 16),
]


@pytest.mark.parametrize("case", range(len(HUGE_PLACES)))
def test_a_4000_digit_literal_is_a_constant_overflow_at_its_place(case):
    text, line, col = HUGE_PLACES[case]
    e = pytest.raises(pf.PTXSyntaxError, pf.parse, text, filename="big.ptx").value
    assert (e.file, e.line, e.col) == ("big.ptx", line, col), str(e)
    assert e.msg == "constant overflow: the integer 0xffffffffffffffffff... (4,002 characters) does not fit in 64 bits"
    str(e)  # formatting the diagnostic converts nothing to decimal


def test_integer_literals_hold_64_bits_in_every_base():
    top = (1 << 64) - 1
    for text in ("0xffffffffffffffff", "18446744073709551615", "01777777777777777777777", "0b" + "1" * 64,
                 "0xFFFFFFFFFFFFFFFFU", "0x" + "0" * 50 + "1f"):
        assert int_value(text) in (top, 31), text
    for text in ("0x10000000000000000", "18446744073709551616", "02000000000000000000000", "0b1" + "0" * 64,
                 "9" * 5000):
        with pytest.raises(LiteralOverflow, match="does not fit in 64 bits"):
            int_value(text)
    assert int_value("1.5") is None and int_value("08") is None


def test_the_largest_64_bit_literals_parse_and_print_back():
    text = entry("mov.u64 %rd1, 0xffffffffffffffff;\nmov.u64 %rd2, -18446744073709551615;\n"
                 "ld.global.u64 %rd1, [%rd1+18446744073709551615];")
    m = pf.parse(text)
    assert m.to_ptx() == text and pf.parse(m.to_ptx(canonical=True)) == m
    assert m.kernels[0].body[2].operands[1].value == (1 << 64) - 1


@pytest.mark.parametrize("command", ["check", "fmt"])
def test_check_and_fmt_report_the_huge_literal(command, tmp_path, capsys):
    path = tmp_path / "big.ptx"
    path.write_text(entry(f"mov.u64 %rd1, g+{HUGE};"))
    assert main([command, str(path)]) == 1
    out, err = capsys.readouterr()
    assert f"{path}:9:17: error: constant overflow" in err and "Traceback" not in out + err


def minus_run(n: int) -> str:
    return entry("mov.u32 %r1, (" + "-" * n + "1);")


def test_unary_minus_signs_nest_up_to_the_limit():
    m = pf.parse(minus_run(MAX_NESTING - 1))  # the parenthesis is one level
    assert m.kernels[0].body[2].operands[1].value == -1
    validate(m)


@pytest.mark.parametrize("n", [MAX_NESTING, 150, 1500, 100_000])
def test_unary_minus_signs_past_the_limit_are_an_error_at_the_first_too_deep_one(n):
    e = pytest.raises(pf.PTXSyntaxError, pf.parse, minus_run(n), filename="neg.ptx").value
    assert (e.line, e.col) == (9, 14 + MAX_NESTING), e.msg
    assert e.msg == f"constant expression nested deeper than {MAX_NESTING} levels (parentheses and unary operators)"


@pytest.mark.parametrize("n", [MAX_NESTING + 1, 3000])
def test_parentheses_in_a_constant_expression_are_bounded_too(n):
    text = entry("mov.u32 %r1, " + "(" * n + "1" + ")" * n + "+1;")
    e = pytest.raises(pf.PTXSyntaxError, pf.parse, text).value
    assert (e.line, e.col) == (9, 14 + MAX_NESTING) and "nested deeper than" in e.msg


def test_parentheses_at_the_limit_fold():
    n = MAX_NESTING
    m = pf.parse(entry("mov.u32 %r1, " + "(" * n + "7" + ")" * n + "*2;"))
    assert m.kernels[0].body[2].operands[1].value == 14


def test_the_evaluator_uses_no_recursion():
    assert evaluate(["~"] * 10_000 + [5], max_nesting=10_000) == 5
    assert evaluate(["("] * 10_000 + [3] + [")"] * 10_000, max_nesting=10_000) == 3
    with pytest.raises(ConstExprError) as ei:
        evaluate(["-"] * 10_000 + [5])
    assert ei.value.index == 100


@pytest.mark.parametrize("tokens,value", [
    ([1, "+", 2, "*", 3], 7), (["(", 1, "<<", 5, ")", "|", 3], 35), ([-7, "/", 2], -3), ([-7, "%", 2], -1),
    (["-", 2, "*", 3], -6), (["!", 0, "&&", 1], 1), ([1, "<", 2, "==", 1], 1), ([(1 << 63) - 1, "+", 1], -(1 << 63)),
    (["-", "(", "-", 9223372036854775807, "-", 1, ")"], -(1 << 63)), (["~", 0, ">>", 60], -1),
])
def test_constant_expressions_fold_as_64_bit_c(tokens, value):
    assert evaluate(tokens) == value


def test_a_long_source_line_is_shown_around_the_caret():
    e = pytest.raises(pf.PTXSyntaxError, pf.parse, minus_run(100_000)).value
    text = str(e)
    assert len(text) < 600
    _, shown, caret = text.split("\n")
    assert shown.startswith("  ...") and shown.endswith("...")
    assert shown[caret.index("^")] == "-"  # the caret still points at the 101st level


def test_nested_parentheses_before_a_long_operand_parse_in_linear_time():
    # Each '(' scanned to the end of the operand to decide whether it opens a constant expression: 100 levels
    # before 200 KB of `1+` took 100 scans of it (seconds); one scan now settles every level.
    text = entry("mov.u32 %r1, " + "(" * MAX_NESTING + "1+" * 100_000 + "%r1;")
    t = time.process_time()
    with pytest.raises(pf.PTXSyntaxError):
        pf.parse(text)
    assert time.process_time() - t < 2.0  # the fuzz campaign's budget: 1 CPU second per 100 KB


def test_constant_and_list_parentheses_nest_in_each_other():
    m = pf.parse(entry("mov.u32 %r1, ((2)*(3+(4)));\nmov.u32 %r2, ((1<<5)|3);"))
    assert [s.operands[1].value for s in m.kernels[0].body[2:4]] == [14, 35]


@pytest.mark.parametrize("text,value", [
    ("~0&255", 255), ("-(-(-1))", -1), ("!0", 1), ("~0", -1), ("-(2*3)", -6), ("~(1<<4)", -17), ("--1", 1),
    ("- -1", 1),
])
def test_a_constant_expression_may_open_with_a_unary_operator(text, value):
    # ptxas 13.0 assembles `mov.u32 %r1, <text>;` for each; the parser refused them ("expected an operand")
    m = pf.parse(entry(f"mov.u32 %r1, {text};"))
    op = m.kernels[0].body[2].operands[1]
    assert (op.value, op.text) == (value, text)
    assert pf.parse(m.to_ptx(canonical=True)) == m


def test_unary_operators_before_a_register_stay_operators():
    m = pf.parse(entry(".reg .pred %p<2>;\nneg.s32 %r1, -%r2;\nnot.pred %p1, !%p0;"))
    neg, notp = m.kernels[0].body[3:5]
    assert type(neg.operands[1]).__name__ == "Minus" and type(notp.operands[1]).__name__ == "Negated"
