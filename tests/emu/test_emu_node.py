"""A node of emulated GPUs: peer memory, streams on SM partitions, concurrent launches, the node watchdog."""

import time

import node_kernels as K
import numpy as np
import pytest

from ptxforge import runtime as rt
from ptxforge.emu import LaunchError, MemoryFault, Node, WatchdogTimeout


def run_ring(node, k, n=256):
    G = len(node)
    recv = [rt.empty(n, np.uint32, device=d) for d in node.devices]
    flag = [rt.empty(1, np.uint32, device=d) for d in node.devices]
    outs = [np.zeros(n, np.uint32) for _ in range(G)]
    pend = []
    for r, d in enumerate(node.devices):
        nx = (r + 1) % G
        pend.append(k.launch((1,), (128,), [recv[nx], flag[nx], recv[r], flag[r], outs[r], np.uint32(r),
                                             np.uint32(n)], device=d, stream=d.stream()))
    node.synchronize()
    return outs, pend


def test_ring_exchange_among_4_gpus_through_peer_pointers():
    node = Node(gpus=4, sms=132)
    outs, pend = run_ring(node, K.ring())
    for r in range(4):
        np.testing.assert_array_equal(outs[r], (r - 1) % 4 * 1000 + np.arange(256, dtype=np.uint32))
        res = pend[r].result()
        assert res.thread_instructions > 0 and f"GPU {r}" in res.gpu


def test_buffers_have_node_wide_addresses_and_owners():
    node = Node(gpus=3, sms=8)
    bufs = [rt.to_device(np.full(4, r, np.uint32), device=d) for r, d in enumerate(node.devices)]
    assert len({b.address for b in bufs}) == 3
    for r, b in enumerate(bufs):
        assert b.allocation.gpu == r and node.devices[(r + 1) % 3].memory.find(b.address) is b.allocation
        np.testing.assert_array_equal(b.to_host(), r)


def test_a_kernel_takes_a_peer_buffer_and_an_integer_peer_address():
    node = Node(gpus=2, sms=8)
    a = rt.empty(32, np.uint32, device=node.devices[1])
    K.store_one().launch((1,), (32,), [a], device=node.devices[0])  # synchronous, peer DeviceBuffer
    np.testing.assert_array_equal(a.to_host(), np.arange(1, 33))
    b = rt.empty(32, np.uint32, device=node.devices[1])
    K.store_one().launch((1,), (32,), [b.address], device=node.devices[0], stream=node.devices[0].stream())
    node.synchronize()
    np.testing.assert_array_equal(b.to_host(), np.arange(1, 33))


def test_peer_access_disabled_is_an_error_naming_both_gpus():
    node = Node(gpus=3, sms=8)
    node.disable_peer_access(0, 2)
    assert not node.can_access_peer(0, 2) and node.can_access_peer(2, 0)
    far = rt.empty(32, np.uint32, device=node.devices[2])
    with pytest.raises(LaunchError, match="GPU 2"):  # a peer buffer it may not access: refused at launch
        K.store_one().launch((1,), (32,), [far], device=node.devices[0])
    s = node.devices[0].stream()
    p = K.store_one().launch((1,), (32,), [far.address], device=node.devices[0], stream=s)
    with pytest.raises(MemoryFault) as e:
        node.synchronize()
    msg = str(e.value)
    assert "peer-access" in msg and "on GPU 0" in msg and "belongs to GPU 2" in msg
    assert "disable_peer_access(0, 2)" in msg and "store_one.ptx" in msg
    assert p.error is e.value
    K.store_one().launch((1,), (32,), [far], device=node.devices[2])  # its own GPU still may
    np.testing.assert_array_equal(far.to_host(), np.arange(1, 33))


def test_out_of_bounds_through_a_peer_pointer_names_the_owning_gpu():
    node = Node(gpus=4, sms=8)
    small = rt.empty(16, np.uint32, device=node.devices[3], )
    with pytest.raises(MemoryFault) as e:
        K.store_one().launch((1,), (32,), [small.address], device=node.devices[1])
    msg = str(e.value)
    assert "out-of-bounds" in msg and "buffer on GPU 3" in msg and "on GPU 1" in msg


