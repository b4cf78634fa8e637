"""Release/acquire synchronization in the race check (sanitizer/order.py), on tests/sanitizer/kernels/sync_san.cu.

Correct patterns of CUDA's libraries and of hand-written handoffs are clean and compute what the plain
emulator computes; each planted twin (weak flag, too narrow a scope, a missing fence on either side, a
missing __syncthreads after the acquire, a plain store beside atomics) is reported with both sides named.
"""

from __future__ import annotations

import functools
from pathlib import Path

import numpy as np
import pytest

KERNELS = Path(__file__).resolve().parent / "kernels"
CU = KERNELS / "sync_san.cu"
PTX = KERNELS / "sync_san.sm_80.O3.ptx"
rng = np.random.default_rng(1)


@functools.cache
def module():
    import ptxforge as pf

    return pf.parse(PTX.read_text(), filename=PTX.name)


def cu_line(marker: str) -> int:
    hits = [i for i, line in enumerate(CU.read_text().splitlines(), 1) if marker in line]
    assert len(hits) == 1, marker
    return hits[0]


def run(name, grid, block, args, sanitize=True):
    from ptxforge.emu.sanitizer import SanitizerError

    try:
        module().kernel(name).launch(grid=grid, block=block, args=args, device="emu", options={"sanitize": sanitize})
    except SanitizerError as e:
        return e
    return None


def handoff_args():
    return [rng.standard_normal(64).astype(np.float32), np.zeros(64, np.float32), np.zeros(1, np.uint32),
            np.zeros(64, np.float32)]


def races(err):
    assert err is not None, "the sanitizer found nothing"
    return [r for r in err.reports if r.kind == "race"]


@pytest.mark.parametrize("name", ["handoff_fence_volatile", "handoff_release_acquire"])
def test_flag_handoffs_between_blocks_are_clean(name):
    args = handoff_args()
    assert run(name, (2,), (64,), args) is None
    np.testing.assert_array_equal(args[3], 3.0 * args[0])


