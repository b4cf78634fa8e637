"""Kernel arguments: checked against a kernel's parameter list, then packed into the parameter buffer.

Arrays, tensors and device buffers (or None for a null pointer; see `arguments`) go to 64-bit pointer
parameters, checked against the pointee type when the kernel knows it (DSL kernels), numbers to scalars,
bytes or numpy records to by-value aggregates (`.param .align A .b8 name[N]`). The layout of the
packed buffer (each parameter at its natural or declared alignment) is the one both devices use.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np

from ptxforge.errors import LaunchError
from ptxforge.ptx import ir
from ptxforge.ptx.isa.effects import addresses_memory
from ptxforge.runtime import arguments as A

_INT_RANGE = {
    ".u8": (0, 2**8 - 1), ".u16": (0, 2**16 - 1), ".u32": (0, 2**32 - 1), ".u64": (0, 2**64 - 1),
    ".s8": (-(2**7), 2**7 - 1), ".s16": (-(2**15), 2**15 - 1), ".s32": (-(2**31), 2**31 - 1),
    ".s64": (-(2**63), 2**63 - 1), ".b8": (-(2**7), 2**8 - 1), ".b16": (-(2**15), 2**16 - 1),
    ".b32": (-(2**31), 2**32 - 1), ".b64": (-(2**63), 2**64 - 1),
}
_FLOAT = {".f16": np.float16, ".f32": np.float32, ".f64": np.float64}


@dataclass(frozen=True)
class PointeeType:
    """What a typed pointer parameter points to: `label` as written (`ptr(f32)`), `dtype` the element's
    numpy/ml_dtypes name (None: untyped, any array), `itemsize` for width-only types (`ptr(b32)`)."""

    label: str
    dtype: str | None
    itemsize: int | None = None
    hint: str = "declare the parameter untyped (ptr(..., typed=False))"  # how to accept other elements

    def accepts(self, name: str | None, itemsize: int | None) -> bool:
        if self.dtype is not None:
            return name == self.dtype
        return self.itemsize is None or itemsize is None or itemsize == self.itemsize


def check_args(kernel: str, params: tuple[ir.Param, ...], args: list, is_buffer: Callable[[Any], bool], *,
               pointee: Any = None,
               pointers: frozenset[str] = frozenset()) -> list:
    """One (kind, param, value) per argument: kind is "ptr" (value: None, a buffer, a HostArray, a
    DevicePointer or an integer address), "scalar" (value: bytes) or "bytes".

    `is_buffer(a)` says whether `a` is a device buffer; `pointee` gives each parameter's PointeeType (or
    None); `pointers` names parameters known to be pointers, for which an integer is an address (checked
    against the device's allocations at packing). Raises LaunchError naming the argument."""
    if len(args) != len(params):
        sig = ", ".join(f"{p.type} {p.name}" for p in params)
        raise LaunchError(f"{kernel} takes {len(params)} argument(s) ({sig}), got {len(args)}")
    plan: list[tuple[str, ir.Param, Any]] = []  # (kind, parameter, value): "ptr" with a pointer, "bytes" with bytes
    for i, (where, p, a) in enumerate(zip(argument_names(kernel, params), params, args, strict=True)):
        typed = pointee[i] if pointee else None
        is_pointer = typed is not None or p.name in pointers or p.ptr_space is not None
        if p.array:
            plan.append(("bytes", p, aggregate_bytes(a, p.size, where)))
        elif a is None or is_buffer(a) or A.is_array_like(a):
            if ir.type_bits(p.type) != 64 or p.type.startswith(".f"):
                raise LaunchError(f"{where}: a pointer (array/tensor/buffer/None) needs a 64-bit integer parameter")
            value: Any = a if a is None or is_buffer(a) else A.pointer_argument(a, where)
            if typed is not None and value is not None:
                name = value.dtype.name if is_buffer(value) else value.dtype_name
                size = value.dtype.itemsize if is_buffer(value) else (
                    value.array.dtype.itemsize if isinstance(value, A.HostArray) else None)
                if not typed.accepts(name, size):
                    what = "DeviceBuffer" if is_buffer(value) else value.kind
                    want = typed.dtype or f"{typed.itemsize}-byte"
                    raise LaunchError(f"{where}: {p.name} is {typed.label}, which takes {want} elements; got a "
                                      f"{what} of {name}: convert it (e.g. .astype) or {typed.hint}")
            plan.append(("ptr", p, value))
        elif is_pointer and isinstance(a, int | np.integer) and not isinstance(a, bool | np.bool_):
            plan.append(("ptr", p, int(a)))
        elif is_pointer:
            raise LaunchError(f"{where}: {p.name} is a pointer; expected an array, tensor, DeviceBuffer, None or a "
                              f"device address, got {type(a).__name__}")
        else:
            plan.append(("scalar", p, scalar_bytes(a, p.type, where)))
    return plan


_NAMES: dict[int, tuple[Any, str, tuple[str, ...]]] = {}  # id(params) -> (params, kernel, argument names)


def argument_names(kernel: str, params: Any) -> tuple[str, ...]:
    """How messages name each argument of `kernel` (made once per parameter list, not at every launch; keyed
    by identity: hashing the parameters costs more than naming them)."""
    hit = _NAMES.get(id(params))
    if hit is not None and hit[0] is params and hit[1] == kernel:
        return hit[2]
    names = tuple(f"{kernel} argument {i} ({p.name}, {p.type}{f'[{p.size}]' if p.array else ''})"
                  for i, p in enumerate(params))
    if len(_NAMES) > 4096:
        _NAMES.clear()
    _NAMES[id(params)] = (params, kernel, names)
    return names


_POINTER_CACHE: dict[int, tuple[ir.Function, frozenset[str]]] = {}


def pointer_params(func: ir.Function) -> frozenset[str]:
    """Names of the 64-bit parameters `func` uses as addresses: declared `.ptr`, or loaded and then (through
    mov, cvta, 64-bit add/sub and mad.wide's addend) converted by cvta or used as the base of a memory
    operand. A parameter added to another parameter is not counted (a byte offset looks the same)."""
    hit = _POINTER_CACHE.get(id(func))
    if hit is not None and hit[0] is func:
        return hit[1]
    names = {p.name for p in func.params if ir.type_bits(p.type) == 64 and not p.array}
    taint: dict[str, frozenset[str]] = {}
    found: set[str] = {p.name for p in func.params if p.ptr_space is not None}

    def of(o) -> frozenset[str]:
        return taint.get(o.name, frozenset()) if isinstance(o, ir.Register) else frozenset()
    for ins in func.instructions():
        ops, op = ins.operands, ins.opcode
        if not ops:
            continue
        dst = ops[0] if isinstance(ops[0], ir.Register) else None
        if op == "ld" and "param" in ins.suffixes and len(ops) > 1 and isinstance(ops[1], ir.Address) \
                and isinstance(ops[1].base, ir.Symbol) and ops[1].base.name in names and dst is not None:
            taint[dst.name] = frozenset({ops[1].base.name})
            continue
        if addresses_memory(ins):  # the ISA table's effects: its [reg] operands are memory addresses
            for o in ops:
                if isinstance(o, ir.Address) and isinstance(o.base, ir.Register):
                    found |= of(o.base)
        if op == "cvta" and len(ops) > 1:
            found |= of(ops[1])
        if dst is None:
            continue
        sources: frozenset[str] = frozenset()
        if op in ("mov", "cvta") and len(ops) > 1:
            sources = of(ops[1])
        elif op in ("add", "sub") and any(t in ins.suffixes for t in ("s64", "u64", "b64")):
            parts = [of(o) for o in ops[1:]]
            if sum(1 for x in parts if x) == 1:
                sources = next(x for x in parts if x)
        elif op == "mad" and "wide" in ins.suffixes and len(ops) > 3:
            sources = of(ops[3])
        if sources:
            taint[dst.name] = sources
        else:
            taint.pop(dst.name, None)
    result = frozenset(found & names | {p.name for p in func.params if p.ptr_space is not None})
    if len(_POINTER_CACHE) > 4096:
        _POINTER_CACHE.clear()
    _POINTER_CACHE[id(func)] = (func, result)
    return result


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


_OFFSETS: dict[tuple[int, ...], tuple[tuple, tuple[tuple[int, ...], int]]] = {}


def _offsets_of(params: tuple[ir.Param, ...]) -> tuple[tuple[int, ...], int]:
    """`param_offsets`, keyed by the parameters' identities (a launch packs the same Param objects each time;
    hashing them costs more than the rest of the packing)."""
    key = tuple(map(id, params))
    hit = _OFFSETS.get(key)
    if hit is not None and all(a is b for a, b in zip(hit[0], params, strict=True)):
        return hit[1]
    found = param_offsets(params)
    if len(_OFFSETS) > 4096:
        _OFFSETS.clear()
    _OFFSETS[key] = (params, found)
    return found


def pack(plan: list, pointer: Callable[[ir.Param, Any], int]) -> tuple[bytes, list[int]]:
    """The packed parameter buffer and each parameter's offset; `pointer(param, arg)` gives an address."""
    at, total = _offsets_of(tuple(p for _, p, _ in plan))
    offsets = list(at)
    out = bytearray(total)
    for (kind, p, a), off in zip(plan, offsets, strict=True):
        if kind == "ptr":
            out[off:off + 8] = int(pointer(p, a)).to_bytes(8, "little")
        else:
            place(out, off, max(p.size, 1), a)
    return bytes(out), offsets


def place(out: bytearray, off: int, size: int, raw: bytes) -> None:
    """Put a scalar's or aggregate's bytes `raw` at `off` in the packed buffer `out`, cut or zero-padded to
    `size` (the parameter's: max(param.size, 1))."""
    out[off:off + size] = raw[:size].ljust(size, b"\0")


def scalar_bytes(a: Any, ty: str, where: str) -> bytes:
    """The little-endian bytes of a number for a scalar parameter of type `ty`."""
    bits = ir.type_bits(ty)
    if ty in _FLOAT:
        if isinstance(a, bool | np.bool_) or not isinstance(a, int | float | np.floating | np.integer):
            raise LaunchError(f"{where}: expected a number, got {type(a).__name__}")
        if isinstance(a, np.integer):
            raise LaunchError(f"{where}: expected a float for {ty}, got {np.asarray(a).dtype}")
        if isinstance(a, np.floating) and a.dtype.itemsize * 8 != bits:
            raise LaunchError(f"{where}: expected a {bits}-bit float, got {a.dtype}; "
                              f"pass {_FLOAT[ty].__name__}(...)")
        return np.asarray(a, _FLOAT[ty]).tobytes()
    if ty in _INT_RANGE:
        if isinstance(a, float | np.floating):
            raise LaunchError(f"{where}: expected an integer for {ty}, got {type(a).__name__} {a!r}")
        if isinstance(a, bool | np.bool_) or not isinstance(a, int | np.integer):
            raise LaunchError(f"{where}: expected an integer, got {type(a).__name__}")
        if isinstance(a, np.integer) and a.dtype.itemsize * 8 != bits:
            raise LaunchError(f"{where}: expected a {bits}-bit integer, got {a.dtype}")
        v = int(a)
        lo, hi = _INT_RANGE[ty]
        if not lo <= v <= hi:
            raise LaunchError(f"{where}: value {v} does not fit {ty} [{lo}, {hi}]")
        return (v & ((1 << bits) - 1)).to_bytes(bits // 8, "little")
    if ty == ".pred":
        return bytes([1 if a else 0])
    raise LaunchError(f"{where}: parameters of type {ty} are not supported")


def aggregate_bytes(a: Any, size: int, where: str) -> bytes:
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