def test_atomics_from_4_gpus_on_one_counter_sum_exactly():
    node = Node(gpus=4, sms=16)
    home = node.devices[0]
    counter, total, cas = (rt.empty(1, dt, device=home) for dt in (np.uint32, np.uint64, np.uint32))
    k = K.counter_atomics()
    for r, d in enumerate(node.devices):
        for s in (d.stream(sms=range(0, 8)), d.stream(sms=range(8, 16))):
            k.launch((2,), (32,), [counter, total, cas, np.uint32(r)], device=d, stream=s)
    node.synchronize()
    threads = 2 * 32 * 2  # per GPU
    assert int(counter.to_host()[0]) == 4 * threads
    assert int(total.to_host()[0]) == threads * sum(r + 1 for r in range(4))
    assert int(cas.to_host()[0]) == threads * sum(r + 1 for r in range(4))


def test_persistent_kernel_on_20_sms_spins_on_a_flag_set_by_a_kernel_on_the_other_112():
    node = Node(gpus=1, sms=132)
    gpu = node.devices[0]
    comm, gemm = gpu.stream(sms=range(0, 20)), gpu.stream(sms=range(20, 132))
    blocks = 224
    counter = rt.empty(1, np.uint32, device=gpu)
    where_p = np.full(20, 999, np.uint32)
    a = np.arange(blocks * 64, dtype=np.uint32)
    c = np.zeros_like(a)
    where_c = np.full(blocks, 999, np.uint32)
    pp = K.persistent().launch((20,), (64,), [counter, where_p, np.uint32(blocks)], device=gpu, stream=comm)
    pc = K.compute().launch((blocks,), (64,), [a, c, where_c, counter], device=gpu, stream=gemm)
    node.synchronize()
    np.testing.assert_array_equal(c, 3 * a + np.arange(a.size, dtype=np.uint32))
    np.testing.assert_array_equal(np.sort(where_p), np.arange(20))  # one block on each of SMs 0-19
    assert where_c.min() >= 20 and where_c.max() <= 131 and np.unique(where_c).size == 112
    rp, rc = pp.result(), pc.result()
    assert rp.per_sm.size == rc.per_sm.size == 132
    assert (rp.per_sm[:20] > 0).all() and not rp.per_sm[20:].any()
    assert (rc.per_sm[20:] > 0).all() and not rc.per_sm[:20].any()
    assert {e[2] for e in node.sm_map} == {"persistent", "compute"}


def test_occupancy_limits_blocks_per_sm_of_a_stream():
    node = Node(gpus=1, sms=8)
    gpu = node.devices[0]
    out = np.zeros(64 * 2, np.uint32)  # 64 blocks of 1024 threads: 2 per SM on 2 SMs -> waves
    sm = np.zeros(64 * 1024 * 2, np.uint32)
    t = np.zeros(64 * 1024 * 2, np.uint64)
    p = K.clocks().launch((64,), (1024,), [t, sm], device=gpu, stream=gpu.stream(sms=[5, 6]))
    node.synchronize()
    assert set(np.unique(sm[0::2]).tolist()) == {5, 6} and set(sm[1::2].tolist()) == {8}
    res = p.result()
    assert res.waves == 16  # 2 SMs x 2 blocks of 1024 threads (2048 per SM) per wave
    del out


def test_launches_on_one_stream_run_in_order_and_the_watchdog_names_what_waits():
    node = Node(gpus=2, sms=8, watchdog_s=1.0)
    g0 = node.devices[0]
    a, b = rt.empty(1, np.uint32, device=g0), rt.empty(1, np.uint32, device=g0)
    s = g0.stream()
    k = K.wait_then_raise()
    k.launch((1,), (32,), [a, b], device=g0, stream=s)  # waits for a, which the next launch on s sets
    setter = K.store_one()
    p2 = setter.launch((1,), (1,), [a], device=g0, stream=s)
    with pytest.raises(WatchdogTimeout) as e:
        node.synchronize()
    msg = str(e.value)
    assert "GPU 0 stream 0" in msg and "wait_then_raise" in msg and "store_one has not started" in msg
    assert "offset 0 of buffer on GPU 0), which hold 0" in msg
    assert p2.error is not None and not node.pending


