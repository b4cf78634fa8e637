"""The native tier (ptxforge.emu.native) against the interpreter: same memory, same counts, on corpus kernels.

Each kernel runs on both tiers from identical device memory (random bytes: NaNs, subnormals and all); the
buffers must come back byte-identical and the thread-instruction counts (total and per SM) equal. Kernels the
native tier cannot run fall back to the interpreter and say why.
"""

from __future__ import annotations

import numpy as np
import pytest
from emu_corpus import corpus_module

import ptxforge
from ptxforge.emu.errors import EmulatorError
from ptxforge.runtime.buffers import to_device
from ptxforge.runtime.launch_config import EmulatorOptions

pytest.importorskip("llvmlite")

# (module, kernel, grid, block): kernels the native tier runs today (sm_80 -O3 builds)
NATIVE = [
    ("vector_ops", "vadd_f32", (4,), (256,)),
    ("vector_ops", "saxpy", (3,), (128,)),
    ("vector_ops", "int_ops_narrow", (2,), (256,)),
    ("vector_ops", "select_i32", (2,), (256,)),
    ("vector_ops", "scale_f32x4", (2,), (64,)),
    ("control_flow", "collatz_steps", (4,), (256,)),
    ("control_flow", "search_goto", (2,), (128,)),
    ("reductions", "reduce_sum_warp", (4,), (256,)),
    ("reductions", "reduce_sum_shared", (4,), (256,)),
    ("reductions", "reduce_max_i32", (4,), (256,)),
    ("matmul_tiled", "matmul_tiled_f32", (2, 2), (16, 16)),
    ("scans", "scan_inclusive_hillis_steele", (2,), (256,)),
    ("scans", "scan_exclusive_blelloch", (2,), (256,)),
    ("scans", "scan_inclusive_warp_shuffle", (2,), (256,)),
    ("transpose", "transpose_naive", (2, 2), (32, 8)),
    ("transpose", "transpose_padded", (2, 2), (32, 8)),
    ("bitonic_sort", "bitonic_sort_f32", (2,), (256,)),
    ("cub_block_ops", "cub_warp_reduce_scan", (2,), (128,)),
    ("launch_config", "grid_3d_special_regs", (2, 2, 2), (8, 4, 2)),
    ("launch_config", "stencil_3d_7pt", (2, 2, 2), (8, 4, 4)),
    ("memory_spaces", "dynamic_smem_reverse", (2,), (128,)),
    ("float_to_int", "float_bits", (2,), (256,)),
    ("histogram", "histogram_global", (4,), (256,)),
    ("histogram", "histogram_shared", (4,), (256,)),
    ("atomics", "atomics_scoped_shared", (2,), (256,)),
    ("moe_router", "expert_token_counts", (2,), (128,)),
    ("int_division", "int_divmod", (2,), (256,)),
    ("int_division", "int_divmod64", (2,), (256,)),
    ("int_division", "int_floordiv", (2,), (256,)),
]
BUF_BYTES = 1 << 18
SCALAR = 32  # every integer parameter (sizes, strides): small, so every index stays inside the buffers


def _args(kernel, seed: int):
    rng = np.random.default_rng(seed)
    out = []
    for p in kernel.function.params:
        if p.type in (".u64", ".b64", ".s64"):
            out.append(to_device(rng.integers(0, 256, BUF_BYTES, dtype=np.uint8)))
        elif p.type == ".f32":
            out.append(np.float32(1.5))
        elif p.type in (".u32", ".s32", ".b32"):
            out.append(np.int32(SCALAR) if p.type == ".s32" else np.uint32(SCALAR))
        else:
            pytest.fail(f"{kernel.name}: no argument for a {p.type} parameter")
    return out


def _run(mod, name, grid, block, tier, threads=None, level=None):
    k = corpus_module(mod).kernel(name)
    args = _args(k, 7)
    shared = 4096 if name == "dynamic_smem_reverse" else 0
    try:
        r = k.launch(grid=grid, block=block, args=args, shared_mem=shared,
                     options=EmulatorOptions(tier=tier, threads=threads, level=level))
        outcome: object = r
    except EmulatorError as e:
        outcome = e
    mem = [a.to_host().tobytes() for a in args if hasattr(a, "to_host")]
    for a in args:
        if hasattr(a, "free"):
            a.free()
    return outcome, mem


