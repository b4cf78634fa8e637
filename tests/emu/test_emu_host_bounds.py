"""Kernels cannot exhaust the host: device malloc returns NULL past its heap, a module's variables have a total
cap, a grid of millions of short waves is held to its time limit with bounded bookkeeping, and every error
a running kernel meets names the thread and block."""

from __future__ import annotations

import time
import tracemalloc

import numpy as np
import pytest

import ptxforge as pf
from ptxforge.emu import memory as M
from ptxforge.emu.block_order import EXACT_SHUFFLE, Shuffle
from ptxforge.emu.device_heap import MALLOC_HEAP_SIZE
from ptxforge.emu.errors import EmulatorError, LaunchError, TimeLimitExceeded, UnsupportedInstruction
from ptxforge.emu.launch import EmuDevice, emulate
from ptxforge.emu.machine import MAX_WAVE_LOG

H = ".version 8.5\n.target sm_90\n.address_size 64\n"

# out[tid] = malloc(n); then free(it) when `release` is set
MALLOC = H + """.extern .func (.param .b64 func_retval0) malloc(.param .b64 malloc_param_0);
.extern .func free(.param .b64 free_param_0);
.visible .entry k(.param .u64 out, .param .u64 n, .param .u32 release)
{
.reg .pred %p<2>;
.reg .b32 %r<3>;
.reg .b64 %rd<8>;
ld.param.u64 %rd1, [out];
ld.param.u64 %rd2, [n];
ld.param.u32 %r2, [release];
{
.param .b64 param0;
st.param.b64 [param0], %rd2;
.param .b64 retval0;
call.uni (retval0), malloc, (param0);
ld.param.b64 %rd3, [retval0];
}
mov.u32 %r1, %tid.x;
mul.wide.u32 %rd4, %r1, 8;
add.s64 %rd5, %rd1, %rd4;
st.global.u64 [%rd5], %rd3;
setp.eq.u32 %p1, %r2, 0;
@%p1 bra DONE;
{
.param .b64 param0;
st.param.b64 [param0], %rd3;
call.uni free, (param0);
}
DONE:
ret;
}
"""


def mallocs(dev: EmuDevice, nbytes: int, threads: int = 32, release: bool = False) -> np.ndarray:
    """The pointers `threads` threads got from malloc(nbytes) on `dev`."""
    out = np.full(threads, 7, np.uint64)
    pf.parse(MALLOC).kernel("k").launch(grid=1, block=threads, args=[out, np.uint64(nbytes), np.uint32(release)],
                                        device="emu", emu_device_=dev)
    return out


@pytest.mark.parametrize("nbytes", [2**62, 2**64 - 1, MALLOC_HEAP_SIZE + 1])
def test_malloc_beyond_the_heap_returns_null(nbytes):
    dev = EmuDevice()
    before = dev.memory.arena.nbytes
    assert (mallocs(dev, nbytes) == 0).all()
    assert dev.memory.arena.nbytes == before


def test_the_heap_holds_its_limit_across_launches_and_free_returns_blocks():
    dev = EmuDevice()
    got = mallocs(dev, 1 << 20)  # 32 threads ask for 1 MiB each: the 8 MiB heap holds 8
    assert np.count_nonzero(got) == MALLOC_HEAP_SIZE >> 20 and len(set(got[got != 0].tolist())) == 8
    assert (mallocs(dev, 1 << 20) == 0).all()  # blocks live until freed, across launches
    dev2 = EmuDevice()
    assert np.count_nonzero(mallocs(dev2, 1 << 20, release=True)) == 8
    assert np.count_nonzero(mallocs(dev2, 1 << 20, release=True)) == 8  # freed: the heap is whole again


def test_the_heap_size_is_a_device_option():
    dev = EmuDevice(malloc_heap_size=64 << 20)
    assert dev.malloc_heap_size == 64 << 20
    assert np.count_nonzero(mallocs(dev, 1 << 20)) == 32
    dev = EmuDevice()
    dev.malloc_heap_size = 100
    got = mallocs(dev, 10)  # blocks count in 16-byte granules: 6 of them fit in 100 bytes
    assert np.count_nonzero(got) == 6
    with pytest.raises(LaunchError, match="malloc_heap_size must be a whole number of bytes"):
        dev.malloc_heap_size = -1