def test_cross_gpu_deadlock_is_stopped_by_the_watchdog_naming_each_gpus_waiting_warps():
    node = Node(gpus=2, sms=8, watchdog_s=1.0)
    fa = rt.empty(1, np.uint32, device=node.devices[0])
    fb = rt.empty(1, np.uint32, device=node.devices[1])
    k = K.wait_then_raise()
    k.launch((2,), (64,), [fa, fb], device=node.devices[0], stream=node.devices[0].stream(sms=range(0, 4)))
    k.launch((2,), (64,), [fb, fa], device=node.devices[1], stream=node.devices[1].stream(sms=range(4, 8)))
    with pytest.raises(WatchdogTimeout) as e:
        node.synchronize()
    msg = str(e.value)
    assert "GPU 0 stream 0 (SMs 0-3): wait_then_raise" in msg and "GPU 1 stream 0 (SMs 4-7): wait_then_raise" in msg
    assert "wait_then_raise.ptx:" in msg
    assert "2 live warp(s) of blocks (0, 0, 0)..(1, 0, 0), converged" in msg
    assert "(offset 0 of buffer on GPU 0), which hold 0" in msg and "(offset 0 of buffer on GPU 1), which hold 0" in msg


def test_pairs_of_waiters_on_different_gpus_complete_when_each_flag_gets_set():
    node = Node(gpus=2, sms=8)
    fa = rt.empty(1, np.uint32, device=node.devices[0])
    fb = rt.empty(1, np.uint32, device=node.devices[1])
    done = rt.empty(1, np.uint32, device=node.devices[1])
    k = K.wait_then_raise()
    p1 = k.launch((1,), (32,), [fa, fb], device=node.devices[1], stream=node.devices[1].stream())
    k.launch((1,), (32,), [fb, done], device=node.devices[0], stream=node.devices[0].stream())
    p1.stream.device.node  # noqa: B018 - the stream knows its node
    K.store_one().launch((1,), (1,), [fa], device=node.devices[0], stream=node.devices[0].stream())
    p1.result()  # synchronizes the node
    assert int(done.to_host()[0]) == 1


def test_special_registers_and_clocks_per_gpu():
    node = Node(gpus=2, sms=16)
    t = [np.zeros(2 * 64, np.uint64) for _ in range(3)]
    sm = [np.zeros(2 * 64, np.uint32) for _ in range(3)]
    k = K.clocks()
    g0, g1 = node.devices
    k.launch((2,), (32,), [t[0], sm[0]], device=g0, stream=g0.stream(sms=[3, 9]))
    k.launch((2,), (32,), [t[1], sm[1]], device=g1, stream=g1.stream(sms=range(14, 16)))
    node.synchronize()
    k.launch((2,), (32,), [t[2], sm[2]], device=g1)  # a later synchronous launch on the node
    assert sorted(set(sm[0][0::2].tolist())) == [3, 9] and sorted(set(sm[1][0::2].tolist())) == [14, 15]
    assert set(sm[0][1::2].tolist()) == set(sm[2][1::2].tolist()) == {16}
    later = t[2][0::2].min()
    assert later > max(t[0][0::2].max(), t[1][0::2].max())  # %clock64 is monotonic across the node
    assert t[2][1::2].min() >= max(t[0][1::2].max(), t[1][1::2].max())  # so is %globaltimer


def test_scoped_loads_stores_atomics_fences_run():
    buf = np.arange(128, dtype=np.uint32)
    node = Node(gpus=2, sms=4)
    b = rt.to_device(buf, device=node.devices[1])
    K.scopes().launch((1,), (64,), [b], device=node.devices[0], stream=node.devices[0].stream())
    node.synchronize()
    out = b.to_host()
    np.testing.assert_array_equal(out[:64], 7 * np.arange(64))
    np.testing.assert_array_equal(out[64:69], [128, 65, 66, 195, 0])


