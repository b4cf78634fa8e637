"""Video instructions on the native tier, bit for bit as `semantics.video` computes them (the manual's
pseudocode, with the H200's readings where it is silent): scalar vadd vsub vabsdiff vmin vmax vshl vshr vmad
vset with byte/half-word selectors, `.sat`, a secondary operation (.add/.min/.max) or a destination selector,
and the SIMD vadd2/4 vsub2/4 vavrg2/4 vabsdiff2/4 vmin2/4 vmax2/4 vset2/4 with selectors, masks, `.sat` and
`.add`. The instruction is decoded as `ops_video` decodes it (selectors ride on register names).

Widths: the scalar forms work in i64 as the interpreter's int64 (operands are 33-bit at most); vshl's shifted
value in i128 before its saturation (the interpreter's exact integers), vmad's product and sum in i128 (its
128-bit pseudocode); the SIMD forms on 8/16-bit elements in i32.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from llvmlite import ir as L

from ptxforge.emu.native import lower_round as R
from ptxforge.emu.native.lower import I32, I64, INT, NotNative, V, read, write
from ptxforge.emu.semantics import video as video_semantics
from ptxforge.ptx import ir
from ptxforge.ptx.isa import modifier_slot

if TYPE_CHECKING:
    from ptxforge.emu.native.warp import WarpEnv

I128 = L.IntType(128)
# the modifier groups, from the ISA table as ops_video reads them (every scalar op's secondary operations are
# vadd's; the SIMD vset2/4 compare as vset does)
_SECOPS = modifier_slot("vadd", "secop")
_CMPS = modifier_slot("vset", "cmp")
_SCALES = modifier_slot("vmad", "scale")
_ICMP = {"eq": "==", "ne": "!=", "lt": "<", "le": "<=", "gt": ">", "ge": ">="}


def _source(env: WarpEnv, o: object) -> tuple[L.Value, str | None, bool]:
    """(the whole 32-bit register or immediate, its selector or None, negated)."""
    neg = isinstance(o, ir.Minus)
    if neg:
        o = o.operand  # type: ignore[attr-defined]
    sel = None
    if isinstance(o, ir.Register):
        base, sel = ir.split_selector(o.name)
        o = ir.Register(base, o.span)
    return read(env, o, ".b32"), sel, neg


def _types(ins: ir.Instruction, n: int) -> list[str]:
    ts = [t[1:] for t in ins.types]
    if len(ts) != n or any(t not in ("u32", "s32") for t in ts):
        raise NotNative(f"{ins.mnemonic}: expected {n} types of .u32/.s32")
    return ts


def video(ins: ir.Instruction, env: WarpEnv) -> None:
    """Any video instruction (see the module docstring)."""
    op = ins.opcode
    ops = ins.operands
    dst = ops[0]
    if not isinstance(dst, ir.Register):
        raise NotNative(f"{ins.mnemonic}: the destination is not a register")
    dbase, dsel = ir.split_selector(dst.name)
    srcs = [_source(env, o) for o in ops[1:]]
    if op != "vmad" and any(s[2] for s in srcs):
        raise NotNative(f"{op}: only vmad's operands may be negated")
    has_c = len(srcs) > 2
    c = srcs[2][0] if has_c else R.c(I32, 0)
    sat = ins.has("sat")
    secop = next((s for s in ins.suffixes if s in _SECOPS), None)
    cmp = next((s for s in ins.suffixes if s in _CMPS), None)
    b = env.b
    (a, asel, neg_a), (bb, bsel, neg_b) = srcs[0], srcs[1]
    if op[-1] in "24":
        n, base_op = int(op[-1]), op[:-1]
        if base_op == "vset":
            atype, btype = _types(ins, 2)
            dtype = "u32"
        else:
            dtype, atype, btype = _types(ins, 3)
        d = _simd(b, base_op, a, bb, c, n, dtype, atype, btype, sat, ins.has("add"), dsel, asel, bsel, cmp)
    elif op == "vmad":
        dtype, atype, btype = _types(ins, 3)
        if neg_a and neg_b or (neg_a or neg_b) and srcs[2][2]:
            raise NotNative(f"{ins.mnemonic}: negate either a or b (or c)")
        scale = next((s for s in ins.suffixes if s in _SCALES), None)
        d = _vmad(b, a, bb, c, atype, btype, sat, scale, ins.has("po"), neg_a != neg_b, srcs[2][2], asel, bsel)
    else:
        if secop is not None and dsel is not None:
            raise NotNative(f"{ins.mnemonic}: a secondary operation and a destination selector")
        cc = c if has_c else None
        if op == "vset":
            atype, btype = _types(ins, 2)
            if cmp not in _ICMP:
                raise NotNative(f"{ins.mnemonic}: no comparison")
            x, y = _part(b, a, atype, asel), _part(b, bb, btype, bsel)
            tmp = b.zext(b.icmp_signed(_ICMP[cmp], x, y), V(I64))
            d = _secondary(b, tmp, cc, secop, dsel, False)
        elif op in ("vshl", "vshr"):
            dtype, atype, _ = _types(ins, 3)
            d = _shift(b, op, a, bb, cc, dtype, atype, "wrap" if ins.has("wrap") else "clamp", sat, secop, dsel,
                       asel, bsel)
        elif op in ("vadd", "vsub", "vabsdiff", "vmin", "vmax"):
            dtype, atype, btype = _types(ins, 3)
            x, y = _part(b, a, atype, asel), _part(b, bb, btype, bsel)
            tmp = {"vadd": lambda: b.add(x, y), "vsub": lambda: b.sub(x, y), "vabsdiff": lambda: _abs(b, b.sub(x, y)),
                   "vmin": lambda: _pick(b, "<", x, y), "vmax": lambda: _pick(b, ">", x, y)}[op]()
            d = _secondary(b, _sat(b, tmp, sat, dtype == "s32", dsel), cc, secop, dsel, dtype == "s32")
        else:
            raise NotNative(f"{ins.mnemonic} is not in the native tier yet")
    write(env, ir.Register(dbase, dst.span), d)


# ---------------------------------------------------------------------------------------------- scalar
def _part(b: L.IRBuilder, x: L.Value, ty: str, sel: str | None) -> L.Value:
    """partSelectSignExtend: a byte, half-word or the whole of x (i32), extended to i64 by the type's sign."""
    try:
        width, shift = video_semantics.selected_field(sel)
    except ValueError:
        raise NotNative(f"video selector .{sel} on a scalar operand") from None
    v = b.trunc(b.lshr(x, R.c(I32, shift)), V(INT[width])) if width < 32 else x
    return b.sext(v, V(I64)) if ty == "s32" else b.zext(v, V(I64))


