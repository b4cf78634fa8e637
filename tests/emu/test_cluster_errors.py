"""Mistakes with a Cluster and NVSHMEM's device API: each an error naming the thing, never a traceback."""

import numpy as np
import pytest
from cluster_kernels import barrier_by_every_thread, call, collective_put, launch_all, module, pointer_table

import ptxforge as pf
import ptxforge.runtime
from ptxforge.emu import Cluster, KernelTrap, LaunchError, MemoryFault, Node


def _put_kernel(dest="%rd1", nbytes="4", pe="%r1", sig_op=None):
    body = """
    ld.param.u64 %rd1, [buf];
    ld.param.u64 %rd2, [other];
    ld.param.u32 %r1, [pe];"""
    if sig_op is None:
        body += "\n" + call("nvshmem_putmem_nbi", [(".b64", dest), (".b64", "%rd1"), (".b64", nbytes), (".b32", pe)])
    else:
        body += "\n" + call("nvshmemx_signal_op", [(".b64", dest), (".b64", "1"), (".b32", str(sig_op)),
                                                   (".b32", pe)])
    return module("put1", ".param .u64 buf, .param .u64 other, .param .u32 pe", body + "\n    ret;")


def _run_on_pe0(kernel, cluster, args):
    dev = cluster.devices[0]
    p = kernel.launch((1,), (1,), args, device=dev, stream=dev.stream())
    cluster.synchronize()
    return p


def test_nvshmem_on_a_plain_node_says_it_needs_a_cluster():
    node = Node(gpus=2, sms=1)
    buf = pf.runtime.empty(4, np.uint32, device=node.devices[0])
    k = _put_kernel()
    with pytest.raises(KernelTrap, match=r"nvshmem_putmem_nbi: NVSHMEM's device API runs on the GPUs of a "
                                         r"ptxforge.emu.Cluster; this launch runs on GPU 0 of a Node"):
        _run_on_pe0(k, node, [buf, buf, np.uint32(1)])


def test_a_dest_outside_the_symmetric_heap_is_a_fault_naming_the_allocation_and_the_line():
    cluster = Cluster(nodes=2, gpus_per_node=1, sms=1)
    plain = pf.runtime.empty(4, np.uint32, device=cluster.devices[0])
    with pytest.raises(MemoryFault, match=r"put1.ptx:\d+: call.uni.*nvshmem_putmem_nbi: address 0x[0-9a-f]+ is in "
                                          r"buffer on GPU 0, which is not PE 0's copy of a symmetric object"):
        _run_on_pe0(_put_kernel(), cluster, [plain, plain, np.uint32(1)])


def test_a_put_past_the_end_of_a_symmetric_object_and_a_pe_that_does_not_exist():
    cluster = Cluster(nodes=2, gpus_per_node=1, sms=1)
    buf = cluster.malloc(4, np.uint32, "buf")
    with pytest.raises(MemoryFault, match=r"16 bytes at offset 8 run past the end of buf \(16 bytes\)"):
        _run_on_pe0(_put_kernel(dest="%rd2", nbytes="16"), cluster, [buf.address(0), buf.address(0) + 8,
                                                                      np.uint32(1)])
    with pytest.raises(MemoryFault, match=r"nvshmem_putmem_nbi: PE 7 does not exist \(the cluster has PEs 0-1\)"):
        _run_on_pe0(_put_kernel(), cluster, [buf.address(0), buf.address(0), np.uint32(7)])


def test_a_bad_signal_operation_is_named():
    cluster = Cluster(nodes=2, gpus_per_node=1, sms=1)
    sig = cluster.malloc(1, np.uint64, "sig")
    with pytest.raises(MemoryFault, match=r"nvshmemx_signal_op: sig_op 3 is neither NVSHMEM_SIGNAL_SET \(9\) nor "
                                          r"NVSHMEM_SIGNAL_ADD \(10\)"):
        _run_on_pe0(_put_kernel(sig_op=3), cluster, [sig.address(0), sig.address(0), np.uint32(1)])