def test_the_module_data_total_is_capped_naming_the_variable_that_crosses_it():
    gib = 1 << 30  # each at the one-variable limit; three of them are more than a module may hold
    text = H + "".join(f".global .b8 g{i}[{gib}];\n" for i in range(3)) + ".visible .entry k()\n{\nret;\n}\n"
    dev = EmuDevice()
    before = dev.memory.arena.nbytes
    t = time.perf_counter()
    with pytest.raises(LaunchError, match=r"<string>:6:\d+: \.global g2 \(1,073,741,824 bytes\) brings the module's "
                                          r"\.global/\.const data to 3,221,225,472 bytes; .* at most 2,147,483,648"):
        pf.parse(text).kernel("k").launch(grid=1, block=1, args=[], device="emu", emu_device_=dev)
    assert time.perf_counter() - t < 5 and dev.memory.arena.nbytes == before


RET = H + ".visible .entry k()\n{\nret;\n}\n"


def test_a_grid_of_many_short_waves_is_held_to_the_time_limit():
    # every wave ends within one step, before the launch's first tick: the limit is checked between waves
    # (the interpreter's waves: a grid this big would go to the native tier, which checks the clock per block)
    k = pf.parse(RET).kernel("k")
    t = time.perf_counter()
    with pytest.raises(TimeLimitExceeded, match=r"time limit of 0\.3 s .* between waves: [\d,]+ of its "
                                                r"40,000,000 blocks had run"):
        k.launch(grid=(40_000_000,), block=(32,), args=[], device="emu",
                 options={"time_limit_s": 0.3, "tier": "interp"})
    assert time.perf_counter() - t < 3


def test_the_wave_log_stays_bounded_and_sums_up_the_rest():
    mod = pf.parse(RET)
    nblocks = 32 * (MAX_WAVE_LOG + 300)  # 32 blocks a wave on one SM
    m = emulate(mod, mod.kernel("k").function, grid=(nblocks,), block=(32,), params=b"", num_sms=1, run=False)
    stats = m.run()
    assert stats["waves"] == MAX_WAVE_LOG + 300 and len(m.wave_log) == MAX_WAVE_LOG
    assert sum(n for _, n, *_ in m.wave_log) == nblocks
    assert m.wave_log[-1][4] == (0,)  # the SMs the summed-up waves ran on


# bar.sync with an id from a register: 99 for thread 37 of block 1 only, 0 for every other thread
BAD_BARRIER = H + """.visible .entry k()
{
.reg .pred %p<4>;
.reg .b32 %r<4>;
mov.u32 %r1, %tid.x;
mov.u32 %r2, %ctaid.x;
setp.eq.u32 %p1, %r1, 37;
setp.eq.u32 %p2, %r2, 1;
and.pred %p3, %p1, %p2;
selp.u32 %r3, 99, 0, %p3;
bar.sync %r3;
ret;
}
"""

# an indirect call to f, except thread 3 of block 1, which calls 0x1234
BAD_CALL = H + """.func f()
{
ret;
}
.visible .entry k()
{
.reg .pred %p<4>;
.reg .b32 %r<3>;
.reg .b64 %rd<3>;
mov.u32 %r1, %tid.x;
mov.u32 %r2, %ctaid.x;
setp.eq.u32 %p1, %r1, 3;
setp.eq.u32 %p2, %r2, 1;
and.pred %p3, %p1, %p2;
mov.u64 %rd1, f;
selp.b64 %rd2, 0x1234, %rd1, %p3;
P: .callprototype ()_ ();
call %rd2, P;
ret;
}
"""


@pytest.mark.parametrize("sanitize", [False, True])
@pytest.mark.parametrize("text,words", [
    (BAD_BARRIER, r"barrier id 99 is out of range 0\.\.15 \(thread \(37,0,0\) block \(1,0,0\)\)"),
    (BAD_CALL, r"indirect call to 0x1234, not a function \(thread \(3,0,0\) block \(1,0,0\)\)"),
])
def test_errors_of_a_running_kernel_name_the_thread_and_block(text, words, sanitize):
    with pytest.raises(EmulatorError, match=words):
        pf.parse(text).kernel("k").launch(grid=2, block=64, args=[], device="emu", options={"sanitize": sanitize})


