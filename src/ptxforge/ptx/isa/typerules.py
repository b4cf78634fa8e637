"""Operand/instruction type compatibility, as the PTX ISA manual states it.

Section "Type Information for Instructions and Operands" (Table 26, Type Checking Rules):
bit-size types agree with any type of the same size; signed and unsigned integers agree when their
sizes match; floating-point types agree only when they match exactly; predicates only with
predicates.

Section "Operand Size Exceeding Instruction-Type Size" (Tables 27/28, relaxed rules for ld, st and
cvt): the register may be wider than the instruction type. Bit-size and integer registers work with
bit-size and integer instruction types of the same or smaller size; floating-point registers work with
a bit-size instruction type of the same or smaller size, or with exactly their own float type; a
floating-point instruction type accepts a bit-size register of the same or larger size.
ptxas 13.0 agrees with both tables on every case probed (see tests/ptx/test_isa.py).
"""

from __future__ import annotations

from functools import lru_cache

from ptxforge.ptx.ir import type_bits


def kind(t: str) -> str:
    """'b', 's', 'u', 'f' or 'pred' for a PTX type name ('.b32' -> 'b', '.bf16x2' -> 'f')."""
    if t == ".pred":
        return "pred"
    c = t[1]
    if t in (".u16x2", ".s16x2"):
        return t[1]
    if c in "bsu" and not t.startswith((".bf16", ".s2f6", ".ue8m0", ".ue4m3")):
        return c
    return "f"


def is_int(t: str) -> bool:
    return kind(t) in ("s", "u")


def is_float(t: str) -> bool:
    return kind(t) == "f"


def strict_ok(inst: str, reg: str, packed_as_int: bool = False) -> bool:
    """Table 26: may a register declared `reg` be used where the instruction expects `inst`?

    `packed_as_int`: ptxas also lets a .f16x2/.bf16x2 register stand for a 32-bit integer where the
    instruction's own type suffix says so (add.u32, ld.global.u16), though not for fixed-type operands
    such as shift amounts or popc's result."""
    if inst == reg:
        return True
    ki, kr = kind(inst), kind(reg)
    if "pred" in (ki, kr):
        return False
    if type_bits(inst) != type_bits(reg):
        return False
    if ki == "b" or kr == "b":
        return True
    if ki in "su" and kr in "su":
        return True
    if packed_as_int and ki in "su" and reg in _PACKED_HALF:
        return True  # ptxas treats .f16x2/.bf16x2 registers like 32-bit integers
    return False  # floats must match exactly; float vs integer never agree


_PACKED_HALF = (".f16x2", ".bf16x2")


def relaxed_ok(inst: str, reg: str) -> bool:
    """Tables 27/28 (ld, st, cvt): like `strict_ok`, but the register may be wider."""
    if strict_ok(inst, reg, packed_as_int=True):
        return True
    ki, kr = kind(inst), kind(reg)
    if ki in "su" and reg in _PACKED_HALF:
        kr = "b"
    if "pred" in (ki, kr):
        return False
    if inst == ".b128" or type_bits(reg) < type_bits(inst):
        return False
    if ki == "b":
        return True  # every register kind may hold a narrower bit-size value
    if ki in "su":
        return kr in "bsu"
    return kr == "b"  # float instruction type: only a (wider) bit-size register


@lru_cache(maxsize=4096)
def compatible(inst: str, reg: str, relaxed: bool, from_suffix: bool = True) -> bool:
    """`relaxed`: ld/st/cvt rules; `from_suffix`: the operand's type comes from the type suffix."""
    return relaxed_ok(inst, reg) if relaxed else strict_ok(inst, reg, packed_as_int=from_suffix)


def immediate_problem(inst: str, value: int | float, text: str) -> str | None:
    """Why a literal cannot stand for a value of type `inst` (None when it can).

    As ptxas 13.0 applies the manual: .f32/.f64 operands take float literals only; integer operands
    take integer literals only; a bit-size operand takes an integer, or a float literal of its own width
    (0fXXXXXXXX is 32-bit, 0dXXXXXXXXXXXXXXXX and decimal literals such as 1.5 are 64-bit);
    16-bit and packed float types (.f16, .bf16x2, ...) take no literal at all.
    """
    k = kind(inst)
    is_float_lit = isinstance(value, float)
    if k == "pred":
        return "a float literal cannot be a predicate" if is_float_lit else None
    if k in "su":
        return f"{text} is a floating-point literal, expected an integer ({inst})" if is_float_lit else None
    if k == "b":
        if is_float_lit:
            bits = 32 if text.lstrip("-")[:2] in ("0f", "0F") else 64
            if bits != type_bits(inst):
                return f"{text} is a {bits}-bit floating-point literal, but {inst} is {type_bits(inst)} bits"
        return None
    if inst in (".f32", ".f64"):
        if not is_float_lit:
            return f"{text} is an integer literal, expected a {inst} literal (e.g. 0f3F800000 or 1.0)"
        return None
    return f"{inst} operands cannot be literals; move the bits into a register with mov.b{type_bits(inst)}"


_SCALAR_CVT = frozenset(".u8 .u16 .u32 .u64 .s8 .s16 .s32 .s64 .f16 .bf16 .f32 .f64".split())
_IRND = (".rni", ".rzi", ".rmi", ".rpi")
_FRND = (".rn", ".rz", ".rm", ".rp")


def cvt_rounding_problem(dst: str, src: str, mods: tuple[str, ...]) -> str | None:
    """The manual's rounding rules for scalar cvt (section "Rounding Modifiers"; ptxas agrees):
    float-to-int needs an integer rounding (.rni...), int-to-float and narrowing float-to-float need
    a float rounding (.rn...), same-size float-to-float may round to an integer (.rni...), and
    widening float conversions and int-to-int conversions take none."""
    if dst not in _SCALAR_CVT or src not in _SCALAR_CVT:
        return None
    irnd = [m for m in mods if m in _IRND]
    frnd = [m for m in mods if m in _FRND]
    fd, fs = is_float(dst), is_float(src)
    if fs and not fd:
        allowed, required, what = _IRND, True, "a float-to-integer conversion"
    elif fd and not fs:
        allowed, required, what = _FRND, True, "an integer-to-float conversion"
    elif fd and fs and type_bits(dst) < type_bits(src):
        allowed, required, what = _FRND, True, "a narrowing float conversion"
    elif fd and fs and dst == src:
        allowed, required, what = _IRND, False, "a same-type float conversion"
    elif fd and fs and type_bits(dst) == type_bits(src):
        allowed, required, what = _FRND, False, "a conversion between 16-bit float formats"
    else:
        allowed, required, what = (), False, ("a widening float conversion" if fd else  # type: ignore[assignment]
                                              "an integer-to-integer conversion")
    bad = [m for m in irnd + frnd if m not in allowed]
    if bad:
        ok = f"; use one of {', '.join(allowed)}" if allowed else ""
        return f"rounding {bad[0]} is not allowed on {what}{ok}"
    if required and not (irnd or frnd):
        return f"{what} needs a rounding modifier ({', '.join(allowed)})"
    if ".ftz" in mods and "f32" not in (dst.lstrip("."), src.lstrip(".")):
        return ".ftz applies only to conversions from or to .f32"  # ptxas refuses it elsewhere
    return None
