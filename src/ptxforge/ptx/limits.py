"""Limits ptxas enforces beyond the grammar: at most 64 KiB of constant data in a module, 48 KiB of static
shared memory declared in one kernel (beyond that, shared memory must be dynamic: `.extern .shared`), and
for barriers given as immediates, numbers 0..15 and thread counts that are multiples of 32 (non-zero for an
arrive)."""

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
                yield from _barrier_problems(s)


def _barrier_problems(s: ir.Instruction) -> Iterator[tuple[ir.Span, str]]:
    """ptxas 13.0's rules (tests/ptx/data/ptxas_barriers.txt): an immediate barrier number is 0..15, an
    immediate thread count a multiple of the warp size, and not 0 for an arrive."""
    red = "red" in s.suffixes
    ops = s.operands[1:] if red else s.operands
    number = _int(ops[0])
    if number is not None and not 0 <= number < NBARRIERS:
        yield ops[0].span, f"{s.mnemonic}: barrier number {number} is out of range 0..{NBARRIERS - 1}"
    if len(ops) != (3 if red else 2):
        return  # no thread count
    count = _int(ops[1])
    if count is not None and count % 32:
        yield ops[1].span, f"{s.mnemonic}: thread count {count} is not a multiple of the warp size (32)"
    elif count == 0 and "arrive" in s.suffixes:
        yield ops[1].span, f"{s.mnemonic}: an arrive needs a non-zero thread count"


def _int(op) -> int | None:
    return op.value if isinstance(op, ir.Immediate) and isinstance(op.value, int) else None


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
