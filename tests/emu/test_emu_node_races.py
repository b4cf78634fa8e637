"""The node sanitizer pairs an acquire with the release whose value it reads (PTX memory model): the flag
that is checked matters, not just the time and scope of the acquire."""

import node_kernels as K
import numpy as np
import pytest

from ptxforge import runtime as rt
from ptxforge.emu import Node
from ptxforge.emu.sanitizer import SanitizerError

N = 256


def spin(load: str, flag: str = "%rd2", until: str = "setp.eq.u32 %p2, %r2, 0;") -> str:
    return f"""SPIN:
    {load} %r2, [{flag}];
    {until}
    @%p2 bra SPIN;"""


ACQUIRE_LATE = spin("ld.acquire.sys.global.u32")
RELAXED_LATE = spin("ld.relaxed.sys.global.u32")
VOLATILE_LATE = spin("ld.volatile.global.u32")

CLEAN = {
    "acquire of the flag raised after the data": ACQUIRE_LATE,
    "relaxed poll, then a system fence": RELAXED_LATE + "\n    fence.acq_rel.sys;",
    "volatile poll, then membar.sys": VOLATILE_LATE + "\n    membar.sys;",
    "relaxed poll, then an acquire of the same flag": RELAXED_LATE + "\n    ld.acquire.sys.global.u32 %r3, [%rd2];",
}
RACY = {
    # the flag that covers the data is polled without acquire; the acquire is of a flag raised before the
    # data was written (it reads that release's value, which orders nothing after it)
    "relaxed poll, then an acquire of a flag raised before the data":
        RELAXED_LATE + "\n    ld.acquire.sys.global.u32 %r3, [%rd1];",
    "relaxed poll, then an acquire of an unrelated flag set by the host":
        RELAXED_LATE + "\n    ld.acquire.sys.global.u32 %r3, [%rd4];",
    "acquire of the wrong flag only (raised before the data)": spin("ld.acquire.sys.global.u32", "%rd1"),
    "relaxed poll only": RELAXED_LATE,
    "no flag check at all": "",
}


def handoff(wait: str, bump: str | None = None):
    """GPU 0 publishes N ints into GPU 1's memory (early flag, data, late flag); GPU 1 runs `wait` and
    copies the data out. With `bump`, GPU 2 waits for the late flag, runs `bump` on it (a third party in
    the release sequence) and then sets a plain `go` flag; GPU 1 polls `go` (relaxed) and then acquires the
    late flag once, so it reads the value GPU 2 left there. Returns (the first sanitizer error or None,
    the consumer's pending launch, its output); without an error the output must be the data."""
    node = Node(gpus=3 if bump else 2, sms=4, sanitize=True)
    g0, g1 = node.devices[:2]
    data = rt.empty(N, np.uint32, device=g1)
    early, late = rt.empty(1, np.uint32, device=g1), rt.empty(1, np.uint32, device=g1)
    out = np.zeros(N, np.uint32)
    K.publisher().launch((1,), (128,), [data, early, late, np.uint32(N)], device=g0, stream=g0.stream())
    first = early
    if bump:
        g2 = node.devices[2]
        first = rt.empty(1, np.uint32, device=g1)  # `go`, in place of the early flag
        K.bumper(bump).launch((1,), (32,), [late, first], device=g2, stream=g2.stream())
        wait = spin("ld.relaxed.sys.global.u32", "%rd1") + """
    ld.acquire.sys.global.u32 %r3, [%rd2];
    setp.ne.u32 %p3, %r3, 2;
    @%p3 trap;"""
    pend = K.consumer(wait).launch((1,), (128,), [first, late, data, out, np.uint32(N)], device=g1,
                                   stream=g1.stream())
    try:
        node.synchronize()
    except SanitizerError as e:
        return e, pend, out
    np.testing.assert_array_equal(out, np.arange(1, N + 1))
    return None, pend, out


@pytest.mark.parametrize("name", CLEAN)
def test_a_consumer_that_acquires_the_flag_covering_the_data_is_clean(name):
    err, _, out = handoff(CLEAN[name])
    assert err is None
    np.testing.assert_array_equal(out, np.arange(1, N + 1))


@pytest.mark.parametrize("name", RACY)
def test_a_consumer_that_does_not_acquire_the_right_flag_is_a_race_naming_both_sides(name):
    err, _, _ = handoff(RACY[name])
    assert isinstance(err, SanitizerError), f"{name}: not reported"
    rep = next(r for r in err.reports if r.kind == "race" and "ld.global.u32 %r6" in
               (r.instruction + r.other["instruction"]))
    pair = sorted([rep.instruction, rep.other["instruction"]])
    assert pair[0].startswith("ld.global.u32 %r6") and pair[1].startswith("st.global.u32 [%rd5]"), pair
    assert {rep.gpu, rep.other["gpu"]} == {0, 1}
    assert rep.other["launch"].startswith("publisher on GPU 0") and "no release/acquire pair at .sys" in rep.message
    assert rep.allocation and rep.allocation.startswith("buffer on GPU 1")
    text = str(err)
    assert "consumer.ptx:" in text and "publisher.ptx:" in text


