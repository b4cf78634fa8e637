"""The native tier: a kernel's PTX compiled with LLVM (llvmlite) into machine code that runs whole blocks.

`plan.py` decides whether a kernel can run here (the first instruction it cannot is named), `lower.py` turns
one PTX instruction into scalar LLVM IR for one lane, `codegen.py` builds the block function (warps of 32
lanes with per-lane pcs, lowest pc first, barriers as switches between the block's warps), `jit.py` compiles
it and caches the object code on disk by content, and `launcher.py` spreads the blocks over threads.
"""

from __future__ import annotations

from ptxforge.emu.native.plan import TIERS, NativePlan, native_plan, requested_tier

__all__ = ["TIERS", "NativePlan", "native_plan", "requested_tier"]
