"""Vector registers by any legal name (with or without `%`), as call arguments and `.reg` parameters, and
mov's packed vectors, validated as ptxas 13.0 does (each verdict is re-checked with ptxas where it is found)."""

import pytest
from vector_register_ptx import BARE, CALLS, HEAD

import ptxforge as pf
from ptxforge.ptx.validator import validate
from ptxforge.toolchain import ToolNotFound, assemble, find_tool


def _ptxas_ok(text: str) -> bool | None:
    try:
        find_tool("ptxas")
    except ToolNotFound:
        return None
    return assemble(text, "sm_90a").ok


@pytest.mark.parametrize("text", [BARE, CALLS], ids=["bare-names", "calls"])
def test_accepted_as_ptxas_accepts(text):
    m = pf.parse(text, filename="v.ptx")
    assert validate(m) == []
    assert pf.parse(m.to_ptx(), filename="v.ptx").to_ptx() == m.to_ptx()
    assert _ptxas_ok(text) in (True, None)


@pytest.mark.parametrize("old, new, message", [
    # ptxas: "Type of argument does not match formal parameter 'a'"
    ("call (temp), impl, (temp);", "call (temp), impl, (s);",
     "call to impl: s (.b32, 4 bytes) does not match parameter .reg .v2 .u32 a (8 bytes)"),
    ("call (temp), impl, (temp);", "call (s), impl, (temp);",
     "call to impl: s (.b32, 4 bytes) does not match parameter .reg .v2 .u32 r (8 bytes)"),
])
def test_call_arguments_refused_as_ptxas_refuses(old, new, message):
    text = CALLS.replace(old, new)
    ps = validate(pf.parse(text, filename="v.ptx"))
    assert [p.message for p in ps] == [message]
    assert ps[0].line == text[: text.index(new)].count("\n") + 1 and ps[0].col > 1
    assert _ptxas_ok(text) in (False, None)


def test_a_register_as_wide_as_a_vector_parameter_is_accepted():
    text = CALLS.replace("call (s), sum4, (h);", "call (s), sum4, (%rd1);")  # 8 bytes for .v4 .u16: ptxas takes it
    assert validate(pf.parse(text, filename="v.ptx")) == []
    assert _ptxas_ok(text) in (True, None)


MOV = HEAD + """.visible .entry k()
{
    .reg .b32 %r<20>;
    .reg .b16 %h<3>;
    .reg .b64 %rd<3>;
    LINE
    ret;
}
"""


@pytest.mark.parametrize("line, message", [
    ("mov.u32 %r0, {0, %r16};", "mov.u32: operand 2 packs 2 elements of 32 bits, but .u32 is 32 bits"),
    ("mov.b32 %r0, {%h1, %r16};", "mov.b32: operand 2 mixes registers of different sizes"),
    ("mov.b64 %rd1, {0, %r16};", None),
    ("mov.b32 %r1, {0, %h1};", None),
    ("mov.b32 %r1, {%h1, 0};", None),
])
def test_mov_vector_size_as_ptxas_checks_it(line, message):
    text = MOV.replace("LINE", line)
    got = [p.message for p in validate(pf.parse(text, filename="m.ptx"))]
    assert got == ([message] if message else [])
    assert _ptxas_ok(text) in ((message is None), None)  # ptxas: "Argument vector size mismatch for 'mov'"
