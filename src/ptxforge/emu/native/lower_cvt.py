"""cvt with a float on either side, bit for bit as `ptxforge.emu.semantics.convert.cvt`:

- a source of 16 bits or fewer (f16, bf16, the packed fp8 pairs, narrow integers): a table of all its
  values that `convert.cvt` itself fills at code-generation time, looked up per lane;
- f32/f64 -> f32/f16/bf16/tf32 and two f32 -> f16x2/bf16x2/e4m3x2/e5m2x2 in every rounding mode with .ftz,
  .sat, .relu and .satfinite (lower_round.encode);
- f32 -> f64 (a NaN keeps its payload, quieted), float -> same float rounded to an integral value;
- float -> integer `.rni/.rzi/.rmi/.rpi` (clamped; NaN -> 0, or 1 << (w - 1) from an .f64 or into 64 bits);
- integer -> float in every rounding mode (64-bit sources split exactly as convert._int_to_f64_exact).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np
from llvmlite import ir as L

from ptxforge.emu.native import lower_round as R
from ptxforge.emu.native.lower import F32, F64, I32, I64, INT, NotNative, V, bits_of, read, signed, write
from ptxforge.emu.semantics import convert, formats

if TYPE_CHECKING:
    from ptxforge.emu.native.warp import WarpEnv
    from ptxforge.ptx import ir

ROUND_INT = {"rni": "llvm.roundeven", "rzi": "llvm.trunc", "rmi": "llvm.floor", "rpi": "llvm.ceil"}
ROUNDS = ("rn", "rz", "rm", "rp", "rna", "rs", *ROUND_INT)
FLOATS = {".f32": formats.F32, ".f64": formats.F64, ".f16": formats.F16, ".bf16": formats.BF16,
          ".tf32": formats.TF32}
PAIRS = {".f16x2": formats.F16, ".bf16x2": formats.BF16, ".e4m3x2": formats.E4M3, ".e5m2x2": formats.E5M2}
INTS = ("u8", "u16", "u32", "u64", "s8", "s16", "s32", "s64", "b8", "b16", "b32", "b64")
FLAGS = ("ftz", "sat", "relu", "satfinite")


def _vname(t: L.Type) -> str:
    return f"v32f{32 if t == F32 else 64}"


def _intr(env: WarpEnv, base: str, t: L.Type, nargs: int) -> L.Function:
    return env.module_intrinsic(f"{base}.{_vname(t)}", V(t), [V(t)] * nargs)


def _put(env: WarpEnv, o: object, v: L.Value) -> None:
    """Write `v` into `o`, zero-extended to a wider register (the interpreter's astype of unsigned bits)."""
    if not hasattr(o, "name"):
        write(env, o, v)
        return
    _, rty = env.reg(o)
    rbits, vbits = bits_of(rty), v.type.element.width
    write(env, o, env.b.zext(v, V(INT[rbits])) if rbits > vbits > 1 else v)


def cvt(ins: ir.Instruction, env: WarpEnv) -> None:
    """cvt with a float on either side (see the module docstring)."""
    dty, sty = ins.types
    mods = [m[1:] for m in ins.modifiers]
    rnds = [m for m in mods if m in ROUNDS]
    flags = {m for m in mods if m not in ROUNDS}
    if len(rnds) > 1 or flags - set(FLAGS) or "rs" in rnds:
        raise NotNative(f"{ins.mnemonic} is not in the native tier yet")
    rnd = rnds[0] if rnds else None
    srcs = ins.operands[1:]
    if len(srcs) == 1 and bits_of(sty) <= 16:
        _by_table(ins, env, dty, sty, rnd, flags)
    elif len(srcs) == 1 and sty in (".f16x2", ".bf16x2") and dty in (".e4m3x2", ".e5m2x2"):
        _pair_by_table(ins, env, dty, sty, rnd, flags)
    elif sty in (".f32", ".f64") and (dty in PAIRS or (dty in FLOATS and bits_of(dty) <= 32 and dty != sty)):
        _narrow(ins, env, dty, sty, rnd, flags)
    elif sty in FLOATS and dty[1:] in INTS:
        _to_int(ins, env, dty, sty, rnd, flags)
    elif sty[1:] in INTS and dty in (".f32", ".f64"):
        _from_int(ins, env, dty, sty, rnd, flags)
    elif sty == ".f32" and dty == ".f64":
        _widen(ins, env, rnd, flags)
    elif sty == dty and sty in (".f32", ".f64"):
        _integral(ins, env, sty, rnd, flags)
    else:
        raise NotNative(f"{ins.mnemonic} is not in the native tier yet")


def _kw(rnd: str | None, flags: set[str]) -> dict:
    return dict(rnd=rnd, **{f: f in flags for f in FLAGS})


def _by_table(ins: ir.Instruction, env: WarpEnv, dty: str, sty: str, rnd: str | None, flags: set[str]) -> None:
    w = bits_of(sty)
    dbits = bits_of(dty)
    if dbits not in (8, 16, 32, 64):
        raise NotNative(f"{ins.mnemonic} is not in the native tier yet")
    ud = {8: np.uint8, 16: np.uint16, 32: np.uint32, 64: np.uint64}
    key = f"cvt|{dty}|{sty}|{rnd}|{sorted(flags)}"
    try:
        table = np.asarray(convert.cvt(np.arange(1 << w, dtype=ud[w]), dty, sty, **_kw(rnd, flags)))
    except ValueError as e:
        raise NotNative(f"{ins.mnemonic}: {e}") from None
    table = table.astype(ud[dbits])
    x = read(env, ins.operands[1], sty)
    _put(env, ins.operands[0], R.table_lookup(env, key, table, x))


def _pair_by_table(ins: ir.Instruction, env: WarpEnv, dty: str, sty: str, rnd: str | None,
                   flags: set[str]) -> None:
    """A packed f16x2/bf16x2 source into an fp8 pair: each half converts on its own (convert._cvt_packed),
    so one table of a half's 65536 values (the other half zero) serves both."""
    key = f"cvt|{dty}|{sty}|{rnd}|{sorted(flags)}"
    try:
        table = np.asarray(convert.cvt(np.arange(1 << 16, dtype=np.uint32), dty, sty, **_kw(rnd, flags)))
    except ValueError as e:
        raise NotNative(f"{ins.mnemonic}: {e}") from None
    table = (table.astype(np.uint32) & 0xFF).astype(np.uint8)
    b = env.b
    x = read(env, ins.operands[1], sty)
    lo = R.table_lookup(env, key, table, b.trunc(x, V(INT[16])))
    hi = R.table_lookup(env, key, table, b.trunc(b.lshr(x, L.Constant(V(I32), 16)), V(INT[16])))
    r = b.or_(b.shl(b.zext(hi, V(INT[16])), L.Constant(V(INT[16]), 8)), b.zext(lo, V(INT[16])))
    _put(env, ins.operands[0], r)


def _post(b: L.IRBuilder, bits: L.Value, fmt: formats.FloatFormat, flags: set[str], ftz_ok: bool = True) -> L.Value:
    """convert._float_post: .ftz (f32), .sat (NaN and negative -> +0, above 1 -> 1), .relu."""
    it = bits.type
    w = it.element.width
    sign = L.Constant(it, 1 << (w - 1))
    exp = L.Constant(it, (((1 << fmt.ebits) - 1) << fmt.mbits) << fmt.shift)
    zero = L.Constant(it, 0)
    if "ftz" in flags and fmt is formats.F32 and ftz_ok:
        bits = R.ftz32(b, bits)
    is_nan = b.icmp_unsigned(">", b.and_(bits, b.not_(sign)), exp)
    neg = b.icmp_unsigned("!=", b.and_(bits, sign), zero)
    if "sat" in flags:
        bits = b.select(b.or_(is_nan, neg), zero, bits)
        ones = {"f64": 0x3FF0000000000000, "f32": 0x3F800000, "f16": 0x3C00, "bf16": 0x3F80, "tf32": 0x3F800000}
        # (above 1.0, now that nothing is negative or NaN: an unsigned comparison of the bits)
        gt = b.icmp_unsigned(">", bits, L.Constant(it, ones[fmt.name]))
        bits = b.select(gt, L.Constant(it, ones[fmt.name]), bits)
    if "relu" in flags:
        bits = b.select(b.and_(neg, b.not_(is_nan)), zero, bits)
    return bits


def _relu_in(b: L.IRBuilder, v: L.Value) -> L.Value:
    """convert._elem_encode's .relu before encoding: negative values and -0 -> +0 (NaN stays)."""
    neg = b.icmp_signed("<", b.bitcast(v, V(I64)), L.Constant(V(I64), 0))
    return b.select(b.and_(neg, b.not_(R.isnan(b, v))), L.Constant(V(F64), 0.0), v)


def _source(env: WarpEnv, o: object, sty: str, flags: set[str]) -> L.Value:
    """A .f32/.f64 source as float64 (an f32 flushed first under .ftz)."""
    b = env.b
    x = read(env, o, sty)
    if sty == ".f64":
        return b.bitcast(x, V(F64))
    if "ftz" in flags:
        x = R.ftz32(b, x)
    return b.fpext(b.bitcast(x, V(F32)), V(F64))


def _narrow(ins: ir.Instruction, env: WarpEnv, dty: str, sty: str, rnd: str | None, flags: set[str]) -> None:
    """f32/f64 -> f32/f16/bf16/tf32, and two f32 -> a packed pair (a in the upper half)."""
    b = env.b
    if rnd not in ("rn", "rz", "rm", "rp", "rna") or (rnd == "rna" and dty != ".tf32"):
        raise NotNative(f"{ins.mnemonic} is not in the native tier yet")
    srcs = ins.operands[1:]
    if dty in PAIRS:
        fmt = PAIRS[dty]
        small = fmt.bits == 8
        if len(srcs) != 2 or sty != ".f32" or (small and ("satfinite" not in flags or rnd != "rn")) or \
                flags - {"relu", "satfinite"}:
            raise NotNative(f"{ins.mnemonic} is not in the native tier yet")
        codes = []
        for o in srcs:
            v = _source(env, o, sty, flags)
            if small and "relu" in flags:
                v = _relu_in(b, v)
            code = b.trunc(R.encode(b, v, fmt, rnd, "satfinite" in flags), V(INT[max(8, fmt.bits)]))
            if not small:
                code = _post(b, code, fmt, flags & {"relu"})
            codes.append(b.zext(code, V(I32)))
        eb = fmt.bits
        r = b.or_(b.shl(codes[0], L.Constant(V(I32), eb)), codes[1])
        _put(env, ins.operands[0], b.trunc(r, V(INT[2 * eb])) if eb == 8 else r)
        return
    fmt = FLOATS[dty]
    if len(srcs) != 1 or (fmt is formats.F32 and sty != ".f64"):
        raise NotNative(f"{ins.mnemonic} is not in the native tier yet")
    v = _source(env, srcs[0], sty, flags)
    sat = "satfinite" in flags
    if fmt is formats.F32:
        if sat:
            raise NotNative(f"{ins.mnemonic} is not in the native tier yet")
        bits = R.canon32(b, R.f64_to_f32(b, v, rnd))
        _put(env, ins.operands[0], _post(b, bits, fmt, flags))
        return
    code = b.trunc(R.encode(b, v, fmt, rnd, sat), V(INT[fmt.bits]))
    code = _post(b, code, fmt, flags)
    if sty == ".f64" and fmt is formats.F16:  # (an H200's f64 -> f16 NaN: convert._float_to_float)
        code = b.select(R.isnan(b, v), L.Constant(V(INT[16]), 0x7E00), code)
    elif fmt is formats.TF32:  # a NaN keeps its sign and payload cut to 10 fraction bits, if any is left
        kept = b.and_(read(env, srcs[0], sty), L.Constant(V(I32), 0xFFFFE000))
        if "ftz" in flags:
            kept = b.and_(R.ftz32(b, read(env, srcs[0], sty)), L.Constant(V(I32), 0xFFFFE000))
        has = b.icmp_unsigned("!=", b.and_(kept, L.Constant(V(I32), 0x7FFFFF)), L.Constant(V(I32), 0))
        code = b.select(b.and_(R.isnan(b, v), has), kept, code)
    _put(env, ins.operands[0], code)


def _to_int(ins: ir.Instruction, env: WarpEnv, dty: str, sty: str, rnd: str | None, flags: set[str]) -> None:
    """float -> integer (.sat changes nothing: it is always clamped)."""
    if rnd not in ROUND_INT or sty not in (".f32", ".f64") or flags - {"sat", "ftz"} or \
            ("ftz" in flags and sty != ".f32"):
        raise NotNative(f"{ins.mnemonic} is not in the native tier yet")
    b = env.b
    ft = F32 if sty == ".f32" else F64
    xb = read(env, ins.operands[1], sty)
    if "ftz" in flags:
        xb = R.ftz32(b, xb)
    x = b.bitcast(xb, V(ft))
    r = b.call(_intr(env, ROUND_INT[rnd], ft, 1), [x])
    wd = bits_of(dty)
    it = V(INT[wd])
    kind = "fptosi" if signed(dty) else "fptoui"
    conv = env.module_intrinsic(f"llvm.{kind}.sat.v32i{wd}.{_vname(ft)}", it, [V(ft)])
    v = b.call(conv, [r])
    if sty == ".f64" or wd == 64:
        v = b.select(R.isnan(b, r), L.Constant(it, 1 << (wd - 1)), v)
    write(env, ins.operands[0], v)


def _from_int(ins: ir.Instruction, env: WarpEnv, dty: str, sty: str, rnd: str | None, flags: set[str]) -> None:
    """integer -> .f32/.f64 (convert._int_to_float): the exact value as a float64 pair, rounded once."""
    sw = bits_of(sty)
    if flags - {"sat", "ftz"} or not (rnd in ("rn", "rz", "rm", "rp") or (rnd is None and sw <= 32 and not flags)):
        raise NotNative(f"{ins.mnemonic} is not in the native tier yet")
    rnd = rnd or "rn"
    b = env.b
    x = read(env, ins.operands[1], sty)
    zero = L.Constant(V(F64), 0.0)
    if sw <= 32:
        s = b.sitofp(x, V(F64)) if signed(sty) else b.uitofp(x, V(F64))
        e = zero
    else:
        hi = b.ashr(x, L.Constant(V(I64), 32)) if signed(sty) else b.lshr(x, L.Constant(V(I64), 32))
        hf = b.sitofp(hi, V(F64)) if signed(sty) else b.uitofp(hi, V(F64))
        lo = b.uitofp(b.and_(x, L.Constant(V(I64), 0xFFFFFFFF)), V(F64))
        s, e = R.two_sum(b, b.fmul(hf, L.Constant(V(F64), 4294967296.0)), lo)
    if dty == ".f64":
        sb = b.bitcast(s, V(I64))
        bits = R.fix_directed(b, sb, b.fcmp_ordered(">", e, zero), b.fcmp_ordered("<", e, zero), rnd)
        _put(env, ins.operands[0], _post(b, bits, formats.F64, flags - {"ftz"}))
        return
    bits = R.f64_to_f32(b, R.round_to_odd(b, s, e), rnd)
    _put(env, ins.operands[0], _post(b, bits, formats.F32, flags))


def _widen(ins: ir.Instruction, env: WarpEnv, rnd: str | None, flags: set[str]) -> None:
    """cvt.f64.f32: exact; a NaN keeps its sign and payload, quieted (as x86 and numpy's astype do)."""
    if rnd not in (None, "rn") or flags - {"ftz", "sat"}:
        raise NotNative(f"{ins.mnemonic} is not in the native tier yet")
    b = env.b
    xb = read(env, ins.operands[1], ".f32")
    if "ftz" in flags:
        xb = R.ftz32(b, xb)
    wide = b.bitcast(b.fpext(b.bitcast(xb, V(F32)), V(F64)), V(I64))
    x64 = b.zext(xb, V(I64))
    nan = b.or_(b.or_(b.shl(b.and_(x64, L.Constant(V(I64), 0x80000000)), L.Constant(V(I64), 32)),
                      L.Constant(V(I64), 0x7FF8000000000000)),
                b.shl(b.and_(x64, L.Constant(V(I64), 0x7FFFFF)), L.Constant(V(I64), 29)))
    r = b.select(R.nan32(b, xb), nan, wide)
    _put(env, ins.operands[0], _post(b, r, formats.F64, flags - {"ftz"}))


def _integral(ins: ir.Instruction, env: WarpEnv, ty: str, rnd: str | None, flags: set[str]) -> None:
    """float -> same float: rounded to an integral value (.rni ...), or only .ftz/.sat applied."""
    if (rnd is not None and rnd not in ROUND_INT and rnd != "rn") or flags - {"ftz", "sat"} or \
            ("ftz" in flags and ty != ".f32"):
        raise NotNative(f"{ins.mnemonic} is not in the native tier yet")
    b = env.b
    bits = bits_of(ty)
    ft = F32 if bits == 32 else F64
    xb = read(env, ins.operands[1], ty)
    if "ftz" in flags:
        xb = R.ftz32(b, xb)
    x = b.bitcast(xb, V(ft))
    if rnd in ROUND_INT:
        x = b.call(_intr(env, ROUND_INT[rnd], ft, 1), [x])
    it = V(INT[bits])
    nan = formats.F32.nan if bits == 32 else formats.F64.nan
    r = b.select(R.isnan(b, x), L.Constant(it, nan), b.bitcast(x, it))
    fmt = formats.F32 if bits == 32 else formats.F64
    _put(env, ins.operands[0], _post(b, r, fmt, flags))


