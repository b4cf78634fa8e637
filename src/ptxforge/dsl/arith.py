"""Arithmetic, logic, comparison, move and conversion instructions: one call, one instruction.

The type suffix comes from the operands: `add(a, b)` on two `.u32` registers is `add.u32`. Python
numbers become immediates of that type. Operands of different types are an error at the call; read a
register as another type of the same width with `r.view(t)` or convert it with `cvt`.
"""

from __future__ import annotations

import sys
from typing import TYPE_CHECKING

import ml_dtypes
import numpy as np

from ptxforge.dsl import types as T
from ptxforge.dsl.builder import current
from ptxforge.dsl.errors import DSLError, DSLTypeError
from ptxforge.dsl.types import DType
from ptxforge.dsl.values import Pred, ReadOnlyReg, Reg, SReg, bind_operators, immediate, new_reg, value_of
from ptxforge.ptx import ir
from ptxforge.ptx.isa import modifier_slot

if TYPE_CHECKING:
    from collections.abc import Iterable
    from typing import Literal, TypeAlias

    from ptxforge.dsl.types import DTypeLike
    from ptxforge.dsl.values import Index, Value

    Rounding: TypeAlias = Literal["rn", "rz", "rm", "rp"]  # float rounding: nearest even, zero, -inf, +inf

ROUNDINGS = ("rn", "rz", "rm", "rp")  # (typed out as the `Rounding` type is; tests/dsl checks it against the table)
INT_ROUNDINGS = ("rni", "rzi", "rmi", "rpi")


# --------------------------------------------------------------------------- operand helpers


def _type_list(types: list[DType]) -> str:
    names = [str(t) for t in types]
    return names[0] if len(names) == 1 else ", ".join(names[:-1]) + " and " + names[-1]


def fits(have: DType, want: DType) -> bool:
    """May a register of type `have` stand where `want` is asked for explicitly (type=, out=)? Same type,
    or same width where one is a bit type or both are integers (PTX's own rule)."""
    if have == want:
        return True
    if have.bits != want.bits or "pred" in (have.kind, want.kind):
        return False
    return "b" in (have.kind, want.kind) or (have.is_int and want.is_int)


def unify(op: str, vals: Iterable[Value], t: DTypeLike | None = None) -> DType:
    """The common type of the register operands (or `t`); DSLTypeError if they differ."""
    vals = [value_of(v) for v in vals]
    regs = [v for v in vals if isinstance(v, Reg)]
    if t is not None:
        t = T.dtype(t)
        for r in regs:
            if not fits(r.type, t):
                raise DSLTypeError(f"{op}: operand {r.name} is {r.type}, expected {t}")
        return t
    if not regs:
        raise DSLTypeError(f"{op}: at least one operand must be a register (or pass type=...)")
    first = regs[0].type
    if any(r.type != first for r in regs):
        raise DSLTypeError(f"{op}: operands must share type {first}, got {_type_list([r.type for r in regs])}")
    return first


def operand(v: object, t: DType, op: str = "") -> ir.Operand:
    """The IR operand for a register, special register or Python number used as type t."""
    v = value_of(v)
    if isinstance(v, Reg):
        return v.operand
    if isinstance(v, int | float):
        imm = immediate(v, t)
        if imm is not None:
            return imm
        return mov(_bits_of(v, t), type=T.dtype(t.storage)).operand  # f16/bf16: no literal syntax
    raise DSLTypeError(f"{op + ': ' if op else ''}cannot use {type(v).__name__} {v!r} as a {t} operand")


def _bits_of(v: int | float, t: DType) -> int:
    if t.name == ".f16":
        return int(np.array(v, np.float16).view(np.uint16))
    if t.name == ".bf16":
        return int(np.array(v, ml_dtypes.bfloat16).view(np.uint16))
    raise DSLTypeError(f"no literal for {t}; build the value with cvt")


def result(t: DType, out: Reg | None, op: str) -> Reg:
    if out is None:
        return new_reg(t)
    if not isinstance(out, Reg):
        raise DSLTypeError(f"{op}: out= must be a register, got {type(out).__name__}")
    if isinstance(out, ReadOnlyReg):
        out.set(None)  # raises: special registers are read-only
    if not fits(out.type, t):
        raise DSLTypeError(f"{op}: out={out.name} is {out.type}, but the result is {t}")
    return out


