"""Floating-point instructions as LLVM vector code, bit for bit as the interpreter's semantics
(`ptxforge.emu.semantics.floating`, `float_misc`, `convert`):

- `add`/`sub`/`mul`/`fma` `.f64` in round-to-nearest: a NaN result takes the first NaN input's payload,
  quieted, else the canonical NaN (`sub` is `a + (-b)`, so a NaN `b` comes back with its sign flipped);
- `min`/`max` `.f32`/`.f64` (a NaN input yields the other, two NaNs the canonical NaN, -0 below +0), and
  `abs`/`neg` (the sign bit);
- `cvt` float -> integer with `.rni/.rzi/.rmi/.rpi` (clamped to the destination; NaN -> 0, or 1 << (w - 1)
  from an .f64 or into 64 bits), integer -> float `.rn`, `.f64` -> `.f32` `.rn` (NaN -> canonical),
  `.f32` -> `.f64` (NaN payload kept, quieted) and float -> same float rounded to an integral value.

`.ftz`, `.sat`, other rounding modes and the narrow formats raise NotNative (the kernel runs interpreted).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from llvmlite import ir as L

from ptxforge.emu.native.lower import F32, F64, I32, I64, INT, NotNative, V, bits_of, read, signed, write
from ptxforge.emu.semantics import formats

if TYPE_CHECKING:
    from ptxforge.emu.native.warp import WarpEnv
    from ptxforge.ptx import ir

FLOAT = {32: F32, 64: F64}
NAN = {32: formats.F32.nan, 64: formats.F64.nan}
QUIET64 = 1 << 51  # (a NaN input's payload, quieted, as floating._nan64 keeps it)
ROUND_INT = {"rni": "llvm.roundeven", "rzi": "llvm.trunc", "rmi": "llvm.floor", "rpi": "llvm.ceil"}


def _ftype(ty: str) -> tuple[int, L.Type]:
    if ty not in (".f32", ".f64"):
        raise NotNative(f"{ty} is not in the native tier yet")
    bits = bits_of(ty)
    return bits, FLOAT[bits]


def _vname(t: L.Type) -> str:
    return f"v32f{t.width if isinstance(t, L.IntType) else (32 if t == F32 else 64)}"


def _intr(env: WarpEnv, base: str, t: L.Type, nargs: int) -> L.Function:
    return env.module_intrinsic(f"{base}.{_vname(t)}", V(t), [V(t)] * nargs)


def _isnan(b: L.IRBuilder, x: L.Value) -> L.Value:
    return b.fcmp_unordered("uno", x, x)


def _canon(b: L.IRBuilder, f: L.Value, bits: int) -> L.Value:
    """The bits of `f`, a NaN made the canonical NaN."""
    it = V(INT[bits])
    return b.select(_isnan(b, f), L.Constant(it, NAN[bits]), b.bitcast(f, it))


def _nan64(b: L.IRBuilder, r: L.Value, ins_bits: list[L.Value]) -> L.Value:
    """floating._nan64: a NaN result takes the first NaN input's payload (quieted), else the canonical NaN."""
    it = V(I64)
    isn = _isnan(b, r)
    out = b.select(isn, L.Constant(it, NAN[64]), b.bitcast(r, it))
    for xb in reversed(ins_bits):
        x = b.bitcast(xb, V(F64))
        out = b.select(b.and_(isn, _isnan(b, x)), b.or_(xb, L.Constant(it, QUIET64)), out)
    return out


def arith64(ins: ir.Instruction, env: WarpEnv) -> None:
    """add/sub/mul/fma .f64 in round-to-nearest."""
    mods = [m[1:] for m in ins.modifiers]
    if any(m != "rn" for m in mods) or (ins.opcode in ("fma", "mad") and mods != ["rn"]):
        raise NotNative(f"{ins.mnemonic} is not in the native tier yet")
    b = env.b
    ops = ins.operands
    xs = [read(env, o, ".f64") for o in ops[1:]]
    if ins.opcode == "sub":
        xs[1] = b.xor(xs[1], L.Constant(V(I64), 1 << 63))
    fs = [b.bitcast(x, V(F64)) for x in xs]
    if ins.opcode in ("add", "sub"):
        r = b.fadd(fs[0], fs[1])
    elif ins.opcode == "mul":
        r = b.fmul(fs[0], fs[1])
    elif ins.opcode in ("fma", "mad"):
        r = b.call(_intr(env, "llvm.fma", F64, 3), fs)
    else:
        raise NotNative(f"{ins.mnemonic} is not in the native tier yet")
    write(env, ops[0], _nan64(b, r, xs))


