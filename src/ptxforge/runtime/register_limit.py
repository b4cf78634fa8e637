"""The register-limited block size on the emulator, as the driver computes it (CU_FUNC_ATTRIBUTE_MAX_THREADS_PER_BLOCK):
a block needs round_up(registers x 32, 256) registers per warp, warps rounded up to the SM's 4 sub-partitions,
within the SM's 65,536. The register count is the one ptxas gives the kernel, so this is asked of ptxas only
when `.maxnreg` lets the count exceed what the block allows; without ptxas the check is not made (a GPU
launch always makes it, from the driver's own attribute)."""

from __future__ import annotations

from ptxforge.emu.launch_checks import directive_where
from ptxforge.errors import LaunchError
from ptxforge.ptx import ir
from ptxforge.runtime.resources import PtxasError, resource_usage
from ptxforge.toolchain import ToolNotFound

REGS_PER_SM = 65536
REG_ALLOC_UNIT = 256
SUB_PARTITIONS = 4


def max_threads(registers: int) -> int:
    """The largest block (a multiple of 32, at most 1024) whose warps' registers fit one SM."""
    per_warp = -(-registers * 32 // REG_ALLOC_UNIT) * REG_ALLOC_UNIT
    if per_warp == 0:
        return 1024
    warps = REGS_PER_SM // per_warp // SUB_PARTITIONS * SUB_PARTITIONS
    return max(0, min(1024, warps * 32))


def check_register_limit(module: ir.Module, func: ir.Function, block: tuple[int, int, int]) -> None:
    """LaunchError when `func`'s registers (as ptxas allocates them under `.maxnreg`) do not allow `block`."""
    limit = dict(func.directives).get(".maxnreg")
    if not limit:
        return
    threads = block[0] * block[1] * block[2]
    cap = int(limit[0] if isinstance(limit, list | tuple) else limit)
    if threads <= max_threads(cap):
        return  # whatever ptxas allocates up to the cap fits
    try:
        used = resource_usage(module)[func.name].registers
    except (ToolNotFound, PtxasError, KeyError):
        return  # no ptxas here, or it refuses the module: nothing to measure (documented above)
    if used is None or threads <= max_threads(used):
        return
    raise LaunchError(f"{func.name} uses {used} registers per thread (ptxas, under .maxnreg {cap} at "
                      f"{directive_where(module, func, '.maxnreg')}), so a block may have at most "
                      f"{max_threads(used)} threads; the launch asked for {threads} (the driver refuses it)")
