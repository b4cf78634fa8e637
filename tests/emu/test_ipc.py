"""Emulator IPC: emulated GPUs in separate real processes (gloo) sharing memory through IPC handles."""

import os
import pickle
import subprocess
import sys

import ipc_ranks as R
import node_kernels as K
import numpy as np
import pytest

from ptxforge import runtime as rt
from ptxforge.emu import LaunchError, MemoryFault
from ptxforge.emu.ipc import (
    EmuIpcHandle,
    IpcError,
    ipc_close_mem_handle,
    ipc_device,
    ipc_get_mem_handle,
    ipc_open_mem_handle,
    live_segments,
    rank_base,
)
from ptxforge.emu.ipc.segment import owner_pid
from ptxforge.ep.spawn import run_ranks
from ptxforge.processes import exited

HERE = os.path.dirname(__file__)


def _ours_or_orphaned(name: str) -> bool:
    """A segment of this process or of a process that is gone (this test's ranks); others' jobs may run."""
    pid = int(name.split("-")[2])
    if pid == os.getpid():
        return True
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return True
    return False


@pytest.fixture(autouse=True)
def no_leak():
    """Every test leaves /dev/shm as it found it: no segment of this process or of its exited ranks."""
    before = set(live_segments())
    yield
    leaked = {n for n in set(live_segments()) - before if _ours_or_orphaned(n)}
    assert not leaked, f"leaked IPC segments: {sorted(leaked)}"


# --------------------------------------------------------------------------- real processes

@pytest.mark.parametrize("world", [2, 4])
def test_ring_exchange_across_processes_matches_numpy(world):
    n = 1000
    outs = run_ranks(R.ring, world, n, timeout_s=120)
    for r, out in enumerate(outs):
        np.testing.assert_array_equal(out, (r - 1) % world * 1000 + np.arange(n, dtype=np.uint32))


def test_nvcc_all_to_all_through_pointer_tables_on_4_processes_matches_numpy():
    world, chunk, rounds = 4, 48, 2
    path = os.path.join(HERE, "..", "corpus", "ptx", "cuda", "node_all_to_all.sm_90a.O3.ptx")
    outs = run_ranks(R.all_to_all, world, path, chunk, rounds, timeout_s=180)
    token = np.arange(world * chunk, dtype=np.int32).reshape(world, chunk)
    for tag in range(1, rounds + 1):
        send = [(j * 1_000_000 + token + tag * 7).astype(np.int32) for j in range(world)]
        for r in range(world):
            want = np.stack([send[j][r] for j in range(world)]).reshape(-1)
            np.testing.assert_array_equal(outs[r][tag - 1], want, err_msg=f"rank {r}, round {tag}")


def test_atomics_from_4_processes_on_one_counter_sum_exactly():
    world, iters, blocks = 4, 6, 2
    results = run_ranks(R.atomics, world, iters, blocks, timeout_s=180)
    counter, total, cas = results[0]
    threads = iters * blocks * 64  # per rank
    assert counter == world * threads
    assert total == sum(threads * (r + 1) for r in range(world))
    assert cas == total  # each thread's CAS loop added rank + 1 exactly once


def test_cross_process_deadlock_ends_with_a_watchdog_error_naming_the_wait():
    msg, seconds = run_ranks(R.deadlock, 2, 0.5, timeout_s=90)[0]
    assert "made no progress for 0.5 s" in msg, msg
    assert "no other process of the IPC job wrote" in msg
    assert "looping over wait_then_raise.ptx:16 .. wait_then_raise.ptx:18" in msg  # the spin loop's lines
    assert "last global load read 4 bytes" in msg and "which hold 0" in msg  # the flag it polls
    assert seconds < 30


def test_a_spin_on_a_flag_a_busy_process_will_set_is_not_a_deadlock():
    # rank 1 works 2.5 s (its own stores) before it sets rank 0's flag; rank 0's watchdog is 0.5 s
    (done, seconds), stores = run_ranks(R.waits_for_busy_peer, 2, 2.5, 0.5, timeout_s=90)
    assert done == 1 and seconds >= 2.0 and stores > 0


def test_writes_that_are_never_the_awaited_flag_still_end_in_a_bounded_time():
    msg, seconds = run_ranks(R.chatter_is_not_progress, 2, 0.4, timeout_s=90)[0]
    assert "made no progress for 4 s (10 x watchdog_s)" in msg, msg
    assert "wait_then_raise.ptx" in msg
    assert 3.5 < seconds < 40


