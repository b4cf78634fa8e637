"""Compacted stepping of divergent lane-local code (emu/compact.py) takes exactly the machine's own steps.

Every kernel here runs twice, with sessions on and off, and must give the same memory, the same
thread-instruction counts per SM and the same number of machine steps; tickets taken with atomics after
(or between) divergent stretches record the order and grouping in which lanes reach the instructions that
are not lane-local, shfl/vote/activemask results record who runs together. Each test also checks that
sessions really ran.
"""

import numpy as np
import pytest
from emu_corpus import corpus_module

import ptxforge as pf
from ptxforge.emu import WatchdogTimeout, compact
from ptxforge.emu import machine as machine_mod

HEAD = ".version 8.0\n.target sm_80\n.address_size 64\n"


def kernel(body: str, params: str, name: str = "k", extra: str = ""):
    text = HEAD + extra + f""".visible .entry {name}({params})
{{
    .reg .pred %p<16>;
    .reg .b32 %r<48>;
    .reg .b64 %rd<16>;
{body}
}}
"""
    return pf.parse(text, filename="compact.ptx").kernel(name)


def both(launch, arrays, monkeypatch):
    """Run `launch()` in reference mode (no sessions, no fast path), then in fast mode, from the same initial
    `arrays`: the two outcomes."""
    init = [a.copy() for a in arrays]
    steps = []
    orig = machine_mod.Machine.run

    def run(self):
        stats = orig(self)
        steps.append(stats["steps"])
        return stats
    monkeypatch.setattr(machine_mod.Machine, "run", run)
    out = []
    for enabled in (False, True):
        for a, b in zip(arrays, init, strict=True):
            a[...] = b
        monkeypatch.setenv("PTXFORGE_EMU_REFERENCE", "0" if enabled else "1")
        before = compact.steps_run()
        r = launch()
        used = compact.steps_run() - before
        out.append(([a.copy() for a in arrays], r.thread_instructions, np.asarray(r.per_sm).tolist(),
                    steps[-1], used))
    return out


def assert_same(off, on, min_session_steps=1):
    (mem0, ti0, sm0, st0, used0), (mem1, ti1, sm1, st1, used1) = off, on
    assert used0 == 0
    assert used1 >= min_session_steps, "no compacted session ran: the test would prove nothing"
    for a, b in zip(mem0, mem1, strict=True):
        np.testing.assert_array_equal(a, b)
    assert (ti0, sm0, st0) == (ti1, sm1, st1)


# A data-dependent loop with an if/else inside, an exit before it and one from inside it, and an atomic
# ticket after it (the order in which lanes leave the loop, and with whom).
COLLATZ = """
    ld.param.u64 %rd1, [out]; ld.param.u64 %rd2, [seeds]; ld.param.u64 %rd3, [ctr];
    mov.u32 %r1, %tid.x; mov.u32 %r2, %ctaid.x; mov.u32 %r3, %ntid.x;
    mad.lo.s32 %r4, %r2, %r3, %r1;
    mul.wide.u32 %rd4, %r4, 4;
    add.s64 %rd5, %rd2, %rd4;
    ld.global.u32 %r5, [%rd5];
    mul.wide.u32 %rd6, %r4, 8;
    add.s64 %rd7, %rd1, %rd6;
    mov.u32 %r6, 0;
    setp.eq.u32 %p1, %r5, 0;
    @%p1 ret;
$LOOP:
    and.b32 %r7, %r5, 1;
    setp.eq.u32 %p2, %r7, 1;
    @%p2 bra $ODD;
    shr.u32 %r5, %r5, 1;
    bra $NEXT;
$ODD:
    mad.lo.u32 %r5, %r5, 3, 1;
$NEXT:
    add.u32 %r6, %r6, 1;
    setp.eq.u32 %p3, %r6, 37;
    and.b32 %r8, %r4, 7;
    setp.eq.u32 %p4, %r8, 3;
    and.pred %p5, %p3, %p4;
    @%p5 bra $QUIT;
    setp.ne.u32 %p6, %r5, 1;
    @%p6 bra $LOOP;
    atom.global.add.u32 %r9, [%rd3], 1;
    st.global.v2.u32 [%rd7], {%r6, %r9};
    ret;
$QUIT:
    st.global.v2.u32 [%rd7], {%r6, %r5};
    exit;
"""
PARAMS3 = ".param .u64 out, .param .u64 seeds, .param .u64 ctr"


