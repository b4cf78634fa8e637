"""The native tier on the recorded H200 results and the corpus: every kernel it claims (a native plan) runs
there (`tier == "native"`) and gives the H200's bits (one-instruction and warp kernels) or the interpreter's
memory byte for byte (corpus kernels, random device memory); a kernel it does not claim falls back naming
the instruction. The interpreter's side of the same recordings is test_hw_reference.py. The corpus sweep
runs each source's sm_80 build in the suite; every other build (265 modules, minutes of the interpreter's time)
only with PTXFORGE_NATIVE_SWEEP=1."""

from __future__ import annotations

import glob
import os
from pathlib import Path

import numpy as np
import pytest
from conformance import hw_ops

from ptxforge.emu.errors import EmulatorError
from ptxforge.emu.launch import emu_device
from ptxforge.emu.native.plan import native_plan
from ptxforge.errors import LaunchError
from ptxforge.runtime.buffers import to_device
from ptxforge.runtime.launch_config import EmulatorOptions

pytest.importorskip("llvmlite")

HW = np.load(Path(__file__).resolve().parents[1] / "conformance" / "data" / "hw_reference_h200.npz")
CORPUS = Path(__file__).resolve().parents[1] / "corpus" / "ptx"
# at least this many of the recorded cases run natively (what the tier covers today: a regression guard)
MIN_NATIVE_EXACT, MIN_NATIVE_WARP = 26, 13


def _plan(kernel):
    layout, ops = emu_device().image(kernel.module).compiled(kernel.function)
    return native_plan(layout, ops, (256, 1, 1))


def _native_exact(case) -> bool:
    return _plan(hw_ops._kernel(case.ptx(), case.name)).ir_text is not None