def test_the_acquire_of_a_flag_raised_before_the_data_is_not_a_scope_error():
    err, _, _ = handoff(RACY["relaxed poll, then an acquire of a flag raised before the data"])
    assert all("scope error" not in r.message for r in err.reports)


def test_a_relaxed_poll_then_a_gpu_fence_is_a_scope_error():
    """The acquire pattern (relaxed read, fence) has the fence's scope: .gpu does not reach GPU 0."""
    err, _, _ = handoff(RELAXED_LATE + "\n    fence.acq_rel.gpu;")
    rep = next(r for r in err.reports if r.instruction.startswith("ld.global.u32 %r6"))
    assert rep.gpu == 1 and rep.other["gpu"] == 0 and "scope error" in rep.message and "use .sys" in rep.message


RMW_BUMPS = {
    "atom.add": "atom.relaxed.sys.global.add.u32 %r4, [%rd1], %r3;",
    "red.add": "red.relaxed.sys.global.add.u32 [%rd1], %r3;",
    "atom.exch": "mov.u32 %r3, 2;\n    atom.relaxed.sys.global.exch.b32 %r4, [%rd1], %r3;",
    "atom.cas": "mov.u32 %r3, 2;\n    atom.relaxed.sys.global.cas.b32 %r4, [%rd1], %r2, %r3;",
}


@pytest.mark.parametrize("bump", RMW_BUMPS)
def test_an_atomic_of_another_gpu_continues_the_release_sequence(bump):
    """GPU 0 releases the flag (1), GPU 2 bumps it to 2 with a relaxed RMW, GPU 1 acquires the value 2:
    the value is in the release sequence of GPU 0's release, so the data is ordered."""
    err, pend, _ = handoff("", RMW_BUMPS[bump])
    assert err is None


def test_a_plain_store_of_another_gpu_ends_the_release_sequence():
    """The same with GPU 2 storing 2 (st.relaxed.sys, not an RMW): the acquire reads GPU 2's value, which
    no release of GPU 0 heads, so the data read races with GPU 0's writes."""
    err, _, _ = handoff("", "mov.u32 %r3, 2;\n    st.relaxed.sys.global.u32 [%rd1], %r3;")
    assert isinstance(err, SanitizerError)
    rep = err.reports[0]
    assert rep.gpu == 1 and rep.other["gpu"] == 0 and rep.instruction.startswith("ld.global.u32 %r6")
    assert rep.other["instruction"].startswith("st.global.u32 [%rd5]")


RELEASE_THEN_RELAXED = {  # what precedes `st.relaxed.sys [flag], 2` in the producer; clean or not
    "st.release of the same flag": ("st.release.sys.global.u32 [%rd2], %r2;", True),
    "fence.acq_rel.sys": ("fence.acq_rel.sys;", True),
    "st.release of another flag": ("st.release.sys.global.u32 [%rd5], %r2;", False),
    "nothing": ("", False),
}


@pytest.mark.parametrize("name", RELEASE_THEN_RELAXED)
def test_a_relaxed_store_is_a_release_after_a_fence_or_a_release_of_the_same_flag(name):
    """st.release [M] (or a fence) followed by st.relaxed [M] in one thread is a release pattern on M;
    a release of another location is not. The consumer polls a plain `go` set afterwards, then acquires
    the flag once, so it reads only the relaxed store's value."""
    before, clean = RELEASE_THEN_RELAXED[name]
    k = K.kernel("twice", ".param .u64 data, .param .u64 flag, .param .u64 go, .param .u64 other", f"""
    ld.param.u64 %rd1, [data];
    ld.param.u64 %rd2, [flag];
    ld.param.u64 %rd6, [go];
    ld.param.u64 %rd5, [other];
    mov.u32 %r1, %tid.x;
    mul.wide.u32 %rd3, %r1, 4;
    add.s64 %rd4, %rd1, %rd3;
    st.global.u32 [%rd4], %r1;
    bar.sync 0;
    setp.ne.u32 %p1, %r1, 0;
    @%p1 bra DONE;
    mov.u32 %r2, 1;
    {before}
    mov.u32 %r2, 2;
    st.relaxed.sys.global.u32 [%rd2], %r2;
    st.relaxed.sys.global.u32 [%rd6], %r2;
DONE:
    ret;""")
    node = Node(gpus=2, sms=4, sanitize=True)
    g0, g1 = node.devices
    data, flag, go, other = (rt.empty(n, np.uint32, device=g1) for n in (N, 1, 1, 1))
    out = np.zeros(N, np.uint32)
    k.launch((1,), (N,), [data, flag, go, other], device=g0, stream=g0.stream())
    wait = spin("ld.relaxed.sys.global.u32", "%rd1") + """
    ld.acquire.sys.global.u32 %r3, [%rd2];
    setp.ne.u32 %p3, %r3, 2;
    @%p3 trap;"""
    K.consumer(wait).launch((1,), (128,), [go, flag, data, out, np.uint32(N)], device=g1, stream=g1.stream())
    if clean:
        node.synchronize()
        np.testing.assert_array_equal(out, np.arange(N))
        return
    with pytest.raises(SanitizerError) as e:
        node.synchronize()
    rep = e.value.reports[0]
    assert rep.instruction.startswith("ld.global.u32 %r6") and rep.other["instruction"].startswith("st.global.u32")
    assert rep.gpu == 1 and rep.other["gpu"] == 0


