"""The native tier's shared-memory accesses against the interpreter: a group of loads from one base register
(checked once for the group's whole range, else access by access), the warp's address shapes (consecutive,
consecutive or one value per half-warp, anything else), faults inside a group, guarded-off lanes out of bounds.
Hand-written PTX, one warp, bit-exact comparisons of memory, counts and fault messages."""

from __future__ import annotations

import numpy as np
import pytest

import ptxforge as pf
from ptxforge.emu.errors import EmulatorError
from ptxforge.runtime.launch_config import EmulatorOptions

pytest.importorskip("llvmlite")

# A block of 16 x 2 (one warp; the native tier takes half-warp shapes for blocks narrower than a warp). Lane
# i = 16 * tid.y + tid.x (half h = i / 16, column c = i % 16) reads shared words at sh + base + h * row +
# c * (col0 or col1 by half), +4, +64 and +256, under the guard i < lim, and stores what it read; the 1 KB of
# shared memory is filled first by 8 stores from one base register (a group of stores).
GROUPS = """
.version 7.0
.target sm_80
.address_size 64
.visible .entry groups(.param .u64 out, .param .u32 base, .param .u32 row, .param .u32 col0, .param .u32 col1,
                       .param .u32 lim)
{
    .reg .pred %p<3>;
    .reg .b32 %r<40>;
    .reg .b64 %rd<4>;
    .shared .align 16 .b32 sh[256];
    ld.param.u64 %rd1, [out];
    ld.param.u32 %r1, [base];
    ld.param.u32 %r2, [row];
    ld.param.u32 %r3, [col0];
    ld.param.u32 %r4, [col1];
    ld.param.u32 %r5, [lim];
    mov.u32 %r6, %tid.x;
    mov.u32 %r19, %tid.y;
    mad.lo.u32 %r6, %r19, 16, %r6;
    mov.u32 %r7, sh;
    shl.b32 %r8, %r6, 2;
    add.u32 %r9, %r7, %r8;
    mul.lo.u32 %r10, %r6, -1640531535;
    st.shared.u32 [%r9], %r10;
    add.u32 %r11, %r10, 1;
    st.shared.u32 [%r9+128], %r11;
    add.u32 %r11, %r10, 2;
    st.shared.u32 [%r9+256], %r11;
    add.u32 %r11, %r10, 3;
    st.shared.u32 [%r9+384], %r11;
    add.u32 %r11, %r10, 4;
    st.shared.u32 [%r9+512], %r11;
    add.u32 %r11, %r10, 5;
    st.shared.u32 [%r9+640], %r11;
    add.u32 %r11, %r10, 6;
    st.shared.u32 [%r9+768], %r11;
    add.u32 %r11, %r10, 7;
    st.shared.u32 [%r9+896], %r11;
    bar.sync 0;
    shr.u32 %r12, %r6, 4;
    and.b32 %r13, %r6, 15;
    setp.ne.u32 %p1, %r12, 0;
    selp.u32 %r14, %r4, %r3, %p1;
    mul.lo.u32 %r15, %r12, %r2;
    mad.lo.u32 %r16, %r13, %r14, %r15;
    add.u32 %r17, %r16, %r1;
    add.u32 %r18, %r17, %r7;
    setp.lt.u32 %p2, %r6, %r5;
    mul.wide.u32 %rd2, %r6, 16;
    add.s64 %rd3, %rd1, %rd2;
    @%p2 ld.shared.u32 %r20, [%r18];
    @%p2 ld.shared.u32 %r21, [%r18+4];
    st.global.u32 [%rd3], %r20;
    st.global.u32 [%rd3+4], %r21;
    @%p2 ld.shared.u32 %r22, [%r18+64];
    st.global.u32 [%rd3+8], %r22;
    @%p2 ld.shared.u32 %r23, [%r18+256];
    st.global.u32 [%rd3+12], %r23;
    ret;
}
"""

# (base, row, col0, col1, lim): what the case is about
CASES = {
    "consecutive warp": (0, 64, 4, 4, 32),
    "consecutive halves": (0, 128, 4, 4, 32),
    "one value per half": (0, 64, 0, 0, 32),
    "consecutive half and one-value half": (8, 64, 4, 0, 32),
    "one-value half reading the last word of shared memory": (0, 764, 4, 0, 32),
    "no shape (a gather)": (4, 12, 8, 12, 32),
    "the group's last access out of bounds from lane 17": (700, 64, 4, 4, 32),
    "a middle access out of bounds": (0, 960, 4, 0, 32),
    "misaligned base": (2, 64, 4, 4, 32),
    "out-of-bounds lanes guarded off": (700, 64, 4, 4, 16),
    "every lane guarded off": (5000, 64, 4, 4, 0),
}


