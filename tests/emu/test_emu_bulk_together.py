"""A cp.async.bulk run by many lanes at once copies them together (one load, one store, one mbarrier update:
`ops_async._copy_together`) where that is the same as lane by lane: the same memory, instruction counts and
steps as in reference mode (lane by lane); overlapping destinations (the last lane's bytes win) and the sanitizer
keep the lane-by-lane path."""

import numpy as np
import pytest

import ptxforge as pf
from ptxforge.emu import ops_async
from ptxforge.emu.launch import EmuDevice, emulate
from ptxforge.emu.sanitizer import Sanitizer

# each thread: 32 bytes src[gtid] -> shared buf[tid] (complete-tx on its warp's mbarrier, which all 32 lanes
# arrive on with expect-tx), then buf[tid] -> dst[gtid >> shift] (shift 1: lane pairs write the same bytes)
PTX = """
.version 8.0
.target sm_90a
.address_size 64
.visible .entry lanes_bulk(.param .u64 src, .param .u64 dst, .param .u32 shift)
{
    .shared .align 16 .b8 buf[2048];
    .shared .align 8 .b64 bar[2];
    .reg .pred %p<3>;
    .reg .b32 %r<16>;
    .reg .b64 %rd<8>;
    ld.param.u64 %rd1, [src];
    ld.param.u64 %rd2, [dst];
    ld.param.u32 %r10, [shift];
    mov.u32 %r1, %tid.x;
    mov.u32 %r2, %ctaid.x;
    mov.u32 %r3, %ntid.x;
    mad.lo.u32 %r4, %r2, %r3, %r1;
    shr.u32 %r5, %r1, 5;
    mov.u32 %r6, bar;
    shl.b32 %r7, %r5, 3;
    add.u32 %r6, %r6, %r7;
    and.b32 %r8, %r1, 31;
    setp.eq.u32 %p1, %r8, 0;
    @%p1 mbarrier.init.shared::cta.b64 [%r6], 32;
    bar.sync 0;
    mul.wide.u32 %rd3, %r4, 32;
    add.s64 %rd4, %rd1, %rd3;
    mov.u32 %r9, buf;
    shl.b32 %r11, %r1, 5;
    add.u32 %r9, %r9, %r11;
    mbarrier.arrive.expect_tx.shared::cta.b64 _, [%r6], 32;
    cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes [%r9], [%rd4], 32, [%r6];
WAIT:
    mbarrier.try_wait.parity.shared::cta.b64 %p2, [%r6], 0;
    @!%p2 bra WAIT;
    shr.u32 %r12, %r4, %r10;
    mul.wide.u32 %rd5, %r12, 32;
    add.s64 %rd6, %rd2, %rd5;
    cp.async.bulk.global.shared::cta.bulk_group [%rd6], [%r9], 32;
    cp.async.bulk.commit_group;
    cp.async.bulk.wait_group 0;
    ret;
}
"""

BLOCKS, THREADS = 2, 64


def _run(monkeypatch, together, shift, sanitize=False):
    taken = []
    orig = ops_async._copy_together

    def spy(*a):
        r = orig(*a)
        taken.append(r)
        return r
    monkeypatch.setattr(ops_async, "_copy_together", spy)
    n = BLOCKS * THREADS
    src = np.arange(n * 8, dtype=np.uint32) * np.uint32(2654435761)
    dev = EmuDevice()
    a_src, a_dst = dev.memory.alloc(src.nbytes), dev.memory.alloc(src.nbytes)
    dev.memory.write(a_src, src)
    dev.memory.write(a_dst, np.full(n * 8, 0xDEADBEEF, np.uint32))
    mod = pf.parse(PTX, filename="lanes_bulk.ptx")
    params = np.uint64(a_src.base).tobytes() + np.uint64(a_dst.base).tobytes() + np.uint32(shift).tobytes()
    checks = [Sanitizer()] if sanitize else []
    stats = emulate(mod, mod.function("lanes_bulk"), grid=(BLOCKS,), block=(THREADS,), device=dev, params=params,
                    watchdog_s=30, checks=checks, reference=not together)
    dst = dev.memory.read(a_dst)[:src.nbytes].view(np.uint32).copy()
    return src, dst, stats, taken


def test_disjoint_copies_go_together_with_the_same_counts(monkeypatch):
    src, dst, st1, taken = _run(monkeypatch, True, 0)
    np.testing.assert_array_equal(dst, src)
    assert taken and all(taken)  # every multi-lane copy of the wave went together
    _, dst0, st0, taken0 = _run(monkeypatch, False, 0)
    np.testing.assert_array_equal(dst0, dst)
    assert not any(taken0)
    assert st1["thread_instructions"] == st0["thread_instructions"] and st1["steps"] == st0["steps"]


def test_overlapping_destinations_go_lane_by_lane(monkeypatch):
    src, dst, st1, taken = _run(monkeypatch, True, 1)
    rows = src.reshape(-1, 8)
    want = np.full_like(dst, 0xDEADBEEF).reshape(-1, 8)
    want[:rows.shape[0] // 2] = rows[1::2]  # of each lane pair writing one row, the higher lane's bytes
    np.testing.assert_array_equal(dst.reshape(-1, 8), want)
    assert True in taken and False in taken  # the loads went together, the overlapping stores did not
    _, dst0, st0, _ = _run(monkeypatch, False, 1)
    np.testing.assert_array_equal(dst0, dst)
    assert st1["thread_instructions"] == st0["thread_instructions"] and st1["steps"] == st0["steps"]


@pytest.mark.parametrize("shift", [0, 1])
def test_sanitizer_sees_the_lanes_apart(monkeypatch, shift):
    src, dst, _, taken = _run(monkeypatch, True, shift, sanitize=True)
    assert not any(taken)
    if shift == 0:
        np.testing.assert_array_equal(dst, src)
