"""One PTX instruction as LLVM vector IR for a warp's 32 lanes, with the interpreter's exact semantics.

Every value is a <32 x T> vector, one element per lane; lanes that do not stand at the instruction compute
too, on whatever their registers hold, and the warp environment keeps their effects out (registers are
written under the active mask, memory is touched only for active lanes). Registers hold the bits of their
declared width as the interpreter's storage dtypes do (a predicate as i1). Anything whose exact result
LLVM has no plain form for (other rounding modes, .ftz, .sat, conversions to or from floats, f64 NaN
payloads, division) raises `NotNative`, so the kernel falls back to the interpreter: never a result that
differs.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import numpy as np
from llvmlite import ir as L

from ptxforge.emu.errors import EmulatorError
from ptxforge.ptx import ir

if TYPE_CHECKING:
    from ptxforge.emu.native.codegen import WarpEnv

I1, I8, I16, I32, I64 = L.IntType(1), L.IntType(8), L.IntType(16), L.IntType(32), L.IntType(64)
F32, F64 = L.FloatType(), L.DoubleType()
INT = {8: I8, 16: I16, 32: I32, 64: I64}
WARP = 32


def V(t: L.Type) -> L.VectorType:
    """A warp's vector of `t`."""
    return L.VectorType(t, WARP)


SREGS = ("%tid.x", "%tid.y", "%tid.z", "%ntid.x", "%ntid.y", "%ntid.z", "%ctaid.x", "%ctaid.y", "%ctaid.z",
         "%nctaid.x", "%nctaid.y", "%nctaid.z", "%laneid", "%warpid")
INT_CMP = {"eq": "==", "ne": "!=", "lt": "<", "le": "<=", "gt": ">", "ge": ">=",
           "lo": "<", "ls": "<=", "hi": ">", "hs": ">="}
FLOAT_CMP = {"eq": "==", "ne": "!=", "lt": "<", "le": "<=", "gt": ">", "ge": ">="}  # ordered ('ne' too)
FLOAT_CMP_U = {"equ": "==", "neu": "!=", "ltu": "<", "leu": "<=", "gtu": ">", "geu": ">="}
LOADS = ("global", "shared", "param")


class NotNative(EmulatorError):
    """The instruction (or kernel) has no native form yet: the launch falls back to the interpreter."""

    def __init__(self, msg: str, pc: int | None = None):
        super().__init__(msg)
        self.pc = pc


def type_of(ins: ir.Instruction) -> str:
    ts = ins.types
    if not ts:
        raise NotNative("no type suffix")
    return ts[-1]


def bits_of(ty: str) -> int:
    return 1 if ty == ".pred" else ir.type_bits(ty)


def signed(ty: str) -> bool:
    return ty.startswith(".s")


# ---------------------------------------------------------------------------------------------- operands
def read(env: WarpEnv, o: Any, ty: str) -> L.Value:
    """Operand `o` read as PTX type `ty`: a <32 x iN> (N = the type's width; i1 for .pred)."""
    b = env.b
    bits = bits_of(ty)
    t = V(I1 if bits == 1 else INT[bits])
    if isinstance(o, ir.Register):
        slot, rty = env.reg(o)
        rbits = bits_of(rty)
        if rbits != bits and not (bits < rbits and bits > 1):
            raise NotNative(f"{o.name} ({rty}) read as {ty}")
        v = env.load_reg(slot)
        return b.trunc(v, t) if bits < rbits else v
    if isinstance(o, ir.Immediate):
        return L.Constant(t, _imm_bits(o, ty))
    if isinstance(o, ir.SpecialRegister):
        v = env.sreg(o.name)
        return v if bits == 32 else b.zext(v, t) if bits > 32 else b.trunc(v, t)
    if isinstance(o, ir.Symbol | ir.Register):
        raise NotNative(f"operand {o}")
    raise NotNative(f"operand {type(o).__name__}")


