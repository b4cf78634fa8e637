"""Fill a module's `__constant__` (and `__device__`) variables before a launch, on either device:
what `cudaMemcpyToSymbol` / `cuModuleGetGlobal` + a copy do in CUDA."""

from __future__ import annotations

from typing import Any

import numpy as np

from ptxforge.errors import LaunchError
from ptxforge.ptx import ir
from ptxforge.runtime.buffers import resolve_device


def module_variable(module: ir.Module, name: str) -> ir.Variable:
    """The module-scope .const or .global variable `name`; KeyError lists the ones the module has."""
    for v in module.variables:
        if v.name == name and v.space in (".const", ".global") and v.linkage != ".extern":
            return v
    have = [v.name for v in module.variables if v.space in (".const", ".global") and v.linkage != ".extern"]
    raise KeyError(f"no .const or .global variable {name!r} in {module.filename}; it has: "
                   + (", ".join(have) or "none"))


def constant_bytes(var: ir.Variable, values: Any, offset: int = 0) -> np.ndarray:
    """`values` as the bytes to copy into `var` at byte `offset`, checked to fit."""
    data = np.ascontiguousarray(np.asarray(values))
    if data.dtype == object:
        raise TypeError(f"{var.name}: values must be a numeric array, not {data.dtype}")
    raw = data.reshape(-1).view(np.uint8)
    if not isinstance(offset, int | np.integer) or offset < 0:
        raise LaunchError(f"{var.name}: offset must be a non-negative integer, got {offset!r}")
    if offset + raw.size > var.size:
        raise LaunchError(f"{var.name}: {raw.size} bytes at offset {offset} do not fit its {var.size} bytes "
                          f"({var.space} {var.type}{''.join(f'[{d}]' for d in var.array)})")
    return raw


def set_constant(module: ir.Module, name: str, values: Any, *, device: Any = None, offset: int = 0) -> None:
    """Copy `values` (a numpy array or scalar; its raw bytes) into the variable `name` of `module` as loaded
    on `device` ("emu", "cuda", "cuda:N", a device object; None: the default device), starting at byte
    `offset`. Later launches of the module's kernels on that device read the new contents."""
    var = module_variable(module, name)
    raw = constant_bytes(var, values, int(offset))
    resolve_device(device).write_global(module, name, raw, int(offset))

