"""Floating-point instructions on .f32/.f64 as LLVM vector code, bit for bit as the interpreter's semantics
(`ptxforge.emu.semantics.floating`, `float_misc`, `approx`): add/sub/mul/fma in every rounding mode with
.ftz and .sat (.f64: add/sub/mul/fma in every mode), div/rcp/sqrt, rsqrt.approx, min/max with
their modifiers, abs/neg, copysign, testp and setp's comparisons. Directed roundings come from AVX-512's
embedded rounding where the host has it (lower_embedded.py), else from exact float64 steps (lower_round.py).
.f64 NaN results take the first NaN input's payload, quieted, else the canonical NaN
(`sub` is `a + (-b)`, so a NaN `b` comes back with its sign flipped); .f32 NaN results are canonical.
cvt lives in lower_cvt.py, half precision in lower_half.py.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from llvmlite import ir as L

from ptxforge.emu.native import lower_embedded
from ptxforge.emu.native import lower_round as R
from ptxforge.emu.native.lower import F32, F64, I1, I32, I64, INT, NotNative, V, bits_of, read, write
from ptxforge.emu.semantics import formats

if TYPE_CHECKING:
    from ptxforge.emu.native.warp import WarpEnv
    from ptxforge.ptx import ir

FLOAT = {32: F32, 64: F64}
NAN = {32: formats.F32.nan, 64: formats.F64.nan}
QUIET64 = 1 << 51  # (a NaN input's payload, quieted, as floating._nan64 keeps it)


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


def _nan64(b: L.IRBuilder, r: L.Value, ins_bits: list[L.Value]) -> L.Value:
    """floating._nan64: a NaN result takes the first NaN input's payload (quieted), else the canonical NaN."""
    it = V(I64)
    isn = _isnan(b, r)
    out = b.select(isn, L.Constant(it, NAN[64]), b.bitcast(r, it))
    for xb in reversed(ins_bits):
        x = b.bitcast(xb, V(F64))
        out = b.select(b.and_(isn, _isnan(b, x)), b.or_(xb, L.Constant(it, QUIET64)), out)
    return out


RNDS = ("rn", "rz", "rm", "rp")


def float_mods(ins: ir.Instruction, extra: tuple[str, ...] = ("ftz", "sat")) -> tuple[str, bool, bool]:
    """(rounding, .ftz, .sat) of a float instruction; NotNative for any other modifier."""
    mods = [m[1:] for m in ins.modifiers]
    rnd = [m for m in mods if m in RNDS]
    bad = [m for m in mods if m not in RNDS and m not in extra]
    if len(rnd) > 1 or bad:
        raise NotNative(f"{ins.mnemonic}: .{(bad or rnd)[0]} is not in the native tier yet")
    return (rnd[0] if rnd else "rn"), "ftz" in mods, "sat" in mods


def arith(ins: ir.Instruction, env: WarpEnv) -> None:
    """add/sub/mul/fma/mad .f32 in every rounding mode with .ftz and .sat (floating.add/mul/fma), and .f64
    (`arith64`)."""
    ty = ins.types[-1]
    if ty == ".f64":
        arith64(ins, env)
        return
    if ty != ".f32":
        raise NotNative(f"{ins.mnemonic}: {ty} arithmetic is not in the native tier yet")
    rnd, ftz, sat = float_mods(ins)
    b = env.b
    ops = ins.operands
    xs = [env.read_nan_free(o, ty) for o in ops[1:]]  # (a NaN result is canonical whichever NaN came in)
    if ftz:
        xs = [R.ftz32(b, x) for x in xs]
    if ins.opcode == "sub":
        xs[1] = b.xor(xs[1], L.Constant(V(I32), R.SIGN32))
    fs = [b.bitcast(x, V(F32)) for x in xs]
    op = "add" if ins.opcode in ("add", "sub") else "mul" if ins.opcode == "mul" else "fma"
    if rnd == "rn":
        if op == "add":
            r = b.fadd(fs[0], fs[1])
        elif op == "mul":
            r = b.fmul(fs[0], fs[1])
        else:
            r = b.call(_intr(env, "llvm.fma", F32, 3), fs)
        bits = b.bitcast(r, V(I32))
    elif (hw := lower_embedded.rounded(env, op, fs, rnd)) is not None:
        bits = b.bitcast(hw, V(I32))
    else:
        ds = [b.fpext(f, V(F64)) for f in fs]
        if op == "mul":  # (exact in float64)
            v = b.fmul(ds[0], ds[1])
        else:
            x, y = (ds[0], ds[1]) if op == "add" else (b.fmul(ds[0], ds[1]), ds[2])
            v = R.round_to_odd(b, *R.two_sum(b, x, y))
            if rnd == "rm":
                v = R.rm_zero_sign(b, v, x, y)
        bits = R.f64_to_f32(b, v, rnd)
    write(env, ops[0], R.finish32(b, bits, ftz, sat))
    if not ftz and not sat:
        env.keep_raw(ops[0], bits)


