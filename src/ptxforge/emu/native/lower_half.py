"""Half-precision arithmetic (.f16, .bf16 and the packed .f16x2, .bf16x2) as LLVM vector code, bit for bit as
`ptxforge.emu.semantics.half`: add, sub, mul, fma in every rounding mode with .ftz, .sat and .relu; neg, abs;
min, max with .ftz, .NaN, .xorsign.abs and .relu.

Each element is decoded exactly to float64 by integer steps, the operation is computed exactly (or rounded to
odd) in float64 and rounded once by `lower_round.encode`: the correctly rounded result, which is what the
interpreter's float32 and float64 routes give. A packed operand is two elements, element 0 in the low bits.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from llvmlite import ir as L

from ptxforge.emu.native import lower_round as R
from ptxforge.emu.native.lower import F32, F64, I16, I32, I64, NotNative, V, read, write
from ptxforge.emu.semantics import formats

if TYPE_CHECKING:
    from ptxforge.emu.native.warp import WarpEnv
    from ptxforge.ptx import ir

HALVES = {".f16": (formats.F16, False), ".bf16": (formats.BF16, False), ".f16x2": (formats.F16, True),
          ".bf16x2": (formats.BF16, True)}
NAN16 = 0x7FFF


def _fmt(ins: ir.Instruction) -> tuple[formats.FloatFormat, bool, str]:
    ty = ins.types[-1]
    if ty not in HALVES or len(ins.types) != 1:
        raise NotNative(f"{ins.mnemonic} is not in the native tier yet")
    fmt, packed = HALVES[ty]
    return fmt, packed, ty


def _c(v: int) -> L.Constant:
    return L.Constant(V(I16), v)


def _exp(fmt: formats.FloatFormat) -> int:
    return 0x7C00 if fmt is formats.F16 else 0x7F80


def _ftz(b: L.IRBuilder, h: L.Value, fmt: formats.FloatFormat) -> L.Value:
    """half.ftz16: subnormals -> the zero of their sign."""
    sub = b.icmp_unsigned("==", b.and_(h, _c(_exp(fmt))), _c(0))
    return b.select(sub, b.and_(h, _c(0x8000)), h)


def _is_nan(b: L.IRBuilder, h: L.Value, fmt: formats.FloatFormat) -> L.Value:
    return b.icmp_unsigned(">", b.and_(h, _c(0x7FFF)), _c(_exp(fmt)))


def decode(b: L.IRBuilder, h: L.Value, fmt: formats.FloatFormat) -> L.Value:
    """<32 x i16> f16/bf16 bits -> <32 x double>, exactly."""
    if fmt is formats.BF16:
        return b.fpext(b.bitcast(b.shl(b.zext(h, V(I32)), L.Constant(V(I32), 16)), V(F32)), V(F64))
    x = b.zext(h, V(I64))
    sign = b.shl(b.and_(x, R.c(I64, 0x8000)), R.c(I64, 48))
    e = b.and_(b.lshr(x, R.c(I64, 10)), R.c(I64, 31))
    m = b.and_(x, R.c(I64, 0x3FF))
    normal = b.or_(b.shl(b.add(e, R.c(I64, 1023 - 15)), R.c(I64, 52)), b.shl(m, R.c(I64, 42)))
    special = b.or_(R.c(I64, 0x7FF << 52), b.shl(m, R.c(I64, 42)))
    tiny = b.bitcast(b.fmul(b.uitofp(m, V(F64)), L.Constant(V(F64), 2.0 ** -24)), V(I64))
    mag = b.select(b.icmp_unsigned("==", e, R.c(I64, 0)), tiny,
                   b.select(b.icmp_unsigned("==", e, R.c(I64, 31)), special, normal))
    return b.bitcast(b.or_(mag, sign), V(F64))


def _post(b: L.IRBuilder, r: L.Value, fmt: formats.FloatFormat, ftz: bool, sat: bool, relu: bool) -> L.Value:
    """half._post: canonical NaN 0x7fff, then .ftz, .sat, .relu."""
    r = b.select(_is_nan(b, r, fmt), _c(NAN16), r)
    if ftz:
        r = _ftz(b, r, fmt)
    neg = b.icmp_unsigned("!=", b.and_(r, _c(0x8000)), _c(0))
    if sat:
        one = 0x3C00 if fmt is formats.F16 else 0x3F80
        r = b.select(b.or_(neg, _is_nan(b, r, fmt)), _c(0), r)
        r = b.select(b.icmp_unsigned(">", r, _c(one)), _c(one), r)
    if relu:
        r = b.select(b.and_(neg, b.not_(_is_nan(b, r, fmt))), _c(0), r)
    return r


def _split(env: WarpEnv, o: object, ty: str, packed: bool) -> list[L.Value]:
    b = env.b
    x = read(env, o, ty)
    if not packed:
        return [x]
    return [b.trunc(x, V(I16)), b.trunc(b.lshr(x, L.Constant(V(I32), 16)), V(I16))]


def _join(b: L.IRBuilder, parts: list[L.Value]) -> L.Value:
    if len(parts) == 1:
        return parts[0]
    lo, hi = (b.zext(p, V(I32)) for p in parts)
    return b.or_(lo, b.shl(hi, L.Constant(V(I32), 16)))


def arith(ins: ir.Instruction, env: WarpEnv) -> None:
    """add/sub/mul/fma (and mad) on .f16/.bf16/.f16x2/.bf16x2 (half.add/sub/mul/fma)."""
    fmt, packed, ty = _fmt(ins)
    mods = [m[1:] for m in ins.modifiers]
    rnds = [m for m in mods if m in ("rn", "rz", "rm", "rp")]
    if len(rnds) > 1 or any(m not in ("rn", "rz", "rm", "rp", "ftz", "sat", "relu") for m in mods):
        raise NotNative(f"{ins.mnemonic} is not in the native tier yet")
    rnd = rnds[0] if rnds else "rn"
    ftz, sat, relu = "ftz" in mods, "sat" in mods, "relu" in mods
    b = env.b
    ops = ins.operands
    lanes = [_split(env, o, ty, packed) for o in ops[1:]]
    out = []
    for i in range(len(lanes[0])):
        hs = [lane[i] for lane in lanes]
        if ins.opcode == "sub":
            hs[1] = b.xor(hs[1], _c(0x8000))
        if ftz:
            hs = [_ftz(b, h, fmt) for h in hs]
        xs = [decode(b, h, fmt) for h in hs]
        if ins.opcode == "mul":
            v = b.fmul(xs[0], xs[1])  # (exact in float64)
        else:
            x, y = (xs[0], xs[1]) if ins.opcode in ("add", "sub") else (b.fmul(xs[0], xs[1]), xs[2])
            v = R.round_to_odd(b, *R.two_sum(b, x, y))
            if rnd == "rm":
                v = R.rm_zero_sign(b, v, x, y)
        code = b.trunc(R.encode(b, v, fmt, rnd), V(I16))
        out.append(_post(b, code, fmt, ftz, sat, relu))
    write(env, ops[0], _join(b, out))


def absneg(ins: ir.Instruction, env: WarpEnv) -> None:
    """neg/abs{.ftz} (half.neg/abs): the sign bit, after the flush; a packed NaN half becomes 0x7fff."""
    fmt, packed, ty = _fmt(ins)
    mods = [m[1:] for m in ins.modifiers]
    if any(m != "ftz" for m in mods):
        raise NotNative(f"{ins.mnemonic} is not in the native tier yet")
    b = env.b
    out = []
    for h in _split(env, ins.operands[1], ty, packed):
        if mods:
            h = _ftz(b, h, fmt)
        r = b.and_(h, _c(0x7FFF)) if ins.opcode == "abs" else b.xor(h, _c(0x8000))
        if packed:
            r = b.select(_is_nan(b, h, fmt), _c(NAN16), r)
        out.append(r)
    write(env, ins.operands[0], _join(b, out))


def minmax(ins: ir.Instruction, env: WarpEnv) -> None:
    """min/max{.ftz}{.NaN}{.xorsign.abs}{.relu} (float_misc.minmax_bits on 16-bit elements)."""
    fmt, packed, ty = _fmt(ins)
    mods = [m[1:] for m in ins.modifiers]
    if any(m not in ("ftz", "NaN", "xorsign", "abs", "relu") for m in mods) or ("abs" in mods) != \
            ("xorsign" in mods) or len(ins.operands) != 3:
        raise NotNative(f"{ins.mnemonic} is not in the native tier yet")
    b = env.b
    ops = ins.operands
    out = []
    for x, y in zip(_split(env, ops[1], ty, packed), _split(env, ops[2], ty, packed), strict=True):
        out.append(_minmax16(b, x, y, fmt, ins.opcode == "min", "ftz" in mods, "NaN" in mods,
                             "xorsign" in mods, "relu" in mods))
    write(env, ops[0], _join(b, out))


def _key(b: L.IRBuilder, h: L.Value) -> L.Value:
    """float_misc._order_key: a signed key in float order with -0 < +0."""
    x = b.zext(h, V(I32))
    mag = b.and_(x, L.Constant(V(I32), 0x7FFF))
    neg = b.icmp_unsigned("!=", b.and_(x, L.Constant(V(I32), 0x8000)), L.Constant(V(I32), 0))
    return b.select(neg, b.sub(L.Constant(V(I32), -1), mag), mag)


def _minmax16(b: L.IRBuilder, x: L.Value, y: L.Value, fmt: formats.FloatFormat, pick_min: bool, ftz: bool,
              nan: bool, xorsign: bool, relu: bool) -> L.Value:
    if ftz:
        x, y = _ftz(b, x, fmt), _ftz(b, y, fmt)
    xs = b.and_(b.xor(x, y), _c(0x8000))
    if xorsign:
        x, y = b.and_(x, _c(0x7FFF)), b.and_(y, _c(0x7FFF))
    na, nb = _is_nan(b, x, fmt), _is_nan(b, y, fmt)
    take_x = b.icmp_signed("<" if pick_min else ">", _key(b, x), _key(b, y))
    r = b.select(take_x, x, y)
    r = b.select(b.and_(na, b.not_(nb)), y, b.select(b.and_(nb, b.not_(na)), x, r))
    if xorsign:
        r = b.or_(b.and_(r, _c(0x7FFF)), xs)
    r = b.select(b.or_(na, nb) if nan else b.and_(na, nb), _c(NAN16), r)
    if relu:
        neg = b.icmp_unsigned("!=", b.and_(r, _c(0x8000)), _c(0))
        r = b.select(b.and_(neg, b.not_(_is_nan(b, r, fmt))), _c(0), r)
    return r
