"""Integer bit instructions as LLVM vector code, as `ptxforge.emu.semantics.bitops` / `integer` compute them:
`neg`/`abs` (|INT_MIN| = INT_MIN), `popc`/`clz` (a u32 count), `brev`, `bfe` (position and length taken
mod 256, clamped to the width, sign-extended from the field's top bit for signed types), `bfi`, `prmt` in
its default mode, and `mul.hi`."""

from __future__ import annotations

from typing import TYPE_CHECKING

from llvmlite import ir as L

from ptxforge.emu.native.lower import I32, I64, INT, NotNative, V, bits_of, read, signed, type_of, write
from ptxforge.emu.semantics.bitops import _PRMT_MODES as PRMT_MODES

if TYPE_CHECKING:
    from ptxforge.emu.native.warp import WarpEnv
    from ptxforge.ptx import ir


def _const(t: L.Type, v: int) -> L.Constant:
    return L.Constant(t, v)


def neg_abs(ins: ir.Instruction, env: WarpEnv) -> None:
    ty = type_of(ins)
    if ins.modifiers:
        raise NotNative(f"{ins.mnemonic} is not in the native tier yet")
    b = env.b
    x = read(env, ins.operands[1], ty)
    zero = _const(x.type, 0)
    minus = b.sub(zero, x)
    r = minus if ins.opcode == "neg" else b.select(b.icmp_signed("<", x, zero), minus, x)
    write(env, ins.operands[0], r)


def count(ins: ir.Instruction, env: WarpEnv) -> None:
    """popc / clz .b32/.b64 -> u32; brev keeps the width."""
    ty = type_of(ins)
    b = env.b
    x = read(env, ins.operands[1], ty)
    w = x.type.element.width
    if ins.opcode == "brev":
        f = env.module_intrinsic(f"llvm.bitreverse.v32i{w}", x.type, [x.type])
        write(env, ins.operands[0], b.call(f, [x]))
        return
    if ins.opcode == "popc":
        r = b.call(env.module_intrinsic(f"llvm.ctpop.v32i{w}", x.type, [x.type]), [x])
    else:
        f = env.module_intrinsic(f"llvm.ctlz.v32i{w}", x.type, [x.type, L.IntType(1)])
        r = b.call(f, [x, L.Constant(L.IntType(1), 0)])
    write(env, ins.operands[0], b.trunc(r, V(I32)) if w > 32 else r)


def _low_mask(b: L.IRBuilder, take: L.Value, t: L.Type, w: int) -> L.Value:
    """(1 << take) - 1 in `t` (take in 0..w, i32 lanes), all ones at take == w."""
    tk = b.zext(take, t) if w > 32 else take
    ones = _const(t, (1 << w) - 1)
    full = b.icmp_unsigned(">=", take, _const(V(I32), w))
    safe = b.select(full, _const(t, 0), tk)
    return b.select(full, ones, b.sub(b.shl(_const(t, 1), safe), _const(t, 1)))


def _amount(b: L.IRBuilder, v: L.Value, t: L.Type, w: int) -> L.Value:
    """A shift amount (i32 lanes, < w where used) in the operand type `t`."""
    return b.zext(v, t) if w > 32 else v


def bfe(ins: ir.Instruction, env: WarpEnv) -> None:
    ty = type_of(ins)
    b = env.b
    ops = ins.operands
    a = read(env, ops[1], ty)
    t = a.type
    w = t.element.width
    pos = b.and_(read(env, ops[2], ".u32"), _const(V(I32), 0xFF))
    ln = b.and_(read(env, ops[3], ".u32"), _const(V(I32), 0xFF))
    wv = _const(V(I32), w)
    room = b.sub(wv, b.select(b.icmp_unsigned(">", pos, wv), wv, pos))  # w - min(pos, w)
    take = b.select(b.icmp_unsigned("<", ln, room), ln, room)
    outside = b.icmp_unsigned(">=", pos, wv)
    safe_pos = b.select(outside, _const(V(I32), 0), pos)
    shifted = b.select(outside, _const(t, 0), b.lshr(a, _amount(b, safe_pos, t, w)))
    m = _low_mask(b, take, t, w)
    field = b.and_(shifted, m)
    if signed(ty):
        top = b.add(pos, b.sub(ln, _const(V(I32), 1)))  # pos + ln - 1 (ln = 0: pos - 1, maybe -1)
        sidx = b.select(b.icmp_signed(">", top, _const(V(I32), w - 1)), _const(V(I32), w - 1), top)
        sidx = b.select(b.icmp_signed("<", sidx, _const(V(I32), 0)), _const(V(I32), 0), sidx)
        sbit = b.trunc(b.lshr(a, _amount(b, sidx, t, w)), V(L.IntType(1)))
        sbit = b.and_(sbit, b.icmp_unsigned("!=", ln, _const(V(I32), 0)))
        field = b.select(sbit, b.or_(field, b.not_(m)), field)
    write(env, ops[0], field)


