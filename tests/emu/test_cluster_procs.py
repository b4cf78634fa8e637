"""One cluster GPU per process (`ClusterRank`): 2 nodes x 2 GPUs as 4 gloo processes run the single-process
Cluster tests' kernels with the same results, over both NIC transports; failures end on every rank, bounded."""

import os
import re

import cluster_rank_cases as R
import numpy as np
import pytest
from cluster_kernels import all_to_all, barrier_ring, expected_a2a, launch_all, put_and_exit, ring_put_signal, run_a2a

from ptxforge.emu import Cluster
from ptxforge.emu.ipc import live_segments
from ptxforge.ep.spawn import run_ranks
from ptxforge.plan.params import Params

WORLD = 4
TRANSPORTS = ("shm", "dist")


def _ours_or_orphaned(name: str) -> bool:
    pid = int(name.split("-")[2])
    if pid == os.getpid():
        return True
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return True
    return False


@pytest.fixture(scope="module")
def results():
    """Every case of cluster_rank_cases on one world of 4 processes; and nothing left in /dev/shm after it."""
    before = set(live_segments())
    out = run_ranks(R.every_case, WORLD, timeout_s=600)
    leaked = {n for n in set(live_segments()) - before if _ours_or_orphaned(n)}
    return out, leaked


def _values(results, case):
    out, _ = results
    failed = {r: c[case]["error"] for r, c in enumerate(out) if not c[case]["ok"]}
    assert not failed, "\n".join(f"--- rank {r} ---\n{e}" for r, e in failed.items())
    return [c[case]["value"] for c in out]


def _single_ring(warps, n=32):
    cluster = Cluster(nodes=2, gpus_per_node=2, sms=2)
    send, recv = cluster.malloc(n, np.uint32, "send"), cluster.malloc(n, np.uint32, "recv")
    sig, out = cluster.malloc(1, np.uint64, "sig"), cluster.malloc(n, np.uint32, "out")
    for pe in range(WORLD):
        send.write(pe, pe * 1000 + np.arange(n))
    result = launch_all(ring_put_signal(n, warps), cluster,
                        lambda pe: [send.address(pe), recv.address(pe), sig.address(pe), out.address(pe)],
                        block=32 * warps)
    return out.to_host(), [(t.src, t.dst, t.kind, t.bytes, t.messages) for t in result.links]


@pytest.mark.parametrize("transport", TRANSPORTS)
def test_the_all_to_all_on_4_processes_equals_the_single_process_cluster_bytes_and_modeled_time_included(
        results, transport):
    ranks = _values(results, f"a2a-{transport}")
    single, result = run_a2a(all_to_all(), Cluster(nodes=2, gpus_per_node=2, sms=2, links=Params()), n=R.N)
    assert np.array_equal(np.stack([r["out"] for r in ranks]), single)
    assert np.array_equal(single, expected_a2a(WORLD, R.N))
    links = [(t.src, t.dst, t.kind, t.bytes, t.messages, t.modeled_us) for t in result.links]
    assert all(r["links"] == links for r in ranks)  # every rank reports every link
    assert {k for *_, k, _b, _m, _t in links} >= {"rdma", "nvlink"} and all(r["transport"] == transport for r in ranks)


@pytest.mark.parametrize("transport", TRANSPORTS)
@pytest.mark.parametrize("warps", [1, 4])
def test_the_put_with_signal_ring_on_4_processes_equals_the_single_process_cluster(results, transport, warps):
    ranks = _values(results, f"ring{warps}-{transport}")
    single, links = _single_ring(warps)
    assert np.array_equal(np.stack([r["out"] for r in ranks]), single)
    assert all(r["links"] == links for r in ranks)


@pytest.mark.parametrize("transport", TRANSPORTS)
def test_a_put_of_two_mib_crosses_in_chunks_and_the_rings_wrap(results, transport):
    for r, v in enumerate(_values(results, f"big-{transport}")):
        n = R.BIG
        expected = ((r - 1) % WORLD * 1000 + np.arange(n)).astype(np.uint32)
        assert v["rounds"] == [int(expected.astype(np.uint64).sum())] * 2 and v["head"] == expected[:32].tolist()


@pytest.mark.parametrize("transport", TRANSPORTS)
def test_nvshmem_barrier_all_and_puts_left_in_flight_across_processes(results, transport):
    cluster = Cluster(nodes=2, gpus_per_node=2, sms=1)
    value, slot, out = (cluster.malloc(1, np.uint32, name) for name in ("value", "slot", "out"))
    launch_all(barrier_ring(), cluster, lambda pe: [value.address(pe), slot.address(pe), out.address(pe)])
    assert [v["out"] for v in _values(results, f"barrier-{transport}")] == out.to_host().reshape(-1).tolist()
    cluster = Cluster(nodes=2, gpus_per_node=2, sms=1, adversarial=2)
    value, slot = cluster.malloc(1, np.uint32, "value"), cluster.malloc(1, np.uint32, "slot")
    launch_all(put_and_exit(), cluster, lambda pe: [value.address(pe), slot.address(pe)])
    flight = _values(results, f"in-flight-{transport}")
    assert [v["slot"] for v in flight] == [int(slot.read(pe)[0]) for pe in range(WORLD)] == [4, 1, 2, 3]
    assert all(v["pending"] == 0 and v["rdma"] == 8 and v["nvlink"] == 8 for v in flight)


