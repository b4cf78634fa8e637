"""A register plus a constant as a source (`st.global.u64 [p], %r1+2;`): ptxas takes it from an integer register
of any width (it converts the sum to the instruction's type), not from a float register; a bare register of
another width stays refused. Each verdict re-checked with ptxas where it is found."""

import pytest

import ptxforge as pf
from ptxforge.ptx.validator import validate
from ptxforge.toolchain import ToolNotFound, assemble, find_tool

TEXT = """.version 8.0
.target sm_90a
.address_size 64
.visible .entry k(.param .u64 p)
{
  .reg .b64 t, %rd0;
  DECL
  ld.param.u64 %rd0, [p];
  mov.u64 t, 40;
  INS
  ret;
}
"""


@pytest.mark.parametrize("decl, ins, message", [
    (".reg .b32 %r1;", "st.global.u64 [%rd0], %r1+2;", None),
    (".reg .b16 %r1;", "st.global.u64 [%rd0], %r1+2;", None),
    (".reg .b32 %r1;", "st.global.u32 [%rd0], t+2;", None),
    (".reg .f32 %r1;", "st.global.u64 [%rd0], %r1+2;",
     "st.global.u64: operand 2 adds a constant to %r1 (.f32), which needs an integer register"),
    (".reg .b32 %r1;", "st.global.u64 [%rd0], %r1;", "st.global.u64: operand 2 is %r1 (.b32), expected .u64"),
])
def test_register_plus_constant_sources_as_ptxas_takes_them(decl, ins, message):
    text = TEXT.replace("DECL", decl).replace("INS", ins)
    got = [d.message for d in validate(pf.parse(text, filename="r.ptx"))]
    assert got == ([message] if message else [])
    try:
        find_tool("ptxas")
    except ToolNotFound:
        return
    assert assemble(text, "sm_90a").ok == (message is None)
