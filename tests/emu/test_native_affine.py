"""Lane-affine accesses on the native tier (emu/native/affine.py): which registers are lane 0's + stride * lane,
and global accesses at such addresses (one scalar span check, one vector access) against the interpreter,
where the span way holds and where it must give way (a 32-bit index that wraps, a lane inactive, a stride
other than the access's size, a block whose rows split warps)."""

from __future__ import annotations

import numpy as np
import pytest

import ptxforge as pf
from ptxforge.emu.errors import MemoryFault
from ptxforge.emu.launch import emu_device
from ptxforge.emu.native.affine import lane_strides
from ptxforge.emu.native.dataflow import param_registers, surely_written
from ptxforge.runtime.buffers import to_device
from ptxforge.runtime.launch_config import EmulatorOptions

pytest.importorskip("llvmlite")

# c[i] = a[i] + b[i + 1] with i = ctaid.x * ntid.x + tid.x, guarded by i < n, each address made from a signed
# 32-bit index j = i + off widened as nvcc does, less off widened (the same address where j does not wrap);
# STEP bytes apart (4: the span way); j widened before the branch (CARRIED: the segment after it takes the
# widened register in) or after it (HERE: the segment widens it itself)
ADD = """
.version 7.0
.target sm_80
.address_size 64
.visible .entry add(.param .u64 a, .param .u64 b, .param .u64 c, .param .u32 n, .param .u32 off)
{
    .reg .pred %p<2>;
    .reg .b32 %r<12>;
    .reg .b64 %rd<13>;
    ld.param.u64 %rd1, [a];
    ld.param.u64 %rd2, [b];
    ld.param.u64 %rd3, [c];
    ld.param.u32 %r1, [n];
    ld.param.u32 %r2, [off];
    mov.u32 %r3, %ctaid.x;
    mov.u32 %r4, %ntid.x;
    mov.u32 %r5, %tid.x;
    mad.lo.s32 %r6, %r3, %r4, %r5;
    add.s32 %r7, %r6, %r2;
    CARRIED
    setp.ge.s32 %p1, %r6, %r1;
    @%p1 bra DONE;
    cvta.to.global.u64 %rd4, %rd1;
    HERE
    mul.wide.s32 %rd5, %r2, STEP;
    sub.s64 %rd5, %rd11, %rd5;
    add.s64 %rd6, %rd4, %rd5;
    cvta.to.global.u64 %rd7, %rd2;
    add.s64 %rd8, %rd7, %rd5;
    ld.global.u32 %r8, [%rd6];
    ld.global.u32 %r9, [%rd8+4];
    add.s32 %r10, %r8, %r9;
    cvta.to.global.u64 %rd9, %rd3;
    add.s64 %rd10, %rd9, %rd5;
    st.global.u32 [%rd10], %r10;
DONE:
    ret;
}
"""


def _kernel(step: int = 4, carried: bool = False):
    widen = f"mul.wide.s32 %rd11, %r7, {step};"
    text = ADD.replace("CARRIED", widen if carried else "").replace("HERE", "" if carried else widen)
    return pf.parse(text.replace("STEP", str(step)), filename="add.ptx").kernel("add")


def _on_tiers(k, grid, block, make, level=None):
    """Run `k` on both tiers from the same inputs, `make()` -> (its buffers, the launch's arguments; the last
    buffer is the output): per tier ("ok", the output's bytes, counts) or ("fault", message)."""
    found = {}
    for tier in ("interp", "native"):
        bufs, args = make()
        try:
            r = k.launch(grid=grid, block=block, args=args,
                         options=EmulatorOptions(tier=tier, level=level if tier == "native" else None))
            assert r.tier == tier, r.tier_note
            found[tier] = ("ok", bufs[-1].to_host().tobytes(), r.thread_instructions)
        except MemoryFault as e:
            found[tier] = ("fault", str(e))
        for x in bufs:
            x.free()
    return found


def _both(k, grid, block, words, n, off=0, ptr_words=0, level=None):
    """`_on_tiers` of the ADD kernel: a and b random, c the output, `ptr_words` into each."""
    def make():
        rng = np.random.default_rng(5)
        a, b = (to_device(rng.integers(0, 1 << 30, words, dtype=np.uint32)) for _ in range(2))
        c = to_device(np.zeros(words, np.uint32))
        return [a, b, c], [a.address + 4 * ptr_words, b.address + 4 * ptr_words, c.address + 4 * ptr_words,
                           np.uint32(n), np.uint32(off)]
    return _on_tiers(k, grid, block, make, level)