def test_nvshmem_ptr_gives_same_node_peers_pointers_and_other_nodes_none(results):
    for r, v in enumerate(_values(results, "pointers-shm")):
        node = r // 2
        assert v["ptrs"] == [b if p // 2 == node else 0 for p, b in enumerate(v["bases"])]


WAIT = (r"node (\d) GPU (\d) block \(0, 0, 0\) warp 0: nvshmem_signal_wait_until on sig byte 0 \(0x[0-9a-f]+\) "
        r"wants a value >= {want} and sees {seen}")


@pytest.mark.parametrize("transport", TRANSPORTS)
def test_a_count_that_never_arrives_stops_every_rank_naming_node_gpu_warp_signal_wanted_and_seen(results, transport):
    for r, v in enumerate(_values(results, f"waits-forever-{transport}")):
        m = re.search(WAIT.format(want=5, seen=4), v["error"] or "")
        assert m and int(m[1]) == int(m[2]) // 2, v
        assert v["type"] in ("WatchdogTimeout", "PeerStopped") and v["s"] < 20  # watchdog_s = 1
        assert f"node {r // 2} GPU {r} block (0, 0, 0) warp 0: nvshmem_signal_wait_until" in v["error"]  # its own
    for r, v in enumerate(_values(results, f"one-waits-{transport}")):
        assert re.search(WAIT.format(want=7, seen=0), v["error"] or ""), v
        assert "node 1 GPU 3" in v["error"] and v["s"] < 20
        assert v["type"] == ("WatchdogTimeout" if r == 3 else "PeerStopped")
        if r != 3:
            assert v["error"].startswith("node 1 GPU 3 (rank 3) stopped: WatchdogTimeout: kernel made no progress "
                                         "for 1 s")


def test_the_adversarial_mode_across_processes_breaks_a_missing_fence_deterministically(results):
    expected = expected_a2a(WORLD, R.N)
    for seed in range(2):
        fenced = _values(results, f"adversarial-fenced-{seed}")
        assert np.array_equal(np.stack([v["out"] for v in fenced]), expected)
        unfenced = np.stack([v["out"] for v in _values(results, f"adversarial-unfenced-{seed}")])
        assert not np.array_equal(unfenced, expected)
    again = np.stack([v["out"] for v in _values(results, "adversarial-unfenced-0-again")])
    assert np.array_equal(again, np.stack([v["out"] for v in _values(results, "adversarial-unfenced-0")]))
    # a host write on one rank is no lockstep round (it used to wait for the others' round, which they never ran)
    assert np.array_equal(np.stack([v["out"] for v in _values(results, "adversarial-host-write")]), expected)


def test_each_ranks_launch_runs_under_its_own_sanitizer(results):
    single, _ = _single_ring(1)
    assert np.array_equal(np.stack([v["out"] for v in _values(results, "sanitized-ring")]), single)


def test_options_or_symmetric_allocations_that_differ_between_ranks_are_an_error_on_every_rank(results):
    for errors in _values(results, "mistakes"):
        assert errors == [
            "num_ranks_per_node must be a whole number that divides the group's 4 ranks, not 3",
            "the ranks disagree on num_ranks_per_node, sms, transport, adversarial and watchdog_s: rank 0 passed "
            "(2, 1, None, None, 60.0), rank 2 (2, 2, None, None, 60.0)",
            "the ranks disagree on symmetric allocation 0 (shape, dtype, name): rank 0 passed ((8,), '<u4', "
            "'recv'), rank 1 ((9,), '<u4', 'recv')"]


@pytest.mark.parametrize("where", ["argument", "in-kernel"])
def test_a_plain_pointer_to_another_nodes_memory_is_an_error_naming_both_nodes_on_every_rank(results, where):
    note = ("an address in the memory of node 1 GPU 2, and GPU 0 is on node 0: another node's memory is reached "
            "through the NIC (nvshmem_putmem_nbi, nvshmemx_signal_op, ...), not a pointer")
    for r, v in enumerate(_values(results, f"remote-pointer-{where}")):
        assert note in v["error"], v
        if r == 0:
            assert v["type"] == "MemoryFault" and "rd.ptx:" in v["error"] and "on GPU 0" in v["error"]
        else:
            assert v["type"] == "PeerStopped" and v["error"].startswith("node 0 GPU 0 (rank 0) stopped: MemoryFault: ")


def test_nothing_is_left_in_dev_shm(results):
    assert not results[1], f"left in /dev/shm: {sorted(results[1])}"


@pytest.mark.parametrize("transport", TRANSPORTS)
def test_a_dead_peer_stops_a_rank_waiting_on_it_within_seconds_naming_it(transport):
    before = set(live_segments())
    survivor, _ = run_ranks(R.dead_peer, 2, transport, timeout_s=120, killed=(1,))
    assert survivor["error"] is not None and survivor["s"] < 5, survivor
    assert survivor["error"].startswith("node 0 GPU 0 (rank 0) cannot go on: node 1 GPU 1 (rank 1) is gone"), survivor
    assert not {n for n in set(live_segments()) - before if _ours_or_orphaned(n)}


@pytest.mark.slow
def test_ten_seeds_the_missing_fence_is_wrong_on_at_least_9_the_fenced_kernel_on_none():
    outs = run_ranks(R.adversarial_seeds, WORLD, 10, timeout_s=900)
    expected = expected_a2a(WORLD, R.N)
    wrong = {fence: sum(not np.array_equal(np.stack([o[(fence, s)] for o in outs]), expected) for s in range(10))
             for fence in (True, False)}
    assert wrong[True] == 0 and wrong[False] >= 9