def arith64(ins: ir.Instruction, env: WarpEnv) -> None:
    """add/sub/mul/fma .f64 in every rounding mode (floating._add64, _mul64, _fma64)."""
    rnd, ftz, sat = float_mods(ins, ())
    b = env.b
    ops = ins.operands
    xs = [read(env, o, ".f64") for o in ops[1:]]
    if ins.opcode == "sub":
        xs[1] = b.xor(xs[1], L.Constant(V(I64), 1 << 63))
    fs = [b.bitcast(x, V(F64)) for x in xs]
    op = {"add": "add", "sub": "add", "mul": "mul", "fma": "fma", "mad": "fma"}.get(ins.opcode)
    if op is None:
        raise NotNative(f"{ins.mnemonic} is not in the native tier yet")
    hw = lower_embedded.rounded(env, op, fs, rnd)  # (None: .rn, or no embedded rounding on this host)
    if hw is not None:
        r = hw
    elif op == "add":
        r = b.fadd(fs[0], fs[1]) if rnd == "rn" else _add64_directed(b, fs[0], fs[1], rnd)
    elif op == "mul":
        r = b.fmul(fs[0], fs[1]) if rnd == "rn" else _mul64_directed(env, fs[0], fs[1], rnd)
    else:
        r = b.call(_intr(env, "llvm.fma", F64, 3), fs)
        if rnd != "rn":
            r = _fma64_directed(env, fs, r, rnd)
    write(env, ops[0], _nan64(b, r, xs))


def _finite(b: L.IRBuilder, x: L.Value) -> L.Value:
    return b.fcmp_ordered("<", R._fabs(b, x), L.Constant(x.type, float("inf")))


def _add64_directed(b: L.IRBuilder, x: L.Value, y: L.Value, rnd: str) -> L.Value:
    """floating._add64 with a directed rounding: two_sum's error says where the exact sum lies (an overflow
    to infinity lies beyond the exact sum)."""
    s, e = R.two_sum(b, x, y)
    zero = L.Constant(V(F64), 0.0)
    fin = b.and_(_finite(b, x), _finite(b, y))
    s_inf = b.not_(b.or_(_finite(b, s), _isnan(b, s)))
    s_neg = b.fcmp_ordered("<", s, zero)
    above = b.and_(fin, b.select(s_inf, s_neg, b.fcmp_ordered(">", e, zero)))
    below = b.and_(fin, b.select(s_inf, b.not_(s_neg), b.fcmp_ordered("<", e, zero)))
    r = b.bitcast(R.fix_directed(b, b.bitcast(s, V(I64)), above, below, rnd), V(F64))
    if rnd == "rm":
        r = b.select(fin, R.rm_zero_sign(b, r, x, y), r)
    return r


