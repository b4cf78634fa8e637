"""The sanitizer and the watchdog across a cluster's nodes: planted bugs reported with both PTX lines and GPUs."""

import time

import numpy as np
import pytest
from cluster_kernels import (
    all_to_all,
    expected_a2a,
    launch_all,
    nvlink_flag,
    ring_put_signal,
    run_a2a,
    warp_put_then_two_signals,
)

import ptxforge as pf
from ptxforge.emu import Cluster, WatchdogTimeout


def _line(kernel, text: str) -> int:
    """The PTX line of the first instruction whose text contains `text`."""
    lines = kernel.module.source.splitlines()
    return next(i for i, s in enumerate(lines, 1) if text in s)


def test_the_correct_all_to_all_is_race_free_under_the_sanitizer():
    out, _ = run_a2a(all_to_all(), Cluster(nodes=2, gpus_per_node=2, sms=4, sanitize=True))
    assert np.array_equal(out, expected_a2a(4, 8))


def test_a_signal_not_fenced_after_the_data_put_is_a_race_naming_both_lines_gpus_and_nodes():
    k = all_to_all(fence=False)
    with pytest.raises(pf.SanitizerError) as e:
        run_a2a(k, Cluster(nodes=2, gpus_per_node=2, sms=4, sanitize=True))
    reports = [r for r in e.value.reports if r.kind == "unfenced-signal"]
    assert reports and all(r.kind == "unfenced-signal" for r in e.value.reports)
    put, sig, load = _line(k, "call.uni nvshmem_putmem_nbi"), _line(k, "call.uni nvshmemx_signal_op"), \
        _line(k, "ld.global.u32 %r10")
    # the cross-node one: data PE 2 (node 1) put into PE 0 (node 0)
    r = next(r for r in reports if r.gpu == 0 and r.other["gpu"] == 2)
    assert r.ptx_line == load and r.access == "read" and r.other["ptx_line"] == put
    assert r.other["signal_line"] == sig and r.other["node"] == 1
    text = str(r)
    assert f"a2a.ptx:{load}" in text and f"a2a.ptx:{put}" in text and f"a2a.ptx:{sig}" in text
    assert "node 0 GPU 0" in text and "node 1 GPU 2" in text and "nvshmem_fence" in text


def test_a_send_buffer_reused_before_quiet_is_reported_with_both_lines():
    k = all_to_all(reuse=True)
    errors: list = []
    run_a2a(k, Cluster(nodes=2, gpus_per_node=2, sms=4, sanitize=True), errors=errors)
    assert len(errors) == 4 and all(isinstance(e, pf.SanitizerError) for e in errors)  # every rank reports
    reports = [r for e in errors for r in e.reports]
    assert {r.kind for r in reports} == {"send-before-quiet"} and {r.gpu for r in reports} == {0, 1, 2, 3}
    store, put = _line(k, "st.global.u32 [%rd9]"), _line(k, "call.uni nvshmem_putmem_nbi")
    r = next(r for r in reports if r.gpu == 3 and r.other["target_gpu"] == 0)  # node 1 -> node 0, over RDMA
    assert r.ptx_line == store and r.access == "write" and r.other["ptx_line"] == put and r.other["gpu"] == 3
    assert r.allocation.startswith("send") and "nvshmem_quiet" in str(r)
    assert "node 1 GPU 3" in str(r) and "to node 0 GPU 0" in str(r)


def test_a_gpu_scope_release_on_an_nvlink_flag_is_a_scope_error_naming_both_gpus():
    cluster = Cluster(nodes=2, gpus_per_node=2, sms=2, sanitize=True)
    data, flag, out = (cluster.malloc(1, np.uint32, n) for n in ("data", "flag", "out"))
    k = nvlink_flag("st.release.gpu.global.u32")
    with pytest.raises(pf.SanitizerError) as e:
        launch_all(k, cluster, lambda pe: [data.address(pe), flag.address(pe), out.address(pe)])
    races = [r for r in e.value.reports if r.kind == "race"]
    store = _line(k, "st.global.u32 [%rd4]")
    load = _line(k, "ld.global.u32 %r6")
    r = next(r for r in races if r.ptx_line == load)
    assert r.other["ptx_line"] == store and {r.gpu, r.other["gpu"]} in ({0, 1}, {2, 3})
    assert r.other.get("scope") == ".sys" and "scope error" in r.message and ".gpu scope" in r.message