def minmax(ins: ir.Instruction, env: WarpEnv) -> None:
    """min/max .f32/.f64 without modifiers, two inputs (float_misc.minmax_bits)."""
    bits, ft = _ftype(ins.types[-1])
    ops = ins.operands
    if ins.modifiers or len(ops) != 3:
        raise NotNative(f"{ins.mnemonic} is not in the native tier yet")
    b = env.b
    it = V(INT[bits])
    xb, yb = read(env, ops[1], ins.types[-1]), read(env, ops[2], ins.types[-1])
    x, y = b.bitcast(xb, V(ft)), b.bitcast(yb, V(ft))
    pick_min = ins.opcode == "min"
    take_x = b.fcmp_ordered("<" if pick_min else ">", x, y)
    r = b.select(take_x, xb, yb)
    r = b.select(_isnan(b, x), yb, b.select(_isnan(b, y), xb, r))
    zero = L.Constant(V(ft), 0.0)
    both = b.and_(b.fcmp_ordered("==", x, zero), b.fcmp_ordered("==", y, zero))
    r = b.select(both, b.or_(xb, yb) if pick_min else b.and_(xb, yb), r)  # -0.0 < +0.0
    r = b.select(b.and_(_isnan(b, x), _isnan(b, y)), L.Constant(it, NAN[bits]), r)
    write(env, ops[0], r)


def absneg(ins: ir.Instruction, env: WarpEnv) -> None:
    """abs/neg .f32/.f64 (no .ftz): the sign bit cleared or flipped, NaNs kept as they are."""
    bits, _ = _ftype(ins.types[-1])
    if ins.modifiers:
        raise NotNative(f"{ins.mnemonic} is not in the native tier yet")
    b = env.b
    x = read(env, ins.operands[1], ins.types[-1])
    sign = L.Constant(V(INT[bits]), 1 << (bits - 1))
    write(env, ins.operands[0], b.and_(x, b.not_(sign)) if ins.opcode == "abs" else b.xor(x, sign))


def cvt(ins: ir.Instruction, env: WarpEnv) -> None:
    """cvt with a float on either side (see the module docstring)."""
    dty, sty = ins.types
    mods = [m[1:] for m in ins.modifiers]
    rnd = [m for m in mods if m in ("rn", "rz", "rm", "rp", "rna", "rs", *ROUND_INT)]
    other = [m for m in mods if m not in rnd]
    b = env.b
    src_float, dst_float = sty.startswith(".f"), dty.startswith(".f")
    if src_float and not dst_float:  # float -> integer (.sat changes nothing: it is always clamped)
        if len(rnd) != 1 or rnd[0] not in ROUND_INT or any(m != "sat" for m in other):
            raise NotNative(f"{ins.mnemonic} is not in the native tier yet")
        sbits, ft = _ftype(sty)
        x = b.bitcast(read(env, ins.operands[1], sty), V(ft))
        r = b.call(_intr(env, ROUND_INT[rnd[0]], ft, 1), [x])
        wd = bits_of(dty)
        it = V(INT[wd])
        kind = "fptosi" if signed(dty) else "fptoui"
        conv = env.module_intrinsic(f"llvm.{kind}.sat.v32i{wd}.{_vname(ft)}", it, [V(ft)])
        v = b.call(conv, [r])
        if sbits == 64 or wd == 64:
            v = b.select(_isnan(b, r), L.Constant(it, 1 << (wd - 1)), v)
        write(env, ins.operands[0], v)
        return
    if other:
        raise NotNative(f"{ins.mnemonic}: .{other[0]} is not in the native tier yet")
    if not src_float:  # integer -> float, round to nearest
        dbits, ft = _ftype(dty)
        if rnd != ["rn"] and not (not rnd and dbits == 64 and bits_of(sty) <= 32):
            raise NotNative(f"{ins.mnemonic} is not in the native tier yet")
        x = read(env, ins.operands[1], sty)
        f = b.sitofp(x, V(ft)) if signed(sty) else b.uitofp(x, V(ft))
        write(env, ins.operands[0], b.bitcast(f, V(INT[dbits])))
        return
    sbits, sft = _ftype(sty)
    dbits, dft = _ftype(dty)
    x = b.bitcast(read(env, ins.operands[1], sty), V(sft))
    if sbits == dbits:  # to an integral value
        if len(rnd) != 1 or rnd[0] not in ROUND_INT:
            raise NotNative(f"{ins.mnemonic} is not in the native tier yet")
        write(env, ins.operands[0], _canon(b, b.call(_intr(env, ROUND_INT[rnd[0]], sft, 1), [x]), dbits))
    elif dbits > sbits and rnd in ([], ["rn"]):  # a NaN keeps its payload, quieted (the interpreter's fast
        # path, numpy's astype; its reference mode, convert.py, gives the canonical NaN: they disagree)
        write(env, ins.operands[0], b.bitcast(b.fpext(x, V(dft)), V(INT[dbits])))
    elif dbits < sbits and rnd == ["rn"]:
        write(env, ins.operands[0], _canon(b, b.fptrunc(x, V(dft)), dbits))
    else:
        raise NotNative(f"{ins.mnemonic} is not in the native tier yet")