def _abs(b: L.IRBuilder, x: L.Value) -> L.Value:
    t = x.type.element
    return b.select(b.icmp_signed("<", x, R.c(t, 0)), b.neg(x), x)


def _pick(b: L.IRBuilder, how: str, x: L.Value, y: L.Value) -> L.Value:
    return b.select(b.icmp_signed(how, x, y), x, y)


def _clamp(b: L.IRBuilder, x: L.Value, lo: int, hi: int) -> L.Value:
    t = x.type.element
    return _pick(b, ">", _pick(b, "<", x, R.c(t, hi)), R.c(t, lo))


def _sat(b: L.IRBuilder, tmp: L.Value, sat: bool, signed: bool, dsel: str | None) -> L.Value:
    """video._sat: into the 32-bit range, or (a destination selector) a negative result to the part's
    largest value, as an H200 does."""
    if not sat:
        return tmp
    if dsel is None:
        return _clamp(b, tmp, -(1 << 31), (1 << 31) - 1) if signed else _clamp(b, tmp, 0, (1 << 32) - 1)
    width = 8 if dsel[0] == "b" else 16
    hi = (1 << (width - 1)) - 1 if signed else (1 << width) - 1
    t = tmp.type.element
    neg = b.icmp_signed("<", tmp, R.c(t, 0))
    return b.select(neg, R.c(t, hi), _pick(b, "<", tmp, R.c(t, hi)))