def _imm_bits(o: ir.Immediate, ty: str) -> int:
    bits = bits_of(ty)
    text = o.text.lower()
    if ty in (".f32", ".f64"):
        if text.startswith(("0f", "0d")):
            return int(text[2:], 16)
        if isinstance(o.value, float) or ty == ".f32":
            f = np.asarray(float(o.value), np.float32 if ty == ".f32" else np.float64)
            return int(f.view(np.uint32 if ty == ".f32" else np.uint64))
    if isinstance(o.value, float):
        raise NotNative(f"float immediate {o.text} for {ty}")
    return int(o.value) & ((1 << bits) - 1)


def write(env: WarpEnv, o: Any, v: L.Value) -> None:
    """Store `v` (a <32 x iN>) into register operand `o`, truncated to the register's width."""
    if isinstance(o, ir.Sink):
        return
    if not isinstance(o, ir.Register):
        raise NotNative(f"destination {type(o).__name__}")
    slot, rty = env.reg(o)
    b = env.b
    rbits = bits_of(rty)
    vbits = v.type.element.width
    if vbits > rbits:
        v = b.trunc(v, V(I1 if rbits == 1 else INT[rbits]))
    elif vbits < rbits:
        if vbits != 1:
            raise NotNative(f"{vbits}-bit value into {o.name} ({rty})")
        v = b.zext(v, V(INT[rbits]))
    env.store_reg(slot, v)


def _f32(b: L.IRBuilder, v: L.Value) -> L.Value:
    return b.bitcast(v, V(F32))


# ---------------------------------------------------------------------------------------------- integer
def _arith(ins: ir.Instruction, env: WarpEnv) -> None:
    """Integer add/sub/mul/mad (the float forms are lower_float's and lower_half's)."""
    ty = type_of(ins)
    if ty.startswith((".f", ".bf")):
        raise NotNative(f"{ins.mnemonic} is not in the native tier yet")
    b = env.b
    op = ins.opcode
    ops = ins.operands
    mods = [m[1:] for m in ins.modifiers]
    if any(m not in ("lo", "wide", "hi") for m in mods):
        raise NotNative(f"{ins.mnemonic} is not in the native tier yet")
    if "hi" in mods or (ty in PACKED16 and (op not in ("add", "sub") or mods)):
        raise NotNative(f"{ins.mnemonic} is not in the native tier yet")
    if op in ("add", "sub"):
        x, y = read(env, ops[1], ty), read(env, ops[2], ty)
        fn = b.add if op == "add" else b.sub
        write(env, ops[0], _per_half(b, fn, x, y) if ty in PACKED16 else fn(x, y))
        return
    wide = "wide" in mods
    x, y = read(env, ops[1], ty), read(env, ops[2], ty)
    if wide:
        wt = V(INT[2 * x.type.element.width])
        ext = b.sext if signed(ty) else b.zext
        x, y = ext(x, wt), ext(y, wt)
    r = b.mul(x, y)
    if op == "mad":
        r = b.add(r, read(env, ops[3], f"{'.s' if signed(ty) else '.b'}{r.type.element.width}"))
    write(env, ops[0], r)


def _bitwise(ins: ir.Instruction, env: WarpEnv) -> None:
    ty = type_of(ins)
    b = env.b
    ops = ins.operands
    if ins.opcode == "not":
        write(env, ops[0], b.not_(read(env, ops[1], ty)))
        return
    x, y = read(env, ops[1], ty), read(env, ops[2], ty)
    f = {"and": b.and_, "or": b.or_, "xor": b.xor}[ins.opcode]
    write(env, ops[0], f(x, y))