# the default suite runs these 12 (a vector loop, divergence, shuffles, barriers, atomics, a 3-D grid, 64-bit
# division, a 2-D shared tile, a matmul: each an LLVM compile at the quick level of 0.2-1 s); the other 17 are
# slow-marked (the bitonic sort among them: 684 instructions, 7 s of LLVM at the quick level)
DEFAULT = {"vadd_f32", "collatz_steps", "search_goto", "reduce_sum_warp", "reduce_sum_shared", "matmul_tiled_f32",
           "scan_exclusive_blelloch", "transpose_padded", "grid_3d_special_regs", "histogram_shared",
           "atomics_scoped_shared", "int_divmod64"}
assert DEFAULT <= {n for _, n, _, _ in NATIVE}


@pytest.mark.parametrize("mod,name,grid,block",
                         [pytest.param(*k, marks=() if k[1] in DEFAULT else pytest.mark.slow) for k in NATIVE],
                         ids=[f"{m}.{n}" for m, n, _, _ in NATIVE])
def test_native_matches_interpreter(mod, name, grid, block):
    want, want_mem = _run(mod, name, grid, block, "interp")
    got, got_mem = _run(mod, name, grid, block, "native")
    if isinstance(want, Exception):
        assert type(got) is type(want), f"interpreter: {want!r}; native: {got!r}"
        return
    assert not isinstance(got, Exception), got
    assert got.tier == "native", got.tier_note
    assert want.tier == "interp"
    assert got.thread_instructions == want.thread_instructions
    assert np.array_equal(got.per_sm, want.per_sm)
    assert got_mem == want_mem


def test_optimized_level_matches_the_interpreter():
    """The test above runs every kernel at the quick level (the level a cold kernel gets); the optimized level
    (LLVM -O3 and its passes) on a kernel with shuffles, barriers and a loop."""
    mod, name, grid, block = next(k for k in NATIVE if k[1] == "reduce_sum_warp")
    want, want_mem = _run(mod, name, grid, block, "interp")
    got, got_mem = _run(mod, name, grid, block, "native", level="opt")
    assert not isinstance(got, Exception), got
    assert (got.tier, got.level) == ("native", "opt"), got.tier_note
    assert got.thread_instructions == want.thread_instructions and np.array_equal(got.per_sm, want.per_sm)
    assert got_mem == want_mem


def test_auto_tiers_a_kernel_by_its_heat(monkeypatch):
    """Cold: the interpreter, saying why; warm: the quick level; hot: the optimized one; results equal."""
    import ptxforge as pf
    from ptxforge.emu.native import select
    from ptxforge.errors import LaunchError

    # a module of this test's own: its kernel's heat starts at zero
    k = pf.parse(corpus_module("vector_ops").to_ptx(), filename="tiering.ptx").kernel("vadd_f32")
    monkeypatch.setattr(select, "QUICK_BASE_MS", 5.0)  # (thresholds a few launches apart)
    monkeypatch.setattr(select, "QUICK_OP_MS", 0.0)
    n = 1000
    a, b = np.arange(n, dtype=np.float32), np.full(n, 0.5, np.float32)
    seen = []
    for _ in range(12):
        c = np.zeros(n, np.float32)
        r = k.launch(grid=(4,), block=(256,), args=[a, b, c, np.int32(n)],
                     options=EmulatorOptions(tier="auto", level="auto"))  # (whatever $PTXFORGE_NATIVE_LEVEL says)
        assert np.array_equal(c, a + b)
        seen.append((r.tier, r.level))
        if r.tier == "interp":
            assert "vadd_f32 is cold (about" in r.tier_note, r.tier_note
    tiers = [t for i, t in enumerate(seen) if i == 0 or seen[i - 1] != t]
    assert tiers == [("interp", ""), ("native", "quick"), ("native", "opt")], seen
    # a forced level wins over the heat, and does not make a cold kernel native; a bad one is named
    cold = pf.parse(corpus_module("vector_ops").to_ptx(), filename="cold.ptx").kernel("vadd_f32")
    r = cold.launch(grid=(4,), block=(256,), args=[a, b, np.zeros(n, np.float32), np.int32(n)],
                    options=EmulatorOptions(tier="auto", level="opt"))
    assert r.tier == "interp" and "is cold" in r.tier_note
    r = k.launch(grid=(4,), block=(256,), args=[a, b, np.zeros(n, np.float32), np.int32(n)],
                 options=EmulatorOptions(tier="auto", level="quick"))
    assert (r.tier, r.level) == ("native", "quick")
    with pytest.raises(LaunchError, match="level must be one of 'auto', 'quick', 'opt', not 'fast'"):
        EmulatorOptions(level="fast")