def _secondary(b: L.IRBuilder, tmp: L.Value, c: L.Value | None, secop: str | None, dsel: str | None,
               signed: bool) -> L.Value:
    """video._secondary: the i64 result with c added, or min/max with c, or merged into c's other bits; i32."""
    if secop is not None:
        if c is None:
            raise NotNative(f"video secondary operation .{secop} without c")
        cv = b.sext(c, V(I64)) if signed else b.zext(c, V(I64))
        if secop == "add":
            tmp = b.add(tmp, cv)
        elif secop in ("min", "max"):
            tmp = _pick(b, "<" if secop == "min" else ">", tmp, cv)
        else:
            raise NotNative(f"video secondary operation .{secop}")
        return b.trunc(tmp, V(I32))
    low = b.trunc(tmp, V(I32))
    if dsel is None:
        return low
    if c is None:
        raise NotNative(f"video destination selector .{dsel} without c")
    width, shift = (8, 8 * int(dsel[1])) if dsel[0] == "b" else (16, 16 * int(dsel[1]))
    if dsel not in ("b0", "b1", "b2", "b3", "h0", "h1"):
        raise NotNative(f"video destination selector .{dsel}")
    m = ((1 << width) - 1) << shift
    part = b.and_(low, R.c(I32, m)) if dsel == "h1" else b.shl(b.and_(low, R.c(I32, (1 << width) - 1)),
                                                              R.c(I32, shift))
    return b.or_(part, b.and_(c, R.c(I32, 0xFFFFFFFF ^ m)))


def _shift(b: L.IRBuilder, op: str, a: L.Value, y: L.Value, c: L.Value | None, dtype: str, atype: str, mode: str,
           sat: bool, secop: str | None, dsel: str | None, asel: str | None, bsel: str | None) -> L.Value:
    """video.shift: vshl in i128 (exact up to 65 bits), saturated, then wrapped to 64 bits; vshr in i64."""
    x = _part(b, a, atype, asel)
    n = _part(b, y, "u32", bsel)
    n = _pick(b, "<", n, R.c(I64, 32)) if mode == "clamp" else b.and_(n, R.c(I64, 31))
    if op == "vshl":
        wide = b.shl(b.sext(x, V(I128)), b.zext(n, V(I128)))
        tmp = b.trunc(_sat(b, wide, sat, dtype == "s32", dsel), V(I64))
    else:
        tmp = _sat(b, b.ashr(x, n), sat, dtype == "s32", dsel)
    return _secondary(b, tmp, c, secop, dsel, dtype == "s32")


def _vmad(b: L.IRBuilder, a: L.Value, y: L.Value, c: L.Value, atype: str, btype: str, sat: bool,
          scale: str | None, po: bool, neg_ab: bool, neg_c: bool, asel: str | None, bsel: str | None) -> L.Value:
    """video.vmad: (a*b, negated or not) + (c, negated or not) + lsb in 128 bits, scaled, saturated."""
    signed_final = atype == "s32" or btype == "s32" or neg_ab or neg_c
    tmp = b.mul(b.sext(_part(b, a, atype, asel), V(I128)), b.sext(_part(b, y, btype, bsel), V(I128)))
    cc, lsb = c, 0
    if po:
        lsb = 1
    elif neg_ab:
        tmp, lsb = b.not_(tmp), 1
    elif neg_c:
        cc, lsb = b.not_(cc), 1
    cw = b.sext(cc, V(I128)) if signed_final else b.zext(cc, V(I128))
    tmp = b.add(b.add(tmp, cw), R.c(I128, lsb))
    if scale is not None:
        if scale not in ("shr7", "shr15"):
            raise NotNative(f"vmad scale .{scale}")
        tmp = b.lshr(tmp, R.c(I128, 7 if scale == "shr7" else 15))
    res = b.trunc(tmp, V(I64))
    if sat:
        if signed_final:
            res = _clamp(b, res, -(1 << 31), (1 << 31) - 1)
        else:
            big = b.icmp_unsigned(">", res, R.c(I64, 0xFFFFFFFF))
            res = b.select(big, R.c(I64, 0xFFFFFFFF), res)
    return b.trunc(res, V(I32))