@pytest.mark.parametrize("name", ["grid_barrier_exchange", "ticket_barrier_exchange"])
def test_grid_barriers_are_clean(name):
    n, bs = 256, 64
    x = rng.standard_normal(n).astype(np.float32)
    args = [x, np.zeros(n, np.float32), np.zeros(n, np.float32), np.zeros(1 + n // bs, np.uint32)]
    assert run(name, (n // bs,), (bs,), args) is None
    np.testing.assert_array_equal(args[2], np.roll(2.0 * x, -bs) + 1.0)


def test_cooperative_groups_block_sync_and_cuda_barrier_are_clean():
    x = rng.standard_normal(512).astype(np.float32)
    out = np.zeros(512, np.float32)
    assert run("cg_block_reverse", (2,), (256,), [x, out]) is None
    np.testing.assert_array_equal(out, x.reshape(2, 256)[:, ::-1].reshape(-1))
    out = np.zeros(256, np.float32)
    assert run("cuda_barrier_reverse", (2,), (128,), [x[:256], out]) is None
    np.testing.assert_array_equal(out, x[:256].reshape(2, 128)[:, ::-1].reshape(-1))


def test_cuda_pipeline_with_teardown_is_clean():
    """fence.sc.cta + atom.add.acquire.cta by every thread, then mbarrier.inval by the last one."""
    chunks = 4
    x = rng.standard_normal(2 * chunks * 128).astype(np.float32)
    out = np.zeros(256, np.float32)
    assert run("pipeline_sum", (2,), (128,), [x, out, np.int32(chunks)]) is None
    want = np.roll(x.reshape(2, chunks, 128), -1, axis=2).sum(1).reshape(-1)
    np.testing.assert_allclose(out, want, rtol=1e-6, atol=1e-6)


def test_atomics_never_race_with_each_other():
    c = np.zeros(2, np.uint32)
    assert run("atomic_count", (4,), (64,), [c]) is None
    assert c[0] == 256 and c[1] == 0xFFFFFFFF


def test_weak_store_used_as_a_flag():
    err = run("handoff_weak_flag", (2,), (64,), handoff_args())
    rs = races(err)
    flag = [r for r in rs if r.allocation.endswith("param_2")]
    assert flag and {flag[0].access, flag[0].other["access"]} == {"read", "write"}
    assert flag[0].instruction.startswith("ld.acquire.gpu") or flag[0].instruction.startswith("st.global.u32")
    data = [r for r in rs if r.allocation.endswith("param_1")]
    assert data and data[0].block == (1, 0, 0) and data[0].other["block"] == (0, 0, 0)


def test_release_acquire_at_cta_scope_between_blocks_is_a_scope_error():
    err = run("handoff_cta_scope", (2,), (64,), handoff_args())
    r = races(err)[0]
    assert r.other.get("scope") == ".gpu" and "scope too narrow" in r.headline()
    assert (r.block, r.other["block"]) == ((1, 0, 0), (0, 0, 0))
    assert r.source.endswith(f"sync_san.cu:{cu_line('REPORT: scope too narrow')}")
    assert "block (0, 0, 0) and block (1, 0, 0)" in r.message and r.count == 64
    assert r.other["release"]["instruction"].startswith("st.release.cta.global")
    assert r.other["acquire"]["instruction"].startswith("ld.acquire.cta.global")
    assert "conflicts with a write by thread (0,0,0) in block (0,0,0)" in str(err)


@pytest.mark.parametrize(("name", "marker"), [("handoff_no_acquire_fence", "REPORT: unordered read (acquire"),
                                              ("handoff_no_release_fence", "REPORT: unordered read (release")])
def test_fence_missing_on_one_side(name, marker):
    r = races(run(name, (2,), (64,), handoff_args()))[0]
    assert r.source.endswith(f"sync_san.cu:{cu_line(marker)}") and "scope" not in r.other
    assert (r.access, r.other["access"], r.block, r.other["block"]) == ("read", "write", (1, 0, 0), (0, 0, 0))


def test_relaxed_spin_without_fence_does_not_acquire():
    n, bs = 256, 64
    args = [rng.standard_normal(n).astype(np.float32), np.zeros(n, np.float32), np.zeros(n, np.float32),
            np.zeros(1 + n // bs, np.uint32)]
    r = races(run("ticket_barrier_no_fence", (n // bs,), (bs,), args))[0]
    assert r.source.endswith(f"sync_san.cu:{cu_line('REPORT: unordered read of another')}")


def test_threads_that_neither_acquire_nor_pass_a_barrier_race():
    """Only thread 0 of the consumer acquires (passed to its warp by __syncwarp); warp 1 reads unordered.
    (That a barrier passes an acquisition on to the block is checked in test_what_a_release_covers.)"""
    rs = races(run("handoff_missing_block_sync", (2,), (64,), handoff_args()))
    sides = {(r.block, r.thread[0] >= 32, r.other["block"], r.other["thread"][0] >= 32) for r in rs}
    assert sides <= {((1, 0, 0), True, (0, 0, 0), True), ((0, 0, 0), True, (1, 0, 0), True)}, sides
    assert sum(r.count for r in rs) == 32


def test_plain_store_beside_atomics_is_a_race():
    r = races(run("plain_vs_atomic", (4,), (32,), [np.zeros(1, np.uint32)]))[0]
    assert {r.access, r.other["access"]} == {"write", "atomic"}


def test_scope_levels():
    from ptxforge.emu.sanitizer.order import CLUSTER, CTA, GPU, SYS, SyncOrder

    o = SyncOrder(8, 32, cluster_of_block=[0, 0, 1, 1, 2, 2, 3, 3], gpu_of_block=[0, 0, 0, 0, 1, 1, 1, 1])
    a, b = np.array([0, 0, 0, 0]), np.array([0, 1, 2, 4])
    np.testing.assert_array_equal(o.level(a, b), [CTA, CLUSTER, GPU, SYS])


def test_cooperative_groups_multi_warp_tile_sync_is_clean():
    """tiled_partition<64>: red.and resets and atom.or.acq_rel.cta arrivals on reserved shared memory,
    ld.acquire.cta spins, passed on to the warp by __syncwarp."""
    x, out = rng.standard_normal(512).astype(np.float32), np.zeros(512, np.float32)
    assert run("cg_tile64_rotate", (2,), (256,), [x, out]) is None
    t = np.arange(256)
    np.testing.assert_array_equal(out, x.reshape(2, 256)[:, t - t % 64 + (t % 64 + 32) % 64].reshape(-1))


def test_release_does_not_cover_other_warps_of_its_interval():
    """Thread 0 releases without a __syncthreads: warp 0's writes are covered (its lanes run before it in
    the warp), those of warp 1 are a race."""
    rs = races(run("handoff_no_sync_before_release", (2,), (64,), handoff_args()))
    data = [r for r in rs if r.allocation.endswith("param_1")]
    assert data and all(r.other["thread"][0] >= 32 for r in data), [r.other["thread"] for r in data]
    assert data[0].source.endswith(f"sync_san.cu:{cu_line('REPORT: unordered read (no block sync)')}")
    assert data[0].other["source"].endswith(f"sync_san.cu:{cu_line('BUG: warps 1.. are not covered')}")
    assert sum(r.count for r in data) == 32


def test_a_reader_ordered_before_the_next_is_not_a_second_reader():
    """Warp 1 reads, acks with a release; warp 0 acquires, reads the same bytes and rewrites them."""
    x = rng.standard_normal(32).astype(np.float32)
    slot, out = np.zeros(32, np.float32), np.zeros(32, np.float32)
    assert run("reader_ack_rewrite", (1,), (64,), [x, slot, np.zeros(1, np.uint32), out]) is None
    np.testing.assert_array_equal(out, x)
    np.testing.assert_array_equal(slot, 2.0 * x)


def test_what_a_release_covers():
    """SyncOrder directly: block 0's warp 0 releases at time 10 in barrier interval 5; block 1 acquires."""
    from ptxforge.emu.sanitizer.order import GPU, SyncOrder
    from ptxforge.emu.sanitizer.shadow import EP_SHIFT

    o = SyncOrder(2, 64, cluster_of_block=[0, 1])
    o.new_wave(128, np.repeat(np.arange(2), 64))
    o.publish(np.array([0]), 10, 11, GPU, ep=np.array([5 << EP_SHIFT]), who=np.array([0]))
    o.acquire(np.array([64]), GPU, 12)
    writer = np.array([3, 40, 40, 3])  # warp 0 (lane 3), warp 1 (thread 40), warp 1 earlier interval, warp 0 late
    wep = np.array([5, 5, 4, 5]) << EP_SHIFT
    when = np.array([9, 9, 3, 10])
    got = o.ordered(writer, wep, when, np.full(4, 64))
    np.testing.assert_array_equal(got, [True, False, True, False])
    assert not o.ordered(writer[:1], wep[:1], when[:1], np.array([65])).any()  # thread 65 did not acquire
    o.barrier(np.arange(64, 128))  # until block 1's barrier passes it on
    assert o.ordered(writer[:1], wep[:1], when[:1], np.array([65])).all()


@pytest.mark.parametrize("seed", [3, 11])
def test_clean_patterns_stay_clean_in_shuffled_block_and_warp_order(seed):
    from ptxforge.emu.sanitizer import Sanitizer

    n, bs = 256, 64
    cases = [("handoff_release_acquire", (2,), (64,), handoff_args()),
             ("handoff_fence_volatile", (2,), (64,), handoff_args()),
             ("grid_barrier_exchange", (n // bs,), (bs,), [rng.standard_normal(n).astype(np.float32),
                                                          np.zeros(n, np.float32), np.zeros(n, np.float32),
                                                          np.zeros(1 + n // bs, np.uint32)]),
             ("cg_tile64_rotate", (2,), (256,), [rng.standard_normal(512).astype(np.float32),
                                                 np.zeros(512, np.float32)]),
             ("pipeline_sum", (2,), (128,), [rng.standard_normal(1024).astype(np.float32),
                                             np.zeros(256, np.float32), np.int32(4)]),
             ("reader_ack_rewrite", (1,), (64,), [rng.standard_normal(32).astype(np.float32),
                                                  np.zeros(32, np.float32), np.zeros(1, np.uint32),
                                                  np.zeros(32, np.float32)])]
    for name, grid, block, args in cases:
        err = run(name, grid, block, args, sanitize=Sanitizer(shuffle_seed=seed))
        assert err is None, f"{name}:\n{err}"
    err = run("handoff_cta_scope", (2,), (64,), handoff_args(), sanitize=Sanitizer(shuffle_seed=seed))
    assert races(err)[0].other.get("scope") == ".gpu"