def _outcome(kernel, args, tier, level):
    out = np.zeros(32 * 4, np.uint32)
    try:
        r = kernel.launch(grid=(1,), block=(16, 2), args=[out, *(np.uint32(a) for a in args)],
                          options=EmulatorOptions(tier=tier, level=level))
    except EmulatorError as e:
        return ("fault", type(e).__name__, str(e), out.tobytes())
    assert r.tier == tier, r.tier_note
    return ("ok", r.thread_instructions, out.tobytes())


@pytest.mark.parametrize("level", ["quick", "opt"])
@pytest.mark.parametrize("case", list(CASES))
def test_grouped_shared_loads_match_the_interpreter(case, level):
    k = pf.parse(GROUPS, filename="groups.ptx").kernel("groups")
    want = _outcome(k, CASES[case], "interp", None)
    got = _outcome(k, CASES[case], "native", level)
    assert got == want


def test_the_cases_fault_where_they_say():
    """(the cases above are what their names say: the interpreter's outcomes)"""
    k = pf.parse(GROUPS, filename="groups.ptx").kernel("groups")
    outcomes = {case: _outcome(k, args, "interp", None) for case, args in CASES.items()}
    faults = {case: o[2] for case, o in outcomes.items() if o[0] == "fault"}
    assert set(faults) == {"the group's last access out of bounds from lane 17", "a middle access out of bounds",
                           "misaligned base"}
    assert "[%r18+256]" in faults["the group's last access out of bounds from lane 17"]
    assert "thread (1,1,0)" in faults["the group's last access out of bounds from lane 17"]  # (lane 17: x 1, y 1)
    assert "[%r18+64]" in faults["a middle access out of bounds"]
    assert "misaligned" in faults["misaligned base"] and "[%r18];" in faults["misaligned base"]
    words = np.frombuffer(outcomes["one value per half"][2], np.uint32).reshape(32, 4)
    assert (words[:16] == words[0]).all() and (words[16:] == words[16]).all() and (words[0] != words[16]).any()


# A group whose accesses sit at offsets their own size does not divide: an 8-byte load at +4 and a 4-byte one at
# +2 from a base aligned for both widths (each must fault as misaligned, as its own check says).
ODD_OFFSETS = """
.version 7.0
.target sm_80
.address_size 64
.visible .entry odd(.param .u64 out, .param .u32 which)
{
    .reg .pred %p<3>;
    .reg .b32 %r<12>;
    .reg .b64 %rd<4>;
    .shared .align 16 .b32 sh[256];
    ld.param.u64 %rd1, [out];
    ld.param.u32 %r1, [which];
    mov.u32 %r2, %tid.x;
    mov.u32 %r3, sh;
    shl.b32 %r4, %r2, 4;
    add.u32 %r5, %r3, %r4;
    setp.eq.u32 %p1, %r1, 1;
    setp.eq.u32 %p2, %r1, 2;
    ld.shared.u32 %r6, [%r5];
    ld.shared.u16 %r7, [%r5+6];
    @%p1 ld.shared.v2.u32 {%r8, %r9}, [%r5+4];
    @%p2 ld.shared.u32 %r10, [%r5+2];
    ld.shared.u32 %r11, [%r5+8];
    mul.wide.u32 %rd2, %r2, 4;
    add.s64 %rd3, %rd1, %rd2;
    st.global.u32 [%rd3], %r11;
    ret;
}
"""


@pytest.mark.parametrize("which", [0, 1, 2])
def test_a_group_access_at_an_offset_its_size_does_not_divide_faults_as_misaligned(which):
    k = pf.parse(ODD_OFFSETS, filename="odd.ptx").kernel("odd")
    got = {}
    for tier in ("interp", "native"):
        out = np.zeros(32, np.uint32)
        try:
            r = k.launch(grid=(1,), block=(32,), args=[out, np.uint32(which)], options=EmulatorOptions(tier=tier))
            assert r.tier == tier, r.tier_note
            got[tier] = ("ok", r.thread_instructions, out.tobytes())
        except EmulatorError as e:
            got[tier] = ("fault", str(e))
    assert got["native"] == got["interp"]
    if which:
        assert got["native"][0] == "fault" and "misaligned" in got["native"][1]
        assert ("[%r5+4]" if which == 1 else "[%r5+2]") in got["native"][1]
    else:
        assert got["native"][0] == "ok"