def _mul64_directed(env: WarpEnv, x: L.Value, y: L.Value, rnd: str) -> L.Value:
    """x * y (float64) rounded in `rnd`: where the exact product x*y lies against its nearest double (the
    interpreter's exact rational rounding, computed exactly). Products of at least 2**-960: RN(x*y) and the
    fma remainder (exact there). Smaller ones: x and y scaled by 2**500 each, the scaled product's RN and
    remainder (a double-double of x*y*2**1000), rounded to nearest at the subnormal quantum by one scaling
    back, the side of the exact product from the double-double; below 2**-1960 the result is a zero or the
    smallest subnormal, by the product's sign. An overflow to infinity lies beyond the exact product."""
    b = env.b
    vt = V(F64)
    zero = L.Constant(vt, 0.0)
    fma = _intr(env, "llvm.fma", F64, 3)

    def cf(v: float) -> L.Constant:
        return L.Constant(vt, v)
    p = b.fmul(x, y)
    e = b.call(fma, [x, y, b.fneg(p)])
    fin = b.and_(_finite(b, x), _finite(b, y))
    p_inf = b.not_(b.or_(_finite(b, p), _isnan(b, p)))
    p_neg = b.fcmp_ordered("<", p, zero)
    above = b.select(p_inf, p_neg, b.fcmp_ordered(">", e, zero))
    below = b.select(p_inf, b.not_(p_neg), b.fcmp_ordered("<", e, zero))
    t = p
    # tiny products: the double-double of x*y*2**1000
    small = b.fcmp_ordered("<", R._fabs(b, p), cf(2.0 ** -960))
    xs, ys = b.fmul(x, cf(2.0 ** 500)), b.fmul(y, cf(2.0 ** 500))
    ps = b.fmul(xs, ys)
    es = b.call(fma, [xs, ys, b.fneg(ps)])
    ts = b.fmul(ps, cf(2.0 ** -1000))
    d = b.fsub(ps, b.fmul(ts, cf(2.0 ** 1000)))
    d_zero = b.fcmp_ordered("==", d, zero)
    above_s = b.or_(b.fcmp_ordered(">", d, zero), b.and_(d_zero, b.fcmp_ordered(">", es, zero)))
    below_s = b.or_(b.fcmp_ordered("<", d, zero), b.and_(d_zero, b.fcmp_ordered("<", es, zero)))
    # far below the subnormals: the product's sign says which side of zero it lies
    tiny = b.fcmp_ordered("<", R._fabs(b, ps), cf(2.0 ** -960))
    nonzero = b.and_(b.fcmp_ordered("!=", x, zero), b.fcmp_ordered("!=", y, zero))
    neg = b.icmp_signed("<", b.xor(b.bitcast(x, V(I64)), b.bitcast(y, V(I64))), L.Constant(V(I64), 0))
    above_s = b.select(tiny, b.and_(nonzero, b.not_(neg)), above_s)
    below_s = b.select(tiny, b.and_(nonzero, neg), below_s)
    small = b.and_(small, b.and_(nonzero, fin))  # (a zero factor: an exact zero, and no scaling of a huge one)
    t = b.select(small, ts, t)
    above = b.and_(fin, b.select(small, above_s, above))
    below = b.and_(fin, b.select(small, below_s, below))
    return b.bitcast(R.fix_directed(b, b.bitcast(t, V(I64)), above, below, rnd), vt)