# ---------------------------------------------------------------------------------------------- SIMD
def _simd_select(b: L.IRBuilder, a: L.Value, y: L.Value, sel: str, n: int, signed: bool) -> list[L.Value]:
    """extractAndSignExt: n elements (i32) picked from the bytes (n=4) or half-words (n=2) of {b, a}."""
    width = 32 // n
    digits = [int(ch) for ch in sel[1:]]
    if len(digits) != n or sel[0] != ("b" if n == 4 else "h") or max(digits) >= 2 * n:
        raise NotNative(f"selector .{sel} does not fit a {n}-way SIMD video instruction")
    out = []
    for i in range(n):
        src = digits[n - 1 - i]
        word = a if src < n else y
        v = b.trunc(b.lshr(word, R.c(I32, width * (src % n))), V(INT[width]))
        out.append(b.sext(v, V(I32)) if signed else b.zext(v, V(I32)))
    return out


def _simd(b: L.IRBuilder, op: str, a: L.Value, y: L.Value, c: L.Value, n: int, dtype: str, atype: str,
          btype: str, sat: bool, add: bool, mask: str | None, asel: str | None, bsel: str | None,
          cmp: str | None) -> L.Value:
    """video.simd."""
    if sat and add:
        raise NotNative("SIMD video: .sat with .add")
    pre = "b" if n == 4 else "h"
    asel = asel or pre + "".join(str(i) for i in reversed(range(n)))
    bsel = bsel or pre + "".join(str(i) for i in reversed(range(n, 2 * n)))
    mask = mask or pre + "".join(str(i) for i in reversed(range(n)))
    if mask[0] != pre or any(int(ch) >= n for ch in mask[1:]):
        raise NotNative(f"mask .{mask} does not fit a {n}-way SIMD video instruction")
    enabled = {int(ch) for ch in mask[1:]}
    va = _simd_select(b, a, y, asel, n, atype == "s32")
    vb = _simd_select(b, a, y, bsel, n, btype == "s32")
    width = 32 // n
    one = R.c(I32, 1)
    ts = []
    for x, z in zip(va, vb, strict=True):
        if op == "vset":
            if cmp not in _ICMP:
                raise NotNative(f"vset{n}: no comparison")
            t = b.zext(b.icmp_signed(_ICMP[cmp], x, z), V(I32))
        elif op == "vadd":
            t = b.add(x, z)
        elif op == "vsub":
            t = b.sub(x, z)
        elif op == "vavrg":
            s = b.add(x, z)
            t = b.select(b.icmp_signed(">=", s, R.c(I32, 0)), b.ashr(b.add(s, one), one), b.ashr(s, one))
        elif op == "vabsdiff":
            t = _abs(b, b.sub(x, z))
        elif op in ("vmin", "vmax"):
            t = _pick(b, "<" if op == "vmin" else ">", x, z)
        else:
            raise NotNative(f"SIMD video op {op}")
        if sat and op != "vset":
            lo, hi = (-(1 << (width - 1)), (1 << (width - 1)) - 1) if dtype == "s32" else (0, (1 << width) - 1)
            t = _clamp(b, t, lo, hi)
        ts.append(t)
    if add:
        d = c
        for i in range(n):
            if i in enabled:
                d = b.add(d, ts[i])
        return d
    m = (1 << width) - 1
    d = R.c(I32, 0)
    for i in range(n):
        part = ts[i] if i in enabled else b.lshr(c, R.c(I32, width * i))
        d = b.or_(d, b.shl(b.and_(part, R.c(I32, m)), R.c(I32, width * i)))
    return d


LOWER = {name: video for name in ir.VIDEO_OPCODES}