def _emit(opcode: str, mods: Iterable[str], t: DType, out: Reg | None, srcs: Iterable[Value],
          op: str | None = None) -> Reg:
    op = op or opcode
    d = result(t, out, op)
    ops = [operand(s, t, op) for s in srcs]
    current().emit(opcode, [*mods, t.name], [d.operand, *ops])
    return d


def _bits(t: DType) -> str:
    return ".pred" if t.kind == "pred" else f".b{t.bits}"


def _fmods(t: DType, rnd: Rounding | None, ftz: bool = False, sat: bool = False) -> list[str]:
    mods: list[str] = []
    if rnd:
        if rnd not in ROUNDINGS:
            raise DSLTypeError(f"rounding must be one of {', '.join(ROUNDINGS)}, got {rnd!r}")
        mods.append(rnd)
    if ftz:
        mods.append("ftz")
    if sat:
        mods.append("sat")
    return mods


# --------------------------------------------------------------------------- arithmetic


def add(a: Value, b: Value, *, rnd: Rounding | None = None, sat: bool = False, ftz: bool = False,
        out: Reg | None = None, type: DTypeLike | None = None) -> Reg:
    """`add.T d, a, b`; `sat` clamps (.s32, floats), `rnd` picks float rounding."""
    t = unify("add", [a, b], type)
    return _emit("add", _fmods(t, rnd, ftz, sat), t, out, [a, b])


def sub(a: Value, b: Value, *, rnd: Rounding | None = None, sat: bool = False, ftz: bool = False,
        out: Reg | None = None, type: DTypeLike | None = None) -> Reg:
    """`sub.T d, a, b`."""
    t = unify("sub", [a, b], type)
    return _emit("sub", _fmods(t, rnd, ftz, sat), t, out, [a, b])


def mul(a: Value, b: Value, *, rnd: Rounding | None = None, ftz: bool = False, sat: bool = False,
        out: Reg | None = None, type: DTypeLike | None = None) -> Reg:
    """`mul.lo` on integers (the low half, as C does), `mul` on floats."""
    t = unify("mul", [a, b], type)
    mods = ["lo"] if t.is_int else _fmods(t, rnd, ftz, sat)
    return _emit("mul", mods, t, out, [a, b])


def mul_hi(a: Value, b: Value, *, out: Reg | None = None, type: DTypeLike | None = None) -> Reg:
    """`mul.hi.T`: the high half of the full product."""
    t = unify("mul.hi", [a, b], type)
    return _emit("mul", ["hi"], t, out, [a, b], "mul.hi")


def _wide(t: DType) -> DType:
    if not t.is_int or t.bits not in (16, 32):
        raise DSLTypeError(f"mul.wide/mad.wide take 16- or 32-bit integers, got {t}")
    return T.ALL[f".{t.kind}{t.bits * 2}"]


def mul_wide(a: Value, b: Value, *, out: Reg | None = None, type: DTypeLike | None = None) -> Reg:
    """`mul.wide.T`: the full product in a register twice as wide (u32 x u32 -> u64)."""
    t = unify("mul.wide", [a, b], type)
    d = result(_wide(t), out, "mul.wide")
    current().emit("mul", ["wide", t.name], [d.operand, operand(a, t), operand(b, t)])
    return d


def mad(a: Value, b: Value, c: Value, *, rnd: Rounding | None = "rn", out: Reg | None = None,
        type: DTypeLike | None = None) -> Reg:
    """`mad.lo.T d, a, b, c` on integers (a*b+c); `mad.rn.T` on floats."""
    t = unify("mad", [a, b, c], type)
    mods = ["lo"] if t.is_int else _fmods(t, rnd)
    return _emit("mad", mods, t, out, [a, b, c])


