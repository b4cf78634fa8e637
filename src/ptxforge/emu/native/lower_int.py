"""Integer instructions on the native tier as `semantics.integer` / `semantics.bitops` / `semantics.compare`
compute them: lop3.b32 (without a BoolOp), mul24.{lo,hi}, sad, dp4a and dp2a (every 32-bit result wraps, so
32-bit arithmetic gives the interpreter's int64 sums), shf, bfind, slct, set (without a BoolOp or .ftz),
add/sub.sat.s32 and mad.hi.sat.s32."""

from __future__ import annotations

from typing import TYPE_CHECKING

from llvmlite import ir as L

from ptxforge.emu.native import lower_round as R
from ptxforge.emu.native.lower import (
    FLOAT_CMP,
    FLOAT_CMP_U,
    I1,
    I32,
    I64,
    INT,
    INT_CMP,
    NotNative,
    V,
    bits_of,
    read,
    write,
)
from ptxforge.emu.native.lower_float import setp_float
from ptxforge.ptx import ir

if TYPE_CHECKING:
    from ptxforge.emu.native.warp import WarpEnv


def lop3(ins: ir.Instruction, env: WarpEnv) -> None:
    """lop3.b32 d, a, b, c, immLut: the OR of the truth table's minterms (bit 4a + 2b + c of immLut)."""
    ops = ins.operands
    if isinstance(ops[0], ir.PredPair) or len(ops) != 5 or not isinstance(ops[4], ir.Immediate) or \
            ins.modifiers:
        raise NotNative(f"{ins.mnemonic} (a BoolOp or a register truth table) is not in the native tier yet")
    lut = int(ops[4].value) & 0xFF
    b = env.b
    x = [read(env, o, ".b32") for o in ops[1:4]]
    nx = [b.not_(v) for v in x]
    d: L.Value = R.c(I32, 0)
    for i in range(8):
        if lut >> i & 1:
            term = b.and_(b.and_(x[0] if i & 4 else nx[0], x[1] if i & 2 else nx[1]), x[2] if i & 1 else nx[2])
            d = b.or_(d, term)
    write(env, ops[0], d)


def _ext(b: L.IRBuilder, v: L.Value, signed: bool, t: L.Type) -> L.Value:
    return b.sext(v, V(t)) if signed else b.zext(v, V(t))


def mul24(ins: ir.Instruction, env: WarpEnv) -> None:
    """mul24.{lo,hi}.{u32,s32}: the 24-bit operands' product, bits 31..0 or 47..16."""
    ty = ins.types[-1] if ins.types else ""
    mode = next((s for s in ins.suffixes if s in ("lo", "hi")), None)
    if ty not in (".u32", ".s32") or mode is None or any(m[1:] not in ("lo", "hi") for m in ins.modifiers):
        raise NotNative(f"{ins.mnemonic} is not in the native tier yet")
    b = env.b
    signed = ty == ".s32"
    xs = []
    for o in ins.operands[1:3]:
        v = b.trunc(read(env, o, ".b32"), V(L.IntType(24)))
        xs.append(_ext(b, v, signed, I64))
    p = b.mul(xs[0], xs[1])
    if mode == "hi":
        p = b.lshr(p, R.c(I64, 16))
    write(env, ins.operands[0], b.trunc(p, V(I32)))


def sad(ins: ir.Instruction, env: WarpEnv) -> None:
    """sad.type d, a, b, c: c + |a - b| (the difference in the type's order), wrapped."""
    ty = ins.types[-1] if ins.types else ""
    if ty[1:2] not in ("u", "s") or ins.modifiers:
        raise NotNative(f"{ins.mnemonic} is not in the native tier yet")
    b = env.b
    x, y, c = (read(env, o, ty) for o in ins.operands[1:4])
    less = (b.icmp_signed if ty.startswith(".s") else b.icmp_unsigned)("<", x, y)
    d = b.select(less, b.sub(y, x), b.sub(x, y))
    write(env, ins.operands[0], b.add(d, c))