def _fma64_directed(env: WarpEnv, fs: list[L.Value], r: L.Value, rnd: str) -> L.Value:
    """x * y + z (float64) rounded in `rnd`, from its correctly rounded RN(x*y + z) `r` (llvm.fma): r stepped
    by the sign of the exact residual x*y + z - r (the interpreter's exact rational rounding, computed exactly).
    The residual's sign does not change when every term is scaled by one power of two: the largest of x*y and z
    is brought near 1 (x and y by their own exponents, so that x*y stays an exact two-product), a term below
    2**-600 of it becomes +-2**-600 (every other term is a multiple of 2**-110 or zero there, so the smaller
    term only says which side), and the sign of x'*y' + z' - r' is that of an exact expansion
    (`lower_round.sign_of_sum`). A zero product or a non-finite input: the IEEE result is exact (.rm: an exact
    zero sum is -0 where floating._fma64 says so); an overflow to infinity lies beyond the exact value."""
    b = env.b
    x, y, z = fs
    vt = V(F64)
    zero = L.Constant(vt, 0.0)
    fma = _intr(env, "llvm.fma", F64, 3)
    (mx, ex), (my, ey), (mz, ez), (mr, er) = (R.split64(b, v) for v in (x, y, z, r))
    z_zero, r_zero = b.fcmp_ordered("==", z, zero), b.fcmp_ordered("==", r, zero)
    ep = b.add(ex, ey)
    top = b.select(b.or_(z_zero, b.icmp_signed(">", ep, ez)), ep, ez)
    floor = R.c(I64, -600)

    def scaled(m: L.Value, k: L.Value) -> L.Value:  # m * 2**max(k - top, -600)
        k = b.sub(k, top)
        return b.fmul(m, R.pow2(b, b.select(b.icmp_signed("<", k, floor), floor, k)))
    xs = scaled(mx, ep)
    zs = b.select(z_zero, zero, scaled(mz, ez))
    rs = b.select(r_zero, zero, scaled(mr, er))
    p = b.fmul(xs, my)
    pe = b.call(fma, [xs, my, b.fneg(p)])
    side = R.sign_of_sum(b, [p, pe, zs, b.fneg(rs)])
    fin = b.and_(b.and_(_finite(b, x), _finite(b, y)), _finite(b, z))
    prod = b.and_(b.fcmp_ordered("!=", x, zero), b.fcmp_ordered("!=", y, zero))
    live = b.and_(fin, prod)
    r_inf = b.not_(_finite(b, r))
    r_neg = b.fcmp_ordered("<", r, zero)
    above = b.and_(live, b.select(r_inf, r_neg, b.fcmp_ordered(">", side, zero)))
    below = b.and_(live, b.select(r_inf, b.not_(r_neg), b.fcmp_ordered("<", side, zero)))
    out = b.bitcast(R.fix_directed(b, b.bitcast(r, V(I64)), above, below, rnd), vt)
    if rnd == "rm":  # an exact zero: -0 for a nonzero product, else when the product's or z's sign is set
        exact0 = b.and_(fin, b.and_(r_zero, b.not_(b.or_(above, below))))
        neg = b.or_(prod, b.or_(_signbit(b, b.fmul(x, y)), _signbit(b, z)))
        out = b.select(b.and_(exact0, neg), L.Constant(vt, -0.0), out)
    return out


def _signbit(b: L.IRBuilder, x: L.Value) -> L.Value:
    return b.icmp_signed("<", b.bitcast(x, V(I64)), L.Constant(V(I64), 0))


def _div64_directed(env: WarpEnv, x: L.Value, y: L.Value, r: L.Value, rnd: str) -> L.Value:
    """x / y (float64) rounded in `rnd`, from its correctly rounded RN(x / y) `r` (fdiv): r stepped by the
    sign of x/y - r, which is that of x - r*y times y's. Scaled by powers of two (y and r to [1, 2), x by
    2**(ex - ey - er), near 1 since r is near x/y), the remainder x' - r'*y' is an fma whose rounding keeps
    its sign (every term a multiple of 2**-160: no underflow). A zero or non-finite operand: the IEEE
    quotient is exact; a zero r of a nonzero quotient: the quotient's sign; an overflow to infinity lies
    beyond the exact quotient."""
    b = env.b
    vt = V(F64)
    zero = L.Constant(vt, 0.0)
    (mx, ex), (my, ey), (mr, er) = (R.split64(b, v) for v in (x, y, r))
    xs = b.fmul(mx, R.pow2(b, b.sub(ex, b.add(ey, er))))
    rem = b.call(_intr(env, "llvm.fma", F64, 3), [b.fneg(mr), my, xs])
    up = b.xor(b.fcmp_ordered(">", rem, zero), _signbit(b, y))
    down = b.xor(b.fcmp_ordered("<", rem, zero), _signbit(b, y))
    exact = b.fcmp_ordered("==", rem, zero)
    up, down = b.and_(up, b.not_(exact)), b.and_(down, b.not_(exact))
    live = b.and_(b.and_(_finite(b, x), _finite(b, y)),
                  b.and_(b.fcmp_ordered("!=", x, zero), b.fcmp_ordered("!=", y, zero)))
    r_inf = b.not_(_finite(b, r))
    r_zero = b.fcmp_ordered("==", r, zero)
    q_neg = b.xor(_signbit(b, x), _signbit(b, y))
    r_neg = b.fcmp_ordered("<", r, zero)
    up = b.select(r_inf, r_neg, b.select(r_zero, b.not_(q_neg), up))
    down = b.select(r_inf, b.not_(r_neg), b.select(r_zero, q_neg, down))
    return b.bitcast(R.fix_directed(b, b.bitcast(r, V(I64)), b.and_(live, up), b.and_(live, down), rnd), vt)