def test_bulk_copies_read_and_write_peer_memory():
    node = Node(gpus=3, sms=4)
    src = rt.to_device(np.arange(64, dtype=np.uint32) * 3, device=node.devices[1])
    dst = rt.empty(64, np.uint32, device=node.devices[2])
    K.bulk_copy().launch((1,), (32,), [src, dst], device=node.devices[0], stream=node.devices[0].stream())
    node.synchronize()
    np.testing.assert_array_equal(dst.to_host(), np.arange(64) * 3)


def test_bad_streams_and_devices_are_refused():
    node = Node(gpus=2, sms=8)
    g0, g1 = node.devices
    with pytest.raises(LaunchError, match="SM 8 does not exist"):
        g0.stream(sms=range(4, 9))
    with pytest.raises(LaunchError, match="empty"):
        g0.stream(sms=[])
    with pytest.raises(LaunchError, match="belongs to GPU 0"):
        K.store_one().launch((1,), (1,), [np.zeros(1, np.uint32)], device=g1, stream=g0.stream())
    with pytest.raises(LaunchError, match="stream= takes"):
        K.store_one().launch((1,), (1,), [np.zeros(1, np.uint32)], device="emu", stream=object())
    with pytest.raises(LaunchError, match="1 to 64 GPUs"):
        Node(gpus=0)
    with pytest.raises(LaunchError, match="own memory"):
        node.disable_peer_access(1, 1)


def test_an_error_in_one_launch_fails_the_others_and_is_raised():
    node = Node(gpus=2, sms=4)
    g0, g1 = node.devices
    flag = rt.empty(1, np.uint32, device=g1)
    waiter = K.wait_then_raise().launch((1,), (32,), [flag, flag], device=g1, stream=g1.stream())
    small = rt.empty(16, np.uint32, device=g0)  # 32 threads store one word each: past its end
    bad = K.store_one().launch((1,), (32,), [small], device=g0, stream=g0.stream())
    with pytest.raises(MemoryFault, match="out-of-bounds"):
        node.synchronize()
    assert bad.error is not None and "did not complete" in str(waiter.error)
    with pytest.raises(Exception, match="did not complete"):
        waiter.result()


# ---------------------------------------------------------------------------- the sanitizer across the node
def sanitized_ring(k, gpus=4):
    from ptxforge.emu.sanitizer import SanitizerError

    node = Node(gpus=gpus, sms=8, sanitize=True)
    try:
        outs, _ = run_ring(node, k)
    except SanitizerError as e:
        return e
    for r in range(gpus):
        np.testing.assert_array_equal(outs[r], (r - 1) % gpus * 1000 + np.arange(256, dtype=np.uint32))
    return None


def test_sanitizer_ring_with_release_acquire_at_sys_scope_is_clean():
    assert sanitized_ring(K.ring()) is None


def test_sanitizer_ring_with_fences_around_volatile_flags_is_clean():
    k = K.ring("fence.acq_rel.sys;\n    st.volatile.global.u32", "ld.volatile.global.u32", "fence.acq_rel.sys;")
    assert sanitized_ring(k) is None


def test_sanitizer_flag_at_gpu_scope_read_on_another_gpu_is_a_scope_error():
    e = sanitized_ring(K.ring("st.release.gpu.global.u32", "ld.acquire.gpu.global.u32"))
    assert e is not None
    flag, data = e.reports
    assert flag.kind == data.kind == "race" and "scope error" in flag.message and "use .sys" in data.message
    assert "ld.acquire.gpu" in flag.instruction and "st.release.gpu" in flag.other["instruction"]
    assert data.instruction.startswith("ld.global.u32") and data.other["instruction"].startswith("st.global.u32")
    assert data.gpu == 1 and data.other["gpu"] == 0 and data.count == 256
    text = str(e)
    assert "on GPU 1" in text and "in block (0,0,0) on GPU 0 at ring.ptx:" in text