# One interpreter (imports cost seconds) holds both ranks: the parent exits normally, running the exit handlers;
# its forked child ends with os._exit (no exit handlers, as after SIGKILL) only once the parent has gone, so
# the parent's exit cannot find the child dead and sweep its segment first.
_EXIT_AND_KILL = """
import os, sys, time, numpy as np
from ptxforge import runtime as rt
from ptxforge.emu.ipc import ipc_device
parent = os.getpid()
dev = ipc_device(0, 1, capacity=1 << 20)
rt.empty(16, np.uint32, device=dev)
print("exit", dev.segment, flush=True)
if os.fork() == 0:
    kid = ipc_device(0, 1, capacity=1 << 20)
    rt.empty(16, np.uint32, device=kid)
    print("kill", kid.segment, flush=True)
    deadline = time.monotonic() + 60
    while os.getppid() == parent and time.monotonic() < deadline:
        time.sleep(0.01)
    os._exit(0)
sys.exit(0)
"""


def test_a_rank_that_exits_without_closing_leaves_no_segment():
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([os.path.join(HERE, "..", "..", "src"),
                                                       os.environ.get("PYTHONPATH", "")]))
    # run() returns when the child, the last to hold the output pipe, has ended too
    p = subprocess.run([sys.executable, "-c", _EXIT_AND_KILL], capture_output=True, text=True, timeout=90, env=env)
    assert p.returncode == 0, p.stderr
    names = dict(line.split() for line in p.stdout.splitlines())
    assert names["exit"] not in live_segments()  # atexit removed it
    assert names["kill"] in live_segments()  # os._exit: left behind ...
    # (the child closed the pipe on its way out; its process may take a moment more to end)
    assert exited([owner_pid(names["kill"])], wait_s=30)
    ipc_device(0, 1, capacity=R.CAPACITY).close()  # ... until the next device sweeps dead owners' segments
    assert names["kill"] not in live_segments()


def test_ranks_of_a_gloo_job_that_never_close_leave_no_segment():
    names = run_ranks(R.forget_to_close, 2, timeout_s=60)
    assert len(set(names)) == 2 and not set(names) & set(live_segments())


# --------------------------------------------------------------------------- one process, two ranks (API)

@pytest.fixture
def pair():
    d0, d1 = ipc_device(0, 2, capacity=R.CAPACITY), ipc_device(1, 2, capacity=R.CAPACITY)
    yield d0, d1
    d0.close()
    d1.close()


def test_handles_pickle_and_open_at_the_owners_address(pair):
    d0, d1 = pair
    buf = rt.to_device(np.arange(64, dtype=np.uint32), device=d1)
    assert rank_base(1) <= buf.address < rank_base(2)
    h = pickle.loads(pickle.dumps(ipc_get_mem_handle(buf)))
    assert isinstance(h, EmuIpcHandle) and h.rank == 1 and h.nbytes == 256
    p = ipc_open_mem_handle(h, device=d0)
    assert p == buf.address and d0.owns_address(p) and not d0.owns_address(p + 256)
    assert ipc_open_mem_handle(h, device=d0) == p  # a second open: counted
    K.store_one().launch((1,), (64,), [p], device=d0)  # an integer peer pointer as the argument
    np.testing.assert_array_equal(buf.to_host(), np.arange(1, 65))
    ipc_close_mem_handle(p, device=d0)
    assert d0.owns_address(p)
    ipc_close_mem_handle(h, device=d0)
    assert not d0.owns_address(p)
    with pytest.raises(IpcError, match="no IPC handle is open"):
        ipc_close_mem_handle(p, device=d0)


def test_out_of_bounds_through_a_peer_pointer_names_the_rank_and_buffer(pair):
    d0, d1 = pair
    buf = rt.DeviceBuffer((16,), np.uint32, device=d1, name="recv")
    mine = rt.empty(1, np.uint32, device=d0)
    into_rank1 = buf.address - mine.address  # an offset from a rank 0 buffer into rank 1's memory
    with pytest.raises(MemoryFault, match="in rank 1's memory, none of which is open on rank 0"):
        store_at().launch((1,), (1,), [mine, np.uint64(into_rank1)], device=d0)
    with pytest.raises(LaunchError, match="rank 1's memory, not open on rank 0: open the buffer's handle"):
        K.store_one().launch((1,), (1,), [buf.address], device=d0)
    p = ipc_open_mem_handle(ipc_get_mem_handle(buf), device=d0)
    with pytest.raises(MemoryFault, match=r"past the end of recv of rank 1 .*on GPU 0"):
        K.store_one().launch((1,), (32,), [p], device=d0)
    store_at().launch((1,), (1,), [mine, np.uint64(into_rank1 + 60)], device=d0)  # the last word: in bounds
    assert buf.to_host()[15] == 7