def minmax(ins: ir.Instruction, env: WarpEnv) -> None:
    """min/max .f32/.f64 with .ftz, .NaN, .xorsign.abs, .relu and a third input (float_misc.min/max)."""
    bits, ft = _ftype(ins.types[-1])
    mods = [m[1:] for m in ins.modifiers]
    bad = [m for m in mods if m not in ("ftz", "NaN", "xorsign", "abs", "relu")]
    xorsign = "xorsign" in mods
    ops = ins.operands
    if bad or ("abs" in mods) != xorsign or (xorsign and len(ops) != 3) or len(ops) not in (3, 4):
        raise NotNative(f"{ins.mnemonic} is not in the native tier yet")
    ftz, nan, relu = "ftz" in mods, "NaN" in mods, "relu" in mods
    xs = [read(env, o, ins.types[-1]) for o in ops[1:]]
    pick_min = ins.opcode == "min"
    if len(xs) == 3:
        r = _minmax_bits(env, xs[0], xs[1], bits, pick_min, ftz, nan, False, False)
        r = _minmax_bits(env, r, xs[2], bits, pick_min, ftz, nan, False, relu)
    else:
        r = _minmax_bits(env, xs[0], xs[1], bits, pick_min, ftz, nan, xorsign, relu)
    write(env, ops[0], r)


def _flush(b: L.IRBuilder, x: L.Value, bits: int) -> L.Value:
    """float_misc.flush_bits: subnormals -> the zero of their sign."""
    it = V(INT[bits])
    exp = (0x7FF << 52) if bits == 64 else R.EXP32
    sub = b.icmp_unsigned("==", b.and_(x, L.Constant(it, exp)), L.Constant(it, 0))
    return b.select(sub, b.and_(x, L.Constant(it, 1 << (bits - 1))), x)


def _minmax_bits(env: WarpEnv, xb: L.Value, yb: L.Value, bits: int, pick_min: bool, ftz: bool, nan: bool,
                 xorsign: bool, relu: bool) -> L.Value:
    """float_misc.minmax_bits for .f32/.f64 on bits."""
    b = env.b
    ft, it = V(FLOAT[bits]), V(INT[bits])
    sign = L.Constant(it, 1 << (bits - 1))
    if ftz:
        xb, yb = _flush(b, xb, bits), _flush(b, yb, bits)
    xs = b.and_(b.xor(xb, yb), sign)
    if xorsign:
        xb, yb = b.and_(xb, b.not_(sign)), b.and_(yb, b.not_(sign))
    x, y = b.bitcast(xb, ft), b.bitcast(yb, ft)
    take_x = b.fcmp_ordered("<" if pick_min else ">", x, y)
    r = b.select(take_x, xb, yb)
    nx, ny = _isnan(b, x), _isnan(b, y)
    r = b.select(nx, yb, b.select(ny, xb, r))
    if not xorsign:  # -0.0 < +0.0
        zero = L.Constant(ft, 0.0)
        both = b.and_(b.fcmp_ordered("==", x, zero), b.fcmp_ordered("==", y, zero))
        r = b.select(both, b.or_(xb, yb) if pick_min else b.and_(xb, yb), r)
    else:
        r = b.or_(b.and_(r, b.not_(sign)), xs)
    any_nan = b.or_(nx, ny) if nan else b.and_(nx, ny)
    r = b.select(any_nan, L.Constant(it, NAN[bits]), r)
    if relu:
        neg = b.icmp_unsigned("!=", b.and_(r, sign), L.Constant(it, 0))
        r = b.select(b.and_(neg, b.not_(_isnan(b, b.bitcast(r, ft)))), L.Constant(it, 0), r)
    return r


