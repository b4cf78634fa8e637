"""The operand rules of st.bulk (PTX ISA 9.7.9.13), as ptxas 13.0 applies them.

    st.bulk{.weak}{.shared::cta} [a], size, initval;   // initval must be zero

`size` is a 32- or 64-bit integer register or a constant: a constant must be a multiple of 8 in
[0, 16777216]; a 32-bit register needs PTX ISA 9.0, and ptxas refuses a plain `.b32` one (it takes `.u32`,
`.s32` and every 64-bit integer register). `initval` is the constant 0. With `.shared::cta` the address must
be register-based: ptxas refuses a variable's name ([smem]) or a constant address there, although a generic
st.bulk takes [smem]. Recorded verdicts: tests/ptx/test_isa_st_bulk.py.
"""

from __future__ import annotations

from collections.abc import Collection, Mapping

from ptxforge.ptx import ir
from ptxforge.ptx.ir import ALL_TYPES
from ptxforge.ptx.isa.data_mem import ST_BULK_GRANULE, ST_BULK_MAX_SIZE, ST_BULK_SIZE32_PTX
from ptxforge.ptx.isa.targets import format_version
from ptxforge.ptx.isa.typerules import kind, type_bits

Problem = tuple[ir.Span, str]


def st_bulk_problems(instr: ir.Instruction, reg_types: Mapping[str, str], version: tuple[int, int] | None,
                     symbols: Collection[str] = ()) -> list[Problem]:
    """What the table's signature cannot say about one st.bulk instruction ([] when it is fine)."""
    mn, out = instr.mnemonic, []
    for m in sorted({s for s in instr.suffixes[1:] if instr.suffixes[1:].count(s) > 1}):
        out.append((instr.span, f"{mn}: modifier .{m} appears more than once"))
    if len(instr.operands) != 3:
        return out  # the operand count is the signature's message
    addr, size, initval = instr.operands
    if instr.has("shared::cta") and isinstance(addr, ir.Address) and (
            addr.base is None or isinstance(addr.base, ir.Symbol) or addr.base.name in symbols):
        out.append((addr.span or instr.span, f"{mn}: the address must be a register or a register plus an "
                                             f"offset, e.g. [%r1+8] (ptxas refuses a variable or a constant "
                                             f"address with .shared::cta; mov.u32 %r1, <variable> first)"))
    out += _size_problems(mn, size, reg_types, version, symbols)
    if isinstance(initval, ir.Immediate) and not initval.is_float and initval.value != 0:
        out.append((initval.span or instr.span, f"{mn}: operand 3 (initval) is {initval.text}; the only value "
                                                f"st.bulk allows is 0"))
    elif isinstance(initval, ir.Symbol):
        out.append((initval.span or instr.span, f"{mn}: operand 3 (initval) must be the constant 0"))
    return out


def _size_problems(mn: str, op: ir.Operand, reg_types: Mapping[str, str], version: tuple[int, int] | None,
                   symbols: Collection[str]) -> list[Problem]:
    span = getattr(op, "span", None) or ir.NO_SPAN
    if isinstance(op, ir.Immediate):
        if op.is_float:
            return [(span, f"{mn}: operand 2 (size) is {op.text}, a floating-point literal; expected an integer "
                           f"number of bytes")]
        if not 0 <= op.value <= ST_BULK_MAX_SIZE:
            return [(span, f"{mn}: operand 2 (size) is {op.value}, outside [0, {ST_BULK_MAX_SIZE}]")]
        if op.value % ST_BULK_GRANULE:
            return [(span, f"{mn}: operand 2 (size) is {op.value}, not a multiple of {ST_BULK_GRANULE}")]
        return []
    reg = op.register if isinstance(op, ir.RegisterOffset) else op
    if not isinstance(reg, ir.Register):
        if isinstance(op, ir.Address | ir.AddressList | ir.Vector | ir.PredPair):
            return [(span, f"{mn}: operand 2 (size) must be an integer register or constant")]
        return []
    t = reg_types.get(reg.name)
    if t is None or t not in ALL_TYPES or reg.name in symbols:
        return []
    bits = type_bits(t)
    if kind(t) not in ("b", "s", "u") or bits not in (32, 64):
        return [(span, f"{mn}: operand 2 (size) is {reg.name} ({t}); expected a 32- or 64-bit integer")]
    if bits == 32 and t == ".b32" and not isinstance(op, ir.RegisterOffset):
        return [(span, f"{mn}: operand 2 (size) is {reg.name} (.b32); ptxas takes a 32-bit size as .u32 or .s32 "
                       f"only (or a 64-bit register)")]
    if bits == 32 and version is not None and tuple(version) < ST_BULK_SIZE32_PTX:
        return [(span, f"{mn}: a 32-bit size operand ({reg.name}, {t}) needs PTX ISA "
                       f"{format_version(ST_BULK_SIZE32_PTX)}; this module is .version {format_version(version)}")]
    return []