@pytest.mark.parametrize("blocks, threads", [(32, 256), (3, 96), (1, 40)])
def test_data_dependent_loop_with_exits_and_tickets(blocks, threads, monkeypatch):
    k = kernel(COLLATZ, PARAMS3)
    n = blocks * threads
    rng = np.random.default_rng(n)
    seeds = rng.integers(1, 3000, n).astype(np.uint32)
    seeds[::17] = 0  # exits before the loop
    out = np.zeros((n, 2), np.uint32)
    ctr = np.zeros(1, np.uint32)
    res = both(lambda: k.launch(grid=(blocks,), block=(threads,), args=[out, seeds, ctr]), [out, ctr], monkeypatch)
    assert_same(*res, min_session_steps=50)
    (mem, *_), _ = res
    steps = []
    for s in seeds.tolist():
        c = 0
        while s:  # the kernel's loop runs at least once (1 -> 4 -> 2 -> 1)
            s = 3 * s + 1 if s & 1 else s >> 1
            c += 1
            if s == 1:
                break
        steps.append(c)
    got = mem[0][:, 0]
    live = seeds != 0
    quit_ = live & (np.arange(n) % 8 == 3) & (np.array(steps) >= 37)
    np.testing.assert_array_equal(got[live & ~quit_], np.array(steps)[live & ~quit_])
    assert (got[quit_] == 37).all()
    assert sorted(mem[0][live & ~quit_, 1].tolist()) == list(range(int((live & ~quit_).sum())))


# Two ways out of a loop that meet again further on: lanes leaving by the far exit pass lanes that left
# earlier by the near one; the lowest pc first means the near ones catch up and both run the tail together.
TWO_EXITS = """
    ld.param.u64 %rd1, [out]; ld.param.u64 %rd2, [seeds]; ld.param.u64 %rd3, [ctr];
    mov.u32 %r1, %tid.x; mov.u32 %r2, %ctaid.x; mov.u32 %r3, %ntid.x;
    mad.lo.s32 %r4, %r2, %r3, %r1;
    mul.wide.u32 %rd4, %r4, 4;
    add.s64 %rd5, %rd2, %rd4;
    ld.global.u32 %r5, [%rd5];
    shr.u32 %r10, %r5, 9;
    and.b32 %r10, %r10, 63;
    mov.u32 %r6, 0;
$LOOP:
    and.b32 %r7, %r5, 1;
    setp.eq.u32 %p2, %r7, 1;
    mad.lo.u32 %r8, %r5, 3, 1;
    shr.u32 %r9, %r5, 1;
    selp.u32 %r5, %r8, %r9, %p2;
    add.u32 %r6, %r6, 1;
    setp.eq.u32 %p3, %r6, %r10;
    @%p3 bra $QUIT;
    setp.gt.u32 %p6, %r5, 1;
    @%p6 bra $LOOP;
    bra $TAIL;
$QUIT:
    mul.lo.u32 %r5, %r5, 7;
    xor.b32 %r6, %r6, 256;
$TAIL:
    add.u32 %r6, %r6, %r5;
    atom.global.add.u32 %r11, [%rd3], 1;
    mul.wide.u32 %rd6, %r4, 8;
    add.s64 %rd7, %rd1, %rd6;
    st.global.v2.u32 [%rd7], {%r6, %r11};
    ret;
"""


