"""bmsk and szext from the DSL: the PTX they emit validates and assembles with ptxas, the emulator's results
match a reference written from the PTX ISA's pseudocode (bmsk) and description (szext) for every mode, and a
mode or type the table does not list is refused early, naming what it takes."""

from __future__ import annotations

import numpy as np
import pytest

from ptxforge.dsl import DSLError, DSLTypeError, bmsk, f32, kernel, ld, ptr, reg, s32, st, szext, tid, u32
from ptxforge.ptx.validator import validate
from ptxforge.toolchain import ToolNotFound, assemble, find_tool

try:
    find_tool("ptxas")
    HAVE_PTXAS = True
except ToolNotFound:
    HAVE_PTXAS = False

EDGES = [0, 1, 2, 5, 16, 31, 32, 33, 40, 63, 64, 255, 2**31, 2**32 - 1]
A, B = (np.array(x, np.uint32) for x in zip(*[(a, b) for a in EDGES for b in EDGES], strict=True))


def bmsk_reference(a: int, b: int, mode: str) -> int:
    """The manual's pseudocode for bmsk.mode.b32, one element at a time."""
    a1, b1 = a & 0x1F, b & 0x1F
    mask0 = (0xFFFFFFFF << a1) & 0xFFFFFFFF
    mask1 = (0xFFFFFFFF << (a1 + b1)) & 0xFFFFFFFF if a1 + b1 < 32 else 0
    overflow = a1 + b1 >= 32
    if mode == "clamp":
        if a >= 32:
            mask0, overflow = 0, True
        if b >= 32:
            overflow = True
    if overflow:
        mask1 = 0
    elif b1 == 0:
        mask1 = 0xFFFFFFFF
    return mask0 & ~mask1 & 0xFFFFFFFF


def szext_reference(a: int, b: int, mode: str, signed: bool) -> int:
    """szext: the low N bits of a, sign- or zero-extended; N is b modulo 32 (wrap) or b clamped to 32 (clamp),
    and 0 bits give 0."""
    n = b % 32 if mode == "wrap" else min(b, 32)
    if n == 0:
        return 0
    low = a & ((1 << n) - 1)
    if signed and low >> (n - 1) & 1:
        low -= 1 << n
    return low & 0xFFFFFFFF


def _masks_kernel(mode: str):
    @kernel(arch="sm_75")
    def masks(a: ptr(u32), b: ptr(u32), out: ptr(u32)):
        i = tid.x
        x, y = ld(a[i]), ld(b[i])
        st(out[i * 3], bmsk(x, y, mode=mode))
        st(out[i * 3 + 1], szext(x, y, mode=mode))
        st(out[i * 3 + 2].cast(s32), szext(x, y, mode=mode, type=s32))
    return masks


@pytest.mark.parametrize("mode", ["clamp", "wrap"])
def test_bmsk_and_szext_match_the_manual(mode):
    k = _masks_kernel(mode)
    text = k.ptx()
    assert f"bmsk.{mode}.b32" in text and f"szext.{mode}.u32" in text and f"szext.{mode}.s32" in text
    assert [d.message for d in validate(k.module()) if d.severity == "error"] == []
    out = np.zeros(3 * len(A), np.uint32)
    k.launch(grid=(1,), block=(len(A),), args=[A, B, out], device="emu")
    got = out.reshape(-1, 3)
    for i, (a, b) in enumerate(zip(A.tolist(), B.tolist(), strict=True)):
        assert got[i, 0] == bmsk_reference(a, b, mode), (mode, a, b)
        assert got[i, 1] == szext_reference(a, b, mode, signed=False), (mode, a, b)
        assert got[i, 2] == szext_reference(a, b, mode, signed=True), (mode, a, b)


