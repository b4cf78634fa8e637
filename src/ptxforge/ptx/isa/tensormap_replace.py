"""The operand rules of tensormap.replace (PTX ISA 9.7.9.26) that its signature cannot say, as ptxas 13.0
applies them.

    tensormap.replace.tile.field.space.b1024.type [addr], {ord,} new_val;

- `.b64` goes with .global_address and .global_stride only; every other field is `.b32`.
- `ord` (box_dim, global_dim, global_stride, element_stride) is a constant in [0, 4].
- The code fields take a constant in their table: elemtype 0..12 (13..15, the sub-byte types, from PTX ISA
  8.7 on sm_100 and newer), interleave_layout 0..2, swizzle_mode 0..3 (4, the 96B swizzle, from PTX ISA 8.8 on
  sm_103), swizzle_atomicity 0..3, fill_mode 0..1.
Recorded verdicts: tests/ptx/test_isa_tensormap.py.
"""

from __future__ import annotations

from ptxforge.ptx import ir
from ptxforge.ptx.isa.targets import format_version, parse_target

Problem = tuple[ir.Span, str]

WIDE_FIELDS = frozenset({"global_address", "global_stride"})  # the .b64 ones
ORD_FIELDS = frozenset({"box_dim", "global_dim", "global_stride", "element_stride"})
ORD_MAX = 4
# field -> (largest code, extended largest code, PTX ISA and lowest sm of the extension, or None)
CODE_FIELDS: dict[str, tuple[int, tuple[int, tuple[int, int], int] | None]] = {
    "elemtype": (12, (15, (8, 7), 100)),
    "interleave_layout": (2, None),
    "swizzle_mode": (3, (4, (8, 8), 103)),
    "swizzle_atomicity": (3, None),
    "fill_mode": (1, None),
}


def tensormap_replace_problems(instr: ir.Instruction, version: tuple[int, int] | None,
                               target: str | None) -> list[Problem]:
    """What the table's signature cannot say about one tensormap.replace ([] when it is fine)."""
    mn = instr.mnemonic
    out: list[Problem] = []
    field = next((s for s in instr.suffixes if s in WIDE_FIELDS or s in ORD_FIELDS or s in CODE_FIELDS
                  or s == "rank"), None)
    if field is None:
        return out
    want = "b64" if field in WIDE_FIELDS else "b32"
    for t in ("b32", "b64"):
        if t in instr.suffixes and t != want:
            out.append((instr.span, f"{mn}: .{field} takes .{want}, not .{t}"))
    ops = instr.operands
    if field in ORD_FIELDS and len(ops) == 3:
        ordinal = ops[1]
        if isinstance(ordinal, ir.Immediate) and not ordinal.is_float and not 0 <= ordinal.value <= ORD_MAX:
            out.append((ordinal.span or instr.span, f"{mn}: ord is {ordinal.value}; a dimension is 0..{ORD_MAX}"))
    if field in CODE_FIELDS and len(ops) == 2:
        code = ops[1]
        if isinstance(code, ir.Immediate) and not code.is_float:
            out += _code_problems(mn, field, code, version, target)
    return out


def _code_problems(mn: str, field: str, code: ir.Immediate, version: tuple[int, int] | None,
                   target: str | None) -> list[Problem]:
    top, ext = CODE_FIELDS[field]
    v, span = code.value, code.span or ir.NO_SPAN
    if 0 <= v <= top:
        return []
    if ext is None or not 0 <= v <= ext[0]:
        return [(span, f"{mn}: .{field} {v} is not a code of the field (0..{ext[0] if ext else top})")]
    _, ptx, sm = ext
    if version is not None and tuple(version) < ptx:
        return [(span, f"{mn}: .{field} {v} needs PTX ISA {format_version(ptx)}; this module is .version "
                       f"{format_version(version)}")]
    if target is not None:
        try:
            have = parse_target(target)[0]
        except ValueError:
            return []
        if have < sm:
            return [(span, f"{mn}: .{field} {v} needs sm_{sm} or newer; this module targets {target} "
                           f"(codes 0..{top} here)")]
    return []