def store_at():
    """*(base + off) = 7: a pointer the kernel computes."""
    return K.kernel("store_at", ".param .u64 base, .param .u64 off", """
    ld.param.u64 %rd1, [base];
    ld.param.u64 %rd2, [off];
    add.s64 %rd3, %rd1, %rd2;
    mov.u32 %r1, 7;
    st.global.u32 [%rd3], %r1;
    ret;""")


def test_a_peer_that_frees_and_reallocates_in_place_is_opened_afresh(pair):
    d0, d1 = pair
    old = rt.empty(16, np.uint32, device=d1)
    p_old = ipc_open_mem_handle(ipc_get_mem_handle(old), device=d0)
    old.free()  # the peer does not close its open handle first (allowed: the owner's memory is what counts)
    new = rt.empty(64, np.uint32, device=d1)
    assert new.address == p_old  # first fit: the same place, larger
    p = ipc_open_mem_handle(ipc_get_mem_handle(new), device=d0)
    assert [a.size for a in d0.memory.allocations if a.gpu == 1] == [256]  # the freed one is forgotten
    K.store_one().launch((1,), (64,), [p], device=d0)
    np.testing.assert_array_equal(new.to_host(), np.arange(1, 65))


def test_the_sanitizer_checks_a_launch_on_an_ipc_device(pair):
    d0, d1 = pair
    buf = rt.empty(32, np.uint32, device=d1)
    p = ipc_open_mem_handle(ipc_get_mem_handle(buf), device=d0)
    K.store_one().launch((1,), (32,), [p], device=d0, options={"sanitize": True})  # clean: no report
    np.testing.assert_array_equal(buf.to_host(), np.arange(1, 33))


def test_bad_handles_are_clear_errors(pair):
    d0, d1 = pair
    buf = rt.DeviceBuffer((16,), np.uint32, device=d1, name="recv")
    h = ipc_get_mem_handle(buf)
    with pytest.raises(IpcError, match="opened on its own owner"):
        ipc_open_mem_handle(h, device=d1)
    with pytest.raises(IpcError, match="needs an IPC device"):
        ipc_open_mem_handle(h, device=rt.buffers.resolve_device("emu"))
    with pytest.raises(IpcError, match="takes an EmuIpcHandle"):
        ipc_open_mem_handle(buf.address, device=d0)
    with pytest.raises(IpcError, match="not in a live allocation of rank 0 .*rank 1's"):
        ipc_get_mem_handle(buf.address, device=d0)
    buf.free()
    with pytest.raises(IpcError, match="stale handle: recv of rank 1"):
        ipc_open_mem_handle(h, device=d0)
    assert not d0.memory.peers  # a failed open leaves nothing mapped
    d3 = ipc_device(0, 3, capacity=R.CAPACITY)
    try:
        with pytest.raises(IpcError, match="job of 2 ranks"):
            ipc_open_mem_handle(ipc_get_mem_handle(rt.empty(1, np.uint32, device=d1)), device=d3)
    finally:
        d3.close()


def test_a_closed_segment_is_a_clear_error(pair):
    d0, d1 = pair
    a, b = rt.empty(4, np.uint32, device=d1), rt.empty(4, np.uint32, device=d1)
    ha, hb = ipc_get_mem_handle(a), ipc_get_mem_handle(b)
    pa = ipc_open_mem_handle(ha, device=d0)
    d1.close()
    with pytest.raises(IpcError, match="rank 1 closed its device"):
        ipc_open_mem_handle(hb, device=d0)
    with pytest.raises(LaunchError, match="rank 1 closed its device"):
        K.store_one().launch((1,), (1,), [pa], device=d0)
    ipc_close_mem_handle(pa, device=d0)
    with pytest.raises(IpcError, match="no longer exists"):
        ipc_open_mem_handle(hb, device=d0)
    with pytest.raises(IpcError, match="closed"):
        rt.empty(4, np.uint32, device=d1)


def test_device_arguments_are_checked():
    with pytest.raises(IpcError, match="rank 2 is not in a world of 2"):
        ipc_device(2, 2)
    with pytest.raises(IpcError, match="world must be"):
        ipc_device(0, 0)
    with pytest.raises(IpcError, match="capacity"):
        ipc_device(0, 1, capacity=1 << 40)
    d = ipc_device(0, 1, capacity=1 << 20)
    try:
        with pytest.raises(IpcError, match="memory is full"):
            rt.empty(1 << 20, np.uint8, device=d)
    finally:
        d.close()
