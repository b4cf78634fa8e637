"""Sizes of a module's variables checked before the emulator allocates anything for them.

The limits are the target's where ptxas or the driver enforce one (64 KiB of constant data per module,
512 KiB of local memory per thread) and the emulator's own where it holds in host memory what a GPU holds
in device memory (one module variable, all of a module's variables, one wave's local memory).
"""

from __future__ import annotations

import os
from typing import TYPE_CHECKING

from ptxforge.emu.errors import LaunchError
from ptxforge.ptx import ir

if TYPE_CHECKING:
    from collections.abc import Iterable, Sequence

    from ptxforge.emu.program import FunctionLayout

CONST_BANK_BYTES = 64 * 1024  # ptxas: "File uses too much global constant data (..., 0x10000 max)"
LOCAL_PER_THREAD = 512 * 1024  # CUDA's limit on local memory per thread
EMU_MAX_VARIABLE = 1 << 30  # one .global variable the emulator will hold in host memory
EMU_MAX_MODULE_DATA = 2 << 30  # all .global/.const variables of one module, in host memory


def _size(v: ir.Variable) -> int:
    try:
        return v.size
    except (OverflowError, ValueError):  # dimensions beyond what numpy or Python can multiply
        return 1 << 64


def check_module_variables(variables: Iterable[ir.Variable]) -> None:
    """Raise LaunchError for a .const total over 64 KiB, a .global variable over the emulator's limit, or
    .global/.const data over the emulator's limit for a whole module (naming the variable that crosses it)."""
    const = total = 0
    for v in variables:
        n = _size(v)
        where = f"{v.span}: " if v.span is not None and v.span.line else ""
        if v.space == ".const":
            const += n
            if const > CONST_BANK_BYTES:
                raise LaunchError(f"{where}{v.space} {v.name}: the module's constant data reaches {const:,} bytes; "
                                  f"the limit is {CONST_BANK_BYTES:,} (64 KiB)")
        elif n > EMU_MAX_VARIABLE:
            raise LaunchError(f"{where}{v.space} {v.name} is {n:,} bytes; the emulator holds module variables in "
                              f"host memory and takes at most {EMU_MAX_VARIABLE:,} (1 GiB) for one")
        total += n
        if total > EMU_MAX_MODULE_DATA:
            raise LaunchError(f"{where}{v.space} {v.name} ({n:,} bytes) brings the module's .global/.const data "
                              f"to {total:,} bytes; the emulator holds module variables in host memory and takes "
                              f"at most {EMU_MAX_MODULE_DATA:,} (2 GiB) for one module")


def check_local(functions: Sequence[FunctionLayout], lanes: int) -> None:
    """Raise LaunchError when a function's .local frame or one wave's local memory is too large."""
    for f in functions:
        if f.frame_size > LOCAL_PER_THREAD:
            raise LaunchError(f"{f.name} declares {f.frame_size:,} bytes of .local memory per thread; the limit "
                              f"is {LOCAL_PER_THREAD:,} (512 KiB)")
    need = lanes * sum(f.frame_size for f in functions)
    budget = host_memory() // 2
    if need > budget:
        raise LaunchError(f"one wave of {lanes:,} threads needs {need:,} bytes of .local memory, more than half "
                          f"of this machine's memory; emulate fewer SMs (num_sms) or launch fewer blocks")


def host_memory() -> int:
    """Bytes of physical memory this machine has (1 TiB when it cannot tell)."""
    try:
        return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    except (ValueError, OSError, AttributeError):
        return 1 << 40
