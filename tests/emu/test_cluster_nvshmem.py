"""A single-process cluster (2 nodes x 2 GPUs) running PTX that calls NVSHMEM's device API: exact results."""

import numpy as np
import pytest
from cluster_kernels import (
    all_to_all,
    barrier_ring,
    collective_put,
    expected_a2a,
    launch_all,
    pointer_table,
    ring_put_signal,
    run_a2a,
)

from ptxforge.emu import Cluster


def test_all_to_all_across_two_nodes_is_exact_and_counts_each_link():
    cluster = Cluster(nodes=2, gpus_per_node=2, sms=4)
    out, result = run_a2a(all_to_all(), cluster, n=8)
    assert np.array_equal(out, expected_a2a(4, 8))
    kinds = {(t.src, t.dst): t.kind for t in result.links}
    assert kinds[(0, 1)] == kinds[(2, 3)] == "nvlink" and kinds[(0, 2)] == kinds[(3, 1)] == "rdma"
    assert kinds[(1, 1)] == "local"
    # every ordered pair carried one 32-byte row and one 8-byte signal
    assert {(t.bytes, t.messages) for t in result.links} == {(40, 2)} and len(result.links) == 16
    assert result.bytes("rdma") == 8 * 40


def test_all_to_all_with_remote_atomic_add_as_the_signal():
    out, _ = run_a2a(all_to_all(signal="atomic_add"), Cluster(nodes=2, gpus_per_node=2, sms=4), n=4)
    assert np.array_equal(out, expected_a2a(4, 4))


@pytest.mark.parametrize("seed", [None, 3])
def test_ring_with_warp_put_with_signal(seed):
    cluster = Cluster(nodes=2, gpus_per_node=2, sms=4, adversarial=seed)
    send, recv = cluster.malloc(32, np.uint32, "send"), cluster.malloc(32, np.uint32, "recv")
    sig, out = cluster.malloc(1, np.uint64, "sig"), cluster.malloc(32, np.uint32, "out")
    for pe in range(4):
        send.write(pe, pe * 100 + np.arange(32))
    result = launch_all(ring_put_signal(), cluster,
                        lambda pe: [send.address(pe), recv.address(pe), sig.address(pe), out.address(pe)])
    for pe in range(4):
        assert np.array_equal(out.read(pe), ((pe - 1) % 4) * 100 + np.arange(32))
    # one put per warp: 128 data bytes + 8 signal bytes on each link of the ring, in one message
    assert [(t.src, t.dst, t.bytes, t.messages) for t in result.links] == \
        [(0, 1, 136, 1), (1, 2, 136, 1), (2, 3, 136, 1), (3, 0, 136, 1)]


def test_nvshmem_ptr_is_a_plain_pointer_on_the_node_and_null_across_nodes():
    cluster = Cluster(nodes=2, gpus_per_node=2, sms=2)
    buf, out = cluster.malloc(16, np.uint8, "buf"), cluster.malloc(4, np.uint64, "out")
    launch_all(pointer_table(), cluster, lambda pe: [buf.address(pe), out.address(pe)])
    for pe in range(4):
        same = [q for q in range(4) if q // 2 == pe // 2]
        assert out.read(pe).tolist() == [buf.address(q) if q in same else 0 for q in range(4)]


@pytest.mark.parametrize("seed", [None, 0, 1])
def test_barrier_all_completes_every_pes_puts(seed):
    cluster = Cluster(nodes=2, gpus_per_node=2, sms=2, adversarial=seed)
    value, slot, out = (cluster.malloc(1, np.uint32, n) for n in ("value", "slot", "out"))
    launch_all(barrier_ring(), cluster, lambda pe: [value.address(pe), slot.address(pe), out.address(pe)])
    assert [int(out.read(pe)[0]) for pe in range(4)] == [4, 1, 2, 3]


def test_the_cluster_names_its_nodes_and_gpus():
    cluster = Cluster(nodes=3, gpus_per_node=2, sms=1)
    assert [[d.gpu for d in node] for node in cluster.nodes] == [[0, 1], [2, 3], [4, 5]]
    assert cluster.devices[3].name == "GPU 3 of the emulated cluster (node 1, local GPU 1, PE 3)"
    assert cluster.devices[3].stream(sms=[0]).name == "node 1 GPU 3 stream 0 (SM 0)"
    assert cluster.can_access_peer(2, 3) and not cluster.can_access_peer(1, 2)


@pytest.mark.parametrize("form", ["warp", "block"])
def test_warp_and_block_forms_put_once_per_warp_and_per_block(form):
    cluster = Cluster(nodes=2, gpus_per_node=2, sms=2, adversarial=9)
    send, recv, out = (cluster.malloc(64, np.uint32, n) for n in ("send", "recv", "out"))
    for pe in range(4):
        send.write(pe, pe * 100 + np.arange(64))
    result = launch_all(collective_put(form), cluster,
                        lambda pe: [send.address(pe), recv.address(pe), out.address(pe)], block=64)
    for pe in range(4):
        assert np.array_equal(out.read(pe), ((pe - 1) % 4) * 100 + np.arange(64))
    # 64 threads = 2 warps: the warp form puts the block's 256 bytes twice (each warp the whole range)
    puts = 2 if form == "warp" else 1
    assert {(t.bytes, t.messages) for t in result.links} == {(256 * puts, puts)}