def test_a_stream_launch_returns_pending_at_once_and_runs_at_synchronize():
    """Issue 12, Deliver 2: `launch(stream=s)` only queues; `synchronize` runs it; without `stream=` a
    launch runs before it returns."""
    from ptxforge.emu.node import PendingLaunch

    node = Node(gpus=2, sms=4)
    g0, g1 = node.devices
    buf = rt.empty(32, np.uint32, device=g1)
    p = K.store_one().launch((1,), (32,), [buf], device=g0, stream=g0.stream())
    assert isinstance(p, PendingLaunch) and p.state == "pending" and node.pending == [p]
    assert not buf.to_host().any()  # nothing ran yet
    node.synchronize()
    assert p.state == "done" and not node.pending and (p.result().per_sm > 0).sum() == 1  # one block, one SM
    np.testing.assert_array_equal(buf.to_host(), np.arange(1, 33))
    now = rt.empty(32, np.uint32, device=g1)
    res = K.store_one().launch((1,), (32,), [now], device=g0)
    assert not isinstance(res, PendingLaunch) and not node.pending
    np.testing.assert_array_equal(now.to_host(), np.arange(1, 33))


def relay_consumer(barrier: bool):
    """Lane 0 of warp 0 acquires `late`; warp 1 then copies the data out. It learns of the flag through a
    shared-memory relay written with no barrier or fence (`barrier=False`, DeepEP's combine receiver), or
    from a named barrier both warps pass (`barrier=True`, not aligned: they reach it at two instructions)."""
    hand, after, wait = ("", "barrier.sync 1, 64;", "barrier.sync 1, 64;") if barrier else (
        "st.volatile.shared.u32 [relay], 1;", "",
        "RSPIN:\n    ld.volatile.shared.u32 %r3, [relay];\n    setp.eq.u32 %p4, %r3, 0;\n    @%p4 bra RSPIN;")
    return K.kernel("relay_consumer", ".param .u64 late, .param .u64 data, .param .u64 out, .param .u32 n", f"""
    .shared .align 4 .u32 relay;
    ld.param.u64 %rd2, [late];
    ld.param.u64 %rd3, [data];
    ld.param.u64 %rd4, [out];
    ld.param.u32 %r9, [n];
    mov.u32 %r1, %tid.x;
    setp.ne.u32 %p1, %r1, 0;
    @!%p1 st.shared.u32 [relay], 0;
    bar.sync 0;
    setp.ge.u32 %p2, %r1, 32;
    @%p2 bra READER;
    @%p1 bra HANDED;
SPIN:
    ld.acquire.sys.global.u32 %r2, [%rd2];
    setp.eq.u32 %p3, %r2, 0;
    @%p3 bra SPIN;
    {hand}
HANDED:
    {after}
    bra DONE;
READER:
    {wait}
    sub.u32 %r5, %r1, 32;
COPY:
    setp.ge.u32 %p5, %r5, %r9;
    @%p5 bra DONE;
    mul.wide.u32 %rd5, %r5, 4;
    add.s64 %rd6, %rd3, %rd5;
    ld.global.u32 %r6, [%rd6];
    add.s64 %rd7, %rd4, %rd5;
    st.global.u32 [%rd7], %r6;
    add.u32 %r5, %r5, 32;
    bra COPY;
DONE:
    ret;""")


@pytest.mark.parametrize("barrier", [False, True])
def test_what_one_warp_acquired_orders_the_others_only_after_a_barrier(barrier):
    node = Node(gpus=2, sms=4, sanitize=True)
    g0, g1 = node.devices
    data = rt.empty(N, np.uint32, device=g1)
    early, late = rt.empty(1, np.uint32, device=g1), rt.empty(1, np.uint32, device=g1)
    out = np.zeros(N, np.uint32)
    K.publisher().launch((1,), (128,), [data, early, late, np.uint32(N)], device=g0, stream=g0.stream())
    relay_consumer(barrier).launch((1,), (64,), [late, data, out, np.uint32(N)], device=g1, stream=g1.stream())
    if barrier:
        node.synchronize()
    else:
        with pytest.raises(SanitizerError) as e:
            node.synchronize()
        rep = next(r for r in e.value.reports if r.kind == "race")
        pair = sorted([rep.instruction, rep.other["instruction"]])
        assert pair[0].startswith("ld.global.u32 %r6") and pair[1].startswith("st.global.u32 [%rd5]"), pair
        assert {rep.gpu, rep.other["gpu"]} == {0, 1} and rep.thread[0] >= 32  # a reader of warp 1
    np.testing.assert_array_equal(out, np.arange(1, N + 1))
