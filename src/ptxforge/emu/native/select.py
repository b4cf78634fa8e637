"""The launch path's hook: pick the tier and compile level for one launch, and run it natively when picked.

The native tier runs a lone device's plain launch: no checks (sanitizer, watchdog load watch), no node or
cluster, no cooperative grid, and a kernel whose every instruction it supports. Otherwise the interpreter
runs it and the stats say why (`tier_note`).

Tiering, as a JIT does it: each kernel (its layout, per loaded module) keeps its heat, the interpreter time its
launches cost or would have cost, estimated from counts (steps and thread-instructions, not the clock, so the
tier chosen is the same in every run); a launch is estimated before it runs from the kernel's static
instructions, its threads and its waves. Under "auto", a kernel whose heat with this launch stays under what a
quick compile would cost runs on the interpreter (no IR is built for it); past that it runs natively at the
quick level, and past OPT_FACTOR times that at the optimized level (compiled once, cached). "native" skips
the interpreter step. A launch at the quick level adds its own wall time to the heat as well (the quick
code is up to 5.6x slower than the optimized code, slower than the interpreter on a tiled matmul), so a kernel
that runs long there moves on soon; that reading of the clock only ever changes the level, which gives the same
bits, never the tier. A forced level (`level=`, $PTXFORGE_NATIVE_LEVEL) sets the level of a native launch in
place of the heat, never whether the launch is native.
"""

from __future__ import annotations

import weakref
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from ptxforge.emu.native import launcher
from ptxforge.emu.native.plan import NativePlan, native_plan, requested_level, requested_tier

if TYPE_CHECKING:
    from ptxforge.emu.machine import Machine
    from ptxforge.emu.program import Layout

# the interpreter's cost model (ms; fitted on the corpus kernels of tests/emu/test_native_tier.py, within ~3x)
INTERP_LAUNCH_MS = 1.0  # a launch's fixed cost
INTERP_STEP_MS = 0.03  # a warp-instruction step over a wave's lanes
INTERP_TI_MS = 0.4e-6  # a thread-instruction
# the quick level's compile cost (ms; lowering in Python and LLVM at -O0: 0.45-1.1 ms per PTX instruction of the
# kernel on one core of a 2-core AVX-512 VM, benchmarks/native_compile_cost.py, 2026-12-02; fitted here for a
# machine 2.5x slower, as the interpreter's model above was); the optimized level costs OPT_FACTOR times that
QUICK_BASE_MS = 20.0
QUICK_OP_MS = 1.5
OPT_FACTOR = 4.0


@dataclass
class Heat:
    """A kernel's launches so far: their estimated interpreter cost (ms) and the level its code was loaded at
    per block shape."""

    spent_ms: float = 0.0
    launches: int = 0
    levels: dict[tuple[int, int, int], str] = field(default_factory=dict)


_HEAT: weakref.WeakKeyDictionary[Layout, Heat] = weakref.WeakKeyDictionary()


def forget_heat() -> None:
    """Make every kernel cold again (the next launches are interpreted until their heat builds up): for tests
    and benchmarks that must not depend on the launches before them."""
    _HEAT.clear()


def heat(layout: Layout) -> Heat:
    """The heat of `layout`'s kernel (kept while the layout lives: a module unloaded starts cold again)."""
    h = _HEAT.get(layout)
    if h is None:
        h = _HEAT[layout] = Heat()
    return h


_WAITS: weakref.WeakKeyDictionary[Layout, str] = weakref.WeakKeyDictionary()
_ORDERED = ("volatile", "acquire", "relaxed")


def cross_block_wait(layout: Layout, ops: list[Any]) -> str:
    """The first instruction of the kernel by which a block may wait on another block ("" if none): an ordered
    (volatile, acquire, relaxed) load of global or generic memory (a flag), a lock's atomic (cas, exch), or
    nanosleep. The native tier runs a worker's blocks one after another, so such a wait may never end there;
    "auto" keeps these kernels on the interpreter, whose waves run every resident block together."""
    hit = _WAITS.get(layout)
    if hit is None:
        fl = layout.functions[layout.kernel_func.name]
        hit = ""
        for pc in range(fl.entry, fl.end):
            ins = layout.placed[pc].ins
            sx = ins.suffixes
            if ((ins.opcode == "ld" and "shared" not in sx and any(o in sx for o in _ORDERED))
                    or (ins.opcode == "atom" and ("cas" in sx or "exch" in sx)) or ins.opcode == "nanosleep"):
                hit = f"{ops[pc].where}: {ins.mnemonic}"
                break
        _WAITS[layout] = hit
    return hit


def static_ops(m: Machine) -> int:
    fl = m.layout.functions[m.layout.kernel_func.name]
    return max(1, fl.end - fl.entry)