def mad_wide(a: Value, b: Value, c: Value, *, out: Reg | None = None, type: DTypeLike | None = None) -> Reg:
    """`mad.wide.T d, a, b, c`: a*b (16/32-bit) widened, plus c (twice as wide)."""
    t = unify("mad.wide", [a, b], type)
    w = _wide(t)
    c = value_of(c)
    if isinstance(c, Reg) and c.type.bits != w.bits:
        raise DSLTypeError(f"mad.wide: the addend must be {w}, got {c.type}")
    d = result(w, out, "mad.wide")
    current().emit("mad", ["wide", t.name], [d.operand, operand(a, t), operand(b, t), operand(c, w)])
    return d


def fma(a: Value, b: Value, c: Value, *, rnd: Rounding | None = "rn", ftz: bool = False, sat: bool = False,
        relu: bool = False, out: Reg | None = None, type: DTypeLike | None = None) -> Reg:
    """`fma.rn.T d, a, b, c`: fused a*b+c with one rounding."""
    t = unify("fma", [a, b, c], type)
    mods = _fmods(t, rnd, ftz, sat) + (["relu"] if relu else [])
    return _emit("fma", mods, t, out, [a, b, c])


def div(a: Value, b: Value, *, rnd: Rounding | None = None, approx: bool = False, full: bool = False, ftz: bool = False,
        out: Reg | None = None, type: DTypeLike | None = None) -> Reg:
    """`div.T`: integer division, or float division that is IEEE (`rnd='rn'`) or `approx`/`full`."""
    t = unify("div", [a, b], type)
    mods: list[str] = []
    if t.is_float:
        if approx or full:
            mods.append("approx" if approx else "full")
        else:
            mods.append(rnd or "rn")
        if ftz:
            mods.append("ftz")
    return _emit("div", mods, t, out, [a, b])


def rem(a: Value, b: Value, *, out: Reg | None = None, type: DTypeLike | None = None) -> Reg:
    """`rem.T` (integers)."""
    t = unify("rem", [a, b], type)
    return _emit("rem", [], t, out, [a, b])


def min_(a: Value, b: Value, *, nan: bool = False, ftz: bool = False, out: Reg | None = None,
         type: DTypeLike | None = None) -> Reg:
    """`min.T`."""
    t = unify("min", [a, b], type)
    return _emit("min", (["ftz"] if ftz else []) + (["NaN"] if nan else []), t, out, [a, b], "min")


def max_(a: Value, b: Value, *, nan: bool = False, ftz: bool = False, relu: bool = False, out: Reg | None = None,
         type: DTypeLike | None = None) -> Reg:
    """`max.T`."""
    t = unify("max", [a, b], type)
    mods = (["ftz"] if ftz else []) + (["NaN"] if nan else []) + (["relu"] if relu else [])
    return _emit("max", mods, t, out, [a, b], "max")


def abs_(a: Value, *, ftz: bool = False, out: Reg | None = None, type: DTypeLike | None = None) -> Reg:
    """`abs.T`."""
    t = unify("abs", [a], type)
    return _emit("abs", ["ftz"] if ftz else [], t, out, [a], "abs")


def neg(a: Value, *, out: Reg | None = None, type: DTypeLike | None = None) -> Reg:
    """`neg.T`."""
    t = unify("neg", [a], type)
    return _emit("neg", [], t, out, [a])


def _float_unary(name: str, a: Value, mods: Iterable[str], out: Reg | None, type: DTypeLike | None,
                 types: object = None) -> Reg:
    t = unify(name, [a], type)
    if not t.is_float:
        raise DSLTypeError(f"{name}: needs a float register, got {t}")
    return _emit(name, mods, t, out, [a])


def ex2(a: Value, *, ftz: bool = False, out: Reg | None = None, type: DTypeLike | None = None) -> Reg:
    """`ex2.approx.T`: 2**a."""
    return _float_unary("ex2", a, ["approx"] + (["ftz"] if ftz else []), out, type)


def lg2(a: Value, *, ftz: bool = False, out: Reg | None = None, type: DTypeLike | None = None) -> Reg:
    """`lg2.approx.T`: log2(a)."""
    return _float_unary("lg2", a, ["approx"] + (["ftz"] if ftz else []), out, type)


def rcp(a: Value, *, approx: bool = False, rnd: Rounding = "rn", ftz: bool = False, out: Reg | None = None,
        type: DTypeLike | None = None) -> Reg:
    """`rcp.rn.T` (IEEE) or `rcp.approx.T`: 1/a."""
    return _float_unary("rcp", a, ["approx" if approx else rnd] + (["ftz"] if ftz else []), out, type)


