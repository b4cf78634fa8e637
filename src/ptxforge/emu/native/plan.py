"""Which tier runs a launch, and whether a kernel can run natively (else the first instruction that cannot).

The tier comes from the launch option (`tier=`), else $PTXFORGE_EMU_TIER, else DEFAULT_TIER. "native" runs a
launch natively where the kernel and the launch allow it and falls back to the interpreter (saying why)
elsewhere; "auto" (the default) does too for a kernel hot enough to repay a compile (select.py), and interprets
the others; "interp" always interprets. The compile level of a native launch (jit.py: "quick" or "opt") comes
from the `level=` option, else $PTXFORGE_NATIVE_LEVEL, else "auto" (select.py picks by the kernel's heat).
"""

from __future__ import annotations

import weakref
from typing import TYPE_CHECKING, Any

from ptxforge import environment
from ptxforge.emu.errors import LaunchError
from ptxforge.emu.native.codegen import BlockGen
from ptxforge.emu.native.lower import NotNative

if TYPE_CHECKING:
    from ptxforge.emu.program import Layout

TIERS = ("auto", "native", "interp")
ENV = "PTXFORGE_EMU_TIER"
DEFAULT_TIER = "auto"
LEVELS = ("auto", "quick", "opt")
LEVEL_ENV = "PTXFORGE_NATIVE_LEVEL"


def requested_tier(option: str | None = None) -> str:
    """The tier asked for: `option`, else $PTXFORGE_EMU_TIER, else DEFAULT_TIER (a LaunchError for anything else)."""
    tier = option if option is not None else environment.emu_tier() or DEFAULT_TIER
    if tier not in TIERS:
        where = "tier" if option is not None else f"${ENV}"
        raise LaunchError(f"{where} must be one of {', '.join(map(repr, TIERS))}, not {tier!r}")
    return tier


def requested_level(option: str | None = None) -> str:
    """The compile level asked for: `option`, else $PTXFORGE_NATIVE_LEVEL, else "auto" (a LaunchError for
    anything else)."""
    level = option if option is not None else environment.native_level() or "auto"
    if level not in LEVELS:
        where = "level" if option is not None else f"${LEVEL_ENV}"
        raise LaunchError(f"{where} must be one of {', '.join(map(repr, LEVELS))}, not {level!r}")
    return level


class NativePlan:
    """A kernel at one block shape: the LLVM IR of its block function, or why it cannot run natively.

    The IR's text (`ir_text`) is printed at its first use (printing is half of building it in Python): a plan
    asked only whether the kernel runs natively (`native`) never prints it."""

    def __init__(self, module: Any, reason: str = ""):
        self._module = module
        self._text: str | None = None
        self.reason = reason  # "file:line: instruction: why" of the first instruction the tier cannot run
        self.choices: dict[tuple[str, bool], Any] = {}  # (level, exact) -> select.py's Choice to run it so

    @property
    def native(self) -> bool:
        return self._module is not None

    @property
    def ir_text(self) -> str | None:
        if self._text is None and self._module is not None:
            self._text = str(self._module)
            self._module = True  # (the IR objects are freed; the text stands for them)
        return self._text


_PLANS: weakref.WeakKeyDictionary[Layout, dict[tuple[int, int, int], NativePlan]] = weakref.WeakKeyDictionary()


def native_plan(layout: Layout, ops: list[Any], block: tuple[int, int, int]) -> NativePlan:
    """The plan for `layout`'s kernel at `block` (built once per layout and shape)."""
    per = _PLANS.setdefault(layout, {})
    hit = per.get(block)
    if hit is None:
        hit = per[block] = _build(layout, ops, block)
    return hit


def _build(layout: Layout, ops: list[Any], block: tuple[int, int, int]) -> NativePlan:
    gen = None
    try:
        gen = BlockGen(layout, ops, block)
        return NativePlan(gen.build())
    except NotNative as e:
        pc = e.pc if e.pc is not None else getattr(gen, "current_pc", None)
        if pc is None:
            return NativePlan(None, str(e))
        op = ops[pc]
        return NativePlan(None, f"{op.where}: {op.text}: {e}")