def absneg(ins: ir.Instruction, env: WarpEnv) -> None:
    """abs/neg{.ftz} .f32/.f64: the sign bit cleared or flipped (after the flush), NaNs kept as they are."""
    bits, _ = _ftype(ins.types[-1])
    mods = [m[1:] for m in ins.modifiers]
    if any(m != "ftz" for m in mods):
        raise NotNative(f"{ins.mnemonic} is not in the native tier yet")
    b = env.b
    x = read(env, ins.operands[1], ins.types[-1])
    if mods:
        x = _flush(b, x, bits)
    sign = L.Constant(V(INT[bits]), 1 << (bits - 1))
    write(env, ins.operands[0], b.and_(x, b.not_(sign)) if ins.opcode == "abs" else b.xor(x, sign))


def copysign(ins: ir.Instruction, env: WarpEnv) -> None:
    """copysign.{f32,f64} d, a, b: b with a's sign."""
    ty = ins.types[-1]
    bits, _ = _ftype(ty)
    if ins.modifiers:
        raise NotNative(f"{ins.mnemonic} is not in the native tier yet")
    b = env.b
    ops = ins.operands
    sign = L.Constant(V(INT[bits]), 1 << (bits - 1))
    x, y = read(env, ops[1], ty), read(env, ops[2], ty)
    write(env, ops[0], b.or_(b.and_(y, b.not_(sign)), b.and_(x, sign)))


