"""Hostile kernels: wild addresses, huge variables, bad launch options, writes to constant memory,
out-of-range barriers and unbounded recursion end in clear errors, and faults keep what completed."""

from __future__ import annotations

import time

import numpy as np
import pytest

import ptxforge as pf
from ptxforge.emu.errors import EmulatorError, LaunchError, MemoryFault
from ptxforge.emu.launch import EmuDevice
from ptxforge.emu.machine import MAX_CALL_DEPTH
from ptxforge.ptx.validator import validate

H = ".version 8.5\n.target sm_90\n.address_size 64\n"


def wild_load(setup: str):
    """Every thread stores its index to q[tid]; then thread 3 loads from the address `setup` makes."""
    return pf.parse(H + """.visible .entry k(.param .u64 q, .param .u64 r)
{
.reg .b32 %r<4>;
.reg .b64 %rd<6>;
.reg .pred %p<2>;
ld.param.u64 %rd1, [q];
ld.param.u64 %rd5, [r];
mov.u32 %r1, %tid.x;
mul.wide.u32 %rd2, %r1, 4;
add.s64 %rd3, %rd1, %rd2;
st.global.u32 [%rd3], %r1;
setp.ne.u32 %p1, %r1, 3;
@%p1 bra DONE;
""" + setup + """
ld.global.u32 %r2, [%rd4];
DONE:
ret;
}
""").kernel("k")


@pytest.mark.parametrize("setup,words", [
    ("mov.u64 %rd4, -4;", "a negative address (-4 as a signed number)"),
    ("mov.u64 %rd4, -9223372036854775808;", "a negative address"),
    ("mov.u64 %rd4, 9223372036854775806;", "bytes past the end of"),
    ("mov.u64 %rd4, 0;", "(a null pointer)"),
    ("mov.u64 %rd4, 16;", "a null pointer plus 16 bytes"),
    ("sub.s64 %rd4, %rd1, 64;", "64 bytes below argument q"),
    ("add.s64 %rd4, %rd1, 288;", "between allocations: 256 bytes past the end of argument q"),
    ("add.s64 %rd4, %rd5, 4096;", "bytes past the end of argument r"),
])
@pytest.mark.parametrize("sanitize", [False, True])
def test_wild_addresses_fault_cleanly_and_keep_what_completed(setup, words, sanitize):
    q, r = np.full(8, 99, np.uint32), np.zeros(4, np.uint32)
    kernel = wild_load(setup)
    dev = EmuDevice()  # a fresh device: only q and r are allocated, so the layout below is known
    if sanitize:
        with pytest.raises(pf.SanitizerError) as ei:
            kernel.launch(grid=1, block=8, args=[q, r], device="emu", options={"sanitize": True}, emu_device_=dev)
        assert ei.value.reports[0].kind == "out-of-bounds" and ei.value.reports[0].thread == (3, 0, 0)
        if "null" in words or "negative" in words:
            assert words.split(" (")[0].strip("()") in str(ei.value)
    else:
        with pytest.raises(MemoryFault) as ei:
            kernel.launch(grid=1, block=8, args=[q, r], device="emu", emu_device_=dev)
        assert words in str(ei.value) and "thread (3,0,0)" in str(ei.value)
    assert q.tolist() == list(range(8))  # the stores before the fault came back


def test_an_access_running_past_the_end_is_described_as_such():
    q, r = np.zeros(8, np.uint32), np.zeros(4, np.uint32)
    k = wild_load("add.s64 %rd4, %rd1, 28;\nld.global.v2.u32 {%r2, %r3}, [%rd4];")
    with pytest.raises(EmulatorError):  # misaligned for a v2 load: 28 is not a multiple of 8
        k.launch(grid=1, block=8, args=[q, r], device="emu")
    k = wild_load("add.s64 %rd4, %rd1, 32;\nld.global.v4.u32 {%r2, %r3, %r2, %r3}, [%rd4];")
    with pytest.raises(MemoryFault, match="16 bytes at offset 32 run past the end of argument q"):
        k.launch(grid=1, block=8, args=[np.zeros(10, np.uint32), r], device="emu")


def entry(decl: str, body: str = "") -> str:
    return H + decl + "\n.visible .entry k()\n{\n" + body + "\nret;\n}\n"


@pytest.mark.parametrize("text,words", [
    (entry(".global .b8 g[1099511627776];"), ".global g is 1,099,511,627,776 bytes"),
    (entry(".global .b8 g[18446744073709551615];"), ".global g is 18,446,744,073,709,551,615 bytes"),
    (entry(".global .b32 g[1048576][1048576];"), "the emulator holds module variables in host memory"),
    (entry(".const .b8 c[65537];"), "constant data reaches 65,537 bytes; the limit is 65,536"),
    (entry("", ".local .b8 l[1073741824];"), "1,073,741,824 bytes of .local memory per thread"),
])
def test_variable_sizes_are_checked_before_anything_is_allocated(text, words):
    dev = EmuDevice()
    before = dev.memory.arena.nbytes
    t = time.perf_counter()
    with pytest.raises(LaunchError, match=words.replace("(", r"\(").replace(".", r"\.")):
        # the emulator's own check, behind the validator (which refuses the constant data too)
        pf.parse(text).kernel("k").launch(grid=1, block=1, args=[], device="emu", emu_device_=dev, validate=False)
    assert time.perf_counter() - t < 5 and dev.memory.arena.nbytes == before