@pytest.mark.parametrize("blocks, threads", [(24, 256), (2, 128)])
def test_loop_with_two_exits_that_meet_again(blocks, threads, monkeypatch):
    k = kernel(TWO_EXITS, PARAMS3)
    n = blocks * threads
    seeds = np.random.default_rng(n + 1).integers(2, 40000, n).astype(np.uint32)
    out = np.zeros((n, 2), np.uint32)
    ctr = np.zeros(1, np.uint32)
    res = both(lambda: k.launch(grid=(blocks,), block=(threads,), args=[out, seeds, ctr]), [out, ctr], monkeypatch)
    assert_same(*res, min_session_steps=30)


# Warp-synchronous ops inside a divergent, data-dependent loop: activemask, vote.ballot, shfl.sync with the
# active mask, and a nested lane-local loop of per-lane length between them.
WARP_LOOP = """
    ld.param.u64 %rd1, [out]; ld.param.u64 %rd2, [seeds];
    mov.u32 %r1, %tid.x; mov.u32 %r2, %ctaid.x; mov.u32 %r3, %ntid.x;
    mad.lo.s32 %r4, %r2, %r3, %r1;
    mul.wide.u32 %rd4, %r4, 4;
    add.s64 %rd5, %rd2, %rd4;
    ld.global.u32 %r5, [%rd5];
    and.b32 %r6, %r5, 31;
    mov.u32 %r7, 0;
    mov.u32 %r8, 0;
$OUTER:
    mad.lo.u32 %r5, %r5, 1103515245, 12345;
    shr.u32 %r9, %r5, 16;
    and.b32 %r10, %r9, 15;
    mov.u32 %r11, 0;
$INNER:
    setp.ge.u32 %p1, %r11, %r10;
    @%p1 bra $DONE;
    xor.b32 %r8, %r8, %r11;
    mul.lo.u32 %r8, %r8, 31;
    add.u32 %r11, %r11, 1;
    bra $INNER;
$DONE:
    activemask.b32 %r12;
    and.b32 %r13, %r9, 1;
    setp.eq.u32 %p2, %r13, 1;
    vote.sync.ballot.b32 %r14, %p2, %r12;
    shfl.sync.bfly.b32 %r15, %r8, 1, 31, %r12;
    xor.b32 %r8, %r8, %r14;
    add.u32 %r8, %r8, %r15;
    add.u32 %r8, %r8, %r12;
    add.u32 %r7, %r7, 1;
    setp.lt.u32 %p3, %r7, %r6;
    @%p3 bra $OUTER;
    st.global.u32 [%rd5], %r8;
    ret;
"""


@pytest.mark.parametrize("blocks, threads", [(16, 256), (2, 64)])
def test_warp_ops_in_divergent_loops(blocks, threads, monkeypatch):
    k = kernel(WARP_LOOP, ".param .u64 out, .param .u64 seeds")
    n = blocks * threads
    seeds = np.random.default_rng(7).integers(0, 2**32, n, dtype=np.uint64).astype(np.uint32)
    res = both(lambda: k.launch(grid=(blocks,), block=(threads,), args=[None, seeds]), [seeds], monkeypatch)
    assert_same(*res, min_session_steps=20)


# Lanes of every warp spin in a lane-local loop that never changes their state while the others wait at a
# barrier: the watchdog must still see the state repeat.
SPIN_FOREVER = """
    mov.u32 %r1, %tid.x;
    setp.lt.u32 %p1, %r1, 8;
    @%p1 bra $SPIN;
    bar.sync 0;
    ret;
$SPIN:
    and.b32 %r2, %r2, 1;
    or.b32 %r3, %r2, 4;
    bra $SPIN;
"""


def test_watchdog_sees_an_endless_compacted_loop(monkeypatch):
    k = kernel(SPIN_FOREVER, ".param .u64 out")
    before = compact.steps_run()
    with pytest.raises(WatchdogTimeout, match="no progress"):
        k.launch(grid=(64,), block=(256,), args=[None], options={"watchdog_s": 0.3})
    assert compact.steps_run() - before > 1000


