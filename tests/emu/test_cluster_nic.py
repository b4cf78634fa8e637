"""The NIC model: asynchronous delivery within NVSHMEM's ordering rules, the adversarial mode, traffic per link."""

import numpy as np
import pytest
from cluster_kernels import all_to_all, expected_a2a, launch_all, put_and_exit, run_a2a

from ptxforge.emu import Cluster, LinkModel
from ptxforge.emu.memory import DeviceMemory
from ptxforge.emu.nic import SIGNAL_SET, Fabric, NicOp
from ptxforge.plan.params import Params


def test_the_adversarial_mode_turns_a_missing_fence_into_a_wrong_result_while_the_fenced_kernel_passes():
    expected = expected_a2a(4, 8)
    wrong = {fence: 0 for fence in (True, False)}
    for fence in (True, False):
        k = all_to_all(fence=fence)
        for seed in range(10):
            out, _ = run_a2a(k, Cluster(nodes=2, gpus_per_node=2, sms=2, adversarial=seed))
            wrong[fence] += not np.array_equal(out, expected)
    assert wrong[True] == 0 and wrong[False] >= 9


def test_an_adversarial_run_is_deterministic_per_seed():
    outs = [run_a2a(all_to_all(fence=False), Cluster(nodes=2, gpus_per_node=2, sms=2, adversarial=5))[0]
            for _ in range(2)]
    assert np.array_equal(outs[0], outs[1])


def _fabric(seed=None, npes=2):
    mem = DeviceMemory()
    data = mem.alloc(64 * 1024, "data")
    flag = mem.alloc(8, "flag")
    src = mem.alloc(64 * 1024, "src")
    mem.write(src, np.arange(64 * 1024, dtype=np.uint8))
    return Fabric(mem, 1, npes, adversarial=seed), data, flag, src


def _order(fabric, ops):
    got = []

    class Seen:
        def issued(self, op): pass
        def fenced(self, pe, threads): pass
        def quieted(self, pe, threads): pass
        def delivered(self, op): got.append(op)
    fabric.watchers.append(Seen())
    for op in ops:
        if op == "fence":
            fabric.fence(0)
        else:
            fabric.issue(op)
    while fabric.pending():
        fabric.advance()
    return got


def test_without_a_fence_a_large_put_arrives_after_a_small_signal_issued_later():
    f, data, flag, src = _fabric()
    put = NicOp("put", 0, 1, data.base, src.base, 32 * 1024)
    sig = NicOp("signal", 0, 1, flag.base, 0, 0, sig_addr=flag.base, sig_value=1, sig_op=SIGNAL_SET)
    assert _order(f, [put, sig]) == [sig, put]


@pytest.mark.parametrize("seed", range(5))
def test_a_fence_orders_every_earlier_op_to_a_pe_before_every_later_one(seed):
    f, data, flag, src = _fabric(seed)
    before = [NicOp("put", 0, 1, data.base + 64 * i, src.base, 64) for i in range(6)]
    after = [NicOp("signal", 0, 1, flag.base, 0, 0, sig_addr=flag.base, sig_value=i, sig_op=SIGNAL_SET)
             for i in range(3)]
    got = _order(f, [*before, "fence", *after])
    assert set(got[:6]) == set(before) and set(got[6:]) == set(after)
    assert int(f.memory.read(flag).view(np.uint64)[0]) == [o.sig_value for o in got][-1]


def test_quiet_delivers_everything_the_pe_issued_at_once():
    f, data, flag, src = _fabric(7)
    f.issue(NicOp("put", 0, 1, data.base, src.base, 256))
    f.quiet(0)
    assert f.pending() == 0 and np.array_equal(f.memory.read(data)[:256], np.arange(256, dtype=np.uint8))


