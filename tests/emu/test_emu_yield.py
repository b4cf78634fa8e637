"""A diverged warp that takes the back edge of a loop which may wait for other warps yields its turn.

The machine runs the lowest pc first; a warp spinning on a flag at the lowest pcs of the kernel used to
take nearly every step (the others ran one instruction per rotation, every 64 steps). DeepEP's combine
receiver is such a kernel: its queue-head warp loops until the other 23 warps retire, and the launch took
75,541 steps where it now takes about 2,000. The results and each lane's instructions outside the spin
are the same; the spin runs fewer rounds.
"""

import numpy as np
import pytest

import ptxforge as pf
from ptxforge.emu import compact
from ptxforge.emu import machine as machine_mod

PTX = """.version 8.0
.target sm_80
.address_size 64

.visible .entry spin_waits_for_worker(.param .u64 out, .param .u32 n)
{
    .reg .pred %p<4>;
    .reg .b32 %r<16>;
    .reg .b64 %rd<8>;
    .shared .align 4 .u32 flag;

    mov.u32 %r1, %tid.x;
    setp.ne.u32 %p1, %r1, 0;
    @%p1 bra INIT_DONE;
    st.shared.u32 [flag], 0;
INIT_DONE:
    bar.sync 0;
    ld.param.u64 %rd1, [out];
    ld.param.u32 %r2, [n];
    mov.u32 %r5, 0;
    setp.ge.u32 %p1, %r1, 32;
    @%p1 bra WORKER;
SPIN:                                   // warp 0, at the lowest pcs: waits for warp 1's flag
    ld.volatile.shared.u32 %r3, [flag];
    setp.eq.u32 %p2, %r3, 0;
    @%p2 bra SPIN;
    mov.u32 %r5, %r3;
    bra DONE;
WORKER:                                 // warp 1: n rounds (each reads the flag too), then raises it
    mov.u32 %r4, 0;
LOOP:
    ld.volatile.shared.u32 %r6, [flag];
    add.u32 %r5, %r5, %r6;
    mad.lo.u32 %r5, %r4, 3, %r5;
    add.u32 %r4, %r4, 1;
    setp.lt.u32 %p3, %r4, %r2;
    @%p3 bra LOOP;
    st.volatile.shared.u32 [flag], 7;
DONE:
    mul.wide.u32 %rd2, %r1, 4;
    add.u64 %rd3, %rd1, %rd2;
    st.global.u32 [%rd3], %r5;
    ret;
}
"""


def run(n: int, monkeypatch) -> tuple[np.ndarray, int, int]:
    steps = []
    orig = machine_mod.Machine.run

    def record(self):
        stats = orig(self)
        steps.append(stats["steps"])
        return stats
    monkeypatch.setattr(machine_mod.Machine, "run", record)
    out = np.zeros(64, np.uint32)
    k = pf.parse(PTX, filename="yield.ptx").kernel("spin_waits_for_worker")
    r = k.launch((1,), (64,), [out, np.uint32(n)], device="emu")
    return out, steps[-1], r.thread_instructions


@pytest.mark.parametrize("sessions", [True, False])
def test_a_warp_spinning_at_the_lowest_pc_does_not_starve_the_warp_it_waits_for(sessions, monkeypatch):
    monkeypatch.setenv("PTXFORGE_EMU_REFERENCE", "0" if sessions else "1")
    n = 200
    out, steps, _ = run(n, monkeypatch)
    np.testing.assert_array_equal(out[:32], 7)  # the spinning warp saw the flag
    np.testing.assert_array_equal(out[32:], 3 * sum(range(n)))  # the worker read 0 every round
    # the worker's loop is 6 instructions a round; the spin's 3 run beside it: about 9 steps a round (1,824
    # in all), where the lowest-pc-first order gave the worker one step in 64 (115,346 steps)
    assert steps < 12 * n, steps


def test_the_yield_costs_the_spin_rounds_only(monkeypatch):
    """Twice the worker's rounds: the steps about double (the spin yields once per worker round)."""
    _, s1, i1 = run(100, monkeypatch)
    _, s2, i2 = run(200, monkeypatch)
    assert 1.8 < s2 / s1 < 2.2, (s1, s2)
    worker = 32 * 6 * 100  # the worker warp's extra instructions for 100 more rounds
    assert i2 - i1 >= worker and i2 - i1 < 2 * worker, (i1, i2)


def test_yield_edges_are_the_back_edges_of_loops_that_poll():
    k = pf.parse(PTX, filename="yield.ptx").kernel("spin_waits_for_worker")
    from ptxforge.emu import emu_device
    layout, ops = emu_device().image(k.module).compiled(k.function)
    edges = compact.yield_edges(layout, ops)
    texts = [ops[pc].text for pc in np.flatnonzero(edges)]
    assert texts == ["@%p2 bra SPIN;", "@%p3 bra LOOP;"], texts


COPY_AND_POLL = """.version 8.0
.target sm_90
.address_size 64

.visible .entry copy_then_poll(.param .u64 src, .param .u64 dst, .param .u64 flag, .param .u32 n)
{
    .reg .pred %p<4>;
    .reg .b32 %r<8>;
    .reg .b64 %rd<8>;

    ld.param.u64 %rd1, [src];
    ld.param.u64 %rd2, [dst];
    ld.param.u64 %rd3, [flag];
    ld.param.u32 %r1, [n];
    mov.u32 %r2, %tid.x;
COPY:                                   // weak loads and stores: progress, never a wait
    mul.wide.u32 %rd4, %r2, 4;
    add.u64 %rd5, %rd1, %rd4;
    ld.global.nc.u32 %r3, [%rd5];
    add.u64 %rd6, %rd2, %rd4;
    st.global.u32 [%rd6], %r3;
    add.u32 %r2, %r2, 64;
    setp.lt.u32 %p1, %r2, %r1;
    @%p1 bra COPY;
POLL:                                   // an acquire load of a flag: a wait for another thread
    ld.acquire.gpu.global.u32 %r4, [%rd3];
    setp.eq.u32 %p2, %r4, 0;
    @%p2 bra POLL;
TIMED:                                  // the clock: a wait for time to pass
    mov.u64 %rd7, %globaltimer;
    setp.lt.u64 %p3, %rd7, 0;
    @%p3 bra TIMED;
    ret;
}
"""


def test_a_copy_loop_of_weak_loads_and_stores_does_not_yield():
    """Yielding at a copy loop's back edge only pulls apart warps that copy in step (the DSL dispatch kernel
    took twice the steps so); the loops that poll (an acquire load, the clock) do yield."""
    k = pf.parse(COPY_AND_POLL, filename="copy_poll.ptx").kernel("copy_then_poll")
    from ptxforge.emu import emu_device
    layout, ops = emu_device().image(k.module).compiled(k.function)
    texts = [ops[pc].text for pc in np.flatnonzero(compact.yield_edges(layout, ops))]
    assert texts == ["@%p2 bra POLL;", "@%p3 bra TIMED;"], texts