def _shift(ins: ir.Instruction, env: WarpEnv) -> None:
    ty = type_of(ins)
    b = env.b
    ops = ins.operands
    x = read(env, ops[1], ty)
    w = x.type.element.width
    k = env.constant(ops[2], ".u32")
    if k is not None:  # (a shift known when compiling: the plain one, which affine.py sees through)
        if ins.opcode == "shl" or not signed(ty):
            shift = b.shl if ins.opcode == "shl" else b.lshr
            write(env, ops[0], shift(x, L.Constant(x.type, k)) if k < w else L.Constant(x.type, 0))
        else:
            write(env, ops[0], b.ashr(x, L.Constant(x.type, min(k, w - 1))))
        return
    amt = read(env, ops[2], ".u32")
    big = b.icmp_unsigned(">=", amt, L.Constant(V(I32), w))  # PTX clamps the amount at the width
    a = b.zext(amt, x.type) if w > 32 else b.trunc(amt, x.type) if w < 32 else amt
    a = b.select(big, L.Constant(x.type, w - 1), a)
    if ins.opcode == "shl":
        r = b.select(big, L.Constant(x.type, 0), b.shl(x, a))
    elif signed(ty):
        r = b.ashr(x, a)  # (w - 1 bits: the sign fills it, as a clamped shift does)
    else:
        r = b.select(big, L.Constant(x.type, 0), b.lshr(x, a))
    write(env, ops[0], r)


def _minmax(ins: ir.Instruction, env: WarpEnv) -> None:
    ty = type_of(ins)
    if ty.startswith(".f") or ins.modifiers:
        raise NotNative(f"{ins.mnemonic} is not in the native tier yet")
    b = env.b
    ops = ins.operands
    x, y = read(env, ops[1], ty), read(env, ops[2], ty)
    cmp = b.icmp_signed if signed(ty) else b.icmp_unsigned
    how = "<" if ins.opcode == "min" else ">"
    if ty in PACKED16:
        write(env, ops[0], _per_half(b, lambda u, v: b.select(cmp(how, u, v), u, v), x, y))
        return
    write(env, ops[0], b.select(cmp(how, x, y), x, y))


PACKED16 = (".u16x2", ".s16x2")  # two 16-bit integers in a 32-bit register: each half on its own


def _per_half(b: L.IRBuilder, fn: Any, x: L.Value, y: L.Value) -> L.Value:
    """`fn` of the low halves and of the high halves of <32 x i32> `x` and `y` (integer.py's _packed16)."""
    h = V(I16)
    sixteen = L.Constant(V(I32), 16)
    lo = fn(b.trunc(x, h), b.trunc(y, h))
    hi = fn(b.trunc(b.lshr(x, sixteen), h), b.trunc(b.lshr(y, sixteen), h))
    return b.or_(b.zext(lo, V(I32)), b.shl(b.zext(hi, V(I32)), sixteen))


def _setp(ins: ir.Instruction, env: WarpEnv) -> None:
    ty = type_of(ins)
    b = env.b
    ops = ins.operands
    cmpop = next((m[1:] for m in ins.modifiers), None)
    if len(ins.modifiers) != 1 or isinstance(ops[0], ir.PredPair) or len(ops) != 3:
        raise NotNative(f"{ins.mnemonic} (combined or paired forms) is not in the native tier yet")
    if ty == ".f32":
        x, y = _f32(b, read(env, ops[1], ty)), _f32(b, read(env, ops[2], ty))
        if cmpop in FLOAT_CMP:
            r = b.fcmp_ordered(FLOAT_CMP[cmpop], x, y)
        elif cmpop in FLOAT_CMP_U:
            r = b.fcmp_unordered(FLOAT_CMP_U[cmpop], x, y)
        elif cmpop in ("num", "nan"):
            r = b.fcmp_ordered("ord", x, y) if cmpop == "num" else b.fcmp_unordered("uno", x, y)
        else:
            raise NotNative(f"{ins.mnemonic} is not in the native tier yet")
    elif ty.startswith(".f"):
        raise NotNative(f"{ins.mnemonic} is not in the native tier yet")
    else:
        if cmpop not in INT_CMP:
            raise NotNative(f"{ins.mnemonic} is not in the native tier yet")
        x, y = read(env, ops[1], ty), read(env, ops[2], ty)
        uns = cmpop in ("lo", "ls", "hi", "hs") or not signed(ty)
        r = (b.icmp_unsigned if uns else b.icmp_signed)(INT_CMP[cmpop], x, y)
    write(env, ops[0], r)