def test_registers_of_the_thread_index_are_lane_affine():
    """tid.x and what adds, multiplies and shifts make of it with ctaid, ntid and parameters: stride known; a
    widened index (mul.wide) too, as one that may wrap (lane 31 tells when running); %rd5 is written twice."""
    k = _kernel(carried=True)
    layout, ops = emu_device().image(k.module).compiled(k.function)
    fl = layout.functions[layout.kernel_func.name]
    surely = surely_written(layout, ops, fl.entry, fl.end)
    params = set(param_registers(layout, fl.entry, fl.end))

    def slot(name):
        return layout.lookup(layout.placed[fl.entry], name)[1]
    got = lane_strides(layout, fl.entry, fl.end, (256, 1, 1), surely, params)
    assert {r: got.get(slot(r)) for r in ("%r3", "%r4", "%r5", "%r6", "%r7", "%rd1", "%rd4", "%rd5", "%rd11")} == {
        "%r3": (0, False, False), "%r4": (0, False, False), "%r5": (1, False, False), "%r6": (1, False, False),
        "%r7": (1, False, False), "%rd1": (0, False, False), "%rd4": (0, False, False),
        "%rd5": None,  # (written twice, with strides 0 and 4)
        "%rd11": (4, True, False)}
    # rows narrower than a warp: tid.x wraps inside a warp
    narrow = lane_strides(layout, fl.entry, fl.end, (48, 2, 1), surely, params)
    assert narrow.get(slot("%r5")) is None and narrow.get(slot("%r6")) is None
    assert narrow.get(slot("%r3")) == (0, False, False)


# y[i] += x[i] over a grid-stride loop: i starts at ctaid.x * ntid.x + tid.x and steps by the grid's threads, so
# it is written twice (lane-affine only where every lane took every step: checked when running); lanes whose
# tid.x is below `extra` step twice an iteration (they run ahead: the warp's i is then not lane-affine)
GRID_STRIDE = """
.version 7.0
.target sm_80
.address_size 64
.visible .entry gs(.param .u64 x, .param .u64 y, .param .u32 n, .param .u32 extra)
{
    .reg .pred %p<3>;
    .reg .b32 %r<12>;
    .reg .b64 %rd<8>;
    ld.param.u64 %rd1, [x];
    ld.param.u64 %rd2, [y];
    ld.param.u32 %r1, [n];
    ld.param.u32 %r9, [extra];
    cvta.to.global.u64 %rd1, %rd1;
    cvta.to.global.u64 %rd2, %rd2;
    mov.u32 %r2, %ntid.x;
    mov.u32 %r3, %ctaid.x;
    mov.u32 %r4, %tid.x;
    mov.u32 %r5, %nctaid.x;
    mad.lo.s32 %r6, %r3, %r2, %r4;
    mul.lo.s32 %r7, %r2, %r5;
    setp.ge.s32 %p1, %r6, %r1;
    @%p1 bra DONE;
LOOP:
    mul.wide.s32 %rd3, %r6, 4;
    add.s64 %rd4, %rd1, %rd3;
    ld.global.u32 %r8, [%rd4];
    add.s64 %rd5, %rd2, %rd3;
    ld.global.u32 %r10, [%rd5];
    add.s32 %r10, %r10, %r8;
    st.global.u32 [%rd5], %r10;
    setp.ge.u32 %p2, %r4, %r9;
    @%p2 bra NEXT;
    add.s32 %r6, %r6, %r7;
NEXT:
    add.s32 %r6, %r6, %r7;
    setp.lt.s32 %p1, %r6, %r1;
    @%p1 bra LOOP;
DONE:
    ret;
}
"""


def test_a_loop_index_stepped_by_a_uniform_amount_is_lane_affine_checked_when_running():
    k = pf.parse(GRID_STRIDE, filename="gs.ptx").kernel("gs")
    layout, ops = emu_device().image(k.module).compiled(k.function)
    fl = layout.functions[layout.kernel_func.name]
    surely = surely_written(layout, ops, fl.entry, fl.end)
    got = lane_strides(layout, fl.entry, fl.end, (128, 1, 1), surely, set(param_registers(layout, fl.entry,
                                                                                           fl.end)))
    assert got.get(layout.lookup(layout.placed[fl.entry], "%r6")[1]) == (1, False, True)


def _grid_stride_args(words, n, extra):
    rng = np.random.default_rng(11)
    x, y = (to_device(rng.integers(0, 1 << 30, words, dtype=np.uint32)) for _ in range(2))
    return [x, y], [x, y, np.uint32(n), np.uint32(extra)]


