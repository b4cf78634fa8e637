"""Which lowering runs each PTX instruction: lower.py's core (memory, integer arithmetic, compares, moves),
lower_float.py, lower_approx.py, lower_int.py, lower_bits.py, lower_video.py, lower_warp.py and lower_wgmma.py.
`lower(ins, env)` emits one instruction for a warp."""

from __future__ import annotations

from typing import TYPE_CHECKING

from ptxforge.emu.native import lower as core
from ptxforge.emu.native import lower_approx, lower_cvt, lower_half, lower_int, lower_video, lower_wgmma
from ptxforge.emu.native import lower_bits as bits
from ptxforge.emu.native import lower_float as flt
from ptxforge.emu.native import lower_warp as warp
from ptxforge.emu.native.lower import NotNative, read, type_of, write
from ptxforge.ptx.ir import PredPair

if TYPE_CHECKING:
    from ptxforge.emu.native.warp import WarpEnv
    from ptxforge.ptx import ir


def lower(ins: ir.Instruction, env: WarpEnv) -> None:
    """Emit `ins` for the warp into env.b (env applies the guard and the active mask to its effects)."""
    fn = TABLE.get(ins.opcode)
    if fn is None:
        raise NotNative(f"{ins.opcode} is not in the native tier yet")
    fn(ins, env)


def _is_float(ins: ir.Instruction) -> bool:
    return bool(ins.types) and ins.types[-1].startswith((".f", ".bf"))


def _half(ins: ir.Instruction) -> bool:
    return bool(ins.types) and ins.types[-1] in lower_half.HALVES


def _arith(ins: ir.Instruction, env: WarpEnv) -> None:
    if _half(ins):
        lower_half.arith(ins, env)
    elif _is_float(ins):
        flt.arith(ins, env)
    elif ins.opcode == "mul" and "hi" in ins.suffixes and not _is_float(ins):
        bits.mul_hi(ins, env)
    elif "sat" in ins.suffixes and ins.opcode in ("add", "sub", "mad"):
        lower_int.sat_s32(ins, env)
    else:
        core.LOWER[ins.opcode](ins, env)


def _div(ins: ir.Instruction, env: WarpEnv) -> None:
    (flt.div_rcp_sqrt if _is_float(ins) else core.LOWER["div"])(ins, env)


def _minmax(ins: ir.Instruction, env: WarpEnv) -> None:
    (lower_half.minmax if _half(ins) else flt.minmax if _is_float(ins) else core.LOWER[ins.opcode])(ins, env)


def _neg_abs(ins: ir.Instruction, env: WarpEnv) -> None:
    (lower_half.absneg if _half(ins) else flt.absneg if _is_float(ins) else bits.neg_abs)(ins, env)


def _cvt(ins: ir.Instruction, env: WarpEnv) -> None:
    if len(ins.types) == 2 and any(t.startswith((".f", ".bf", ".e", ".tf")) for t in ins.types):
        lower_cvt.cvt(ins, env)
    else:
        core.LOWER["cvt"](ins, env)


def _setp(ins: ir.Instruction, env: WarpEnv) -> None:
    ty = type_of(ins)
    if ty != ".f64":
        core.LOWER["setp"](ins, env)
        return
    ops = ins.operands
    if len(ins.modifiers) != 1 or isinstance(ops[0], PredPair) or len(ops) != 3:
        raise NotNative(f"{ins.mnemonic} (combined or paired forms) is not in the native tier yet")
    r = flt.setp_float(env, ins.modifiers[0][1:], read(env, ops[1], ty), read(env, ops[2], ty), ty)
    write(env, ops[0], r)


def _fence(ins: ir.Instruction, env: WarpEnv) -> None:
    """fence / membar: a sequentially consistent fence (one worker thread runs a block's warps in turn)."""
    env.b.fence("seq_cst")


TABLE = {
    **core.LOWER, **lower_int.LOWER, **lower_video.LOWER,
    "add": _arith, "sub": _arith, "mul": _arith, "mad": _arith, "fma": _arith,
    "div": _div, "min": _minmax, "max": _minmax, "neg": _neg_abs, "abs": _neg_abs, "cvt": _cvt, "setp": _setp,
    "popc": bits.count, "clz": bits.count, "brev": bits.count, "bfe": bits.bfe, "bfi": bits.bfi,
    "prmt": bits.prmt, "activemask": warp.activemask, "fence": _fence, "membar": _fence,
    "rcp": flt.div_rcp_sqrt, "sqrt": flt.div_rcp_sqrt, "rsqrt": flt.rsqrt, "copysign": flt.copysign,
    "testp": flt.testp, "ex2": lower_approx.transcendental, "lg2": lower_approx.transcendental,
    "sin": lower_approx.transcendental, "cos": lower_approx.transcendental, "tanh": lower_approx.transcendental,
    "wgmma": lower_wgmma.sync_op,
}
