"""Every special register of the ISA table (ptx/isa/data_sreg.py) reads on the emulator, at the table's width:
the table is the one list, and a register it adds without an emulator value fails here, not in a user's
kernel. %tid-like registers are read per component (.x, .y, .z)."""

from __future__ import annotations

import numpy as np
import pytest

import ptxforge as pf
from ptxforge.ptx.isa.data_sreg import SPECIAL_REGISTERS
from ptxforge.ptx.validator import validate

HEAD = ".version 8.8\n.target sm_90a\n.address_size 64\n"
VECTORS = ("%tid", "%ntid", "%ctaid", "%nctaid", "%clusterid", "%nclusterid", "%cluster_ctaid", "%cluster_nctaid")


def _names() -> list[str]:
    out = []
    for name in SPECIAL_REGISTERS:
        out += [f"{name}.{c}" for c in "xyz"] if name in VECTORS else [name]
    return out


def _read(name: str, cluster=None) -> int:
    """The value one thread reads from `name` with a mov of the register's own width."""
    bits = SPECIAL_REGISTERS[name.split(".")[0]].bits
    if bits == 1:
        body = (".reg .pred %p;\n  .reg .b32 %v;\n  mov.pred %p, " + name + ";\n  selp.u32 %v, 1, 0, %p;\n"
                "  cvt.u64.u32 %d, %v;")
    elif bits == 32:
        body = ".reg .b32 %v;\n  mov.u32 %v, " + name + ";\n  cvt.u64.u32 %d, %v;"
    else:
        body = "mov.u64 %d, " + name + ";"
    text = HEAD + f""".visible .entry k(.param .u64 out)
{{
  .reg .b64 %d, %a;
  {body}
  ld.param.u64 %a, [out];
  st.global.u64 [%a], %d;
  ret;
}}
"""
    m = pf.parse(text, "sreg.ptx")
    assert not [str(d) for d in validate(m) if d.severity == "error"]
    out = np.zeros(1, np.uint64)
    m.kernel("k").launch(grid=(1,), block=(1,), args=[out], device="emu", cluster=cluster)
    return int(out[0])


@pytest.mark.parametrize("name", _names())
def test_every_special_register_of_the_table_reads(name):
    value = _read(name)
    assert 0 <= value < 1 << SPECIAL_REGISTERS[name.split(".")[0]].bits


def test_is_explicit_cluster_is_a_predicate():
    assert _read("%is_explicit_cluster") == 0
    assert _read("%is_explicit_cluster", cluster=(1, 1, 1)) == 1


def test_clock_hi_is_the_upper_half_of_clock64():
    text = HEAD + """.visible .entry k(.param .u64 out)
{
  .reg .b32 %hi;
  .reg .b64 %c, %a;
  mov.u64 %c, %clock64;
  mov.u32 %hi, %clock_hi;
  ld.param.u64 %a, [out];
  st.global.u64 [%a], %c;
  st.global.u32 [%a+8], %hi;
  ret;
}
"""
    out = np.zeros(2, np.uint64)
    pf.parse(text, "c.ptx").kernel("k").launch(grid=(1,), block=(1,), args=[out], device="emu")
    assert int(out[1]) & 0xFFFFFFFF == int(out[0]) >> 32
