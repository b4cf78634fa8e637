"""Register liveness (emu/liveness.py): what compacted sessions write back and what the watchdog compares."""

import time

import numpy as np
import pytest

import ptxforge as pf
from ptxforge.emu import WatchdogTimeout
from ptxforge.emu.launch import emu_device
from ptxforge.emu.liveness import Liveness

HEAD = ".version 8.0\n.target sm_80\n.address_size 64\n"


def analysed(body: str, extra: str = ""):
    text = HEAD + extra + f""".visible .entry k(.param .u64 out)
{{
    .reg .pred %p<8>;
    .reg .b32 %r<16>;
    .reg .b64 %rd<8>;
{body}
}}
"""
    mod = pf.parse(text, filename="live.ptx")
    layout, ops = emu_device().image(mod).compiled(mod.kernel("k").function)
    lv = Liveness(layout, ops)
    kf = layout.functions["k"]

    def pc(text):  # the pc of the kernel's instruction written `text`
        hits = [i for i in range(kf.entry, kf.end) if ops[i].text.startswith(text)]
        assert len(hits) == 1, (text, hits)
        return hits[0]

    def slot(name):
        return layout.placed[kf.entry].scope[name][1]

    def live(at, name):
        return bool(lv.live_in[pc(at) - lv.lo] >> slot(name) & 1)

    def cross(at, name):
        return bool(lv.cross_from[pc(at) - lv.lo] >> slot(name) & 1)
    return lv, live, cross, pc, slot


STRAIGHT = """
    ld.param.u64 %rd1, [out];
    mov.u32 %r1, 5;
    add.u32 %r2, %r1, 1;
    mov.u32 %r1, 7;
    st.global.u32 [%rd1], %r2;
    ret;
"""


def test_a_register_is_live_from_its_write_to_its_last_read():
    lv, live, cross, pc, slot = analysed(STRAIGHT)
    assert lv.enabled
    assert live("add.u32", "%r1")
    assert not live("mov.u32 %r1, 7", "%r1")  # overwritten before anyone reads it
    assert not live("st.global", "%r1")  # the value 7 is never read
    assert live("st.global", "%r2") and live("st.global", "%rd1")
    assert not live("ret", "%r2")
    assert not cross("ld.param", "%r2")  # nothing here reads another lane's registers


LOOP = """
    ld.param.u64 %rd1, [out];
    mov.u32 %r5, 0;
    mov.u32 %r6, 0;
$L:
    and.b32 %r7, %r5, 3;
    add.u32 %r6, %r6, %r7;
    add.u32 %r5, %r5, 1;
    setp.lt.u32 %p1, %r5, 10;
    @%p1 bra $L;
    @%p1 mov.u32 %r6, 9;
    st.global.u32 [%rd1], %r6;
    ret;
"""


def test_loop_carried_values_stay_live_and_temporaries_do_not():
    lv, live, cross, pc, slot = analysed(LOOP)
    assert live("and.b32", "%r5") and live("@%p1 bra", "%r5")  # read again on the next turn
    assert live("@%p1 bra", "%r6")
    assert not live("and.b32", "%r7")  # written before it is read, every turn
    assert not live("@%p1 bra", "%r7")
    assert live("@%p1 mov", "%r6")  # a guarded write may not happen: the old value stays live
    assert not live("st.global", "%r5")


SHFL = """
    mov.u32 %r1, %tid.x;
    mul.lo.u32 %r2, %r1, 3;
    shfl.sync.idx.b32 %r3, %r2, 0, 31, -1;
    add.u32 %r4, %r3, 1;
    ld.param.u64 %rd1, [out];
    st.global.u32 [%rd1], %r4;
    ret;
"""


def test_a_shfl_source_counts_for_every_lane_until_the_last_shfl():
    lv, live, cross, pc, slot = analysed(SHFL)
    assert cross("mov.u32 %r1", "%r2") and cross("shfl", "%r2")
    assert not cross("add.u32 %r4", "%r2")  # no shfl can follow
    assert not live("add.u32 %r4", "%r2")
    # needed(): the lanes' own registers, plus the cross-lane ones while the lowest lane can still reach the shfl
    at_add, at_mul = pc("add.u32 %r4"), pc("mul.lo")
    assert not lv.needed([at_add], at_add) >> slot("%r2") & 1
    assert lv.needed([at_add], at_mul) >> slot("%r2") & 1


def test_a_kernel_that_calls_is_not_analysed():
    extra = ".func (.reg .b32 rv) f(.reg .b32 x)\n{\n    add.u32 rv, x, 1;\n    ret;\n}\n"
    body = """
    mov.u32 %r1, 3;
    call (%r2), f, (%r1);
    ld.param.u64 %rd1, [out];
    st.global.u32 [%rd1], %r2;
    ret;
"""
    lv, *_ = analysed(body, extra)
    assert not lv.enabled
    assert lv.needed([0], 0) == lv.all
    assert lv.masks(0) == [True] * lv.nslots


def test_masks_name_the_lanes_whose_value_counts():
    lv, live, cross, pc, slot = analysed(LOOP)
    pcs = np.array([pc("and.b32"), pc("st.global"), pc("ret")] * 32, np.int32)
    m = lv.masks(pcs)
    r5 = m[slot("%r5")]
    np.testing.assert_array_equal(r5, np.tile([True, False, False], 32))
    assert m[slot("%r7")] is False  # dead wherever the lanes stand
    assert lv.masks(pc("ret")) == [False] * lv.nslots