# A device function with a data-dependent loop, called from two sites under divergence (the lanes inside it
# stand in two call contexts, which the machine keeps apart).
FUNC = """
.func (.reg .b32 rv) steps_of(.reg .b32 x)
{
    .reg .pred %q<4>;
    .reg .b32 %s<8>;
    mov.u32 %s1, x;
    mov.u32 %s2, 0;
$FL:
    setp.le.u32 %q1, %s1, 1;
    @%q1 bra $FE;
    and.b32 %s3, %s1, 1;
    setp.eq.u32 %q2, %s3, 1;
    mad.lo.u32 %s4, %s1, 3, 1;
    shr.u32 %s5, %s1, 1;
    selp.u32 %s1, %s4, %s5, %q2;
    add.u32 %s2, %s2, 1;
    bra $FL;
$FE:
    mov.u32 rv, %s2;
    ret;
}
"""
CALLER = """
    ld.param.u64 %rd1, [out]; ld.param.u64 %rd2, [seeds]; ld.param.u64 %rd3, [ctr];
    mov.u32 %r1, %tid.x; mov.u32 %r2, %ctaid.x; mov.u32 %r3, %ntid.x;
    mad.lo.s32 %r4, %r2, %r3, %r1;
    mul.wide.u32 %rd4, %r4, 4;
    add.s64 %rd5, %rd2, %rd4;
    ld.global.u32 %r5, [%rd5];
    and.b32 %r6, %r4, 1;
    setp.eq.u32 %p1, %r6, 1;
    @%p1 bra $ODDLANE;
    call.uni (%r7), steps_of, (%r5);
    bra $JOIN;
$ODDLANE:
    mul.lo.u32 %r8, %r5, 3;
    call.uni (%r7), steps_of, (%r8);
$JOIN:
    atom.global.add.u32 %r9, [%rd3], 1;
    mul.wide.u32 %rd6, %r4, 8;
    add.s64 %rd7, %rd1, %rd6;
    st.global.v2.u32 [%rd7], {%r7, %r9};
    ret;
"""


def test_divergent_calls_keep_their_contexts(monkeypatch):
    k = kernel(CALLER, PARAMS3, extra=FUNC)
    n = 8 * 128
    seeds = np.random.default_rng(3).integers(1, 5000, n).astype(np.uint32)
    out = np.zeros((n, 2), np.uint32)
    ctr = np.zeros(1, np.uint32)
    res = both(lambda: k.launch(grid=(8,), block=(128,), args=[out, seeds, ctr]), [out, ctr], monkeypatch)
    assert_same(*res, min_session_steps=20)

    def steps(x):
        c = 0
        while x > 1:
            x = 3 * x + 1 if x & 1 else x >> 1
            c += 1
        return c
    want = [steps(int(s) * (3 if i & 1 else 1) & 0xFFFFFFFF) for i, s in enumerate(seeds)]
    np.testing.assert_array_equal(res[1][0][0][:, 0], want)


def test_rotation_lets_a_spinning_warp_see_a_flag_set_after_a_compacted_loop(monkeypatch):
    """Warp 0 runs a long lane-local loop (in sessions) and then sets a flag; warps 1-2 spin on it further on
    (their loads run at the machine's rotations, on parked lanes)."""
    k = kernel("""
    ld.param.u64 %rd1, [out];
    mov.u32 %r1, %tid.x;
    setp.ge.u32 %p1, %r1, 32;
    @%p1 bra $WAIT;
    mov.u32 %r4, 0;
    and.b32 %r5, %r1, 3;
$WORK:
    add.u32 %r4, %r4, %r5;
    add.u32 %r4, %r4, 1;
    setp.lt.u32 %p3, %r4, 1500;
    @%p3 bra $WORK;
    setp.eq.u32 %p4, %r1, 0;
    @%p4 st.volatile.global.u32 [%rd1], %r4;
    ret;
$WAIT:
    ld.volatile.global.u32 %r2, [%rd1];
    setp.eq.u32 %p2, %r2, 0;
    @%p2 bra $WAIT;
    add.u32 %r3, %r2, %r1;
    mul.wide.u32 %rd2, %r1, 4;
    add.s64 %rd3, %rd1, %rd2;
    st.global.u32 [%rd3], %r3;
    ret;""", ".param .u64 out")
    out = np.zeros(96, np.uint32)
    res = both(lambda: k.launch(grid=(1,), block=(96,), args=[out], options={"watchdog_s": 20}), [out], monkeypatch)
    assert_same(*res, min_session_steps=100)
    assert (res[1][0][0][32:96] == 1500 + np.arange(32, 96)).all()


