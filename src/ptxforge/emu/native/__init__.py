"""The native tier: a kernel's PTX compiled with LLVM (llvmlite) into machine code that runs whole blocks.

`plan.py` decides whether a kernel can run here (the first instruction it cannot is named), `lowering.py`
turns one PTX instruction into LLVM vector IR for a warp's 32 lanes (lower.py, lower_float.py,
lower_bits.py, lower_warp.py; warp.py is a warp's registers and memory under a mask), `codegen.py` builds the
block function (per-lane pcs, lowest pc first, the block's warps taking turns, barriers), `jit.py` compiles
it and caches the object code on disk by content, `launcher.py` spreads the blocks over threads, and
`watchdog.py` stops a launch that makes no progress.
"""

from __future__ import annotations

from ptxforge.emu.native.plan import TIERS, NativePlan, native_plan, requested_tier

__all__ = ["TIERS", "NativePlan", "native_plan", "requested_tier"]
