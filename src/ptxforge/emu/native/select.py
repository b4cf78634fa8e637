"""The launch path's hook: pick the tier for one launch and run it natively when picked.

The native tier runs a lone device's plain launch: no checks (sanitizer, watchdog load watch), no node or
cluster, no cooperative grid, and a kernel whose every instruction it supports. Otherwise the interpreter
runs it and the stats say why (`tier_note`).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from ptxforge.emu.native import launcher
from ptxforge.emu.native.plan import NativePlan, native_plan, requested_tier

if TYPE_CHECKING:
    from ptxforge.emu.machine import Machine


def choose_tier(m: Machine, option: str | None, *, checks: bool, cooperative: bool,
                node: Any) -> tuple[NativePlan | None, str]:
    """(the native plan to run, "") or (None, why the interpreter runs it; "" when it was asked for)."""
    tier = requested_tier(option)
    if tier == "interp":
        return None, ""
    why = ("checks watch the launch (the sanitizer or your own)" if checks else
           "launches on a Node's GPUs stay on the interpreter" if node is not None else
           "cooperative launches stay on the interpreter" if cooperative else
           "thread-block clusters stay on the interpreter" if m.csize != 1 else "")
    if why:
        return None, f"the native tier was not used: {why}"
    bx, by, bz = m.block
    plan = native_plan(m.layout, m.ops, (bx, by, bz))
    if plan.ir_text is None:
        return None, f"the native tier cannot run {m.layout.kernel_func.name}: {plan.reason}"
    return plan, ""


def run_native(m: Machine, plan: NativePlan, threads: int | None) -> dict:
    """Run the launch `m` natively (see launcher.py); its stats."""
    return launcher.run_native(m, plan, threads)
