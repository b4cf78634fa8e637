"""Kernel arguments: checked against a kernel's parameter list, then packed into the parameter buffer.

Numpy arrays and device buffers (or None for a null pointer) go to 64-bit pointer parameters, numbers to
scalars, bytes or numpy records to by-value aggregates (`.param .align A .b8 name[N]`). The layout of the
packed buffer (each parameter at its natural or declared alignment) is the one both devices use.
"""

from __future__ import annotations

import functools

import numpy as np

from ptxforge.emu.errors import LaunchError
from ptxforge.ptx import ir

_INT_RANGE = {
    ".u8": (0, 2**8 - 1), ".u16": (0, 2**16 - 1), ".u32": (0, 2**32 - 1), ".u64": (0, 2**64 - 1),
    ".s8": (-(2**7), 2**7 - 1), ".s16": (-(2**15), 2**15 - 1), ".s32": (-(2**31), 2**31 - 1),
    ".s64": (-(2**63), 2**63 - 1), ".b8": (-(2**7), 2**8 - 1), ".b16": (-(2**15), 2**16 - 1),
    ".b32": (-(2**31), 2**32 - 1), ".b64": (-(2**63), 2**64 - 1),
}
_FLOAT = {".f16": np.float16, ".f32": np.float32, ".f64": np.float64}


def check_args(kernel: str, params: tuple[ir.Param, ...], args: list, is_buffer) -> list:
    """One (kind, param, value) per argument: kind is "ptr", "scalar" (value: bytes) or "bytes".

    `is_buffer(a)` says whether `a` is a device buffer. Raises LaunchError naming the argument."""
    if len(args) != len(params):
        sig = ", ".join(f"{p.type} {p.name}" for p in params)
        raise LaunchError(f"{kernel} takes {len(params)} argument(s) ({sig}), got {len(args)}")
    plan = []
    for i, (p, a) in enumerate(zip(params, args, strict=True)):
        where = f"{kernel} argument {i} ({p.name}, {p.type}{f'[{p.size}]' if p.array else ''})"
        if p.array:
            plan.append(("bytes", p, aggregate_bytes(a, p.size, where)))
        elif a is None or isinstance(a, np.ndarray) or is_buffer(a):
            if ir.type_bits(p.type) != 64 or p.type.startswith(".f"):
                raise LaunchError(f"{where}: a pointer (array/buffer/None) needs a 64-bit integer parameter")
            if isinstance(a, np.ndarray) and a.dtype == object:
                raise LaunchError(f"{where}: object arrays cannot be copied to the device")
            plan.append(("ptr", p, a))
        else:
            plan.append(("scalar", p, scalar_bytes(a, p.type, where)))
    return plan


@functools.lru_cache(maxsize=1024)
def param_offsets(params: tuple[ir.Param, ...]) -> tuple[tuple[int, ...], int]:
    """The byte offset of each parameter in the packed buffer, and the buffer's size (cached: a kernel's
    layout is computed once, not at every launch)."""
    offsets, end = [], 0
    for p in params:
        align = p.align or min(8, max(1, ir.type_bits(p.type) // 8))
        end += (-end) % align
        offsets.append(end)
        end += max(p.size, 1)
    return tuple(offsets), end


def pack(plan: list, pointer) -> tuple[bytes, list[int]]:
    """The packed parameter buffer and each parameter's offset; `pointer(param, arg)` gives an address."""
    offsets, total = param_offsets(tuple(p for _, p, _ in plan))
    offsets = list(offsets)
    out = bytearray(total)
    for (kind, p, a), off in zip(plan, offsets, strict=True):
        if kind == "ptr":
            out[off:off + 8] = int(pointer(p, a)).to_bytes(8, "little")
        else:
            size = max(p.size, 1)
            out[off:off + size] = a[:size].ljust(size, b"\0")
    return bytes(out), offsets


def scalar_bytes(a, ty: str, where: str) -> bytes:
    """The little-endian bytes of a number for a scalar parameter of type `ty`."""
    bits = ir.type_bits(ty)
    if ty in _FLOAT:
        if isinstance(a, bool | np.bool_) or not isinstance(a, int | float | np.floating | np.integer):
            raise LaunchError(f"{where}: expected a number, got {type(a).__name__}")
        if isinstance(a, np.integer):
            raise LaunchError(f"{where}: expected a float for {ty}, got {np.asarray(a).dtype}")
        if isinstance(a, np.floating) and np.asarray(a).dtype.itemsize * 8 != bits:
            raise LaunchError(f"{where}: expected a {bits}-bit float, got {np.asarray(a).dtype}; "
                              f"pass {_FLOAT[ty].__name__}(...)")
        return np.asarray(a, _FLOAT[ty]).tobytes()
    if ty in _INT_RANGE:
        if isinstance(a, float | np.floating):
            raise LaunchError(f"{where}: expected an integer for {ty}, got {type(a).__name__} {a!r}")
        if isinstance(a, bool | np.bool_) or not isinstance(a, int | np.integer):
            raise LaunchError(f"{where}: expected an integer, got {type(a).__name__}")
        if isinstance(a, np.integer) and np.asarray(a).dtype.itemsize * 8 != bits:
            raise LaunchError(f"{where}: expected a {bits}-bit integer, got {np.asarray(a).dtype}")
        v = int(a)
        lo, hi = _INT_RANGE[ty]
        if not lo <= v <= hi:
            raise LaunchError(f"{where}: value {v} does not fit {ty} [{lo}, {hi}]")
        return (v & ((1 << bits) - 1)).to_bytes(bits // 8, "little")
    if ty == ".pred":
        return bytes([1 if a else 0])
    raise LaunchError(f"{where}: parameters of type {ty} are not supported")


def aggregate_bytes(a, size: int, where: str) -> bytes:
    """The bytes of a by-value aggregate argument, which must be exactly `size` long."""
    if isinstance(a, bytes | bytearray):
        raw = bytes(a)
    elif isinstance(a, np.ndarray | np.void | np.generic):
        raw = np.ascontiguousarray(a).tobytes()
    else:
        raise LaunchError(f"{where}: a by-value aggregate takes bytes or a numpy array/record, "
                          f"got {type(a).__name__}")
    if len(raw) != size:
        raise LaunchError(f"{where}: expected {size} bytes, got {len(raw)}")
    return raw