def _selp(ins: ir.Instruction, env: WarpEnv) -> None:
    ty = type_of(ins)
    ops = ins.operands
    x, y, p = read(env, ops[1], ty), read(env, ops[2], ty), read(env, ops[3], ".pred")
    write(env, ops[0], env.b.select(p, x, y))


def _mov(ins: ir.Instruction, env: WarpEnv) -> None:
    ty = type_of(ins)
    ops = ins.operands
    src = ops[1]
    if isinstance(src, ir.Symbol) or (isinstance(src, ir.Register) and env.symbol_address(src.name) is not None):
        addr = env.symbol_address(src.name)
        if addr is None:
            raise NotNative(f"mov of {src.name}")
        write(env, ops[0], L.Constant(V(INT[bits_of(ty)]), addr))
        return
    if isinstance(src, ir.Register | ir.Immediate | ir.SpecialRegister) and not isinstance(ops[0], ir.Vector):
        write(env, ops[0], read(env, src, ty))
        return
    if isinstance(src, ir.Vector) != isinstance(ops[0], ir.Vector):
        _pack(env, ops[0], src, ty)
        return
    raise NotNative(f"{ins.mnemonic} of a {type(src).__name__}")


def _pack(env: WarpEnv, dst: Any, src: Any, ty: str) -> None:
    """mov.bN d, {a, b, ...} (the first element in the low bits) or mov.bN {a, b, ...}, s (unpacked so)."""
    b = env.b
    w = bits_of(ty)
    parts = src.elements if isinstance(src, ir.Vector) else dst.elements
    if w % len(parts) or w > 64:
        raise NotNative(f"mov.{ty[1:]} of {len(parts)} parts")
    pw = w // len(parts)
    wt, pt = V(INT[w]), V(INT[pw])
    if isinstance(src, ir.Vector):
        acc = L.Constant(wt, 0)
        for i, p in enumerate(parts):
            acc = b.or_(acc, b.shl(b.zext(read(env, p, f".b{pw}"), wt), L.Constant(wt, i * pw)))
        write(env, dst, acc)
        return
    whole = read(env, src, ty)
    for i, p in enumerate(parts):
        write(env, p, b.trunc(b.lshr(whole, L.Constant(wt, i * pw)), pt))


def _cvt(ins: ir.Instruction, env: WarpEnv) -> None:
    ts = ins.types
    if len(ts) != 2 or ins.modifiers or any(t.startswith(".f") for t in ts):
        raise NotNative(f"{ins.mnemonic} is not in the native tier yet")
    dty, sty = ts
    b = env.b
    x = read(env, ins.operands[1], sty)
    dt = V(INT[bits_of(dty)])
    if dt.element.width < x.type.element.width:
        r = b.trunc(x, dt)
    elif dt.element.width > x.type.element.width:
        r = (b.sext if signed(sty) else b.zext)(x, dt)
    else:
        r = x
    if bits_of(dty) < 32 and signed(dty):  # a narrow signed destination: stored as its storage holds it
        r = b.trunc(r, dt)
    write(env, ins.operands[0], r)


def _cvta(ins: ir.Instruction, env: WarpEnv) -> None:
    if ins.suffixes[:2] != ("to", "global") or type_of(ins) != ".u64":
        raise NotNative(f"{ins.mnemonic} is not in the native tier yet")
    write(env, ins.operands[0], read(env, ins.operands[1], ".u64"))  # global addresses are generic ones