def test_fallback_names_the_first_unsupported_instruction():
    k = corpus_module("reductions").kernel("reduce_sum_f64_atomic")
    x, out = np.ones(256, np.float64), np.zeros(1, np.float64)
    r = k.launch(grid=(1,), block=(256,), args=[x, out, np.int32(256)], options=EmulatorOptions(tier="native"))
    assert r.tier == "interp"
    assert "reductions.sm_80.O3.ptx:" in r.tier_note and "add.f64" in r.tier_note, r.tier_note
    assert out[0] == 256.0  # the interpreter ran it
    r = k.launch(grid=(1,), block=(256,), args=[x, out, np.int32(256)], options=EmulatorOptions(tier="interp"))
    assert r.tier == "interp" and r.tier_note == ""  # asked for: nothing to explain


def test_tier_option_and_environment(monkeypatch):
    from ptxforge.errors import LaunchError

    with pytest.raises(LaunchError, match="tier must be one of 'auto', 'native', 'interp', not 'fast'"):
        EmulatorOptions(tier="fast")
    with pytest.raises(LaunchError, match="threads must be"):
        EmulatorOptions(threads=0)
    k = corpus_module("vector_ops").kernel("vadd_f32")
    a = np.ones(256, np.float32)
    monkeypatch.setenv("PTXFORGE_EMU_TIER", "interp")
    assert k.launch(grid=(1,), block=(256,), args=[a, a, a.copy(), np.int32(256)]).tier == "interp"
    monkeypatch.setenv("PTXFORGE_EMU_TIER", "native")
    assert k.launch(grid=(1,), block=(256,), args=[a, a, a.copy(), np.int32(256)]).tier == "native"
    monkeypatch.setenv("PTXFORGE_EMU_TIER", "quick")
    with pytest.raises(LaunchError, match=r"\$PTXFORGE_EMU_TIER must be one of"):
        k.launch(grid=(1,), block=(256,), args=[a, a, a.copy(), np.int32(256)])


def test_sanitizer_stays_on_the_interpreter():
    k = corpus_module("vector_ops").kernel("vadd_f32")
    a = np.ones(256, np.float32)
    r = k.launch(grid=(1,), block=(256,), args=[a, a, a.copy(), np.int32(256)],
                 options=EmulatorOptions(tier="native", sanitize=True))
    assert r.tier == "interp" and "checks watch the launch" in r.tier_note


@pytest.mark.parametrize("tier", ["interp", "native"])
def test_out_of_bounds_is_a_fault_on_both_tiers(tier):
    from ptxforge.emu.errors import MemoryFault

    k = corpus_module("vector_ops").kernel("vadd_f32")
    a, b = to_device(np.ones(256, np.float32)), to_device(np.ones(256, np.float32))
    c = to_device(np.zeros(200, np.float32))
    want = (r"vector_ops\.sm_80\.O3\.ptx:\d+: st\.global\.f32 .*: out-of-bounds global access of 4 bytes at "
            r"0x[0-9a-f]+ \((between allocations: )?0 bytes past the end of .*\) "
            r"by thread \(200,0,0\) block \(0,0,0\)$")
    with pytest.raises(MemoryFault, match=want) as e:
        k.launch(grid=(1,), block=(256,), args=[a, b, c, np.int32(256)], options=EmulatorOptions(tier=tier))
    assert e.value.address == c.address + 200 * 4
    # (what other warps stored before it may differ: the interpreter checks the whole wave's addresses first, the
    # native tier a warp's; test_native_vector.py checks the faulting warp stores nothing)