def test_sanitizer_plain_weak_store_as_a_flag_is_a_race():
    e = sanitized_ring(K.ring("st.global.u32", "ld.acquire.sys.global.u32"), gpus=2)
    assert e is not None
    flag = e.reports[0]  # the weak flag store and the acquire load that polls it, in either order
    pair = sorted([flag.instruction, flag.other["instruction"]])
    assert pair[0].startswith("ld.acquire.sys.global.u32 %r7") and pair[1].startswith("st.global.u32 [%rd2]")
    assert "weak store" in flag.message and "scope error" not in flag.message
    assert flag.allocation.startswith("buffer on GPU") and {flag.gpu, flag.other["gpu"]} == {0, 1}


def test_sanitizer_persistent_and_compute_kernels_on_one_gpu_are_clean():
    node = Node(gpus=1, sms=132, sanitize=True)
    gpu = node.devices[0]
    counter = rt.empty(1, np.uint32, device=gpu)
    where_p, a = np.zeros(20, np.uint32), np.arange(40 * 64, dtype=np.uint32)
    c, where_c = np.zeros_like(a), np.zeros(40, np.uint32)
    K.persistent().launch((20,), (64,), [counter, where_p, np.uint32(40)], device=gpu, stream=gpu.stream(sms=range(20)))
    K.compute().launch((40,), (64,), [a, c, where_c, counter], device=gpu, stream=gpu.stream(sms=range(20, 132)))
    node.synchronize()
    np.testing.assert_array_equal(c, 3 * a + np.arange(a.size, dtype=np.uint32))


def test_a_barrier_deadlock_in_a_stream_launch_names_its_gpu_and_stream():
    k = K.kernel("stuck", ".param .u64 out", """
    mov.u32 %r1, %tid.x;
    setp.ge.u32 %p1, %r1, 32;
    @%p1 bra DONE;
    bar.sync 1, 64;
DONE:
    ret;""")
    node = Node(gpus=2, sms=4)
    g1 = node.devices[1]
    s = g1.stream(sms=[2, 3])
    k.launch((1,), (64,), [None], device=g1, stream=s)
    with pytest.raises(WatchdogTimeout, match=r"GPU 1 stream 0 \(SMs 2-3\): stuck: deadlock"):
        node.synchronize()
    with pytest.raises(LaunchError, match="num_sms does not apply"):
        k.launch((1,), (64,), [None], device=g1, stream=s, options={"num_sms": 2})


def test_sanitizer_launches_on_one_stream_are_ordered_and_other_streams_race():
    from ptxforge.emu.sanitizer import SanitizerError

    node = Node(gpus=2, sms=4, sanitize=True)
    g0, g1 = node.devices
    buf = rt.empty(32, np.uint32, device=g0)
    s = g0.stream()
    K.store_one().launch((1,), (32,), [buf], device=g0, stream=s)
    K.store_one().launch((1,), (32,), [buf], device=g0, stream=s)  # after the first: no race
    node.synchronize()
    K.store_one().launch((1,), (32,), [buf], device=g0, stream=s)
    K.store_one().launch((1,), (32,), [buf], device=g1, stream=g1.stream())  # concurrently, from GPU 1
    with pytest.raises(SanitizerError) as e:
        node.synchronize()
    rep = e.value.reports[0]
    assert rep.kind == "race" and rep.other["race"] == "write-write" and {rep.gpu, rep.other["gpu"]} == {0, 1}