def _space(ins: ir.Instruction) -> str:
    sp = [s for s in ins.suffixes if s in LOADS]
    if len(sp) != 1:
        raise NotNative(f"{ins.mnemonic}: generic or unusual state space is not in the native tier yet")
    extra = [m[1:] for m in ins.modifiers if m[1:] not in (*LOADS, "nc", "v2", "v4", "ca", "cg", "cs", "lu",
                                                          "cv", "wb", "wt", "volatile", "relaxed", "acquire",
                                                          "release", "cta", "gpu", "sys")
             and not m[1:].startswith(("L1::", "L2::"))]  # (cache hints: the interpreter ignores them too)
    if extra:
        raise NotNative(f"{ins.mnemonic}: .{extra[0]} is not in the native tier yet")
    return sp[0]


def _ld(ins: ir.Instruction, env: WarpEnv) -> None:
    space = _space(ins)
    ty = type_of(ins)
    if ty.startswith(".f") and ty not in (".f32", ".f64"):
        raise NotNative(f"{ins.mnemonic} is not in the native tier yet")
    dst, addr = ins.operands
    regs = dst.elements if isinstance(dst, ir.Vector) else (dst,)
    nbytes = bits_of(ty) // 8
    t = INT[8 * nbytes]
    if space == "param":
        off = env.param_offset(addr)
        for i, r in enumerate(regs):
            v = env.load_param(off + i * nbytes, t)
            write(env, r, _extend(env, v, ty, r))
        return
    if not ordered(ins):
        for r, v in zip(regs, env.load(space, addr, t, len(regs)), strict=True):
            write(env, r, _extend(env, v, ty, r))
        return
    # (volatile, relaxed, acquire: an atomic load per lane, which sees other workers' stores)
    if len(regs) != 1:
        raise NotNative(f"{ins.mnemonic}: a vector ordered load is not in the native tier yet")
    host = env.address(space, addr, nbytes, write=False)
    write(env, regs[0], _extend(env, env.atomic(host, "load", [], space == "shared", t), ty, regs[0]))


def ordered(ins: ir.Instruction) -> bool:
    """A volatile, relaxed, acquire or release access (memory other threads may write or read meanwhile)."""
    return any(m[1:] in ("volatile", "relaxed", "acquire", "release") for m in ins.modifiers)


def _extend(env: WarpEnv, v: L.Value, ty: str, reg: Any) -> L.Value:
    """A loaded value widened to its destination register as the interpreter does (sign by the type)."""
    if isinstance(reg, ir.Sink):
        return v
    _, rty = env.reg(reg)
    rbits = bits_of(rty)
    if rbits > v.type.element.width:
        return (env.b.sext if signed(ty) else env.b.zext)(v, V(INT[rbits]))
    return v


def _st(ins: ir.Instruction, env: WarpEnv) -> None:
    space = _space(ins)
    if space == "param":
        raise NotNative("st.param")
    ty = type_of(ins)
    addr, src = ins.operands
    vals = src.elements if isinstance(src, ir.Vector) else (src,)
    nbytes = bits_of(ty) // 8
    data = [read(env, v, ty) for v in vals]
    if not ordered(ins):
        env.store(space, addr, data)
        return
    # (an atomic exchange per lane, in lane order: other workers see it)
    if len(vals) != 1:
        raise NotNative(f"{ins.mnemonic}: a vector ordered store is not in the native tier yet")
    env.atomic(env.address(space, addr, nbytes, write=True), "xchg", data, space == "shared")