@pytest.mark.parametrize("level", ["quick", "opt"])
@pytest.mark.parametrize("n,extra", [(4096, 0), (3001, 0), (4096, 5), (3001, 40), (4096, 128)])
def test_grid_stride_loops_match_the_interpreter(n, extra, level):
    """Every lane stepping alike (the span way) or some running ahead (the runtime test sends the warp the vector
    way), n a multiple of the grid's threads or not (the last warps diverge), at both compile levels."""
    found = _on_tiers(pf.parse(GRID_STRIDE, filename="gs.ptx").kernel("gs"), (4,), (128,),
                      lambda: _grid_stride_args(4096, n, extra), level)
    assert found["interp"] == found["native"] and found["native"][0] == "ok"


def test_a_grid_stride_loop_past_its_buffer_faults_alike_on_both_tiers():
    """The span way's window is the allocation: a loop running off its end faults at the same load on both tiers
    (which lane first: the interpreter steps every block's warps in turn, the native tier a block at a time)."""
    found = _on_tiers(pf.parse(GRID_STRIDE, filename="gs.ptx").kernel("gs"), (4,), (128,),
                      lambda: _grid_stride_args(1000, 4096, 0))
    for kind, m in found.values():
        assert kind == "fault"
        assert m.startswith("gs.ptx:27: ld.global.u32 %r8, [%rd4];: out-of-bounds global access of 4 bytes at "), m
        assert "past the end of buffer" in m


@pytest.mark.parametrize("level", ["quick", "opt"])
@pytest.mark.parametrize("carried", [False, True])
@pytest.mark.parametrize("n", [4096, 1000, 33])
def test_span_accesses_match_the_interpreter(n, level, carried):
    """Full warps take the span way; the warp holding i = n is partly active (the vector way), the others
    have nothing to do (both compile levels: the quick one calls the access functions, the optimized one
    inlines them)."""
    found = _both(_kernel(carried=carried), (16,), (256,), 4096 + 8, n, level=level)
    assert found["interp"] == found["native"]
    assert found["native"][0] == "ok"