def test_sanitizer_follows_an_order_through_a_third_gpu_and_through_stream_order():
    """GPU 0 writes data on GPU 2 (its own kernel), then, after it on the same stream, raises flag a;
    GPU 1 waits for a and raises b; GPU 2 waits for b and reads the data: ordered by the stream and the
    two release/acquire pairs (clean). With GPU 0's flag raised from another stream, the read races (and
    so does the plain store of `go`, polled by that other stream)."""
    from ptxforge.emu.sanitizer import SanitizerError

    def run(same_stream: bool):
        node = Node(gpus=3, sms=4, sanitize=True)
        g0, g1, g2 = node.devices
        data = rt.empty(32, np.uint32, device=g2)
        go, fa, fb = (rt.empty(1, np.uint32, device=g) for g in (g0, g1, g2))
        out = np.zeros(32, np.uint32)
        s = g0.stream()
        K.store_one().launch((1,), (32,), [data], device=g0, stream=s)
        K.store_one().launch((1,), (1,), [go], device=g0, stream=s)
        waiter = K.wait_then_raise().launch((1,), (32,), [go, fa], device=g0,
                                            stream=s if same_stream else g0.stream())
        K.wait_then_raise().launch((1,), (32,), [fa, fb], device=g1, stream=g1.stream())
        reader = K.reader().launch((1,), (32,), [fb, data, out], device=g2, stream=g2.stream())
        try:
            node.synchronize()
        except SanitizerError:
            pass
        np.testing.assert_array_equal(out, np.arange(1, 33))
        return waiter.error, reader.error

    assert run(same_stream=True) == (None, None)
    go_race, data_race = run(same_stream=False)
    assert isinstance(go_race, SanitizerError) and isinstance(data_race, SanitizerError)
    go, data = go_race.reports[0], data_race.reports[0]
    assert go.gpu == 0 and "two concurrent launches on GPU 0" in go.message
    assert data.gpu == 2 and data.instruction.startswith("ld.global.u32") and data.other["gpu"] == 0
    assert data.other["instruction"].startswith("st.global.u32")


def test_node_sanitizer_options_apply_to_every_launch():
    from ptxforge.emu.sanitizer import Sanitizer

    node = Node(gpus=2, sms=8, sanitize=Sanitizer(races=False))
    outs, pend = run_ring(node, K.ring("st.global.u32", "ld.acquire.sys.global.u32"))  # a race, not checked
    assert all(p.error is None for p in pend) and node.sanitize.reports == []


def test_result_of_a_clean_launch_is_given_even_when_another_launch_fails():
    node = Node(gpus=2, sms=4)
    g0, g1 = node.devices
    good = rt.empty(32, np.uint32, device=g0)
    ok = K.store_one().launch((1,), (32,), [good], device=g0, stream=g0.stream())  # ends in its first turn
    small = rt.empty(16, np.uint32, device=g1)  # 32 threads store one word each: past its end
    bad = K.store_one().launch((1,), (32,), [small], device=g1, stream=g1.stream())
    assert ok.result().thread_instructions > 0  # runs the node; the other launch's fault is its own
    with pytest.raises(MemoryFault):
        bad.result()


def test_concurrent_launches_on_shared_sms_respect_the_occupancy_limit():
    node = Node(gpus=1, sms=4)
    gpu = node.devices[0]
    t = [np.zeros(2 * 8 * 1024, np.uint64) for _ in range(2)]
    sm = [np.zeros(2 * 8 * 1024, np.uint32) for _ in range(2)]
    pa = K.clocks().launch((8,), (1024,), [t[0], sm[0]], device=gpu, stream=gpu.stream())  # 2 blocks per SM: full
    pb = K.clocks().launch((8,), (1024,), [t[1], sm[1]], device=gpu, stream=gpu.stream())
    node.synchronize()
    (a,), (b,) = ([w for w in node.sm_map if w[1] == s] for s in (0, 1))
    assert a[3] == b[3] == (0, 1, 2, 3) and b[4] >= a[5]  # b's blocks waited until a's left the SMs
    assert pa.result().waves == pb.result().waves == 1
    assert node.rooms[0].threads.sum() == 0  # every block's room given back