def test_a_plain_pointer_into_another_node_faults_pointing_to_the_nic():
    cluster = Cluster(nodes=2, gpus_per_node=1, sms=1)
    buf = cluster.malloc(4, np.uint32, "buf")
    k = module("poke", ".param .u64 p", "    ld.param.u64 %rd1, [p];\n    st.global.u32 [%rd1], 1;\n    ret;")
    dev = cluster.devices[0]
    k.launch((1,), (1,), [buf.address(1)], device=dev, stream=dev.stream())
    with pytest.raises(MemoryFault, match=r"on node 1, and GPU 0 is on node 0: another node's memory is reached "
                                          r"through the NIC"):
        cluster.synchronize()


def test_cluster_options_are_checked():
    with pytest.raises(LaunchError, match="at least 1 node"):
        Cluster(nodes=0, gpus_per_node=2)
    with pytest.raises(LaunchError, match="at most 64 GPUs in all, got 9 x 8"):
        Cluster(nodes=9, gpus_per_node=8)
    with pytest.raises(LaunchError, match="adversarial is a seed"):
        Cluster(nodes=1, gpus_per_node=1, adversarial="yes")
    cluster = Cluster(nodes=2, gpus_per_node=1, sms=1)
    with pytest.raises(LaunchError, match=r"GPU 0 \(node 0\) cannot access GPU 1 \(node 1\) by pointer"):
        cluster.enable_peer_access(0, 1)
    buf = cluster.malloc(2, np.uint8, "b")
    with pytest.raises(LaunchError, match="b: PE 2 does not exist"):
        buf.address(2)


def test_nvshmem_ptr_of_a_pe_that_does_not_exist():
    cluster = Cluster(nodes=1, gpus_per_node=2, sms=1)
    buf, out = cluster.malloc(16, np.uint8, "buf"), cluster.malloc(4, np.uint64, "out")
    k = pointer_table()
    # 4 threads ask for PEs 0-3 of a 2-PE cluster: n_pes bounds the loop, so the table is exact
    launch_all(k, cluster, lambda pe: [buf.address(pe), out.address(pe)], block=4)
    assert out.read(0).tolist() == [buf.address(0), buf.address(1), 0, 0]


def test_a_warp_collective_put_with_different_arguments_per_thread_is_an_error():
    cluster = Cluster(nodes=2, gpus_per_node=1, sms=1)
    send, recv, out = (cluster.malloc(32, np.uint32, n) for n in ("send", "recv", "out"))
    with pytest.raises(MemoryFault, match=r"coll.ptx:\d+: .*nvshmemx_putmem_nbi_warp: the threads of one warp pass "
                                          r"different values for argument 0"):
        launch_all(collective_put("warp", per_thread_dest=True), cluster,
                   lambda pe: [send.address(pe), recv.address(pe), out.address(pe)])


def test_the_thread_form_of_barrier_all_called_by_every_thread_is_an_error():
    cluster = Cluster(nodes=2, gpus_per_node=1, sms=1)
    with pytest.raises(MemoryFault, match=r"nvshmem_barrier_all: called by more than one thread of PE 0"):
        launch_all(barrier_by_every_thread(), cluster, lambda pe: [0], block=32)


def test_a_put_from_another_nodes_memory_is_an_error():
    cluster = Cluster(nodes=2, gpus_per_node=1, sms=1)
    buf = cluster.malloc(4, np.uint32, "buf")
    # dest: PE 0's own copy; source: PE 1's copy, on node 1
    with pytest.raises(MemoryFault, match=r"nvshmem_putmem_nbi: source 0x[0-9a-f]+ is in buf \(symmetric\) on GPU 1, "
                                          r"on node 1; a put sends from its own node's memory \(node 0\)"):
        _run_on_pe0(_put_kernel(dest="%rd2"), cluster, [buf.address(1), buf.address(0), np.uint32(1)])