def sqrt(a: Value, *, approx: bool = False, rnd: Rounding = "rn", ftz: bool = False, out: Reg | None = None,
         type: DTypeLike | None = None) -> Reg:
    """`sqrt.rn.T` or `sqrt.approx.T`."""
    return _float_unary("sqrt", a, ["approx" if approx else rnd] + (["ftz"] if ftz else []), out, type)


def rsqrt(a: Value, *, ftz: bool = False, out: Reg | None = None, type: DTypeLike | None = None) -> Reg:
    """`rsqrt.approx.T`: 1/sqrt(a)."""
    return _float_unary("rsqrt", a, ["approx"] + (["ftz"] if ftz else []), out, type)


def sin(a: Value, *, ftz: bool = False, out: Reg | None = None) -> Reg:
    """`sin.approx.f32`."""
    return _float_unary("sin", a, ["approx"] + (["ftz"] if ftz else []), out, None)


def cos(a: Value, *, ftz: bool = False, out: Reg | None = None) -> Reg:
    """`cos.approx.f32`."""
    return _float_unary("cos", a, ["approx"] + (["ftz"] if ftz else []), out, None)


def tanh(a: Value, *, out: Reg | None = None) -> Reg:
    """`tanh.approx.T`."""
    return _float_unary("tanh", a, ["approx"], out, None)


# --------------------------------------------------------------------------- bits and logic


def _logic(name: str, a: Value, b: Value, out: Reg | None, type: DTypeLike | None) -> Reg:
    t = unify(name, [a, b], type)
    bt = T.pred if t.kind == "pred" else T.dtype(_bits(t))
    d = result(t, out, name)
    current().emit(name, [bt.name], [d.operand, operand(a, bt, name), operand(b, bt, name)])
    return d


def and_(a: Value, b: Value, *, out: Reg | None = None, type: DTypeLike | None = None) -> Reg:
    """`and.bN` (or `and.pred`)."""
    return _logic("and", a, b, out, type)


def or_(a: Value, b: Value, *, out: Reg | None = None, type: DTypeLike | None = None) -> Reg:
    """`or.bN` (or `or.pred`)."""
    return _logic("or", a, b, out, type)


def xor(a: Value, b: Value, *, out: Reg | None = None, type: DTypeLike | None = None) -> Reg:
    """`xor.bN` (or `xor.pred`)."""
    return _logic("xor", a, b, out, type)


def not_(a: Value, *, out: Reg | None = None, type: DTypeLike | None = None) -> Reg:
    """`not.bN` (or `not.pred`)."""
    t = unify("not", [a], type)
    bt = T.pred if t.kind == "pred" else T.dtype(_bits(t))
    d = result(t, out, "not")
    src = value_of(a)
    if isinstance(src, Pred) and src.negated:
        src = Pred(src.name)
    current().emit("not", [bt.name], [d.operand, operand(src, bt, "not")])
    return d


def _shift_amount(op: str, b: Value) -> ir.Operand:
    b = value_of(b)
    if isinstance(b, Reg):
        if b.type.bits != 32 or not (b.type.is_int or b.type.kind == "b"):
            raise DSLTypeError(f"{op}: the shift amount must be a 32-bit integer, got {b.type}")
        return b.view(T.u32).operand
    return operand(b, T.u32, op)


def shl(a: Value, b: Index, *, out: Reg | None = None, type: DTypeLike | None = None) -> Reg:
    """`shl.bN d, a, b`."""
    t = unify("shl", [a], type)
    d = result(t, out, "shl")
    current().emit("shl", [_bits(t)], [d.operand, operand(a, t), _shift_amount("shl", b)])
    return d


def shr(a: Value, b: Index, *, out: Reg | None = None, type: DTypeLike | None = None) -> Reg:
    """`shr.sN` (arithmetic) on signed, `shr.uN`/`shr.bN` (logical) on the others."""
    t = unify("shr", [a], type)
    d = result(t, out, "shr")
    current().emit("shr", [t.name if t.is_int else _bits(t)], [d.operand, operand(a, t), _shift_amount("shr", b)])
    return d