def interp_ms(steps: float, thread_instructions: float) -> float:
    """The interpreter's estimated cost of a launch of `steps` warp steps and that many thread-instructions."""
    return INTERP_LAUNCH_MS + INTERP_STEP_MS * steps + INTERP_TI_MS * thread_instructions


def predicted_ms(m: Machine) -> float:
    """This launch's interpreter cost estimated before it runs: every static instruction once per thread."""
    ops = static_ops(m)
    waves = -(-m.nblocks // m.resident)
    return interp_ms(waves * ops, m.nblocks * m.threads * ops)


def quick_compile_ms(m: Machine) -> float:
    return QUICK_BASE_MS + QUICK_OP_MS * static_ops(m)


@dataclass(frozen=True)
class Choice:
    """What runs a launch: a native plan at a level, or the interpreter (plan None) and why (`note`)."""

    plan: NativePlan | None
    level: str = ""
    note: str = ""
    exact: bool = False  # the level was forced: run exactly it (else the optimized code serves a quick level)


def choose_tier(m: Machine, option: str | None, *, checks: bool, cooperative: bool, node: Any,
                level: str | None = None) -> Choice:
    """The tier and level for the launch `m`: a native plan and its level, or the interpreter and why ("" when
    the interpreter was asked for)."""
    tier = requested_tier(option)
    if tier == "interp":
        return _INTERP
    forced = requested_level(level)
    why = ("checks watch the launch (the sanitizer or your own)" if checks else
           "launches on a Node's GPUs stay on the interpreter" if node is not None else
           "cooperative launches stay on the interpreter" if cooperative else
           "thread-block clusters stay on the interpreter" if m.csize != 1 else "")
    if why:
        return Choice(None, note=f"the native tier was not used: {why}")
    h = heat(m.layout)
    bx, by, bz = m.block
    block = (bx, by, bz)
    hot = h.spent_ms + predicted_ms(m)
    quick = quick_compile_ms(m)
    loaded = h.levels.get(block)
    wait = cross_block_wait(m.layout, m.ops) if tier == "auto" else ""
    if wait:
        return Choice(None, note=f"the native tier was not used: {m.layout.kernel_func.name} may wait for another "
                                 f"block ({wait}), which only the interpreter's waves guarantee; tier='native' "
                                 f"runs it natively")
    if tier == "auto" and loaded is None and hot < quick:  # (a forced level does not decide the tier)
        return Choice(None, note=f"the native tier was not used: {m.layout.kernel_func.name} is cold (about "
                                 f"{hot:.0f} ms of interpreting so far, a compile costs about {quick:.0f} ms)")
    plan = native_plan(m.layout, m.ops, block)
    if not plan.native:
        return Choice(None, note=f"the native tier cannot run {m.layout.kernel_func.name}: {plan.reason}")
    if forced != "auto":
        return _native_choice(plan, forced, True)
    return _native_choice(plan, "opt" if loaded == "opt" or hot >= OPT_FACTOR * quick else "quick", False)


_INTERP = Choice(None)


def _native_choice(plan: NativePlan, level: str, exact: bool) -> Choice:
    """The Choice of running `plan` at `level` (made once per plan, level and exactness: a launch's choice is one
    of a few)."""
    hit = plan.choices.get((level, exact))
    if hit is None:
        hit = plan.choices[(level, exact)] = Choice(plan, level, exact=exact)
    return hit


def run_native(m: Machine, choice: Choice, threads: int | None, params: bytes | None = None) -> dict:
    """Run the launch `m` natively (see launcher.py) with the packed parameters `params` (None: the machine's);
    its stats, with the level that ran."""
    assert choice.plan is not None
    stats = launcher.run_native(m, choice.plan, threads, choice.level, choice.exact, params)
    h = heat(m.layout)
    bx, by, bz = m.block
    h.levels[(bx, by, bz)] = stats["level"]
    lanes = max(1, min(m.nblocks, m.resident) * m.threads)
    h.spent_ms += interp_ms(stats["thread_instructions"] / lanes, stats["thread_instructions"])
    if stats["level"] == "quick":  # the quick code's own time too: it runs 1.2-5.6x slower than the optimized
        h.spent_ms += 1000 * stats["wall_s"]  # (a clock reading: it may move a kernel to "opt" a launch sooner)
    h.launches += 1
    return stats


def account_interp(m: Machine, stats: dict) -> None:
    """Add an interpreted launch of `m` (its stats) to its kernel's heat."""
    h = heat(m.layout)
    h.spent_ms += interp_ms(stats.get("steps", 0), stats.get("thread_instructions", 0))
    h.launches += 1