def test_the_manuals_example():
    """bmsk.wrap.b32 rd, 1, 2 creates 0x00000006 (the manual's example)."""
    assert bmsk_reference(1, 2, "wrap") == 6

    @kernel(arch="sm_75")
    def example(out: ptr(u32)):
        st(out[0], bmsk(1, 2, mode="wrap"))
    out = np.zeros(1, np.uint32)
    example.launch(grid=(1,), block=(1,), args=[out], device="emu")
    assert out[0] == 6


@pytest.mark.skipif(not HAVE_PTXAS, reason="ptxas is not installed (CUDA_HOME, PATH or the nvidia wheels)")
@pytest.mark.parametrize("mode", ["clamp", "wrap"])
def test_ptxas_accepts_what_the_dsl_emits(mode):
    res = assemble(_masks_kernel(mode).ptx(), "sm_75")
    assert res.ok, res.stderr


def test_a_mode_or_type_outside_the_table_is_refused():
    with pytest.raises(DSLError, match=r"bmsk: mode 'saturate'; expected one of \['clamp', 'wrap'\]"):
        @kernel(arch="sm_75")
        def bad_mode(out: ptr(u32)):
            st(out[0], bmsk(1, 2, mode="saturate"))
        bad_mode.ptx()
    with pytest.raises(DSLTypeError, match=r"szext: operand type \.f32; szext takes \.u32 or \.s32"):
        @kernel(arch="sm_75")
        def bad_type(out: ptr(u32)):
            st(out[0], szext(reg.f32(1.0), 3))
        bad_type.ptx()
    assert f32  # (the type the refused call used)


# (instruction, ptxas 13.0's first error or "" when it assembles, the validator's message)
VERDICTS = [
    ("bmsk.clamp.b32 %r3, %r1, %r2", "", ""),
    ("szext.wrap.u32 %r3, %r1, 8", "", ""),
    ("bmsk.b32 %r3, %r1, %r2", "Clamp modifier required for instruction 'bmsk'",
     "bmsk.b32: needs one of .clamp, .wrap"),
    ("szext.s32 %r3, %r1, %r2", "Clamp modifier required for instruction 'szext'",
     "szext.s32: needs one of .clamp, .wrap"),
    ("bmsk.clamp.wrap.b32 %r3, %r1, %r2", "Multiple clamp modifiers specified",
     "bmsk.clamp.wrap.b32: .clamp and .wrap are both mode modifiers; give one"),
    ("bmsk.clamp.u32 %r3, %r1, %r2", "Unexpected instruction types specified for 'bmsk'",
     "bmsk: type .u32 is not allowed (allowed: .b32)"),
    ("szext.clamp.b32 %r3, %r1, %r2", "Unexpected instruction types specified for 'szext'",
     "szext: type .b32 is not allowed (allowed: .s32, .u32)"),
    ("bmsk.clamp.b32 %r3, %r1", "Arguments mismatch for instruction 'bmsk'", "bmsk: expected 3 operands, got 2"),
    ("bmsk.clamp.b32 7, %r1, %r2", "Result register required for instruction 'bmsk'",
     "bmsk.clamp.b32: operand 1 is the result; it must be a register"),
]


def _one(line: str) -> str:
    return (".version 8.0\n.target sm_90\n.address_size 64\n.visible .entry k()\n{\n.reg .b32 %r<4>;\n"
            f"{line};\nret;\n}}\n")


@pytest.mark.parametrize(("line", "ptxas_says", "message"), VERDICTS, ids=[v[0] for v in VERDICTS])
def test_the_validator_agrees_with_ptxas(line, ptxas_says, message):
    import ptxforge as pf

    errors = [d.message for d in validate(pf.parse(_one(line), "t.ptx")) if d.severity == "error"]
    assert errors == ([message] if message else [])
    if HAVE_PTXAS:  # the recorded verdict, re-checked where ptxas is installed
        res = assemble(_one(line), "sm_90")
        assert res.ok == (not ptxas_says) and ptxas_says in res.stderr, res.stderr
