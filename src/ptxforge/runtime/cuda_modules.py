"""Getting a PTX module onto a GPU: which machine code to build, with ptxas or the driver's JIT.

ptxas (from the dev extra, CUDA_HOME or PATH) builds a cubin for the GPU, so errors come back at PTX lines
exactly as `ptxforge check --ptxas` shows them. Without ptxas, or when the driver refuses the cubin (a
driver older than this ptxas), the driver JIT-compiles the PTX text instead; if the driver is too old for
the module's `.version`, the module is lowered to the newest PTX ISA the driver knows when nothing in it
needs more.
"""

from __future__ import annotations

from ptxforge.errors import LaunchError
from ptxforge.ptx import ir
from ptxforge.ptx.errors import PTXValidationError
from ptxforge.ptx.isa import parse_target
from ptxforge.ptx.retarget import retarget

# PTX ISA version each CUDA driver release JIT-compiles (CUDA toolkit release notes).
_DRIVER_PTX_ISA = {
    11080: (7, 8), 12000: (8, 0), 12010: (8, 1), 12020: (8, 2), 12030: (8, 3), 12040: (8, 4), 12050: (8, 5),
    12060: (8, 5), 12080: (8, 7), 12090: (8, 8), 13000: (9, 0),
}


def driver_ptx_isa(driver_version: int) -> tuple[int, int] | None:
    """The newest PTX ISA a driver of `cuDriverGetVersion()` (e.g. 12080) JIT-compiles; None if unknown."""
    known = [v for v in _DRIVER_PTX_ISA if v <= driver_version]
    return _DRIVER_PTX_ISA[max(known)] if known else None


def cubin_arch(target: str, gpu_arch: str) -> str:
    """The ptxas -arch for PTX of `.target target` on a GPU whose own target is `gpu_arch` (e.g. 'sm_90a').

    Follows ptxas's rule: sm_XY code runs on sm_MN with MN >= XY; sm_XYf on the same family at or above
    XY; sm_XYa only on sm_XY. Raises LaunchError naming both when the code cannot run on this GPU."""
    t_sm, t_suffix = parse_target(target)
    g_sm, _ = parse_target(gpu_arch)
    fix = (f"retarget it (ptxforge retarget FILE --arch sm_{g_sm}, or kernel.ptx(arch=...) in the DSL) or "
           f"run it with device='emu'")
    if t_suffix == "a":
        if t_sm != g_sm:
            raise LaunchError(f"the PTX targets {target}, whose arch-specific features exist only on sm_{t_sm} "
                              f"GPUs; this GPU is {gpu_arch}: {fix}")
        return f"sm_{g_sm}a"
    if t_suffix == "f" and (t_sm // 10 != g_sm // 10 or g_sm < t_sm):
        raise LaunchError(f"the PTX targets {target}, which runs on the sm_{t_sm // 10}x family from sm_{t_sm} "
                          f"on; this GPU is {gpu_arch}: {fix}")
    if g_sm < t_sm:
        raise LaunchError(f"the PTX targets {target}, newer than this GPU ({gpu_arch}): {fix}")
    return f"sm_{g_sm}"


def ptxas_flags(module: ir.Module) -> list[str]:
    """ptxas options the module asks for: -g for `.target ..., debug` (nvcc -G's output)."""
    return ["-g"] if "debug" in module.target.targets else []


def lowered_text(module: ir.Module, newest: tuple[int, int] | None, who: str) -> str:
    """The module's text with `.version` lowered to `newest` when it is newer (Triton writes 9.x versions
    that an older ptxas or driver refuses though nothing in the code needs them).

    Raises LaunchError naming every instruction that needs the newer version."""
    if newest is None or module.version <= newest:
        return module.to_ptx()
    try:
        return retarget(module, module.target.targets[0], ptx_version=newest).to_ptx()
    except PTXValidationError as e:
        v = module.version
        raise LaunchError(f"{who} reads PTX ISA up to {newest[0]}.{newest[1]}; the module is .version "
                          f"{v[0]}.{v[1]} and cannot be lowered:\n{e}") from None


def jit_text(module: ir.Module, driver_version: int) -> str:
    """The PTX text to hand the driver's JIT: the module, lowered to the driver's PTX ISA if it must be.

    Raises LaunchError when the module uses what the driver's PTX ISA lacks."""
    who = f"the CUDA driver ({driver_version // 1000}.{driver_version % 1000 // 10})"
    return lowered_text(module, driver_ptx_isa(driver_version), who)