NEGATIVE_SHARED = """.version 8.0
.target sm_80
.address_size 64
.visible .entry t(.param .u64 p) {
    .reg .b32 %r<3>; .reg .b64 %rd<2>; .shared .align 4 .b8 sm[128];
    mov.u32 %r1, sm;
    add.s32 %r1, %r1, -8;
    ld.shared.u32 %r2, [%r1];
    ld.param.u64 %rd1, [p];
    st.global.u32 [%rd1], %r2;
    ret;
}
"""


@pytest.mark.parametrize("tier", ["interp", "native"])
def test_shared_address_below_the_window_is_worded_alike_on_both_tiers(tier):
    """A one-CTA launch has no other CTA to name: both tiers describe the block's own window."""
    from ptxforge.emu.errors import MemoryFault

    out = to_device(np.zeros(4, np.uint32))
    want = (r"<string>:8: ld\.shared\.u32 %r2, \[%r1\];: out-of-bounds shared access of 4 bytes at 0xfffffff8 "
            r"\(the shared window of this block is 128 bytes\) by thread \(0,0,0\) block \(0,0,0\)$")
    with pytest.raises(MemoryFault, match=want):
        ptxforge.parse(NEGATIVE_SHARED).kernel("t").launch(grid=(1,), block=(32,), args=[out],
                                                          options=EmulatorOptions(tier=tier))


def test_threads_give_identical_results():
    k = corpus_module("reductions").kernel("reduce_sum_warp")
    x = np.random.default_rng(3).random(1 << 14, np.float32)
    outs = []
    for threads in (1, 4):
        out = np.zeros(64, np.float32)
        r = k.launch(grid=(64,), block=(256,), args=[x, out, np.int32(x.size)],
                     options=EmulatorOptions(tier="native", threads=threads))
        assert r.tier == "native"
        outs.append((out.tobytes(), r.thread_instructions))
    assert outs[0] == outs[1]


def test_object_code_is_cached_on_disk_by_content(tmp_path, monkeypatch):
    from ptxforge.emu.launch import emu_device
    from ptxforge.emu.native import jit
    from ptxforge.emu.native.plan import native_plan

    monkeypatch.setenv("PTXFORGE_CACHE_DIR", str(tmp_path))
    m = corpus_module("vector_ops")
    layout, ops = emu_device().image(m).compiled(next(f for f in m.functions if f.name == "vadd_f32"))
    text = native_plan(layout, ops, (64, 1, 1)).ir_text + f"\n; {tmp_path}\n"  # a key of this test's own
    before = dict(jit.STATS)
    addr, level = jit.load(text, "quick")
    assert level == "quick" and jit.STATS["compiled_quick"] == before["compiled_quick"] + 1
    files = [f for f in tmp_path.rglob("*") if f.is_file()]
    assert [f.name for f in files] == [jit.cache_key(text, "quick")] and files[0].parent.parent.name == jit.KIND
    assert jit.cache_key(text, "quick") != jit.cache_key(text, "opt")  # the level is part of the key
    assert jit.load(text, "quick") == (addr, "quick") and jit.STATS["memory_hits"] == before["memory_hits"] + 1
    jit._LOADED.pop(jit.cache_key(text, "quick"))  # a new process: the object comes from disk, not LLVM
    assert jit.load(text, "quick")[1] == "quick"
    assert jit.STATS["disk_hits"] == before["disk_hits"] + 1
    assert jit.STATS["compiled"] == before["compiled"] + 1
    # the optimized level is compiled once; a quick request takes it from then on
    assert jit.load(text, "opt")[1] == "opt" and jit.STATS["compiled_opt"] == before["compiled_opt"] + 1
    assert jit.load(text, "quick")[1] == "opt"
    assert jit.STATS["compiled"] == before["compiled"] + 2