def test_modeled_time_per_link_uses_the_planners_link_figures():
    params = Params()
    out, result = run_a2a(all_to_all(), Cluster(nodes=2, gpus_per_node=2, sms=2, links=params), n=8)
    assert np.array_equal(out, expected_a2a(4, 8))
    rdma = next(t for t in result.links if (t.src, t.dst) == (0, 2))
    nvl = next(t for t in result.links if (t.src, t.dst) == (0, 1))
    assert rdma.kind == "rdma" and rdma.modeled_us == pytest.approx(params.scaleout_latency_us + 40 / 50e3)
    assert nvl.kind == "nvlink" and nvl.modeled_us == pytest.approx(params.nvlink_latency_us + 40 / 160e3)
    assert LinkModel.from_params(params).scaleout_gbs == params.scaleout_gbs
    assert f"{rdma.modeled_us:.3f}" in result.table()


def test_puts_left_in_flight_when_the_kernels_end_arrive_before_synchronize_returns():
    cluster = Cluster(nodes=2, gpus_per_node=2, sms=1, adversarial=2)  # data puts wait 4-47 rounds
    value, slot = cluster.malloc(1, np.uint32, "value"), cluster.malloc(1, np.uint32, "slot")
    result = launch_all(put_and_exit(), cluster, lambda pe: [value.address(pe), slot.address(pe)])
    assert cluster.network.pending() == 0 and [int(slot.read(pe)[0]) for pe in range(4)] == [4, 1, 2, 3]
    assert result.bytes("rdma") == 2 * 4 and result.bytes("nvlink") == 2 * 4


# --------------------------------------------------------------------------- fence and quiet per thread
# NVSHMEM's fence and quiet act for the calling thread's operations; the emulator used to apply them to the
# whole PE, so a kernel relying on another thread's fence passed.

def test_a_fence_by_another_thread_does_not_order_a_threads_put_before_its_signal():
    f, data, flag, src = _fabric()
    put = NicOp("put", 0, 1, data.base, src.base, 32 * 1024, issuers=frozenset({1}))
    sig = NicOp("signal", 0, 1, flag.base, 0, 0, sig_addr=flag.base, sig_value=1, sig_op=SIGNAL_SET,
                issuers=frozenset({1}))
    f.issue(put)
    f.fence(0, frozenset({0}))  # thread 0's fence: thread 1's ops stay unordered
    assert _order(f, [sig]) == [sig, put]
    f, data, flag, src = _fabric()
    put.delivered = sig.delivered = False
    f.issue(put)
    f.fence(0, frozenset({1}))  # thread 1's own fence orders them
    assert _order(f, [sig]) == [put, sig]


def test_quiet_completes_the_calling_threads_operations_only():
    f, data, flag, src = _fabric(7)
    mine = NicOp("put", 0, 1, data.base, src.base, 256, issuers=frozenset({32}))
    other = NicOp("put", 0, 1, data.base + 256, src.base, 256, issuers=frozenset({33}))
    warp = NicOp("put", 0, 1, data.base + 512, src.base, 256, issuers=frozenset(range(32, 64)))
    for op in (mine, other, warp):
        f.issue(op)
    f.quiet(0, frozenset({32}))
    assert mine.delivered and warp.delivered and not other.delivered and f.pending() == 1
    f.quiet(0)  # every thread's (the host, nvshmem_barrier_all)
    assert f.pending() == 0


def test_a_kernel_whose_fence_is_another_threads_breaks_under_the_adversarial_mode_and_the_sanitizer():
    from cluster_kernels import all_to_all_fenced_by_thread0

    import ptxforge as pf

    expected = expected_a2a(4, 8)
    k = all_to_all_fenced_by_thread0()
    wrong = sum(not np.array_equal(run_a2a(k, Cluster(nodes=2, gpus_per_node=2, sms=2, adversarial=s))[0], expected)
                for s in range(5))
    assert wrong >= 4
    with pytest.raises(pf.SanitizerError) as e:
        run_a2a(k, Cluster(nodes=2, gpus_per_node=2, sms=2, sanitize=True))
    assert {r.kind for r in e.value.reports} == {"unfenced-signal"}
    assert any(r.other["node"] != r.gpu // 2 for r in e.value.reports)  # a put from the other node among them
