"""Shared loads through index arrays made of runs (emu/index_runs.py): a group of lanes reading one element
(broadcast) or a row of consecutive elements; the gather moves runs and gives np.take's values, and a tiled
kernel's loads at several offsets from one register still fault where the checked path does."""

from __future__ import annotations

import numpy as np
import pytest

import ptxforge as pf
from ptxforge.emu import index_runs
from ptxforge.emu.errors import MemoryFault

H = ".version 8.5\n.target sm_90\n.address_size 64\n"
rng = np.random.default_rng(1818)
N = 4096


def lanes():
    i = np.arange(N, dtype=np.int64)
    return i // 256, (i % 256) // 16, i % 16  # block, row of threads (ty), column (tx)


def test_broadcast_and_row_runs_are_found_and_gather_like_take():
    blk, ty, tx = lanes()
    view = rng.integers(0, 1 << 32, 16 * 512 + 64, dtype=np.uint64).astype(np.uint32)
    for e, group, broadcast in ((blk * 512 + ty * 16, 16, True), (blk * 512 + 256 + tx, 16, False),
                                (blk * 512 + ty * 16 + tx, 32, False), (blk * 512 + ty // 2 * 16, 32, True),
                                (np.arange(N, dtype=np.int64), 32, False)):
        runs = index_runs.find(e)
        assert runs is not None and (runs.group, runs.broadcast) == (group, broadcast)
        for k in (0, 1, 5, 16, 63):  # a load at [reg + 4k]: the same index array into view[k:]
            got = runs.take(view[k:])
            np.testing.assert_array_equal(got, np.take(view[k:], e))
            assert got.flags.writeable and not np.shares_memory(got, view)  # a new array: registers never alias
    wide = view.view(np.uint64)  # 8-byte elements (ld.shared.f64)
    e = blk * 256 + 128 + tx
    np.testing.assert_array_equal(index_runs.find(e).take(wide[3:]), np.take(wide[3:], e))


def test_a_store_through_distinct_rows_writes_what_a_scatter_writes():
    blk, ty, tx = lanes()
    values = rng.integers(0, 1 << 32, N, dtype=np.uint64).astype(np.uint32)
    for e, distinct in ((blk * 512 + ty * 16 + tx, True), (np.arange(N, dtype=np.int64) + 64, True),
                        (blk * 512 + 256 + tx, False), (blk * 512 + ty * 16, False)):
        runs = index_runs.find(e)
        assert runs.distinct == distinct
        if not distinct:
            continue  # two lanes store to one element: the caller scatters (the last lane wins)
        for k in (0, 3):
            want = np.zeros(16 * 512 + 64, np.uint32)
            want[k:][e] = values
            got = np.zeros_like(want)
            runs.put(got[k:], values)
            np.testing.assert_array_equal(got, want)
            runs.put(got[k:], np.uint32(7))  # a uniform value
            want[k:][e] = 7
            np.testing.assert_array_equal(got, want)


def test_arrays_without_runs_are_left_to_take():
    blk, ty, tx = lanes()
    assert index_runs.find(blk * 512 + (tx ^ 1)) is None  # rows out of order
    assert index_runs.find(blk * 512 + tx + 1) is None  # rows not starting at a multiple of the group
    assert index_runs.find(blk * 512 + tx * 2) is None  # stride 2
    assert index_runs.find(rng.permutation(N)) is None
    assert index_runs.find(np.arange(512, dtype=np.int64)) is None  # too small a wave to bother
    e = blk * 512 + ty * 16
    e[-1] += 1  # one lane of the last group differs
    assert index_runs.find(e) is None
    e = blk * 512 + 256 + tx
    e[N // 2 + 3] = e[N // 2 + 4]
    assert index_runs.find(e) is None


TILED = H + """.visible .entry k(.param .u64 out)
{
.reg .pred %p<2>;
.reg .b32 %r<24>;
.reg .b64 %rd<4>;
.shared .align 4 .b8 buf[1024];
ld.param.u64 %rd1, [out];
mov.u32 %r1, %tid.x;
mov.u32 %r2, %ctaid.x;
mov.u32 %r5, buf;
shl.b32 %r4, %r1, 2;
add.s32 %r6, %r5, %r4;
shr.u32 %r8, %r1, 4;
shl.b32 %r8, %r8, 6;
add.s32 %r7, %r5, %r8;
and.b32 %r13, %r1, 15;
shl.b32 %r13, %r13, 2;
add.s32 %r12, %r5, %r13;
xor.b32 %r17, %r1, 3;
shl.b32 %r17, %r17, 2;
add.s32 %r17, %r5, %r17;
mov.u32 %r20, 0;
mov.u32 %r21, 0;
LOOP:
mad.lo.u32 %r3, %r1, 7, %r2;
add.s32 %r3, %r3, %r21;
st.shared.u32 [%r6], %r3;
bar.sync 0;
ld.shared.u32 %r9, [%r7];
ld.shared.u32 %r10, [%r7+4];
ld.shared.u32 %r11, [%r7+60];
ld.shared.u32 %r14, [%r12];
ld.shared.u32 %r15, [%r12+64];
ld.shared.u32 %r16, [%r12+4];
ld.shared.u32 %r18, [%r17];
bar.sync 0;
mad.lo.u32 %r20, %r10, 3, %r20;
mad.lo.u32 %r20, %r11, 5, %r20;
mad.lo.u32 %r20, %r14, 7, %r20;
mad.lo.u32 %r20, %r15, 11, %r20;
mad.lo.u32 %r20, %r16, 13, %r20;
mad.lo.u32 %r20, %r18, 17, %r20;
add.s32 %r20, %r20, %r9;
add.s32 %r21, %r21, 1000;
setp.lt.u32 %p1, %r21, 3000;
@%p1 bra LOOP;
mov.u32 %r22, %ntid.x;
mad.lo.u32 %r23, %r2, %r22, %r1;
mul.wide.u32 %rd2, %r23, 4;
add.s64 %rd3, %rd1, %rd2;
st.global.u32 [%rd3], %r20;
ret;
}
"""


def tiled_reference(blocks: int) -> np.ndarray:
    t = np.arange(256, dtype=np.uint64)
    acc = np.zeros((blocks, 256), np.uint64)
    for b in range(blocks):
        for turn in range(3):
            buf = t * 7 + b + 1000 * turn
            row, col = t // 16 * 16, t % 16
            acc[b] += buf[row] + 3 * buf[row + 1] + 5 * buf[row + 15] + 7 * buf[col] + 11 * buf[col + 16] + \
                13 * buf[col + 1] + 17 * buf[t ^ 3]
    return (acc % (1 << 32)).astype(np.uint32).reshape(-1)


@pytest.mark.parametrize("sanitize", [False, True])
def test_a_tiled_loop_reads_broadcast_rows_and_scattered_offsets_exactly(sanitize, monkeypatch):
    used = []
    take, put = index_runs.Runs.take, index_runs.Runs.put
    monkeypatch.setattr(index_runs.Runs, "take", lambda self, view: used.append(self.broadcast) or take(self, view))
    monkeypatch.setattr(index_runs.Runs, "put", lambda self, view, v: used.append("put") or put(self, view, v))
    k = pf.parse(TILED).kernel("k")
    blocks = 16  # 4096 lanes in one wave: the runs are looked for
    out = np.zeros(blocks * 256, np.uint32)
    r = k.launch(grid=blocks, block=256, args=[out], device="emu", options={"sanitize": sanitize})
    np.testing.assert_array_equal(out, tiled_reference(blocks))
    assert r.thread_instructions == blocks * 256 * (17 + 3 * 22 + 6)
    # per turn three broadcast and three row loads and a store of one row per group, less the first use of each
    # register's indices (their runs are looked for from the second on); under the sanitizer every access takes
    # the checked path
    assert sorted(used, key=str) == ([] if sanitize else [False] * 8 + [True] * 8 + ["put"] * 2)


def test_a_later_offset_from_a_cached_register_still_faults():
    # [%r7] is in range for every lane and caches %r7's indices; [%r7+1020] leaves the 1 KiB window for the
    # lanes past the first row of 16 threads
    bad = TILED.replace("ld.shared.u32 %r11, [%r7+60];", "ld.shared.u32 %r11, [%r7+1020];")
    out = np.zeros(16 * 256, np.uint32)
    with pytest.raises(MemoryFault, match="out-of-bounds shared access of 4 bytes"):
        pf.parse(bad).kernel("k").launch(grid=16, block=256, args=[out], device="emu")