@pytest.mark.parametrize("case", hw_ops.EXACT, ids=lambda c: c.name)
def test_instruction_on_the_native_tier_matches_the_h200(case):
    k = hw_ops._kernel(case.ptx(), case.name)
    plan = _plan(k)
    if plan.ir_text is None:
        assert f"{case.name}.ptx:" in plan.reason and "not in the native tier" in plan.reason, plan.reason
        return
    ins = case.make_inputs(hw_ops.REFERENCE_N, hw_ops.case_rng(case.name))
    n = len(ins[0])
    out = hw_ops.poisoned_output(case, n)
    pad = [np.zeros(n, np.uint32)] * (3 - len(ins))
    r = k.launch(grid=(n // 256,), block=(256,), args=[*ins, *pad, out, np.uint32(n)],
                 options=EmulatorOptions(tier="native"))
    assert r.tier == "native", r.tier_note
    want = HW[f"op/{case.name}"]
    assert bytes(HW[f"in/{case.name}"]).decode() == hw_ops.digest(ins)
    assert hw_ops.same_bits(out, want).all(), hw_ops.mismatch_report(case.name, ins, out, want)


@pytest.mark.parametrize("name", sorted(hw_ops.WARP_BODIES))
def test_warp_operation_on_the_native_tier_matches_the_h200(name):
    k = hw_ops._kernel(hw_ops.warp_case_ptx(name), name)
    plan = _plan(k)
    if plan.ir_text is None:
        assert "not in the native tier" in plan.reason, plan.reason
        return
    a, b = hw_ops.warp_inputs(name, hw_ops.REFERENCE_N)
    out = np.full(len(a), 0xA5A5A5A5, np.uint32)
    r = k.launch(grid=(len(a) // 256,), block=(256,), args=[a, b, out, np.uint32(len(a))],
                 options=EmulatorOptions(tier="native"))
    assert r.tier == "native", r.tier_note
    want = HW[f"warp/{name}"]
    assert (out == want).all(), hw_ops.mismatch_report(name, (a, b), out, want)


def test_the_native_tier_covers_the_recorded_cases_it_did():
    exact = sum(_native_exact(c) for c in hw_ops.EXACT)
    warp = sum(_plan(hw_ops._kernel(hw_ops.warp_case_ptx(n), n)).ir_text is not None for n in hw_ops.WARP_BODIES)
    assert exact >= MIN_NATIVE_EXACT and warp >= MIN_NATIVE_WARP, (exact, warp)


# ---------------------------------------------------------------------------------------------- the corpus
BUF = 1 << 16
GRID = (1,)  # (one block: kernels launched on shapes they were not written for would race between blocks)


def _args(kernel):
    rng = np.random.default_rng(7)
    out = []
    for p in kernel.function.params:
        t = p.type
        if t in (".u64", ".b64", ".s64"):
            out.append(to_device(rng.integers(0, 256, BUF, dtype=np.uint8)))
        elif t in (".f32", ".f64"):
            out.append((np.float32 if t == ".f32" else np.float64)(1.5))
        elif t[1] in "usb" and t[2:] in ("8", "16", "32"):
            out.append(np.dtype(("i" if t[1] == "s" else "u") + str(int(t[2:]) // 8)).type(8))
        else:
            return None
    return out


def _run(kernel, tier):
    args = _args(kernel)
    try:
        r = kernel.launch(grid=GRID, block=(128,), args=args, shared_mem=2048,
                          options=EmulatorOptions(tier=tier, threads=1, time_limit_s=60))
        outcome: object = r
    except (EmulatorError, LaunchError) as e:
        outcome = e
    mem = [a.to_host().tobytes() for a in args if hasattr(a, "to_host")]
    for a in args:
        if hasattr(a, "free"):
            a.free()
    return outcome, mem


def _modules(pattern: str) -> list[str]:
    return sorted(str(Path(p).relative_to(CORPUS)) for p in glob.glob(str(CORPUS / pattern)))


# ep_style_asm's kernels wait on flags that other GPUs set: alone on one GPU they spin (making progress: they
# read the clock) until the time limit on both tiers, four minutes of the suite for nothing either tier decides
SPINS_FOR_PEERS = "ep_style_asm"
SM80 = [m for m in _modules("cuda/*.sm_80.O3.ptx") if SPINS_FOR_PEERS not in m]
OTHERS = [m for m in _modules("*/*.ptx") if m not in SM80 and SPINS_FOR_PEERS not in m]
SWEEP_OTHERS = os.environ.get("PTXFORGE_NATIVE_SWEEP") == "1"


def _check_module(rel: str) -> None:
    import ptxforge as pf

    path = CORPUS / rel
    m = pf.parse(path.read_text(), filename=path.name)
    for f in m.functions:
        if not f.is_kernel:
            continue
        k = m.kernel(f.name)
        try:
            layout, ops = emu_device().image(m).compiled(f)
        except EmulatorError:
            continue  # (the interpreter's own tests cover what it refuses)
        if native_plan(layout, ops, (128, 1, 1)).ir_text is None or _args(k) is None:
            continue
        want, want_mem = _run(k, "interp")
        got, got_mem = _run(k, "native")
        if isinstance(want, Exception) or isinstance(got, Exception):
            assert type(got) is type(want), f"{f.name}: interpreter {want!r}; native {got!r}"
            continue
        assert got.tier == "native", f"{f.name}: {got.tier_note}"
        assert got.thread_instructions == want.thread_instructions, f.name
        assert got_mem == want_mem, f"{f.name}: the memory differs"


@pytest.mark.slow  # (the interpreter's side takes minutes; test_native_tier.py keeps 29 kernels in the fast suite)
@pytest.mark.parametrize("rel", SM80)
def test_corpus_module_on_both_tiers(rel):
    _check_module(rel)


@pytest.mark.slow
@pytest.mark.skipif(not SWEEP_OTHERS, reason="set PTXFORGE_NATIVE_SWEEP=1 to run every other build of the corpus "
                    "on both tiers (265 modules; the sm_80 builds run above)")
@pytest.mark.parametrize("rel", OTHERS)
def test_corpus_module_on_both_tiers_other_builds(rel):
    _check_module(rel)