# A spin that reads %clock into registers nothing reads: the state that matters repeats. Before the watchdog
# compared live registers only, the clock's value made every fingerprint differ and the launch ran on to its
# time limit. The lanes below stand in two places (a diverged wave) and in one (the converged block 1 warp).
SPIN_ON_CLOCK = """
    mov.u32 %r1, %tid.x;
    setp.lt.u32 %p1, %r1, 8;
    @%p1 bra $L;
$W:
    mov.u32 %r3, %clock;
    add.u32 %r4, %r3, %r1;
    bra $W;
$L:
    mov.u32 %r5, %clock;
    bra $L;
"""


@pytest.mark.parametrize("block", [64, 8])
def test_watchdog_sees_a_spin_whose_changing_values_are_dead(block):
    text = HEAD + f".visible .entry k(.param .u64 out)\n{{\n.reg .pred %p<4>;\n.reg .b32 %r<8>;\n{SPIN_ON_CLOCK}\n}}\n"
    k = pf.parse(text, filename="spin.ptx").kernel("k")
    t = time.monotonic()
    with pytest.raises(WatchdogTimeout, match="no progress"):
        k.launch(grid=(2,), block=(block,), args=[None], options={"watchdog_s": 0.2, "time_limit_s": 60})
    assert time.monotonic() - t < 30


LIVE_SPIN = """
    mov.u32 %r1, %tid.x;
    mov.u32 %r2, 0;
$L:
    add.u32 %r2, %r2, 1;
    setp.ne.u32 %p1, %r2, 0;
    @%p1 bra $L;
    ret;
"""


def test_watchdog_does_not_stop_a_loop_whose_live_values_change():
    text = HEAD + f".visible .entry k(.param .u64 out)\n{{\n.reg .pred %p<4>;\n.reg .b32 %r<8>;\n{LIVE_SPIN}\n}}\n"
    k = pf.parse(text, filename="count.ptx").kernel("k")
    with pytest.raises(pf.emu.TimeLimitExceeded):
        k.launch(grid=(1,), block=(32,), args=[None], options={"watchdog_s": 0.1, "time_limit_s": 1.5})


# The lowest lane of a wave goes back down when it loops: a shfl inside the loop's pcs that the loop never
# runs (here unreachable, as code placed between a loop's blocks may be) counts from $B on too, or a
# session at $B would leave %r5 stale while the watchdog compares it once the lanes stand at $SPIN again.
LOOP_AROUND_A_SHFL = """
    mov.u32 %r1, %tid.x;
    add.u32 %r12, %r12, 0;
    add.u32 %r12, %r12, 0;
    setp.lt.u32 %p1, %r1, 8;
    @%p1 bra $SPIN;
    bra $END;
$SPIN:
    mov.u32 %r6, %clock;
    add.u32 %r5, %r6, 1;
    xor.b32 %r7, %r5, 3;
    add.u32 %r2, %r2, 0;
    add.u32 %r3, %r3, 0;
    bra $B;
$DEAD:
    shfl.sync.idx.b32 %r8, %r5, 0, 31, -1;
    ret;
$B:
    add.u32 %r4, %r4, 0;
    bra $SPIN;
$END:
    bar.sync 0;
    ret;
"""


def test_a_branch_back_keeps_the_cross_lane_registers_of_the_pcs_it_returns_to():
    lv, live, cross, pc, slot = analysed(LOOP_AROUND_A_SHFL)
    assert cross("mov.u32 %r6", "%r5")
    assert cross("add.u32 %r4", "%r5") and cross("bra $SPIN", "%r5")  # $SPIN can follow
    assert not cross("bar.sync", "%r5")  # nothing branches back from the end


# A delay loop: the clock value it compares is dead where the loop's turn starts, and nothing else changes.
# Comparing live registers only, the watchdog saw the same state at most pcs and stopped a launch that ends.
DELAY = """
    ld.param.u64 %rd5, [out];
    mov.u64 %rd1, %clock64;
$W:
    mov.u64 %rd2, %clock64;
    sub.u64 %rd3, %rd2, %rd1;
    setp.lt.u64 %p1, %rd3, 16000000;
""" + "    add.u32 %r2, %r2, 0;\n" * 11 + """    @%p1 bra $W;
    mov.u32 %r1, 7;
    st.global.u32 [%rd5], %r1;
    ret;
"""


def test_a_clock_value_that_steers_the_kernel_counts_everywhere():
    lv, live, cross, pc, slot = analysed(DELAY)
    assert not live("mov.u64 %rd2", "%rd2") and cross("mov.u64 %rd2", "%rd2") and cross("@%p1 bra", "%rd2")
    assert not cross("mov.u64 %rd2", "%rd3")  # (the value read from the clock is enough)
    text = HEAD + f".visible .entry k(.param .u64 out)\n{{\n.reg .pred %p<4>;\n.reg .b32 %r<8>;\n{SPIN_ON_CLOCK}\n}}\n"
    mod = pf.parse(text, filename="spin.ptx")
    layout, ops = emu_device().image(mod).compiled(mod.kernel("k").function)
    assert Liveness(layout, ops).cross_from[0] == 0  # what it reads from the clock steers nothing


def test_watchdog_lets_a_delay_loop_run_to_its_end():
    text = HEAD + f".visible .entry k(.param .u64 out)\n{{\n.reg .pred %p<4>;\n.reg .b32 %r<8>;\n" \
                  f".reg .b64 %rd<8>;\n{DELAY}\n}}\n"
    out = np.zeros(1, np.uint32)
    pf.parse(text, filename="delay.ptx").kernel("k").launch(grid=(1,), block=(32,), args=[out],
                                                            options={"watchdog_s": 0.1, "time_limit_s": 60})
    assert out[0] == 7