@pytest.mark.parametrize("flavor", ["sm_80.O3", "sm_80.G"])
def test_corpus_collatz_and_recursion(flavor, monkeypatch):
    m = corpus_module("control_flow", flavor)
    rng = np.random.default_rng(11)
    n = 2048
    x = rng.integers(1, 20000, n).astype(np.uint32)
    out = np.zeros(n, np.int32)
    k = m.kernel("collatz_steps")
    res = both(lambda: k.launch(grid=(n // 256,), block=(256,), args=[x, out, np.int32(n)]), [out], monkeypatch)
    assert_same(*res, min_session_steps=50)
    r = corpus_module("recursion", flavor)
    v = rng.integers(0, 15, 200).astype(np.uint32)
    fib, fact, par = np.zeros(200, np.uint32), np.zeros(200, np.uint64), np.zeros(200, np.int32)
    res = both(lambda: r.kernel("recursive_fib_fact").launch(grid=(4,), block=(64,), args=[v, fib, fact, par,
                                                                                          np.int32(200)]),
               [fib, fact, par], monkeypatch)
    assert_same(*res, min_session_steps=0)


def test_sanitized_launches_do_not_compact(monkeypatch):
    k = kernel(COLLATZ, PARAMS3)
    seeds = np.arange(1, 257, dtype=np.uint32)
    out = np.zeros((256, 2), np.uint32)
    ctr = np.zeros(1, np.uint32)
    before = compact.steps_run()
    k.launch(grid=(1,), block=(256,), args=[out, seeds, ctr], options={"sanitize": True})
    assert compact.steps_run() == before


def test_a_parked_lanes_fault_during_a_session_names_its_instruction(monkeypatch):
    """Warp 1 reaches a wild load while warp 0 loops (in a session); the rotation runs the load."""
    from ptxforge.emu import MemoryFault

    k = kernel("""
    mov.u32 %r1, %tid.x;
    setp.lt.u32 %p1, %r1, 32;
    @%p1 bra $LOOP;
    mov.u64 %rd1, 4096;
    ld.global.u32 %r2, [%rd1];
    ret;
$LOOP:
    add.u32 %r3, %r3, 1;
    setp.lt.u32 %p2, %r3, 5000;
    @%p2 bra $LOOP;
    ret;""", ".param .u64 out")
    msgs = []
    for enabled in (False, True):
        monkeypatch.setenv("PTXFORGE_EMU_REFERENCE", "0" if enabled else "1")
        before = compact.steps_run()
        with pytest.raises(MemoryFault) as e:
            k.launch(grid=(1,), block=(64,), args=[None])
        msgs.append((str(e.value), compact.steps_run() - before))
    assert msgs[0][0] == msgs[1][0] and "compact.ptx:14: ld.global.u32" in msgs[0][0]
    assert msgs[0][1] == 0 and msgs[1][1] > 0


# shfl runs in a session when the gathered lanes are whole warps standing together: even warps shuffle
# among lane-local code while odd warps wait past it; one thread exits first (its warp is never whole), and
# odd warps split and shuffle with a partial member mask (the machine runs those).
WARP_SHFL = """
    ld.param.u64 %rd1, [out]; ld.param.u32 %r9, [quit];
    mov.u32 %r1, %tid.x;
    shr.u32 %r2, %r1, 5;
    and.b32 %r3, %r1, 31;
    setp.eq.u32 %p4, %r1, %r9;
    @%p4 ret;
    and.b32 %r4, %r2, 1;
    setp.ne.u32 %p1, %r4, 0;
    mul.lo.u32 %r5, %r1, -1640531535;
    @%p1 bra $ODD;
    shfl.sync.down.b32 %r6|%p2, %r5, 16, 31, -1;
    selp.u32 %r7, 1, 3, %p2;
    add.u32 %r5, %r5, %r6;
    xor.b32 %r5, %r5, %r3;
    shfl.sync.bfly.b32 %r6, %r5, 3, 31, -1;
    add.u32 %r5, %r5, %r6;
    mul.lo.u32 %r8, %r3, 5;
    shfl.sync.idx.b32 %r6, %r5, %r8, 31, -1;
    mad.lo.u32 %r5, %r5, %r7, %r6;
$STORE:
    mul.wide.u32 %rd2, %r1, 4;
    add.s64 %rd3, %rd1, %rd2;
    st.global.u32 [%rd3], %r5;
    ret;
$ODD:
    setp.lt.u32 %p3, %r3, 20;
    @%p3 bra $LOW;
    add.u32 %r5, %r5, 7;
    bra $STORE;
$LOW:
    shfl.sync.up.b32 %r6, %r5, 1, 0, 0xfffff;
    add.u32 %r5, %r5, %r6;
    bra $STORE;
"""


def shfl_in_sessions(monkeypatch) -> list:
    """Records each warp-synchronous step a session decides to take itself (True) or leave to the machine."""
    seen = []
    orig = compact.Session._warps_ready

    def ready(self, P, parked_at_P):
        ok = orig(self, P, parked_at_P)
        seen.append(ok)
        return ok
    monkeypatch.setattr(compact.Session, "_warps_ready", ready)
    return seen


@pytest.mark.parametrize("quit_tid", [37, 70, 1 << 20])
@pytest.mark.parametrize("blocks, threads", [(4, 256), (3, 80)])
def test_shfl_runs_on_gathered_whole_warps(quit_tid, blocks, threads, monkeypatch):
    k = kernel(WARP_SHFL, ".param .u64 out, .param .u32 quit")
    out = np.zeros(blocks * threads, np.uint32)
    seen = shfl_in_sessions(monkeypatch)
    res = both(lambda: k.launch(grid=(blocks,), block=(threads,), args=[out, np.uint32(quit_tid)]), [out],
               monkeypatch)
    assert_same(*res)
    # the even warps are whole unless the quitting thread is in one, or the block ends in a partial warp
    whole = threads % 32 == 0 and (quit_tid // 32 % 2 == 1 or quit_tid >= threads)
    assert (sum(seen) >= 3) == whole, seen  # the three shuffles of the even warps
    assert seen.count(False) >= (0 if whole else 1)


@pytest.mark.parametrize("blocks, threads, n", [(64, 256, 64 * 256), (5, 96, 400), (3, 64, 150)])
def test_corpus_shuffle_reduction_after_a_barrier(blocks, threads, n, monkeypatch):
    """Warp 0 of each block reduces the per-warp partials with shfl while the others wait at the end."""
    k = corpus_module("reductions", "sm_80.O3").kernel("reduce_sum_warp")
    x = np.random.default_rng(5).random(n, np.float32)
    out = np.zeros(blocks, np.float32)
    seen = shfl_in_sessions(monkeypatch)
    res = both(lambda: k.launch(grid=(blocks,), block=(threads,), args=[x, out, np.int32(n)]), [out], monkeypatch)
    assert_same(*res, min_session_steps=30)
    assert sum(seen) == 5  # warp 0's five shuffles after the barrier
    np.testing.assert_allclose(res[1][0][0], np.add.reduceat(np.pad(x, (0, blocks * threads - n)),
                                                             np.arange(0, blocks * threads, threads)), rtol=1e-5)


# Odd lanes run a lane-local loop and exit; then the even lanes read, with shfl, a register the odd lanes
# wrote in the loop and never read again themselves (from a source lane outside the member mask: undefined
# on a GPU, that lane's last value here). A session skips writing back the registers no lane reads again
# (liveness.py) but must write this one: another lane's shfl can still read it.
SHFL_FROM_EXITED = """
    ld.param.u64 %rd1, [out]; ld.param.u64 %rd2, [seeds];
    mov.u32 %r1, %tid.x; mov.u32 %r2, %ctaid.x; mov.u32 %r3, %ntid.x;
    mad.lo.s32 %r4, %r2, %r3, %r1;
    mul.wide.u32 %rd4, %r4, 4;
    add.s64 %rd5, %rd2, %rd4;
    ld.global.u32 %r5, [%rd5];
    and.b32 %r6, %r1, 1;
    setp.eq.u32 %p1, %r6, 0;
    @%p1 bra $EVEN;
    and.b32 %r7, %r5, 63;
    mov.u32 %r8, 0;
$LOOP:
    mad.lo.u32 %r5, %r5, 1103515245, 12345;
    xor.b32 %r9, %r5, %r8;
    add.u32 %r8, %r8, 1;
    setp.lt.u32 %p2, %r8, %r7;
    @%p2 bra $LOOP;
    exit;
$EVEN:
    add.u32 %r10, %r1, 1;
    shfl.sync.idx.b32 %r11, %r9, %r10, 31, 0x55555555;
    st.global.u32 [%rd5], %r11;
    ret;
"""


@pytest.mark.parametrize("blocks, threads", [(16, 256), (1, 64)])
def test_registers_another_lane_can_still_read_are_written_back(blocks, threads, monkeypatch):
    k = kernel(SHFL_FROM_EXITED, ".param .u64 out, .param .u64 seeds")
    n = blocks * threads
    seeds = np.random.default_rng(n).integers(0, 2**32, n, dtype=np.uint64).astype(np.uint32)
    init = seeds.copy()
    skipped = compact.writebacks_skipped()
    res = both(lambda: k.launch(grid=(blocks,), block=(threads,), args=[None, seeds]), [seeds], monkeypatch)
    assert_same(*res, min_session_steps=20)
    assert compact.writebacks_skipped() > skipped, "no write-back was skipped: the test would prove nothing"
    (mem, *_), _ = res
    assert (mem[0][0::2] != init[0::2]).all()  # the even lanes stored what they read


def test_watchdog_verdict_is_the_same_when_the_lowest_lane_loops_back(monkeypatch):
    """Eight lanes loop over a shfl they never run (test_emu_liveness.LOOP_AROUND_A_SHFL); the probes land at
    $SPIN, where %r5, which another lane's shfl could read, holds a new %clock value every turn. Sessions that
    left it stale there made the watchdog see a repeat the machine alone never sees."""
    from test_emu_liveness import LOOP_AROUND_A_SHFL

    k = kernel(LOOP_AROUND_A_SHFL, ".param .u64 out")
    seen = []
    for enabled in (False, True):
        monkeypatch.setenv("PTXFORGE_EMU_REFERENCE", "0" if enabled else "1")
        before = compact.steps_run()
        with pytest.raises((WatchdogTimeout, pf.emu.TimeLimitExceeded)) as e:
            k.launch(grid=(1,), block=(64,), args=[None], options={"watchdog_s": 0.3, "time_limit_s": 1.5})
        seen.append((type(e.value).__name__, compact.steps_run() - before > 0))
    assert seen == [("TimeLimitExceeded", False), ("TimeLimitExceeded", True)]