def test_an_error_raised_inside_an_op_names_the_first_thread_that_ran_it():
    text = H.replace("sm_90", "sm_90a") + """.visible .entry k()
{
.reg .f32 %f<4>;
.reg .b64 %rd<2>;
mov.b64 %rd0, 0;
mov.b64 %rd1, 0;
wgmma.mma_async.sync.aligned.m64n8k16.f32.f16.f16 {%f0,%f1,%f2,%f3}, %rd0, %rd1, 1, 1, 1, 0, 0;
ret;
}
"""
    with pytest.raises(UnsupportedInstruction, match=r"whole warpgroup .*\(thread \(0,0,0\) block \(0,0,0\), "
                                                     r"the first of 32 threads running it\)"):
        pf.parse(text).kernel("k").launch(grid=1, block=32, args=[], device="emu")


def test_a_clustered_grid_of_a_billion_blocks_keeps_no_array_of_the_grid():
    k = pf.parse(RET).kernel("k")
    t = time.perf_counter()
    tracemalloc.start()
    try:
        with pytest.raises(TimeLimitExceeded, match="between waves"):
            k.launch(grid=(2**30,), block=(32,), args=[], device="emu", cluster=(2, 1, 1),
                     options={"time_limit_s": 0.3})
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert peak < 64 << 20 and time.perf_counter() - t < 5  # an array of the grid's block ids: 8 GiB


@pytest.mark.parametrize("n", [EXACT_SHUFFLE + 5, 3 * 5 * 7 * 40_000])
def test_a_shuffle_of_millions_of_blocks_is_a_bijection_without_a_permutation_array(n):
    s = Shuffle(n, seed=3)
    ids = s[np.arange(n, dtype=np.int64)]
    assert (s.perm is None) == (n > EXACT_SHUFFLE)
    assert np.array_equal(np.sort(ids), np.arange(n)) and not np.array_equal(ids, np.arange(n))
    big = Shuffle(2**40 + 7, seed=3)  # a 3-D grid's worth of positions: exact integers past 2^63
    got = big[np.array([0, 1, 2**40 + 6], np.int64)]
    assert len(set(got.tolist())) == 3 and ((got >= 0) & (got < 2**40 + 7)).all()


def test_the_sanitizer_refuses_a_grid_whose_state_would_not_fit_before_keeping_any():
    k = pf.parse(RET).kernel("k")
    t = time.perf_counter()
    with pytest.raises(LaunchError, match=r"k: the sanitizer keeps 96 bytes of synchronization state per block, "
                                          r"206,158,430,112 bytes for a grid of 2,147,483,647 blocks"):
        k.launch(grid=(2**31 - 1,), block=(32,), args=[], device="emu",
                 options={"time_limit_s": 5, "sanitize": pf.emu.sanitizer.Sanitizer(shuffle_seed=1)})
    assert time.perf_counter() - t < 3


def test_a_kernel_of_many_mallocs_takes_linear_time():
    # each thread of 16 blocks of 1,024 mallocs 16 bytes: a first fit walking every allocation took minutes
    out = np.zeros(1024, np.uint64)
    t = time.perf_counter()
    pf.parse(MALLOC).kernel("k").launch(grid=16, block=1024, args=[out, np.uint64(16), np.uint32(0)],
                                        device="emu", emu_device_=EmuDevice())
    assert time.perf_counter() - t < 20 and np.count_nonzero(out) == 1024


def _first_fit(live: list, size: int, align: int) -> int:
    """Where a plain first fit over every live allocation places `size` bytes (the allocator's specification)."""
    span, off = M._round_up(max(size, 1), M.PAD), 0
    for a in sorted(live, key=lambda a: a.offset):
        if off + span + M.REDZONE <= a.offset:
            break
        off = M._round_up(a.offset + M._round_up(max(a.size, 1), M.PAD) + M.REDZONE, max(256, align))
    return off


@pytest.mark.parametrize("seed", [1, 2])
def test_the_allocator_still_places_as_a_plain_first_fit(seed):
    rng = np.random.default_rng(seed)
    mem, live = M.DeviceMemory(), []
    for _ in range(1500):
        if live and rng.random() < 0.4:
            mem.free(live.pop(int(rng.integers(len(live)))))
            continue
        size, align = int(rng.choice([1, 64, 100, 1000, 70000])), int(rng.choice([256, 512, 4096]))
        want = _first_fit(live, size, align)
        live.append(mem.alloc(size, align=align))
        assert live[-1].offset == want
