"""The DSL's special registers take their type from the ISA table (ptx/isa/data_sreg.py), the one list of
them: `SReg(name)` reads a 64-bit register as .u64 without being told, and a name the table lacks is refused
where the kernel names it."""

import numpy as np
import pytest

from ptxforge.dsl import DSLError, SReg, clock64, kernel, ptr, selp, st, u32, u64
from ptxforge.dsl import types as T
from ptxforge.ptx.isa.data_sreg import SPECIAL_REGISTERS
from ptxforge.ptx.validator import validate


def test_every_table_register_gets_the_type_of_its_width():
    for name, spec in SPECIAL_REGISTERS.items():
        assert SReg(name).type is {1: T.pred, 32: T.u32, 64: T.u64}[spec.bits], name
    assert clock64.type is T.u64


def test_a_name_outside_the_table_is_refused():
    with pytest.raises(DSLError, match="%clock65 is not a special register of the PTX ISA"):
        SReg("%clock65")


def test_64_bit_registers_read_whole():
    timer, grid = SReg("%globaltimer"), SReg("%gridid")

    @kernel(arch="sm_80")
    def k(a: ptr(u64), b: ptr(u32)):
        st(a[0], timer.get())
        st(a[1], grid.get())
        st(b[0], SReg("%nsmid").get())

    m = k.module()
    assert not [str(d) for d in validate(m) if d.severity == "error"]
    text = k.ptx()
    assert "mov.u64" in text and "%globaltimer;" in text and "%gridid;" in text
    a, b = np.zeros(2, np.uint64), np.zeros(1, np.uint32)
    k.launch(grid=(1,), block=(1,), args=[a, b], device="emu", options={"num_sms": 7})
    assert a[0] > 10**18 and a[1] == 1 and b[0] == 7  # ns since 1970; the emulator's grid id; num_sms


def test_the_predicate_register_reads_as_a_predicate():
    explicit = SReg("%is_explicit_cluster")

    @kernel(arch="sm_90a")
    def k(a: ptr(u32)):
        st(a[0], selp(1, 0, explicit.get(), type=u32))

    assert "mov.pred" in k.ptx()
    for cluster, want in ((None, 0), ((1, 1, 1), 1)):
        a = np.zeros(1, np.uint32)
        k.launch(grid=(1,), block=(1,), args=[a], device="emu", cluster=cluster)
        assert a[0] == want
