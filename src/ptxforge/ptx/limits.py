"""Limits ptxas enforces beyond the grammar: at most 64 KiB of constant data in a module, 48 KiB of static
shared memory declared in one kernel (beyond that, shared memory must be dynamic: `.extern .shared`), and
barrier numbers 0..15 when they are immediates."""

from __future__ import annotations

from collections.abc import Iterator

from ptxforge.ptx import ir

CONST_BANK_BYTES = 0x10000
STATIC_SHARED_BYTES = 0xC000
NBARRIERS = 16


def limit_problems(m: ir.Module) -> Iterator[tuple[ir.Span, str]]:
    """(span, message) for each size or barrier number ptxas would refuse."""
    const = 0
    for v in m.variables:
        if v.space == ".const" and v.linkage != ".extern":
            const += _size(v)
            if const > CONST_BANK_BYTES:
                yield v.span, (f"the module uses too much constant data ({const:#x} bytes with {v.name}, "
                               f"{CONST_BANK_BYTES:#x} max)")
                break
    for f in m.kernels:
        shared, last = 0, None
        for s in _walk(f.body or ()):
            if isinstance(s, ir.Variable) and s.space == ".shared" and s.linkage != ".extern":
                shared += _size(s)
                last = s
        if shared > STATIC_SHARED_BYTES and last is not None:
            yield last.span, (f"{f.name} declares too much static shared data ({shared:#x} bytes, "
                              f"{STATIC_SHARED_BYTES:#x} max; use .extern .shared for more)")
    for f in m.functions:
        for s in _walk(f.body or ()):
            if isinstance(s, ir.Instruction) and s.opcode in ("bar", "barrier") and s.operands \
                    and "warp" not in s.suffixes:
                op = s.operands[1] if "red" in s.suffixes else s.operands[0]
                if isinstance(op, ir.Immediate) and isinstance(op.value, int) and not 0 <= op.value < NBARRIERS:
                    yield op.span, f"{s.mnemonic}: barrier number {op.value} is out of range 0..{NBARRIERS - 1}"


def _size(v: ir.Variable) -> int:
    try:
        return v.size
    except (OverflowError, ValueError):
        return 1 << 64


def _walk(body):
    for s in body:
        yield s
        if isinstance(s, ir.Block):
            yield from _walk(s.body)