def _parts(b: L.IRBuilder, v: L.Value, width: int, signed: bool) -> list[L.Value]:
    """The `width`-bit parts of a <32 x i32>, low first, extended to i32."""
    t = INT[width]
    out = []
    for k in range(32 // width):
        part = b.trunc(b.lshr(v, R.c(I32, k * width)), V(t)) if k else b.trunc(v, V(t))
        out.append(_ext(b, part, signed, I32))
    return out


def dp(ins: ir.Instruction, env: WarpEnv) -> None:
    """dp4a.atype.btype and dp2a.{lo,hi}.atype.btype: c plus byte (and halfword) products, wrapped."""
    ts = ins.types
    at, bt = (ts[0], ts[1]) if len(ts) >= 2 else (".s32", ".s32")
    if any(t not in (".u32", ".s32") for t in (at, bt)) or any(m[1:] not in ("lo", "hi") for m in ins.modifiers):
        raise NotNative(f"{ins.mnemonic} is not in the native tier yet")
    b = env.b
    a, bb, c = (read(env, o, ".b32") for o in ins.operands[1:4])
    vb = _parts(b, bb, 8, bt == ".s32")
    if ins.opcode == "dp4a":
        va = _parts(b, a, 8, at == ".s32")
        pairs = list(zip(va, vb, strict=True))
    else:
        va = _parts(b, a, 16, at == ".s32")
        k = 2 if ins.has("hi") else 0
        pairs = [(va[0], vb[k]), (va[1], vb[k + 1])]
    acc = c
    for x, y in pairs:
        acc = b.add(acc, b.mul(x, y))
    write(env, ins.operands[0], acc)


def shf(ins: ir.Instruction, env: WarpEnv) -> None:
    """shf.{l,r}.{wrap,clamp}.b32 d, a, b, c: the 64-bit b:a shifted by c (clamped to 32, or c mod 32)."""
    if not ins.has("l") and not ins.has("r"):
        raise NotNative(f"{ins.mnemonic} is not in the native tier yet")
    b = env.b
    lo, hi, n = (b.zext(read(env, o, ".b32"), V(I64)) for o in ins.operands[1:4])
    if ins.has("clamp"):
        n = b.select(b.icmp_unsigned(">", n, R.c(I64, 32)), R.c(I64, 32), n)
    else:
        n = b.and_(n, R.c(I64, 31))
    v = b.or_(b.shl(hi, R.c(I64, 32)), lo)
    r = b.lshr(b.shl(v, n), R.c(I64, 32)) if ins.has("l") else b.lshr(v, n)
    write(env, ins.operands[0], b.trunc(r, V(I32)))


def bfind(ins: ir.Instruction, env: WarpEnv) -> None:
    """bfind{.shiftamt}.{u32,s32,u64,s64}: the most significant non-sign bit's position, or 0xffffffff."""
    ty = ins.types[-1] if ins.types else ""
    if ty not in (".u32", ".s32", ".u64", ".s64"):
        raise NotNative(f"{ins.mnemonic} is not in the native tier yet")
    w = bits_of(ty)
    t = INT[w]
    b = env.b
    x = read(env, ins.operands[1], ty)
    if ty.startswith(".s"):
        x = b.select(b.icmp_signed("<", x, R.c(t, 0)), b.not_(x), x)
    ctlz = env.module_intrinsic(f"llvm.ctlz.v32i{w}", V(t), [V(t), I1])
    lead = b.trunc(b.call(ctlz, [x, L.Constant(I1, 0)]), V(I32)) if w == 64 else \
        b.call(ctlz, [x, L.Constant(I1, 0)])
    i = lead if ins.has("shiftamt") else b.sub(R.c(I32, w - 1), lead)
    none = b.icmp_unsigned("==", lead, R.c(I32, w))
    write(env, ins.operands[0], b.select(none, R.c(I32, 0xFFFFFFFF), i))


def slct(ins: ir.Instruction, env: WarpEnv) -> None:
    """slct.dtype.{s32,f32}{.ftz} d, a, b, c: c >= 0 ? a : b (f32: -0 >= 0, NaN selects b)."""
    if len(ins.types) != 2 or ins.types[1] not in (".s32", ".f32"):
        raise NotNative(f"{ins.mnemonic} is not in the native tier yet")
    dt, ct = ins.types
    b = env.b
    x, y = read(env, ins.operands[1], dt), read(env, ins.operands[2], dt)
    c = read(env, ins.operands[3], ct)
    if ct == ".s32":
        cond = b.icmp_signed(">=", c, R.c(I32, 0))
    else:
        if ins.has("ftz"):
            c = R.ftz32(b, c)
        cond = b.fcmp_ordered(">=", b.bitcast(c, V(L.FloatType())), L.Constant(V(L.FloatType()), 0.0))
    write(env, ins.operands[0], b.select(cond, x, y))


def set_(ins: ir.Instruction, env: WarpEnv) -> None:
    """set.CmpOp.dtype.stype (dtype u32/s32/b32: all ones or 0; f32: 1.0 or 0.0) of integer or f32/f64 sources."""
    if len(ins.types) != 2 or len(ins.modifiers) != 1:
        raise NotNative(f"{ins.mnemonic} (BoolOp, .ftz or packed forms) is not in the native tier yet")
    dt, st = ins.types
    cmp = ins.modifiers[0][1:]
    if dt not in (".u32", ".s32", ".b32", ".f32"):
        raise NotNative(f"{ins.mnemonic} is not in the native tier yet")
    b = env.b
    x, y = read(env, ins.operands[1], st), read(env, ins.operands[2], st)
    if st in (".f32", ".f64"):
        if cmp not in FLOAT_CMP and cmp not in FLOAT_CMP_U and cmp not in ("num", "nan"):
            raise NotNative(f"{ins.mnemonic} is not in the native tier yet")
        r = setp_float(env, cmp, x, y, st)
    elif st[1:2] in ("u", "s", "b") and cmp in INT_CMP:
        signed = st.startswith(".s") and cmp in ("lt", "le", "gt", "ge")
        r = (b.icmp_signed if signed else b.icmp_unsigned)(INT_CMP[cmp], x, y)
    else:
        raise NotNative(f"{ins.mnemonic} is not in the native tier yet")
    one = 0x3F800000 if dt == ".f32" else 0xFFFFFFFF
    write(env, ins.operands[0], b.select(r, R.c(I32, one), R.c(I32, 0)))


def sat_s32(ins: ir.Instruction, env: WarpEnv) -> None:
    """add.sat.s32 / sub.sat.s32 (the exact result clamped to s32), mad.hi.sat.s32 ((a*b) >> 32, plus c,
    clamped)."""
    op = ins.opcode
    mods = sorted(m[1:] for m in ins.modifiers)
    if list(ins.types[-1:]) != [".s32"] or mods != (["hi", "sat"] if op == "mad" else ["sat"]):
        raise NotNative(f"{ins.mnemonic} is not in the native tier yet")
    b = env.b
    x, y = read(env, ins.operands[1], ".s32"), read(env, ins.operands[2], ".s32")
    if op == "mad":
        p = b.mul(b.sext(x, V(I64)), b.sext(y, V(I64)))
        x, y = b.trunc(b.ashr(p, R.c(I64, 32)), V(I32)), read(env, ins.operands[3], ".s32")
    name = "llvm.ssub.sat.v32i32" if op == "sub" else "llvm.sadd.sat.v32i32"
    fn = env.module_intrinsic(name, V(I32), [V(I32), V(I32)])
    write(env, ins.operands[0], b.call(fn, [x, y]))


LOWER = {"lop3": lop3, "mul24": mul24, "sad": sad, "dp4a": dp, "dp2a": dp, "shf": shf, "bfind": bfind,
         "slct": slct, "set": set_}
