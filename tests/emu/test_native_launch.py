"""The native tier's launch path (native/launcher.py, the kept Machine of emu/launch.py): repeated launches of
one shape give what the interpreter gives, on grids of one wave and of several, with parameters that change
between launches, and the per-SM counts follow the interpreter's block placement."""

from __future__ import annotations

import time

import numpy as np
import pytest
from emu_corpus import corpus_module

from ptxforge.emu.launch import emulate
from ptxforge.emu.native.launcher import per_sm_counts
from ptxforge.runtime.buffers import to_device

pytest.importorskip("llvmlite")


@pytest.mark.parametrize("blocks", [3, 132, 300])  # under one wave, one wave, several waves on 132 SMs
def test_repeated_native_launches_match_the_interpreter(blocks):
    k = corpus_module("vector_ops").kernel("vadd_f32")
    n = blocks * 128
    rng = np.random.default_rng(blocks)
    a, b = rng.random(n, np.float32), rng.random(n, np.float32)
    bufs = [to_device(a), to_device(b), to_device(np.zeros(n, np.float32))]
    try:
        got = {}
        for tier in ("interp", "native", "native"):  # (the second native launch runs the kept Machine again)
            for count in (n, n - 77):  # (other parameters, the same shape)
                bufs[2].copy_from(np.zeros(n, np.float32))
                r = k.launch(grid=(blocks,), block=(128,), args=[*bufs, np.int32(count)],
                             options={"tier": tier, "threads": 1, "level": "quick"})
                assert r.tier == tier, r.tier_note
                out = bufs[2].to_host()
                np.testing.assert_array_equal(out[:count], a[:count] + b[:count])
                assert not out[count:].any()
                key = (tier, count)
                if key in got:
                    assert got[key][0] == r.thread_instructions
                    np.testing.assert_array_equal(got[key][1], r.per_sm)
                got[key] = (r.thread_instructions, r.per_sm)
        for count in (n, n - 77):
            assert got[("native", count)][0] == got[("interp", count)][0]
            np.testing.assert_array_equal(got[("native", count)][1], got[("interp", count)][1])
    finally:
        for bf in bufs:
            bf.free()


@pytest.mark.parametrize("blocks,num_sms", [(5, 132), (300, 132), (300, 7), (64, 64)])
def test_per_sm_counts_follow_the_block_placement(blocks, num_sms):
    k = corpus_module("vector_ops").kernel("vadd_f32")
    m = emulate(k.module, k.function, grid=(blocks,), block=(256,), params=bytes(28), num_sms=num_sms, run=False)
    counts = np.random.default_rng(blocks).integers(0, 1000, blocks).astype(np.int64)
    want = np.zeros(num_sms, np.int64)
    for b, c in enumerate(counts):  # block b in slot b % resident of its wave, slot i on SM sm_ids[i % n]
        want[m.sm_ids[b % m.resident % m.sm_ids.size]] += c
    np.testing.assert_array_equal(per_sm_counts(m, counts), want)
    sub = emulate(k.module, k.function, grid=(blocks,), block=(256,), params=bytes(28), num_sms=num_sms,
                  sm_ids=list(range(num_sms))[::-1][:3], run=False)  # (a partition: the general placement)
    want = np.zeros(num_sms, np.int64)
    for b, c in enumerate(counts):
        want[sub.sm_ids[b % sub.resident % sub.sm_ids.size]] += c
    np.testing.assert_array_equal(per_sm_counts(sub, counts), want)


def _reduce(threads):
    k = corpus_module("reductions").kernel("reduce_sum_warp")
    x = np.random.default_rng(3).random(1 << 14, np.float32)
    out = np.zeros(64, np.float32)
    r = k.launch(grid=(64,), block=(256,), args=[x, out, np.int32(x.size)],
                 options={"tier": "native", "threads": threads, "level": "quick"})
    assert r.tier == "native"
    return out.tobytes(), r.thread_instructions, r.per_sm.tobytes()


def test_a_grid_too_small_to_split_runs_on_the_callers_thread(monkeypatch):
    from ptxforge.emu.native import launcher

    k = corpus_module("vector_ops").kernel("vadd_f32")
    n = 16 * 256
    a = np.arange(n, dtype=np.float32)
    bufs = [to_device(a), to_device(a), to_device(np.zeros(n, np.float32))]

    def no_team():
        raise AssertionError("the team was handed a grid of microseconds")
    monkeypatch.setattr(launcher, "team", no_team)
    # a chunk of 1 s: 16 blocks fit one whatever the first block's timing (a cold or preempted first block
    # measured several microseconds under load)
    monkeypatch.setattr(launcher, "CHUNK_S", 1.0)
    try:
        r = k.launch(grid=(16,), block=(256,), args=[*bufs, np.int32(n)], options={"tier": "native", "threads": 4})
        assert r.tier == "native"
        np.testing.assert_array_equal(bufs[2].to_host(), 2 * a)
    finally:
        for bf in bufs:
            bf.free()


def test_workers_taking_small_chunks_give_what_one_thread_gives(monkeypatch):
    from ptxforge.emu.native import launcher
    from ptxforge.emu.native.team import team

    monkeypatch.setattr(launcher, "CHUNK_S", 0.0)  # chunks of a block: every worker that joins takes some
    want = _reduce(1)
    before = team().launches
    assert _reduce(4) == want and team().launches > before


