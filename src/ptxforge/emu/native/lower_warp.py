"""Warp-wide instructions as LLVM vector code over a warp's 32 lanes, as `ptxforge.emu.ops_warp` computes
them: `vote` (all/any/uni/ballot), `match` (any/all), `redux` on 32-bit integers, `activemask` and
`bar.warp.sync`. The lanes taking part are the ones standing at the instruction whose member mask names
them; the block function has checked that every running member lane stands there (`shfl` is codegen's)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from llvmlite import ir as L

from ptxforge.emu.native import lower_mma, lower_wgmma
from ptxforge.emu.native.lower import I1, I32, NotNative, V, read, write
from ptxforge.emu.native.warp import IOTA, splat
from ptxforge.ptx import ir

if TYPE_CHECKING:
    from ptxforge.emu.native.warp import WarpEnv

ALL = 0xFFFFFFFF


def member_operand(ins: ir.Instruction) -> Any:
    """The member-mask operand of a warp-wide instruction (None: the whole warp)."""
    ops = ins.operands
    if ins.opcode == "shfl":
        return ops[4] if len(ops) > 4 else None
    if ins.opcode in ("vote", "match", "redux"):
        return ops[2] if len(ops) > 2 else None
    if ins.opcode == "bar" and "warp" in ins.suffixes:
        return ops[0] if ops else None
    if ins.opcode in ("mma", "wgmma"):  # (.aligned: the whole warp)
        return None
    raise NotNative(f"{ins.mnemonic} is not in the native tier yet")


def _bits(b: L.IRBuilder, v: L.Value) -> L.Value:
    return b.bitcast(v, I32)


def _taking_part(env: WarpEnv, ins: ir.Instruction) -> L.Value:
    """<32 x i1>: the lanes here whose own member mask names them."""
    b = env.b
    mo = member_operand(ins)
    if mo is None:
        return env.mask
    mm = read(env, mo, ".b32")
    mine = b.trunc(b.lshr(mm, IOTA), V(I1))
    return b.and_(env.mask, mine)


def vote(ins: ir.Instruction, env: WarpEnv) -> None:
    b = env.b
    mode = next((s for s in ins.suffixes if s in ("all", "any", "uni", "ballot")), None)
    ops = ins.operands
    if mode is None:
        raise NotNative(f"{ins.mnemonic} is not in the native tier yet")
    src = ops[1]
    p = read(env, src.operand if isinstance(src, ir.Negated) else src, ".pred")
    if isinstance(src, ir.Negated):
        p = b.not_(p)
    act = _taking_part(env, ins)
    yes = _bits(b, b.and_(act, p))
    no = _bits(b, b.and_(act, b.not_(p)))
    zero = L.Constant(I32, 0)
    if mode == "ballot":
        write(env, ops[0], splat(b, yes))
        return
    r = {"all": lambda: b.icmp_unsigned("==", no, zero), "any": lambda: b.icmp_unsigned("!=", yes, zero),
         "uni": lambda: b.or_(b.icmp_unsigned("==", yes, zero), b.icmp_unsigned("==", no, zero))}[mode]()
    write(env, ops[0], splat(b, r))


def activemask(ins: ir.Instruction, env: WarpEnv) -> None:
    write(env, ins.operands[0], splat(env.b, _bits(env.b, env.mask)))


def redux(ins: ir.Instruction, env: WarpEnv) -> None:
    """redux.sync.{add,min,max,and,or,xor} on .u32/.s32/.b32 (the float forms stay interpreted)."""
    b = env.b
    ty = ins.types[-1] if ins.types else ".u32"
    op = next((s for s in ins.suffixes if s in ("add", "min", "max", "and", "or", "xor")), None)
    if op is None or ty not in (".u32", ".s32", ".b32") or any(m[1:] not in (op, "sync") for m in ins.modifiers):
        raise NotNative(f"{ins.mnemonic} is not in the native tier yet")
    vt = V(I32)
    x = read(env, ins.operands[1], ty)
    act = _taking_part(env, ins)
    if op in ("min", "max"):
        sgn = ty == ".s32"
        ident = {("min", True): 0x7FFFFFFF, ("min", False): ALL, ("max", True): 0x80000000, ("max", False): 0}
        name = f"llvm.vector.reduce.{'s' if sgn else 'u'}{op}.v32i32"
        ident_v = ident[(op, sgn)]
    else:
        name = f"llvm.vector.reduce.{op}.v32i32"
        ident_v = ALL if op == "and" else 0
    masked = b.select(act, x, L.Constant(vt, ident_v))
    r = b.call(env.module_intrinsic(name, I32, [vt]), [masked])
    write(env, ins.operands[0], splat(b, r))


def match(ins: ir.Instruction, env: WarpEnv) -> None:
    """match.{any,all}.sync.{b32,b64}: per lane, the taking-part lanes holding the same value."""
    b = env.b
    ty = ins.types[-1] if ins.types else ".b32"
    ops = ins.operands
    if isinstance(ops[0], ir.PredPair):
        d, p = ops[0].first, (None if isinstance(ops[0].second, ir.Sink) else ops[0].second)
    else:
        d, p = ops[0], None
    x = read(env, ops[1], ty)
    act = _taking_part(env, ins)
    act_bits = _bits(b, act)
    vt = V(I32)
    masks = L.Constant(vt, 0)
    for j in range(32):  # lane j's value against every lane's: bit j of each lane's mask
        xj = splat(b, b.extract_element(x, L.Constant(I32, j)))
        on = b.and_(b.icmp_unsigned("==", x, xj), splat(b, b.trunc(b.lshr(act_bits, L.Constant(I32, j)), I1)))
        masks = b.or_(masks, b.select(on, L.Constant(vt, 1 << j), L.Constant(vt, 0)))
    if "any" in ins.suffixes:
        write(env, d, masks)
        return
    allw = splat(b, act_bits)
    same = b.icmp_unsigned("==", masks, allw)
    write(env, d, b.select(same, allw, L.Constant(vt, 0)))
    if p is not None:
        write(env, p, same)


WARP_OPS = {"vote": vote, "redux": redux, "match": match, "mma": lower_mma.mma_sync,
            "wgmma": lower_wgmma.mma_async}