def setp_float(env: WarpEnv, cmpop: str, x: L.Value, y: L.Value, ty: str) -> L.Value:
    """setp's comparison of two .f32/.f64 operands (bits) as float: ordered, unordered, num and nan."""
    _, ft = _ftype(ty)
    b = env.b
    x, y = b.bitcast(x, V(ft)), b.bitcast(y, V(ft))
    ordered = {"eq": "==", "ne": "!=", "lt": "<", "le": "<=", "gt": ">", "ge": ">="}
    unordered = {"equ": "==", "neu": "!=", "ltu": "<", "leu": "<=", "gtu": ">", "geu": ">="}
    if cmpop in ordered:
        return b.fcmp_ordered(ordered[cmpop], x, y)
    if cmpop in unordered:
        return b.fcmp_unordered(unordered[cmpop], x, y)
    if cmpop == "num":
        return b.fcmp_ordered("ord", x, y)
    if cmpop == "nan":
        return b.fcmp_unordered("uno", x, y)
    raise NotNative(f"setp.{cmpop} is not in the native tier yet")



def div_rcp_sqrt(ins: ir.Instruction, env: WarpEnv) -> None:
    """div/rcp/sqrt .f32 and .f64 without .ftz, as floating.div/rcp/sqrt: `.rn` (and `.full` division, and
    `.approx` square root and reciprocal, which the interpreter also rounds to nearest) is IEEE's correctly
    rounded result; `div.approx.f32` is a * (1/b) with the reciprocal's subnormals flushed."""
    ty = ins.types[-1]
    bits, ft = _ftype(ty)
    mods = [m[1:] for m in ins.modifiers]
    allowed = {"div": ("rn", "full", "approx") if bits == 32 else ("rn",), "rcp": ("rn", "approx"),
               "sqrt": ("rn", "approx")}[ins.opcode]
    if len(mods) != 1 or mods[0] not in allowed or (ins.opcode == "rcp" and bits == 64 and mods[0] == "approx"):
        raise NotNative(f"{ins.mnemonic} is not in the native tier yet")
    b = env.b
    ops = ins.operands
    one = L.Constant(V(INT[bits]), 0x3FF0000000000000 if bits == 64 else 0x3F800000)
    xs = [read(env, o, ty) for o in ops[1:]]
    if ins.opcode == "rcp":
        xs = [one, xs[0]]
    fs = [b.bitcast(x, V(ft)) for x in xs]
    if ins.opcode == "sqrt":
        r = b.call(_intr(env, "llvm.sqrt", ft, 1), fs)
    elif mods[0] == "approx" and ins.opcode == "div":
        rc = b.bitcast(b.fdiv(L.Constant(V(F32), 1.0), fs[1]), V(I32))
        sub = b.icmp_unsigned("==", b.and_(rc, L.Constant(V(I32), 0x7F800000)), L.Constant(V(I32), 0))
        rc = b.select(sub, b.and_(rc, L.Constant(V(I32), 0x80000000)), rc)
        r = b.fmul(fs[0], b.bitcast(rc, V(F32)))
    else:
        r = b.fdiv(fs[0], fs[1])
    write(env, ops[0], _nan64(b, r, xs) if bits == 64 else _canon(b, r, 32))