SPIN = """
.version 7.0
.target sm_80
.address_size 64
.visible .entry spin(.param .u64 out)
{
    .reg .b32 %r<3>;
    .reg .pred %p<2>;
    mov.u32 %r1, 0;
$L_top:
    add.s32 %r1, %r1, 1;
    setp.ne.s32 %p1, %r1, 0;
    @%p1 bra $L_top;
    ret;
}
"""


def test_a_launch_past_its_time_limit_is_stopped():
    import time

    import ptxforge as pf
    from ptxforge.emu.errors import TimeLimitExceeded

    k = pf.parse(SPIN, filename="spin.ptx").kernel("spin")  # 2^32 steps a thread: seconds, were it not stopped
    out = np.zeros(1, np.uint32)
    t = time.monotonic()
    with pytest.raises(TimeLimitExceeded, match=r"spin: kernel ran past its time limit of 0\.3 s \(time_limit_s\)"):
        k.launch(grid=(1,), block=(32,), args=[out], options=EmulatorOptions(tier="native", time_limit_s=0.3))
    assert time.monotonic() - t < 30


# warp 1 waits for a flag only warp 0 sets after the wait: never (a spin on memory nobody writes)
FLAG_SPIN = """
.version 7.0
.target sm_80
.address_size 64
.visible .entry flagspin(.param .u64 flag)
{
    .reg .b32 %r<4>;
    .reg .b64 %rd<2>;
    .reg .pred %p<3>;
    ld.param.u64 %rd1, [flag];
    mov.u32 %r1, %tid.x;
    setp.lt.u32 %p1, %r1, 32;
    @%p1 bra DONE;
WAIT:
    ld.volatile.global.u32 %r2, [%rd1];
    setp.eq.u32 %p2, %r2, 0;
    @%p2 bra WAIT;
DONE:
    ret;
}
"""


def test_a_spin_nobody_ends_is_stopped_by_the_watchdog_naming_where():
    import time

    import ptxforge as pf
    from ptxforge.emu.errors import WatchdogTimeout

    k = pf.parse(FLAG_SPIN, filename="flagspin.ptx").kernel("flagspin")
    flag = np.zeros(1, np.uint32)
    t = time.monotonic()
    with pytest.raises(WatchdogTimeout, match=r"flagspin: kernel made no progress for 0\.2 s \(watchdog_s\): block "
                       r"\(0,0,0\) keeps coming back to the same state .* warp 1 at flagspin\.ptx:\d+: "):
        k.launch(grid=(1,), block=(64,), args=[flag], options=EmulatorOptions(tier="native", watchdog_s=0.2))
    assert time.monotonic() - t < 30


def test_a_long_loop_whose_registers_change_is_not_stopped_by_the_watchdog():
    """2^24 turns of a loop that writes nothing but counts in a register: progress, as in the interpreter."""
    import ptxforge as pf

    text = SPIN.replace("setp.ne.s32 %p1, %r1, 0;", "setp.ne.s32 %p1, %r1, 16777216;")
    k = pf.parse(text, filename="count.ptx").kernel("spin")
    r = k.launch(grid=(1,), block=(32,), args=[np.zeros(1, np.uint32)],
                 options=EmulatorOptions(tier="native", watchdog_s=0.02))
    assert r.tier == "native" and r.thread_instructions == 32 * (2 + 3 * 16777216)


@pytest.mark.parametrize("kernel,dt", [("int_divmod", np.int32), ("int_divmod64", np.int64)])
def test_division_edge_cases_match(kernel, dt):
    """x/0, x%0 (all ones), INT_MIN/-1 (INT_MIN, remainder 0), negative operands: native = interpreter."""
    lo = np.iinfo(dt).min
    a = np.array([7, -7, 7, -7, lo, lo, lo, 0, 5, -1, lo, 123] * 3, dt)
    b = np.array([2, 2, -2, -2, -1, 1, 0, 0, 0, -1, lo, -7] * 3, dt)
    k = corpus_module("int_division").kernel(kernel)
    outs = {}
    for tier in ("interp", "native"):
        res = [np.zeros(a.size, dt), np.zeros(a.size, dt), np.zeros(a.size, dt), np.zeros(a.size, dt)]
        r = k.launch(grid=(1,), block=(64,), args=[a, b, *res, np.int32(a.size)], options=EmulatorOptions(tier=tier))
        assert r.tier == tier
        outs[tier] = [x.tobytes() for x in res]
    assert outs["native"] == outs["interp"]