def _unary_bits(name: str, a: Value, out: Reg | None, ret_u32: bool) -> Reg:
    t = unify(name, [a])
    d = result(T.u32 if ret_u32 else t, out, name)
    current().emit(name, [_bits(t)], [d.operand, operand(a, t)])
    return d


def popc(a: Value, *, out: Reg | None = None) -> Reg:
    """`popc.bN`: number of set bits (u32)."""
    return _unary_bits("popc", a, out, True)


def clz(a: Value, *, out: Reg | None = None) -> Reg:
    """`clz.bN`: leading zeros (u32)."""
    return _unary_bits("clz", a, out, True)


def brev(a: Value, *, out: Reg | None = None) -> Reg:
    """`brev.bN`: bit reverse."""
    return _unary_bits("brev", a, out, False)


def bfe(a: Value, pos: Index, length: Index, *, out: Reg | None = None) -> Reg:
    """`bfe.T d, a, pos, len`: extract a bit field (sign-extends on signed types)."""
    t = unify("bfe", [a])
    return _emit_mixed("bfe", [t.name], t, out, [(a, t), (pos, T.u32), (length, T.u32)])


def bfi(f: Value, b: Value, pos: Index, length: Index, *, out: Reg | None = None) -> Reg:
    """`bfi.bN d, f, b, pos, len`: insert field f into b."""
    t = unify("bfi", [f, b])
    return _emit_mixed("bfi", [_bits(t)], t, out, [(f, t), (b, t), (pos, T.u32), (length, T.u32)])


def _bit_mode(op: str, mode: str) -> str:
    if mode not in modifier_slot(op, "mode"):
        raise DSLError(f"{op}: mode {mode!r}; expected one of {sorted(modifier_slot(op, 'mode'))}")
    return mode


def bmsk(start: Index, width: Index, *, mode: str = "clamp", out: Reg | None = None) -> Reg:
    """`bmsk.mode.b32 d, a, b`: `width` set bits from bit `start` (mode clamp or wrap for values past 32)."""
    return _emit_mixed("bmsk", [_bit_mode("bmsk", mode), ".b32"], T.b32, out, [(start, T.u32), (width, T.u32)])


def szext(a: Value, width: Index, *, mode: str = "clamp", out: Reg | None = None,
          type: DTypeLike | None = None) -> Reg:
    """`szext.mode.T d, a, b`: the low `width` bits of a, sign-extended (s32) or zero-extended (u32)."""
    t = unify("szext", [a], type)
    if t.name not in (".u32", ".s32"):
        raise DSLTypeError(f"szext: operand type {t.name}; szext takes .u32 or .s32 (pass type=)")
    return _emit_mixed("szext", [_bit_mode("szext", mode), t.name], t, out, [(a, t), (width, T.u32)])


def prmt(a: Value, b: Value, selector: Index, *, mode: str | None = None, out: Reg | None = None) -> Reg:
    """`prmt.b32 d, a, b, c`: pick bytes of {b, a} by the selector nibbles."""
    t = unify("prmt", [a, b])
    return _emit_mixed("prmt", ([mode] if mode else []) + [".b32"], t, out, [(a, t), (b, t), (selector, T.b32)])


def lop3(a: Value, b: Value, c: Value, lut: int, *, out: Reg | None = None) -> Reg:
    """`lop3.b32 d, a, b, c, immLut`: any three-input logic function."""
    t = unify("lop3", [a, b, c])
    return _emit_mixed("lop3", [".b32"], t, out, [(a, t), (b, t), (c, t), (lut, T.b32)])


def _emit_mixed(opcode: str, mods: Iterable[str], t: DType, out: Reg | None,
                typed_srcs: Iterable[tuple[Value, DType]]) -> Reg:
    d = result(t, out, opcode)
    current().emit(opcode, mods, [d.operand, *(_typed(v, vt, opcode) for v, vt in typed_srcs)])
    return d


def _typed(v: Value, t: DType, op: str) -> ir.Operand:
    v = value_of(v)
    if isinstance(v, Reg):
        if v.type.bits != t.bits:
            raise DSLTypeError(f"{op}: operand {v.name} is {v.type}, expected a {t.bits}-bit value")
        return v.operand
    return operand(v, t, op)


