"""Reference mode (`options={"reference": True}`, PTXFORGE_EMU_REFERENCE=1) runs every instruction through its
semantics function with no fast path; fast mode must agree with it bit for bit on the corpus kernels (the
sanitizer's launch table) and the conformance kernels: output memory, thread-instruction counts, per-SM counts
and sanitizer reports."""

from __future__ import annotations

import numpy as np
import pytest
from conformance import hw_ops
from emu_corpus import corpus_module
from sanitizer.corpus_launches import LAUNCHES
from sanitizer.san_helpers import launch_sanitized

import ptxforge as pf
from ptxforge.emu import compact, index_runs, ramps
from ptxforge.emu import memory as M
from ptxforge.environment import EnvironmentVariableError
from ptxforge.errors import LaunchError
from ptxforge.runtime.launch_config import EmulatorOptions


def _vadd():
    """The shipped vadd (`pf.example_path("vadd.ptx")`, the README tour's kernel), a fresh module each time."""
    return pf.parse_file(pf.example_path("vadd.ptx")).kernel("vadd")


def _copy(args):
    return [a.copy() if isinstance(a, np.ndarray) else a for a in args]


def _run(kernel, grid, block, args, shared, reference):
    res = kernel.launch(grid=grid, block=block, args=args, shared_mem=shared, device="emu",
                        options={"reference": reference})
    return res


def _same_launch(kernel, grid, block, make_args, shared=0):
    """Run fast and reference on equal inputs; assert that memory, counts and per-SM counts agree."""
    base = make_args()
    fast_args, ref_args = _copy(base), _copy(base)
    fast = _run(kernel, grid, block, fast_args, shared, False)
    ref = _run(kernel, grid, block, ref_args, shared, True)
    assert (fast.mode, ref.mode) == ("fast", "reference")
    for i, (x, y) in enumerate(zip(fast_args, ref_args, strict=True)):
        if isinstance(x, np.ndarray):
            assert x.tobytes() == y.tobytes(), f"argument {i} differs between fast and reference mode"
    assert fast.thread_instructions == ref.thread_instructions
    np.testing.assert_array_equal(fast.per_sm, ref.per_sm)
    return fast, ref


def _id(e):
    return f"{e[0]}:{e[1]}"


SAMPLE = LAUNCHES[::9]  # a spread over the table (the whole table runs in the slow test)


@pytest.mark.parametrize("entry", SAMPLE, ids=_id)
def test_corpus_sample_agrees(entry):
    name, kernel, grid, block, args, shared = entry[:6]
    _same_launch(corpus_module(name).kernel(kernel), grid, block, args, shared)


@pytest.mark.slow
@pytest.mark.parametrize("entry", [e for e in LAUNCHES if e not in SAMPLE], ids=_id)
def test_whole_corpus_agrees(entry):
    name, kernel, grid, block, args, shared = entry[:6]
    _same_launch(corpus_module(name).kernel(kernel), grid, block, args, shared)


def _conformance(case, monkeypatch):
    ins = case.make_inputs(hw_ops.REFERENCE_N, hw_ops.case_rng(case.name))
    _, fast = hw_ops.run_case(case, "emu", ins=ins)
    monkeypatch.setenv("PTXFORGE_EMU_REFERENCE", "1")  # the environment's way in, for launches that name none
    _, ref = hw_ops.run_case(case, "emu", ins=ins)
    assert fast.tobytes() == ref.tobytes(), hw_ops.mismatch_report(case.name, ins, fast, ref, "fast", "reference")


CONFORMANCE = hw_ops.EXACT + hw_ops.APPROX


@pytest.mark.parametrize("case", CONFORMANCE[::12], ids=lambda c: c.name)
def test_conformance_sample_agrees(case, monkeypatch):
    _conformance(case, monkeypatch)


@pytest.mark.slow
@pytest.mark.parametrize("case", [c for i, c in enumerate(CONFORMANCE) if i % 12], ids=lambda c: c.name)
def test_all_conformance_kernels_agree(case, monkeypatch):
    _conformance(case, monkeypatch)


@pytest.mark.parametrize("name", ["oob_global_read", "missing_sync", "uninit_shared", "bad_shfl_mask"])
def test_sanitizer_reports_agree(name):
    rng = np.random.default_rng(3)
    shapes = {"oob_global_read": ((4,), (256,), lambda: [rng.standard_normal(1000).astype(np.float32),
                                                         np.zeros(1000, np.float32), np.int32(1000)]),
              "missing_sync": ((2,), (256,), lambda: [rng.standard_normal(512).astype(np.float32),
                                                      np.zeros(512, np.float32)]),
              "uninit_shared": ((2,), (256,), lambda: [rng.standard_normal(512).astype(np.float32),
                                                       np.zeros(512, np.float32)]),
              "bad_shfl_mask": ((1,), (64,), lambda: [np.arange(64, dtype=np.int32), np.zeros(64, np.int32)])}
    grid, block, make = shapes[name]
    args = make()
    fast = launch_sanitized(name, grid, block, _copy(args))
    ref = launch_sanitized(name, grid, block, _copy(args), reference=True)
    assert fast is not None and ref is not None
    assert [(r.kind, r.thread, r.block, r.instruction, r.count) for r in fast.reports] == \
        [(r.kind, r.thread, r.block, r.instruction, r.count) for r in ref.reports]