def _divrem(ins: ir.Instruction, env: WarpEnv) -> None:
    """Integer div / rem as the interpreter's semantics.integer: x/0 and x%0 all ones, INT_MIN/-1 = INT_MIN."""
    ty = type_of(ins)
    if ty.startswith(".f") or ins.modifiers:
        raise NotNative(f"{ins.mnemonic} is not in the native tier yet")
    b = env.b
    ops = ins.operands
    x, y = read(env, ops[1], ty), read(env, ops[2], ty)
    t = x.type
    w = t.element.width
    zero = b.icmp_unsigned("==", y, L.Constant(t, 0))
    bad = zero
    if signed(ty):  # INT_MIN / -1 overflows in LLVM: divide by 1 instead (INT_MIN, remainder 0: the same)
        ovf = b.and_(b.icmp_unsigned("==", x, L.Constant(t, 1 << (w - 1))),
                     b.icmp_unsigned("==", y, L.Constant(t, (1 << w) - 1)))
        bad = b.or_(zero, ovf)
    safe = b.select(bad, L.Constant(t, 1), y)
    if ins.opcode == "div":
        r = b.sdiv(x, safe) if signed(ty) else b.udiv(x, safe)
    else:
        r = b.srem(x, safe) if signed(ty) else b.urem(x, safe)
    write(env, ops[0], b.select(zero, L.Constant(t, (1 << w) - 1), r))


_ATOM_OPS = {"add": "add", "and": "and", "or": "or", "xor": "xor", "exch": "xchg", "min": "min", "max": "max"}
_ATOM_MODS = ("global", "shared", "cta", "gpu", "sys", "relaxed", "acquire", "release", "acq_rel")


def _atom(ins: ir.Instruction, env: WarpEnv) -> None:
    """atom / red on integers as LLVM atomics (sequentially consistent: at least what any PTX order asks)."""
    ty = type_of(ins)
    if ty not in (".u32", ".s32", ".b32", ".u64", ".s64", ".b64"):
        raise NotNative(f"{ins.mnemonic}: {ty} atomics are not in the native tier yet")
    ops_ = [m[1:] for m in ins.modifiers if m[1:] not in _ATOM_MODS]
    if len(ops_) != 1 or ops_[0] not in (*_ATOM_OPS, "cas"):
        raise NotNative(f"{ins.mnemonic} is not in the native tier yet")
    space = "shared" if "shared" in ins.suffixes else "global" if "global" in ins.suffixes else None
    if space is None:
        raise NotNative(f"{ins.mnemonic}: a generic address is not in the native tier yet")
    op = ops_[0]
    red = ins.opcode == "red"
    operands = ins.operands
    addr = operands[0] if red else operands[1]
    vals = operands[1:] if red else operands[2:]
    nbytes = bits_of(ty) // 8
    data = [read(env, v, ty) for v in vals]
    if op == "cas" and red:
        raise NotNative("red.cas")
    host = env.address(space, addr, nbytes, write=True)
    rmw = "cas" if op == "cas" else _ATOM_OPS[op]
    if rmw in ("min", "max") and not signed(ty):
        rmw = "u" + rmw
    old = env.atomic(host, rmw, data, shared=space == "shared")
    if not red:
        write(env, operands[0], old)


LOWER = {  # (lowering.py adds the other modules' instructions)
    "add": _arith, "sub": _arith, "mul": _arith, "mad": _arith,
    "and": _bitwise, "or": _bitwise, "xor": _bitwise, "not": _bitwise,
    "shl": _shift, "shr": _shift, "min": _minmax, "max": _minmax, "setp": _setp, "selp": _selp, "mov": _mov,
    "cvt": _cvt, "cvta": _cvta, "ld": _ld, "st": _st, "atom": _atom, "red": _atom,
    "div": _divrem, "rem": _divrem,
}


def counted_loop(b: L.IRBuilder, fn: L.Function, count: int, body: Any, name: str) -> None:
    """for i in range(count): body(i) (i an i64), as an LLVM loop whose blocks are named `name`_head/body/done."""
    pre = b.block
    head, loop, done = (fn.append_basic_block(f"{name}_{x}") for x in ("head", "body", "done"))
    b.branch(head)
    b.position_at_end(head)
    i = b.phi(I64)
    i.add_incoming(L.Constant(I64, 0), pre)
    b.cbranch(b.icmp_signed("<", i, L.Constant(I64, count)), loop, done)
    b.position_at_end(loop)
    body(i)
    i.add_incoming(b.add(i, L.Constant(I64, 1)), b.block)
    b.branch(head)
    b.position_at_end(done)