def testp(ins: ir.Instruction, env: WarpEnv) -> None:
    """testp.op.{f32,f64} (float_misc.testp)."""
    ty = ins.types[-1]
    bits, _ = _ftype(ty)
    op = [m[1:] for m in ins.modifiers]
    if len(op) != 1:
        raise NotNative(f"{ins.mnemonic} is not in the native tier yet")
    b = env.b
    it = V(INT[bits])
    expo = (0x7FF << 52) if bits == 64 else R.EXP32
    x = read(env, ins.operands[1], ty)
    e = b.and_(x, L.Constant(it, expo))
    m = b.and_(x, L.Constant(it, (1 << (bits - 1)) - 1 - expo))
    zero, full = L.Constant(it, 0), L.Constant(it, expo)
    e_full, e_zero = b.icmp_unsigned("==", e, full), b.icmp_unsigned("==", e, zero)
    m_zero = b.icmp_unsigned("==", m, zero)
    res = {"finite": lambda: b.not_(e_full), "infinite": lambda: b.and_(e_full, m_zero),
           "number": lambda: b.not_(b.and_(e_full, b.not_(m_zero))),
           "notanumber": lambda: b.and_(e_full, b.not_(m_zero)),
           "normal": lambda: b.and_(b.not_(e_zero), b.not_(e_full)),
           "subnormal": lambda: b.and_(e_zero, b.not_(m_zero))}.get(op[0])
    if res is None:
        raise NotNative(f"{ins.mnemonic} is not in the native tier yet")
    write(env, ins.operands[0], res())


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
    """div/rcp/sqrt as floating.div/rcp/sqrt. .f32: every rounding mode and .ftz; `.full` division and the
    `.approx` square root and reciprocal are the correctly rounded result (as the interpreter computes them);
    `div.approx.f32` is a * (1/b) with the reciprocal's subnormals flushed. .f64: every rounding mode (no
    .ftz) and `rcp.approx.ftz.f64`."""
    ty = ins.types[-1]
    bits, ft = _ftype(ty)
    mods = [m[1:] for m in ins.modifiers]
    ftz = "ftz" in mods
    modes = [m for m in mods if m != "ftz"]
    mode = modes[0] if len(modes) == 1 else None
    allowed = {"div": (*RNDS, "full", "approx"), "rcp": (*RNDS, "approx"), "sqrt": (*RNDS, "approx")}[ins.opcode]
    if mode not in allowed:
        raise NotNative(f"{ins.mnemonic} is not in the native tier yet")
    b = env.b
    ops = ins.operands
    xs = [read(env, o, ty) for o in ops[1:]]
    if bits == 64:
        if ins.opcode == "rcp" and mode == "approx":
            write(env, ops[0], _rcp_approx64(b, xs[0]))
            return
        if ins.opcode == "sqrt" and mode in ("rz", "rm", "rp") and not ftz:
            write(env, ops[0], _nan64(b, _sqrt64_directed(env, b.bitcast(xs[0], V(F64)), mode), xs))
            return
        directed = mode in ("rz", "rm", "rp") and ins.opcode in ("div", "rcp")
        if ftz or mode not in ("rn", "approx") and not directed or (mode == "approx" and ins.opcode != "sqrt"):
            raise NotNative(f"{ins.mnemonic} is not in the native tier yet")
        fs = [b.bitcast(x, V(F64)) for x in xs]
        if ins.opcode == "rcp":
            fs = [L.Constant(V(F64), 1.0), fs[0]]
        r = b.call(_intr(env, "llvm.sqrt", F64, 1), fs) if ins.opcode == "sqrt" else b.fdiv(fs[0], fs[1])
        if directed:
            r = _div64_directed(env, fs[0], fs[1], r, mode)
        write(env, ops[0], _nan64(b, r, xs))
        return
    if ftz:
        xs = [R.ftz32(b, x) for x in xs]
    if ins.opcode == "rcp":
        xs = [L.Constant(V(I32), R.ONE32), xs[0]]
    if mode in ("approx", "full") and ins.opcode != "div" or mode == "full":
        mode = "rn"
    fs = [b.bitcast(x, V(F32)) for x in xs]
    if mode == "approx":  # div.approx
        rc = R.ftz32(b, b.bitcast(b.fdiv(L.Constant(V(F32), 1.0), fs[1]), V(I32)))
        bits32 = b.bitcast(b.fmul(fs[0], b.bitcast(rc, V(F32))), V(I32))
    elif mode == "rn":
        r = b.call(_intr(env, "llvm.sqrt", F32, 1), fs) if ins.opcode == "sqrt" else b.fdiv(fs[0], fs[1])
        bits32 = b.bitcast(r, V(I32))
    else:
        bits32 = R.f64_to_f32(b, _div_sqrt_to_odd(env, ins.opcode, fs), mode)
    write(env, ops[0], R.finish32(b, bits32, ftz, False))


def _sqrt64_directed(env: WarpEnv, x: L.Value, rnd: str) -> L.Value:
    """sqrt(x) (float64) rounded in `rnd`: RN(sqrt) stepped by the sign of the exact remainder x - r*r (an
    fma); x under 2**-900 is scaled by 2**1000 first and the root back by 2**-500 (both exact: the root of a
    double is normal)."""
    b = env.b
    vt = V(F64)
    zero = L.Constant(vt, 0.0)
    small = b.and_(b.fcmp_ordered(">", x, zero), b.fcmp_ordered("<", x, L.Constant(vt, 2.0 ** -900)))
    xx = b.select(small, b.fmul(x, L.Constant(vt, 2.0 ** 1000)), x)
    r = b.call(_intr(env, "llvm.sqrt", F64, 1), [xx])
    e = b.call(_intr(env, "llvm.fma", F64, 3), [b.fneg(r), r, xx])
    rd = R.fix_directed(b, b.bitcast(r, V(I64)), b.fcmp_ordered(">", e, zero), b.fcmp_ordered("<", e, zero), rnd)
    rd = b.bitcast(rd, vt)
    return b.select(small, b.fmul(rd, L.Constant(vt, 2.0 ** -500)), rd)