def test_reference_mode_takes_no_fast_path(monkeypatch):
    """Every fast-path entry point is watched: a reference launch calls none that does work, a fast one does."""
    used: list[str] = []
    for mod, name in ((ramps, "global_index"), (ramps, "lazy_add"), (M, "run_start"), (M, "shared_elements"),
                      (index_runs, "of")):
        real = getattr(mod, name)

        def spy(*a, _real=real, _name=name, **kw):
            r = _real(*a, **kw)
            if r is not None:
                used.append(_name)
            return r
        monkeypatch.setattr(mod, name, spy)
    real_plan = compact.plan_for
    monkeypatch.setattr(compact, "plan_for", lambda m: used.append("plan") or real_plan(m))
    k = _vadd()
    n = 1 << 14
    a, b = np.arange(n, dtype=np.float32), np.ones(n, np.float32)

    def launch(reference):
        used.clear()
        c = np.zeros(n, np.float32)
        res = k.launch(grid=(n // 256,), block=(256,), args=[a, b, c, np.int32(n)], device="emu",
                       options=EmulatorOptions(reference=reference))
        np.testing.assert_array_equal(c, a + b)
        return res, set(used)
    fast, fast_used = launch(False)
    ref, ref_used = launch(True)
    assert {"global_index", "lazy_add"} <= fast_used or "run_start" in fast_used, fast_used
    assert not ref_used - {"plan"}, ref_used
    assert ref.thread_instructions == fast.thread_instructions and ref.mode == "reference"

    red = corpus_module("reductions").kernel("reduce_sum_shared")  # shared memory: element lists, index runs
    x = np.random.default_rng(5).standard_normal(64 * 256).astype(np.float32)
    seen = []
    for reference in (False, True):
        used.clear()
        out = np.zeros(64, np.float32)
        red.launch(grid=(64,), block=(256,), args=[x, out, np.int32(x.size)], device="emu",
                   options={"reference": reference})
        np.testing.assert_allclose(out, x.reshape(64, 256).sum(1), rtol=1e-4, atol=1e-4)
        seen.append(set(used))
    assert seen[0] & {"shared_elements", "of"}, seen[0]
    assert not seen[1] - {"plan"}, seen[1]


def test_reference_ops_use_the_semantics_functions(monkeypatch):
    """Compiled for reference, add/mul.wide/mad.lo/add.f32 call semantics.integer / floating; fast they do not."""
    from ptxforge.emu.semantics import floating, integer
    calls: list[str] = []
    for mod, name in ((integer, "add"), (integer, "mul"), (integer, "mad"), (floating, "add")):
        real = getattr(mod, name)
        monkeypatch.setattr(mod, name, lambda *a, _r=real, _n=f"{mod.__name__}.{name}", **kw:
                            calls.append(_n) or _r(*a, **kw))
    k = _vadd()
    n = 512
    a, b, c = np.ones(n, np.float32), np.ones(n, np.float32), np.zeros(n, np.float32)
    k.launch(grid=(2,), block=(256,), args=[a, b, c, np.int32(n)], device="emu")
    assert not calls
    k.launch(grid=(2,), block=(256,), args=[a, b, c, np.int32(n)], device="emu", options={"reference": True})
    assert {"ptxforge.emu.semantics.integer.add", "ptxforge.emu.semantics.integer.mul",
            "ptxforge.emu.semantics.integer.mad", "ptxforge.emu.semantics.floating.add"} <= set(calls)
    np.testing.assert_array_equal(c, 2)


def test_environment_variable_turns_it_on_and_is_checked(monkeypatch):
    k = _vadd()
    args = [np.ones(256, np.float32), np.ones(256, np.float32), np.zeros(256, np.float32), np.int32(256)]
    assert k.launch(grid=(1,), block=(256,), args=args, device="emu").mode == "fast"
    monkeypatch.setenv("PTXFORGE_EMU_REFERENCE", "1")
    assert k.launch(grid=(1,), block=(256,), args=args, device="emu").mode == "reference"
    monkeypatch.setenv("PTXFORGE_EMU_REFERENCE", "yes please")
    with pytest.raises(EnvironmentVariableError, match="PTXFORGE_EMU_REFERENCE='yes please': expected 0 or 1"):
        k.launch(grid=(1,), block=(256,), args=args, device="emu")


def test_options_are_checked():
    with pytest.raises(LaunchError, match="reference must be True or False, got 'yes'"):
        EmulatorOptions(reference="yes")  # type: ignore[arg-type]
    k = _vadd()
    args = [np.ones(32, np.float32), np.ones(32, np.float32), np.zeros(32, np.float32), np.int32(32)]
    with pytest.raises(LaunchError, match="unknown emulator option 'referense'; the options are sanitize, "):
        k.launch(grid=(1,), block=(32,), args=args, options={"referense": True})
    with pytest.raises(LaunchError, match="options must be an EmulatorOptions or a dict"):
        k.launch(grid=(1,), block=(32,), args=args, options=[("reference", True)])  # type: ignore[arg-type]
    res = k.launch(grid=(1,), block=(32,), args=args, options={"reference": True})  # an emulator-only option
    assert (res.device, res.mode) == ("emu", "reference")


def test_f64_nan_results_keep_the_input_payload_in_fast_mode():
    """Found by comparing the modes: add.rn.f64's inline path made every NaN 0x7fffffffffffffff, where the
    H200 (and semantics.floating) keep the first NaN input's payload, quieted."""
    case = next(c for c in hw_ops.EXACT if c.name == "add.rn.f64")
    x = np.array([np.nan, 1.0, -np.inf, 2.0], np.float64)
    x[0] = np.uint64(0xFFF9D0373A4364D7).view(np.float64)  # a signalling-looking payload, sign set
    y = np.array([1.0, np.nan, np.inf, 3.0], np.float64)
    ins = [np.tile(x, 256), np.tile(y, 256)]
    _, out = hw_ops.run_case(case, "emu", ins=ins)
    got = out.view(np.uint64)[:4]
    assert [hex(v) for v in got] == ["0xfff9d0373a4364d7", "0x7ff8000000000000", "0x7fffffffffffffff",
                                     hex(np.float64(5.0).view(np.uint64))]