def test_global_atomics_over_threads_give_identical_results():
    runs = [_run("histogram", "histogram_global", (16,), (256,), "native", threads=t) for t in (1, 4)]
    assert all(getattr(r, "tier", None) == "native" for r, _ in runs), runs
    assert runs[0][1] == runs[1][1]


def test_auto_keeps_a_kernel_that_may_wait_for_another_block_on_the_interpreter():
    import ptxforge as pf

    ptx = """
.version 7.0
.target sm_80
.address_size 64
.visible .entry wait_flag(.param .u64 p)
{
    .reg .pred %p<2>;
    .reg .b32 %r<3>;
    .reg .b64 %rd<2>;
    ld.param.u64 %rd1, [p];
    mov.u32 %r1, %ctaid.x;
    setp.eq.u32 %p1, %r1, 0;
    @%p1 bra SPIN;
    st.volatile.global.u32 [%rd1], 1;
    ret;
SPIN:
    ld.volatile.global.u32 %r2, [%rd1];
    setp.eq.u32 %p1, %r2, 0;
    @%p1 bra SPIN;
    ret;
}
"""
    k = pf.parse(ptx, filename="wait.ptx").kernel("wait_flag")
    flag = np.zeros(1, np.uint32)
    r = k.launch(grid=(2,), block=(32,), args=[flag], options=EmulatorOptions(tier="auto", level="quick"))
    assert r.tier == "interp" and "wait_flag may wait for another block (wait.ptx:17: ld.volatile.global.u32)" \
        in r.tier_note, r.tier_note
    assert flag[0] == 1


def _past_block_0(text: str) -> str:
    """`text` with block 0 returning at once (the launcher's timed first chunk), the other blocks as they were."""
    return text.replace(".reg .pred %p<", ".reg .b32 %cta;\n    .reg .pred %first;\n    .reg .pred %p<").replace(
        "{\n", "{\n    mov.u32 %cta, %ctaid.x;\n    setp.eq.u32 %first, %cta, 0;\n    @%first ret;\n", 1)


def test_limits_stop_every_worker_of_a_shared_launch(monkeypatch):
    """Blocks 1.. spread over the caller and a helper (chunks of a block): the time limit and the watchdog stop
    them all."""
    import time

    import ptxforge as pf
    from ptxforge.emu.errors import TimeLimitExceeded, WatchdogTimeout
    from ptxforge.emu.native import launcher
    from ptxforge.emu.native.team import team

    monkeypatch.setattr(launcher, "CHUNK_S", 0.0)
    launches = team().launches
    spin = pf.parse(_past_block_0(SPIN), filename="spin.ptx").kernel("spin")
    t = time.monotonic()
    with pytest.raises(TimeLimitExceeded, match=r"spin: kernel ran past its time limit of 0\.3 s"):
        spin.launch(grid=(8,), block=(32,), args=[np.zeros(1, np.uint32)],
                    options=EmulatorOptions(tier="native", threads=2, time_limit_s=0.3))
    flagspin = pf.parse(_past_block_0(FLAG_SPIN), filename="flagspin.ptx").kernel("flagspin")
    with pytest.raises(WatchdogTimeout, match=r"flagspin: kernel made no progress for 0\.2 s \(watchdog_s\): block "
                       r"\([1-7],0,0\) keeps coming back to the same state .* warp 1 at flagspin\.ptx:\d+: "):
        flagspin.launch(grid=(8,), block=(64,), args=[np.zeros(1, np.uint32)],
                        options=EmulatorOptions(tier="native", threads=2, watchdog_s=0.2))
    assert time.monotonic() - t < 60 and team().launches == launches + 2