# --------------------------------------------------------------------------- compare, select, move


_CMPS = modifier_slot("setp", "cmp_int") | modifier_slot("setp", "cmp_float")  # setp's CmpOp, from the ISA table


def setp(cmp: str, a: Value, b: Value, *, ftz: bool = False, out: Reg | None = None,
         type: DTypeLike | None = None) -> Pred:
    """`setp.cmp.T p, a, b`: a predicate from a comparison."""
    if cmp not in _CMPS:
        raise DSLTypeError(f"setp: unknown comparison {cmp!r}")
    t = unify(f"setp.{cmp}", [a, b], type)
    if t.kind == "b" and cmp not in ("eq", "ne"):
        raise DSLTypeError(f"setp.{cmp}: {t} registers have no order (signed or unsigned?); view them as "
                           f"u{t.bits}/s{t.bits} first")
    if t.kind == "pred":
        raise DSLTypeError("setp: compare predicates with xor/and, not setp")
    d = result(T.pred, out, "setp")
    current().emit("setp", [cmp] + (["ftz"] if ftz else []) + [t.name], [d.operand, operand(a, t), operand(b, t)])
    return d  # type: ignore[return-value]  # a .pred result register is a Pred (new_reg)


def selp(a: Value, b: Value, p: Pred, *, out: Reg | None = None, type: DTypeLike | None = None) -> Reg:
    """`selp.T d, a, b, p`: p ? a : b."""
    t = unify("selp", [a, b], type)
    p = value_of(p)
    if not isinstance(p, Pred):
        raise DSLTypeError(f"selp: the condition must be a predicate, got {p!r}")
    st = T.dtype(t.storage) if t.storage != t.name else t
    d = result(t, out, "selp")
    current().emit("selp", [st.name if st.kind != "b" else _bits(st)],
                   [d.operand, operand(a, st), operand(b, st), p.operand])
    return d


def _mov_type(t: DType) -> str:
    if t.kind == "pred":
        return ".pred"
    if t.storage != t.name:  # f16, bf16, fp8, packed: bit-size move
        return _bits(T.dtype(t.storage))
    return t.name


def mov(v: Value, *, out: Reg | None = None, type: DTypeLike | None = None) -> Reg:
    """`mov.T d, v`: copy a register, a special register or a constant into a (new) register."""
    if isinstance(v, SReg):
        v = v.get()
    if type is not None:
        t = T.dtype(type)
    elif isinstance(v, Reg):
        t = v.type
    elif isinstance(out, Reg):
        t = out.type
    elif isinstance(v, float):
        t = T.f32
    elif isinstance(v, int) and not isinstance(v, bool):
        t = T.s32 if -(1 << 31) <= v < (1 << 31) else T.s64
    else:
        raise DSLTypeError(f"mov: cannot move {v.__class__.__name__} {v!r}")
    if isinstance(v, Reg) and v.type != t and not (v.type.bits == t.bits and "b" in (v.type.kind, t.kind)):
        raise DSLTypeError(f"mov: operands must share type {t}, got {t} and {v.type}")
    d = result(t, out, "mov")
    if isinstance(v, Pred) and v.negated:
        not_(Pred(v.name), out=d)
        return d
    mt = _mov_type(t)
    if isinstance(v, int | float) and immediate(v, t) is None:
        v = _bits_of(v, t)
    src = v.operand if isinstance(v, Reg) else operand(v, T.dtype(mt) if mt != ".pred" else T.pred, "mov")
    current().emit("mov", [mt], [d.operand, src])
    return d


def bitcast(v: Reg | SReg, t: DTypeLike, *, out: Reg | None = None) -> Reg:
    """`mov.bN d, v`: the bits of v in a new register of type t (same width), e.g. f32 -> u32."""
    t = T.dtype(t)
    v = value_of(v)
    if not isinstance(v, Reg) or v.type.bits != t.bits:
        raise DSLTypeError(f"bitcast: needs a register of {t.bits} bits, got {v!r}")
    d = result(t, out, "bitcast")
    current().emit("mov", [f".b{t.bits}"], [d.operand, v.operand])
    return d