def bfi(ins: ir.Instruction, env: WarpEnv) -> None:
    ty = type_of(ins)
    b = env.b
    ops = ins.operands
    a, base = read(env, ops[1], ty), read(env, ops[2], ty)
    t = a.type
    w = t.element.width
    pos = b.and_(read(env, ops[3], ".u32"), _const(V(I32), 0xFF))
    ln = b.and_(read(env, ops[4], ".u32"), _const(V(I32), 0xFF))
    wv = _const(V(I32), w)
    room = b.sub(wv, b.select(b.icmp_unsigned(">", pos, wv), wv, pos))
    take = b.select(b.icmp_unsigned("<", ln, room), ln, room)
    outside = b.icmp_unsigned(">=", pos, wv)
    sh = _amount(b, b.select(outside, _const(V(I32), 0), pos), t, w)
    m_at = b.select(outside, _const(t, 0), b.shl(_low_mask(b, take, t, w), sh))
    r = b.or_(b.and_(base, b.not_(m_at)), b.and_(b.shl(a, sh), m_at))
    write(env, ops[0], r)


def prmt(ins: ir.Instruction, env: WarpEnv) -> None:
    """prmt.b32 in the default mode: byte i of d is byte (c >> 4i) & 7 of {b, a}, or its sign with bit 3; in the
    .f4e/.b4e/.rc8/.ecl/.ecr/.rc16 modes byte i is byte MODES[mode][c & 3][i] (semantics.bitops' table)."""
    modes = [s for s in ins.suffixes if s != "b32"]
    if len(modes) > 1 or (modes and modes[0] not in PRMT_MODES) or \
            any(m[1:] not in PRMT_MODES for m in ins.modifiers):
        raise NotNative(f"{ins.mnemonic} is not in the native tier yet")
    b = env.b
    ops = ins.operands
    a, hi, c = (read(env, o, ".b32") for o in ops[1:4])
    t = V(I64)
    src = b.or_(b.shl(b.zext(hi, t), _const(t, 32)), b.zext(a, t))
    d = _const(V(I32), 0)
    if modes:
        table = PRMT_MODES[modes[0]]
        sel = b.and_(c, _const(V(I32), 3))
        for i in range(4):
            s = _const(t, table[0][i])
            for j in (1, 2, 3):
                s = b.select(b.icmp_unsigned("==", sel, _const(V(I32), j)), _const(t, table[j][i]), s)
            byte = b.trunc(b.and_(b.lshr(src, b.mul(s, _const(t, 8))), _const(t, 0xFF)), V(I32))
            d = b.or_(d, b.shl(byte, _const(V(I32), 8 * i)))
        write(env, ops[0], d)
        return
    for i in range(4):
        sel = b.and_(b.lshr(c, _const(V(I32), 4 * i)), _const(V(I32), 0xF))
        byte = b.and_(b.lshr(src, b.zext(b.mul(b.and_(sel, _const(V(I32), 7)), _const(V(I32), 8)), t)),
                      _const(t, 0xFF))
        byte = b.trunc(byte, V(I32))
        sign = b.mul(b.lshr(byte, _const(V(I32), 7)), _const(V(I32), 0xFF))
        byte = b.select(b.icmp_unsigned("!=", b.and_(sel, _const(V(I32), 8)), _const(V(I32), 0)), sign, byte)
        d = b.or_(d, b.shl(byte, _const(V(I32), 8 * i)))
    write(env, ops[0], d)


def mul_hi(ins: ir.Instruction, env: WarpEnv) -> None:
    """mul.hi on integers: the high half of the double-width product."""
    ty = type_of(ins)
    b = env.b
    ops = ins.operands
    x, y = read(env, ops[1], ty), read(env, ops[2], ty)
    w = bits_of(ty)
    wt = V(L.IntType(2 * w))
    ext = b.sext if signed(ty) else b.zext
    p = b.mul(ext(x, wt), ext(y, wt))
    write(env, ops[0], b.trunc(b.lshr(p, _const(wt, w)), V(INT[w])))