def test_a_persistent_kernel_filling_every_sm_starves_the_kernel_it_waits_for():
    node = Node(gpus=1, sms=4, watchdog_s=1.0)
    gpu = node.devices[0]
    counter = rt.empty(1, np.uint32, device=gpu)
    where = np.zeros(8, np.uint32)
    a = np.arange(4 * 64, dtype=np.uint32)
    c, where_c = np.zeros_like(a), np.zeros(4, np.uint32)
    K.persistent().launch((8,), (1024,), [counter, where, np.uint32(4)], device=gpu, stream=gpu.stream())
    K.compute().launch((4,), (64,), [a, c, where_c, counter], device=gpu, stream=gpu.stream())
    with pytest.raises(WatchdogTimeout) as e:
        node.synchronize()
    msg = str(e.value)
    assert "stream 1 (SMs 0-3): compute: waits for room on SMs 0-3" in msg and "no block has started" in msg
    assert "stream 0 (SMs 0-3): persistent:" in msg and "which hold 0" in msg
    assert node.rooms[0].threads.sum() == 0


def test_the_node_watchdog_counts_stores_as_progress_up_to_ten_periods():
    k = K.kernel("busy_wait", ".param .u64 flag, .param .u64 polls", """
    ld.param.u64 %rd1, [flag];
    ld.param.u64 %rd2, [polls];
    mov.u32 %r1, 0;
SPIN:
    add.u32 %r1, %r1, 1;
    st.global.u32 [%rd2], %r1;
    ld.acquire.sys.global.u32 %r2, [%rd1];
    setp.eq.u32 %p1, %r2, 0;
    @%p1 bra SPIN;
    ret;""")
    node = Node(gpus=1, sms=4, watchdog_s=0.1)
    gpu = node.devices[0]
    flag, polls = rt.empty(1, np.uint32, device=gpu), rt.empty(1, np.uint32, device=gpu)
    k.launch((1,), (32,), [flag, polls], device=gpu, stream=gpu.stream())
    t0 = time.monotonic()
    with pytest.raises(WatchdogTimeout, match=r"ran past 1 s \(10 x watchdog_s\)"):
        node.synchronize()
    assert time.monotonic() - t0 >= 1.0 and int(polls.to_host()[0]) > 0


@pytest.mark.parametrize("space", ["shared", "local"])
def test_a_spin_that_copies_its_flag_to_shared_or_local_memory_is_no_progress(space):
    """DeepEP's combine receiver copies the tail it polls into shared memory every round: a deadlock of
    such a loop is no progress (only global stores are), stopped after one watchdog period, not ten."""
    k = K.kernel("copying_wait", ".param .u64 flag", f"""
    .{space} .align 4 .u32 copy;
    ld.param.u64 %rd1, [flag];
SPIN:
    ld.acquire.sys.global.u32 %r2, [%rd1];
    st.{space}.u32 [copy], %r2;
    setp.eq.u32 %p1, %r2, 0;
    @%p1 bra SPIN;
    ret;""")
    node = Node(gpus=1, sms=4, watchdog_s=0.2)
    gpu = node.devices[0]
    flag = rt.empty(1, np.uint32, device=gpu)
    k.launch((1,), (32,), [flag], device=gpu, stream=gpu.stream())
    with pytest.raises(WatchdogTimeout, match=r"made no progress \(no global store, no launch ended\) for 0.2 s"):
        node.synchronize()


def test_a_higher_priority_stream_gets_freed_sms_first():
    node = Node(gpus=1, sms=2)
    gpu = node.devices[0]
    bufs = [(np.zeros(2 * 4 * 1024, np.uint64), np.zeros(2 * 4 * 1024, np.uint32)) for _ in range(3)]
    k = K.clocks()
    k.launch((4,), (1024,), list(bufs[0]), device=gpu, stream=gpu.stream(priority=-2))  # fills both SMs
    k.launch((4,), (1024,), list(bufs[1]), device=gpu, stream=gpu.stream(priority=0))  # queued first ...
    k.launch((4,), (1024,), list(bufs[2]), device=gpu, stream=gpu.stream(priority=-1))  # ... this one goes first
    node.synchronize()
    start = {s: t0 for _, s, _, _, t0, _ in node.sm_map}
    end = {s: t1 for _, s, _, _, _, t1 in node.sm_map}
    assert end[0] <= start[2] < start[1] and end[2] <= start[1]  # one full wave at a time, by priority
    assert node.rooms[0].blocks.sum() == 0