def _div_sqrt_to_odd(env: WarpEnv, opcode: str, fs: list[L.Value]) -> L.Value:
    """The float64 round-to-odd of an f32 quotient or square root: the float64 result stepped by the sign
    of its exact remainder (an fma), as floating.div/sqrt do with two_prod."""
    b = env.b
    fma = _intr(env, "llvm.fma", F64, 3)
    zero = L.Constant(V(F64), 0.0)
    if opcode == "sqrt":
        x = b.fpext(fs[0], V(F64))
        q = b.call(_intr(env, "llvm.sqrt", F64, 1), [x])
        rem = b.call(fma, [b.fneg(q), q, x])
        flip = L.Constant(V(I1), 0)
        ok = L.Constant(V(I1), 1)
    else:
        x, y = (b.fpext(f, V(F64)) for f in fs)
        q = b.fdiv(x, y)
        rem = b.call(fma, [b.fneg(q), y, x])
        flip = b.icmp_signed("<", b.bitcast(y, V(I64)), L.Constant(V(I64), 0))
        ok = b.fcmp_ordered("!=", y, zero)
    need = b.and_(ok, b.and_(b.fcmp_ordered("!=", rem, zero), _finite(b, rem)))
    neg = b.xor(b.fcmp_ordered("<", rem, zero), flip)
    e = b.select(need, b.select(neg, L.Constant(V(F64), -1.0), L.Constant(V(F64), 1.0)), zero)
    return R.round_to_odd(b, q, e)


def _rcp_approx64(b: L.IRBuilder, x: L.Value) -> L.Value:
    """rcp.approx.ftz.f64 (approx.py / floating.rcp): 1/x of the flushed input, a NaN 0x7fffffff00000000,
    the result flushed."""
    xf = _flush(b, x, 64)
    f = b.bitcast(xf, V(F64))
    r = b.bitcast(b.fdiv(L.Constant(V(F64), 1.0), f), V(I64))
    r = b.select(_isnan(b, f), L.Constant(V(I64), 0x7FFFFFFF00000000), r)
    return _flush(b, r, 64)


def rsqrt(ins: ir.Instruction, env: WarpEnv) -> None:
    """rsqrt.approx{.ftz}.{f32,f64} as approx.py computes it: 1 / sqrt(x) in float64 (two IEEE operations),
    rounded once to f32 (ex2, lg2, sin, cos and tanh: lower_approx.py)."""
    ty = ins.types[-1]
    bits, _ = _ftype(ty)
    mods = [m[1:] for m in ins.modifiers]
    if "approx" not in mods or any(m not in ("approx", "ftz") for m in mods):
        raise NotNative(f"{ins.mnemonic} is not in the native tier yet")
    ftz = "ftz" in mods
    b = env.b
    x = read(env, ins.operands[1], ty)
    if ftz:
        x = _flush(b, x, bits)
    f = b.bitcast(x, V(F64)) if bits == 64 else b.fpext(b.bitcast(x, V(F32)), V(F64))
    r = b.fdiv(L.Constant(V(F64), 1.0), b.call(_intr(env, "llvm.sqrt", F64, 1), [f]))
    if bits == 32:
        out = R.canon32(b, b.bitcast(b.fptrunc(r, V(F32)), V(I32)))
    else:
        nan = 0x7FFFFFFF00000000 if ftz else NAN[64]
        out = b.select(_isnan(b, r), L.Constant(V(I64), nan), b.bitcast(r, V(I64)))
    write(env, ins.operands[0], _flush(b, out, bits) if ftz else out)