@pytest.mark.parametrize("num_sms", [0, -1, 1025, 2.5, True])
def test_num_sms_is_validated(num_sms):
    k = pf.parse(entry("")).kernel("k")
    with pytest.raises(LaunchError, match="num_sms must be a whole number from 1 to 1024"):
        k.launch(grid=1, block=1, args=[], device="emu", options={"num_sms": num_sms})


CONST_STORE = entry(".const .b32 table[4] = {1, 2, 3, 4};", """.reg .b32 %r<3>;
.reg .b64 %rd<3>;
mov.u64 %rd1, table;
cvta.const.u64 %rd1, %rd1;
ld.u32 %r1, [%rd1+4];
st.u32 [%rd1], %r1;""")


def test_constant_memory_is_read_only():
    k = pf.parse(CONST_STORE).kernel("k")
    with pytest.raises(MemoryFault, match=r"st\.u32 \[%rd1\], %r1;: write to read-only memory .*table is read-only"):
        k.launch(grid=1, block=1, args=[], device="emu")
    with pytest.raises(pf.SanitizerError, match="read-only"):
        k.launch(grid=1, block=1, args=[], device="emu", options={"sanitize": True})


def test_check_rejects_st_const_as_ptxas_does():
    m = pf.parse(entry(".const .b32 c[4];", ".reg .b32 %r<2>;\nmov.u32 %r1, 1;\nst.const.u32 [c], %r1;"))
    assert [d.message for d in validate(m)] == ["st: unknown modifier .const"]


@pytest.mark.parametrize("body,block", [
    ("bar.sync 17;", 32), ("bar.sync 17;", 1), ("barrier.sync 16, 32;", 64), ("bar.arrive 20, 32;", 64),
    (".reg .pred %p<2>;\nsetp.eq.u32 %p1, 1, 1;\nbar.red.popc.u32 %r1, 18, %p1;", 32),
    ("mov.u32 %r1, 17;\nbar.sync %r1;", 32), ("mov.u32 %r1, 16;\nbar.sync %r1;", 1),
])
@pytest.mark.parametrize("sanitize", [False, True])
def test_barrier_ids_are_checked_on_every_path(body, block, sanitize):
    k = pf.parse(entry("", ".reg .b32 %r<3>;\n" + body)).kernel("k")
    # the emulator's own check, behind the validator (which refuses the immediate ids before a launch)
    with pytest.raises(EmulatorError, match=r"barrier id [12]\d is out of range 0\.\.15"):
        k.launch(grid=1, block=block, args=[], device="emu", options={"sanitize": sanitize}, validate=False)
    if "%r1;" not in body:
        with pytest.raises(pf.PTXValidationError, match=r"barrier number [12]\d is out of range 0\.\.15"):
            k.launch(grid=1, block=block, args=[], device="emu", options={"sanitize": sanitize})


def test_check_reports_immediate_barrier_ids_out_of_range():
    m = pf.parse(entry("", "bar.sync 17;\nbar.warp.sync 0xffffffff;\nbar.sync 15;"))
    assert [d.message for d in validate(m)] == ["bar.sync: barrier number 17 is out of range 0..15"]


def test_static_shared_and_constant_limits_in_check():
    m = pf.parse(entry(".const .b8 c[65537];", ".shared .b8 s[30000];\n.shared .b8 t[30000];"))
    assert [d.message for d in validate(m)] == [
        "the module uses too much constant data (0x10001 bytes with c, 0x10000 max)",
        "k declares too much static shared data (0xea60 bytes, 0xc000 max; use .extern .shared for more)"]


RECURSE = H + """.func (.param .b32 r) f(.param .b32 x)
{
.reg .b32 %r<4>;
ld.param.b32 %r1, [x];
add.s32 %r2, %r1, 1;
{
.param .b32 a;
.param .b32 rv;
st.param.b32 [a], %r2;
call (rv), f, (a);
ld.param.b32 %r3, [rv];
}
st.param.b32 [r], %r3;
ret;
}
.visible .entry k()
{
{
.param .b32 a;
.param .b32 rv;
st.param.b32 [a], 0;
call (rv), f, (a);
}
ret;
}
"""


def test_unbounded_recursion_stops_at_the_call_depth_limit():
    t = time.perf_counter()
    with pytest.raises(EmulatorError, match=f"call to f: the call stack of thread \\(0,0,0\\) block \\(0,0,0\\) "
                                            f"is {MAX_CALL_DEPTH} frames deep"):
        pf.parse(RECURSE).kernel("k").launch(grid=1, block=32, args=[], device="emu", options={"watchdog_s": 60})
    assert time.perf_counter() - t < 30  # the depth limit, not the watchdog