def test_helpers_join_back_to_back_launches(monkeypatch):
    """A helper spinning after a launch joins the next one (tried for up to 10 s: on a loaded machine a helper
    may wait long for a core), and what the workers write is what one thread writes."""
    from ptxforge.emu.native import launcher
    from ptxforge.emu.native.team import team

    monkeypatch.setattr(launcher, "CHUNK_S", 0.0)
    k = corpus_module("vector_ops").kernel("vadd_f32")
    n = 2048 * 128  # (a few hundred microseconds a launch: time for a helper to join)
    a = np.random.default_rng(5).random(n, np.float32)
    bufs = [to_device(a), to_device(a), to_device(np.zeros(n, np.float32))]
    try:
        joined = team().joined
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline:
            bufs[2].copy_from(np.zeros(n, np.float32))
            k.launch(grid=(2048,), block=(128,), args=[*bufs, np.int32(n)],
                     options={"tier": "native", "threads": 2, "level": "quick"})
            np.testing.assert_array_equal(bufs[2].to_host(), a + a)
            if team().joined > joined:
                break
        assert team().joined > joined
    finally:
        for bf in bufs:
            bf.free()


def test_a_fault_in_a_shared_launch_names_its_thread_and_block(monkeypatch):
    from ptxforge.emu.errors import MemoryFault
    from ptxforge.emu.native import launcher

    monkeypatch.setattr(launcher, "CHUNK_S", 0.0)
    k = corpus_module("vector_ops").kernel("vadd_f32")
    n = 64 * 256
    a = to_device(np.ones(n, np.float32))
    c = to_device(np.zeros(n - 56, np.float32))  # only block 63's threads 200.. write past its end
    try:
        for _ in range(5):  # (whichever worker runs block 63)
            with pytest.raises(MemoryFault, match=r"out-of-bounds global access of 4 bytes .* by thread \(200,0,0\) "
                               r"block \(63,0,0\)$"):
                k.launch(grid=(64,), block=(256,), args=[a, a, c, np.int32(n)],
                         options={"tier": "native", "threads": 2, "level": "quick"})
    finally:
        a.free()
        c.free()


def test_helpers_sleep_once_their_spin_is_over(monkeypatch):
    """After a shared launch every helper is asleep (spending no CPU) within its bounded spin; with no spin at all
    (spin_ns 0, as $PTXFORGE_NATIVE_SPIN_S=0 sets) the launches still give what one thread gives."""
    import time

    from ptxforge.emu.native import launcher
    from ptxforge.emu.native.team import team

    monkeypatch.setattr(launcher, "CHUNK_S", 0.0)
    want = _reduce(1)
    for spin_ns in (team().spin_ns, 0):
        monkeypatch.setattr(team(), "spin_ns", spin_ns)
        assert _reduce(2) == want
        deadline = time.monotonic() + 10  # (a loaded machine may keep a helper from its core a while)
        while team().sleeping < len(team().helpers) and time.monotonic() < deadline:
            time.sleep(0.005)
        assert team().sleeping == len(team().helpers)


def test_quiet_spells_follow_helpers_that_found_no_core(monkeypatch):
    """A launch no awake helper joined, or one whose helper kept the caller waiting, starts a quiet spell (doubling
    to MAX_QUIET_S); a launch helpers joined in time shrinks the next one back. In a spell a default-threads launch
    runs on the caller's thread; threads=N still shares."""
    from ptxforge.emu.native import launcher
    from ptxforge.emu.native import team as T

    crew = T.team()
    monkeypatch.setattr(crew, "backoff", T.MIN_QUIET_S)
    monkeypatch.setattr(crew, "quiet_until", 0.0)
    crew.note(False, 0, 0.0)  # (helpers asleep: no verdict)
    assert not crew.quiet() and crew.backoff == T.MIN_QUIET_S
    crew.note(True, 0, 0.0)
    assert crew.quiet() and crew.backoff == 2 * T.MIN_QUIET_S
    crew.note(False, 1, 2 * T.LATE_S)
    assert crew.backoff == 4 * T.MIN_QUIET_S
    for _ in range(20):
        crew.note(True, 0, 0.0)
    assert crew.backoff == T.MAX_QUIET_S
    crew.note(True, 1, 0.0)
    assert crew.backoff == T.MIN_QUIET_S

    monkeypatch.setattr(launcher, "ALONE_S", 0.0)  # (every launch would share, but for the spell)
    monkeypatch.setattr(crew, "quiet_until", float("inf"))
    want = _reduce(1)
    launches = crew.launches
    assert _reduce(None) == want and crew.launches == launches
    monkeypatch.setattr(launcher, "CHUNK_S", 0.0)
    assert _reduce(2) == want and crew.launches == launches + 1


def test_launches_from_two_threads_at_once_give_what_one_thread_gives(monkeypatch):
    """The team serves one launch at a time; a launch that finds it busy runs on its caller's thread."""
    import threading

    from ptxforge.emu.native import launcher

    monkeypatch.setattr(launcher, "CHUNK_S", 0.0)
    want = _reduce(1)
    got: list[tuple] = []

    def launches():
        for _ in range(20):
            got.append(_reduce(2))
    threads = [threading.Thread(target=launches) for _ in range(2)]
    for th in threads:
        th.start()
    for th in threads:
        th.join()
    assert len(got) == 40 and all(g == want for g in got)