@pytest.mark.parametrize("step", [8, 12])
def test_a_stride_other_than_the_size_goes_the_vector_way(step):
    found = _both(_kernel(step), (4,), (128,), 4 * 512 * step // 4 + 8, 512)
    assert found["interp"] == found["native"]
    assert found["native"][0] == "ok"


@pytest.mark.parametrize("block", [(48, 2, 1), (32, 4, 1), (64, 1, 1)])
def test_blocks_of_several_rows_match_the_interpreter(block):
    found = _both(_kernel(), (3,), block, 1024, 1000)
    assert found["interp"] == found["native"]


@pytest.mark.parametrize("words, ptr, thread", [(100, 68, 31), (100, 69, 31), (96, 80, 16)])
def test_a_span_past_the_end_faults_as_lane_by_lane(words, ptr, thread):
    """The span check fails (the span ends past the allocation, mid-granule): the vector way names the first
    bad access and lane as the interpreter does (b is read one word on, after a)."""
    found = _both(_kernel(), (1,), (32,), words, 32, ptr_words=ptr)
    assert found["interp"] == found["native"]
    assert found["native"][0] == "fault" and f"by thread ({thread},0,0)" in found["native"][1]


@pytest.mark.parametrize("carried", [False, True])
def test_an_index_that_wraps_goes_the_vector_way(carried):
    """i + off crosses 2**31 inside the warp: widened, lanes past it jump 16 GiB back, so the warp is not one
    span; the scalar test on lane 0 sends it the vector way, which faults on the first such lane as the
    interpreter does (a span from lane 0 would have read in bounds). Warp 0 does not wrap: the span way. The
    widening in the access's segment is tested on lane 0's index, the one taken in from before the branch on
    its lane 31."""
    off = (1 << 31) - 40  # lanes 8.. of warp 1 wrap (that warp's lane 0: index 2**31 - 8)
    found = _both(_kernel(carried=carried), (1,), (64,), 128, 64, off=off)
    assert found["interp"] == found["native"]
    assert found["native"][0] == "fault" and "by thread (40,0,0)" in found["native"][1]


@pytest.mark.parametrize("words, n, thread", [(4096, 4095, None), (1000, 1024, 8), (999, 999, 6), (3000, 3008, 24),
                                              (20000, 19999, None), (20000, 20000, 31)])
def test_blocks_marching_through_their_arrays_fault_where_the_interpreter_does(words, n, thread):
    """Blocks of one warp, one span each: an access's window of good offsets, opened at the first block and again
    where it ends (32 KiB on at most), never reaches past the valid bytes; the block that leaves it faults as the
    interpreter does, at the same lane (a's last word, mid-granule; b's, one on; in a warp partly active)."""
    found = _both(_kernel(), ((n + 31) // 32,), (32,), words, n)
    assert found["interp"] == found["native"]
    assert found["native"][0] == ("ok" if thread is None else "fault")
    if thread is not None:
        assert f"by thread ({thread},0,0)" in found["native"][1]


@pytest.mark.parametrize("level", ["quick", "opt"])
@pytest.mark.parametrize("ptr, thread", [(75, None), (76, 31), (77, 31), (78, 30)])
def test_a_window_ends_on_the_last_good_span(ptr, thread, level):
    """a, b and c start `ptr` words into their allocations of 1100 words, so the last block's spans end on the
    last word (b's one word on), one word past it, two: the window opened at the first block holds the last good
    span and no more (ptr 76: b's last span is one word past; 77: a's too, which is read first)."""
    found = _both(_kernel(), (32,), (32,), 1100, 1024, ptr_words=ptr, level=level)
    assert found["interp"] == found["native"]
    assert found["native"][0] == ("ok" if thread is None else "fault")
    if thread is not None:
        assert f"by thread ({thread},0,0) block (31,0,0)" in found["native"][1]


# c[i] = a[i] with each lane's WIDTH words loaded and stored as one vector access (their order swapped about)
VEC = """
.version 7.0
.target sm_80
.address_size 64
.visible .entry vec(.param .u64 a, .param .u64 c, .param .u32 n)
{
    .reg .pred %p<2>;
    .reg .b32 %r<16>;
    .reg .b64 %rd<8>;
    ld.param.u64 %rd1, [a];
    ld.param.u64 %rd2, [c];
    ld.param.u32 %r1, [n];
    mov.u32 %r2, %ctaid.x;
    mov.u32 %r3, %ntid.x;
    mov.u32 %r4, %tid.x;
    mad.lo.s32 %r5, %r2, %r3, %r4;
    setp.ge.s32 %p1, %r5, %r1;
    @%p1 bra DONE;
    cvta.to.global.u64 %rd3, %rd1;
    mul.wide.s32 %rd4, %r5, BYTES;
    add.s64 %rd5, %rd3, %rd4;
    LOAD
    cvta.to.global.u64 %rd6, %rd2;
    add.s64 %rd7, %rd6, %rd4;
    STORE
DONE:
    ret;
}
"""
VEC_OPS = {2: ("ld.global.v2.u32 {%r6, %r7}, [%rd5];", "st.global.v2.u32 [%rd7], {%r7, %r6};"),
           4: ("ld.global.v4.u32 {%r6, %r7, %r8, %r9}, [%rd5];", "st.global.v4.u32 [%rd7], {%r9, %r6, %r8, %r7};")}


@pytest.mark.parametrize("width", [2, 4])
@pytest.mark.parametrize("words_per_lane, n, thread", [(64, 64, None), (64, 50, None), (60, 64, 28)])
def test_vector_accesses_take_one_span_and_match_the_interpreter(width, words_per_lane, n, thread):
    """ld/st.v2 and .v4 whose lanes' vectors lie side by side: one span of 32 vectors, its elements dealt out
    to the registers and gathered back in memory order; a partial warp and a span past the end go the vector
    way (the same fault, at the same lane: vector 60, in block 1)."""
    load, store = VEC_OPS[width]
    text = VEC.replace("BYTES", str(4 * width)).replace("LOAD", load).replace("STORE", store)
    k = pf.parse(text, filename="vec.ptx").kernel("vec")
    words = words_per_lane * width
    found = {}
    for tier in ("interp", "native"):
        a = to_device((np.arange(words, dtype=np.uint64) * 2654435761 % (1 << 32)).astype(np.uint32))
        c = to_device(np.zeros(words, np.uint32))
        try:
            r = k.launch(grid=(2,), block=(32,), args=[a, c, np.uint32(n)], options=EmulatorOptions(tier=tier))
            assert r.tier == tier, r.tier_note
            found[tier] = ("ok", c.to_host().tobytes(), r.thread_instructions)
        except MemoryFault as e:
            found[tier] = ("fault", str(e))
        a.free()
        c.free()
    assert found["interp"] == found["native"]
    assert found["native"][0] == ("ok" if thread is None else "fault")
    if thread is not None:
        assert f"by thread ({thread},0,0) block (1,0,0)" in found["native"][1]