def test_the_same_nvlink_flag_with_a_sys_scope_release_is_clean():
    cluster = Cluster(nodes=2, gpus_per_node=2, sms=2, sanitize=True)
    data, flag, out = (cluster.malloc(1, np.uint32, n) for n in ("data", "flag", "out"))
    launch_all(nvlink_flag(), cluster, lambda pe: [data.address(pe), flag.address(pe), out.address(pe)])
    assert [int(out.read(pe)[0]) for pe in range(4)] == [17, 7, 37, 27]


def test_a_wrong_count_stops_every_waiting_rank_within_the_watchdog_naming_what_it_waits_for():
    cluster = Cluster(nodes=2, gpus_per_node=2, sms=2, watchdog_s=0.5)
    t0 = time.monotonic()
    with pytest.raises(WatchdogTimeout) as e:
        run_a2a(all_to_all(extra_wait=1), cluster)
    assert time.monotonic() - t0 < 10
    text = str(e.value)
    assert text.startswith("the cluster made no progress") and "node 1 GPU 3 stream 0 (SMs 0-1): a2a:" in text
    for pe in range(4):
        assert (f"node {pe // 2} GPU {pe} block (0, 0, 0) warp 0: nvshmem_signal_wait_until on sig byte 0 "
                f"({cluster.heap.objects[2].address(pe):#x}) wants a value >= 5 and sees 4") in text


@pytest.mark.parametrize("seed", [None, 0, 1])
def test_puts_with_signal_need_no_fence_between_them(seed):
    """Two warps' put-with-signal to one PE, each +1, the receiver waiting for 2: each data part is ordered
    before its own signal, so reading both after the count is complete is not a race."""
    cluster = Cluster(nodes=2, gpus_per_node=1, sms=2, sanitize=True, adversarial=seed)
    send, recv = cluster.malloc(64, np.uint32, "send"), cluster.malloc(64, np.uint32, "recv")
    sig, out = cluster.malloc(1, np.uint64, "sig"), cluster.malloc(64, np.uint32, "out")
    for pe in range(2):
        send.write(pe, pe * 100 + np.arange(64))
    launch_all(ring_put_signal(n=64, warps=2), cluster,
               lambda pe: [send.address(pe), recv.address(pe), sig.address(pe), out.address(pe)], block=64)
    assert [out.read(pe).tolist() for pe in range(2)] == [list(100 + np.arange(64)), list(np.arange(64))]


def _two_signals(fence: bool, seed: int | None = None):
    """Run warp_put_then_two_signals on a 2-node cluster (one GPU each); returns (kernel, out per PE)."""
    cluster = Cluster(nodes=2, gpus_per_node=1, sms=2, sanitize=True, adversarial=seed)
    send, recv, out = (cluster.malloc(32, np.uint32, n) for n in ("send", "recv", "out"))
    sig, other = cluster.malloc(1, np.uint64, "sig"), cluster.malloc(1, np.uint64, "other")
    for pe in range(2):
        send.write(pe, pe * 100 + np.arange(32))
    k = warp_put_then_two_signals(fence)
    launch_all(k, cluster, lambda pe: [send.address(pe), recv.address(pe), sig.address(pe), other.address(pe),
                                       out.address(pe), np.uint32(32)], block=64)
    return k, [out.read(pe).tolist() for pe in range(2)]


@pytest.mark.parametrize("seed", [None, 3])
def test_a_warp_put_fenced_and_signalled_by_its_lane_0_is_clean_despite_another_threads_later_signal(seed):
    """NVSHMEM's fence orders the calling thread's operations: lane 0 issued the warp put (each lane does),
    fenced and signalled, so `sig` orders the data; thread 32's later `other` signal never issued the put and
    is no signal of the data's arrival (DeepEP's RDMA coordinator and its head-return warp)."""
    _, out = _two_signals(fence=True, seed=seed)
    assert out == [list(100 + np.arange(32)), list(np.arange(32))]


def test_the_same_warp_put_signalled_by_its_lane_0_without_a_fence_is_still_a_race():
    with pytest.raises(pf.SanitizerError) as e:
        _two_signals(fence=False)
    k = warp_put_then_two_signals(fence=False)
    reports = [r for r in e.value.reports if r.kind == "unfenced-signal"]
    assert reports and {r.gpu for r in reports} <= {0, 1}  # the first launch's error is raised
    put, sig = _line(k, "call.uni nvshmemx_putmem_nbi_warp"), _line(k, "call.uni nvshmemx_signal_op")
    load = _line(k, "ld.global.u32 %r5")
    # the read is attributed to lane 0's own signal, never to thread 32's unrelated atomic add
    assert {(r.ptx_line, r.other["ptx_line"], r.other["signal_line"]) for r in reports} == {(load, put, sig)}