def pack(*parts: Reg | SReg, out: Reg | None = None) -> Reg:
    """`mov.bN d, {lo, ..., hi}`: join equal-size registers (first = lowest bits) into one."""
    if len(parts) not in (2, 4):
        raise DSLTypeError(f"pack: takes 2 or 4 registers, got {len(parts)}")
    regs = [value_of(p) for p in parts]
    if not all(isinstance(r, Reg) for r in regs) or len({r.type.bits for r in regs}) != 1:
        raise DSLTypeError("pack: all parts must be registers of the same width")
    bits = regs[0].type.bits * len(regs)
    t = T.dtype(f".b{bits}")
    d = result(t, out, "pack")
    current().emit("mov", [t.name], [d.operand, ir.Vector(tuple(r.operand for r in regs))])
    return d


def unpack(v: Reg | SReg, parts: int = 2, type: DTypeLike | None = None) -> tuple[Reg, ...]:
    """`mov.bN {lo, ..., hi}, v`: split a register into equal parts (first = lowest bits)."""
    v = value_of(v)
    if not isinstance(v, Reg):
        raise DSLTypeError("unpack: needs a register")
    pt = T.dtype(type) if type is not None else T.dtype(f".b{v.type.bits // parts}")
    regs = [new_reg(pt) for _ in range(parts)]
    current().emit("mov", [f".b{v.type.bits}"], [ir.Vector(tuple(r.operand for r in regs)), v.view(
        T.dtype(f".b{v.type.bits}")).operand])
    return tuple(regs)


# --------------------------------------------------------------------------- conversions


def _default_rounding(to: DType, frm: DType) -> str | None:
    if to.is_float and frm.is_float:
        if to.bits < frm.bits or "x2" in to.name or "x2" in frm.name:
            return "rn"
        return None
    if to.is_float and not frm.is_float:
        return "rn"
    if frm.is_float and not to.is_float:
        return "rzi"  # C's truncation toward zero
    return None


def cvt(x: Reg | SReg, to: DTypeLike, *, rnd: str | None = "default", ftz: bool = False, sat: bool = False,
        relu: bool = False, satfinite: bool = False, out: Reg | None = None) -> Reg:
    """`cvt.rnd.to.from d, x`. Rounding defaults to C's: `rzi` float->int, `rn` int->float and
    narrowing float conversions, none for widening ones; pass `rnd=None` for none."""
    to = T.dtype(to)
    x = value_of(x)
    if not isinstance(x, Reg):
        raise DSLTypeError(f"cvt: the source must be a register, got {x!r}")
    frm = x.type
    if rnd == "default":
        rnd = _default_rounding(to, frm)
    fp8 = to.name in (".e4m3x2", ".e5m2x2")
    mods = [rnd] if rnd else []
    if fp8:
        mods += ["satfinite"] + (["relu"] if relu else [])
    else:
        mods += (["ftz"] if ftz else []) + (["sat"] if sat else []) + (["relu"] if relu else []) + (
            ["satfinite"] if satfinite else [])
    d = result(to, out, "cvt")
    current().emit("cvt", [*mods, to.name, frm.name], [d.operand, x.operand])
    return d


def cvt_pack(lo: Value, hi: Value, to: DTypeLike, *, relu: bool = False, out: Reg | None = None) -> Reg:
    """Two f32 values converted and packed into one register, `lo` in the low half:
    `cvt.rn.satfinite.e4m3x2.f32 d, hi, lo` (and .e5m2x2, .f16x2, .bf16x2)."""
    to = T.dtype(to)
    if to.name not in (".e4m3x2", ".e5m2x2", ".f16x2", ".bf16x2"):
        raise DSLTypeError(f"cvt_pack: packs into e4m3x2, e5m2x2, f16x2 or bf16x2, not {to}")
    t = unify("cvt_pack", [lo, hi], T.f32)
    mods = ["rn"] + (["satfinite"] if to.name.startswith(".e") else []) + (["relu"] if relu else [])
    d = result(to, out, "cvt_pack")
    current().emit("cvt", [*mods, to.name, t.name], [d.operand, operand(hi, t), operand(lo, t)])
    return d


bind_operators(sys.modules[__name__])  # Reg's operators (r + 1, r < n) call this module's functions
