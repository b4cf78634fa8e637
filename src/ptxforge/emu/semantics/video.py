"""Video instructions: scalar vadd vsub vabsdiff vmin vmax vshl vshr vmad vset and SIMD vadd2/4 vsub2/4
vavrg2/4 vabsdiff2/4 vmin2/4 vmax2/4 vset2/4, following the pseudocode of the PTX manual (9.7.18).

Operands are uint32 arrays. Selectors are strings without the dot: scalar asel/bsel/dsel in
b0 b1 b2 b3 h0 h1 (None: the whole word); SIMD asel/bsel 'b3210'-style (4-way) or 'h10'-style (2-way)
picking from the eight bytes / four half-words of {b, a} (most significant element first, like the
PTX spelling), and mask 'b3210' / 'h10' naming the enabled result positions. nvcc emits
`vabsdiff4.u32.u32.u32` for __vabsdiffu4 and __vsadu4.
"""

from __future__ import annotations

import numpy as np

from . import _types as T

_SCALAR_OPS = ("vadd", "vsub", "vabsdiff", "vmin", "vmax")
_SIMD_OPS = ("vadd", "vsub", "vavrg", "vabsdiff", "vmin", "vmax")
_CMPS = ("eq", "ne", "lt", "le", "gt", "ge")


def _signed(t) -> bool:
    t = T.norm(t)
    if t not in ("u32", "s32"):
        raise ValueError(f"video instruction type .{t}: expected u32 or s32")
    return t == "s32"


def selected_field(sel: str | None) -> tuple[int, int]:
    """(width, shift) of the part of a word a scalar video operand's selector picks (None: the whole word)."""
    if sel is None:
        return 32, 0
    if sel in ("b0", "b1", "b2", "b3"):
        return 8, 8 * int(sel[1])
    if sel in ("h0", "h1"):
        return 16, 16 * int(sel[1])
    raise ValueError(f"selector .{sel}: expected b0 b1 b2 b3 h0 h1")


def _part(x, ty, sel):
    """partSelectSignExtend: a byte, half-word or the word of x, sign/zero-extended (int64)."""
    u = T.raw(x, 32).astype(np.int64)
    signed = _signed(ty)
    width, shift = selected_field(sel)
    v = (u >> shift) & ((1 << width) - 1)
    if signed:
        v = np.where(v >> (width - 1) == 1, v - (1 << width), v)
    return v


def _sat(tmp, sat, signed, dsel):
    if not sat:
        return tmp
    if dsel is None:
        lo, hi = (-(1 << 31), (1 << 31) - 1) if signed else (0, (1 << 32) - 1)
        return np.clip(tmp, lo, hi)
    # Saturating into a byte or half-word: an H200 clamps the result read as unsigned to the part's largest
    # value (127 / 255, 32767 / 65535), so a negative result saturates high (recorded in
    # tests/conformance/data; the manual's optSaturate does not say).
    width = 8 if dsel[0] == "b" else 16
    hi = (1 << (width - 1)) - 1 if signed else (1 << width) - 1
    return np.where(tmp < 0, hi, np.minimum(tmp, hi))


def _secondary(tmp, c, secop, dsel, dtype_signed):
    if secop is not None and dsel is not None:
        raise ValueError("a video instruction takes either a secondary operation or a destination selector")
    if secop is not None:
        cv = T.signed_view(c, 32).astype(np.int64) if dtype_signed else T.raw(c, 32).astype(np.int64)
        if secop == "add":
            tmp = tmp + cv
        elif secop == "min":
            tmp = np.minimum(tmp, cv)
        elif secop == "max":
            tmp = np.maximum(tmp, cv)
        else:
            raise ValueError(f"secondary operation .{secop}: expected add, min or max")
    elif dsel is not None:
        cu = T.raw(c, 32).astype(np.int64)
        # As an H200 computes it (tests/conformance/data): a byte selector places the low byte of the result
        # in that byte; .h0 the low half-word; .h1 keeps bits 31..16 of the result where they are.
        width, shift = (8, 8 * int(dsel[1])) if dsel[0] == "b" else (16, 16 * int(dsel[1]))
        m = ((1 << width) - 1) << shift
        part = (tmp & m) if dsel == "h1" else ((tmp & ((1 << width) - 1)) << shift)
        tmp = part | (cu & (0xFFFFFFFF ^ m))
    return (np.asarray(tmp).astype(np.int64) & 0xFFFFFFFF).astype(np.uint32)


def scalar(op: str, a: T.Bits, b: T.Bits, c: T.Bits | None = None, dtype: str = "u32", atype: str = "u32",
           btype: str = "u32", sat: bool = False, secop: str | None = None, dsel: str | None = None,
           asel: str | None = None, bsel: str | None = None) -> np.ndarray:
    """vadd/vsub/vabsdiff/vmin/vmax.dtype.atype.btype{.sat}{.secop} d{.dsel}, a{.asel}, b{.bsel}{, c}."""
    if op not in _SCALAR_OPS:
        raise ValueError(f"scalar video op {op!r}: expected one of {_SCALAR_OPS}")
    ta, tb = _part(a, atype, asel), _part(b, btype, bsel)
    tmp = {"vadd": lambda: ta + tb, "vsub": lambda: ta - tb, "vabsdiff": lambda: np.abs(ta - tb),
           "vmin": lambda: np.minimum(ta, tb), "vmax": lambda: np.maximum(ta, tb)}[op]()
    tmp = _sat(tmp, sat, _signed(dtype), dsel)
    return _secondary(tmp, c, secop, dsel, _signed(dtype))


def shift(op: str, a: T.Bits, b: T.Bits, c: T.Bits | None = None, dtype: str = "u32", atype: str = "u32",
          mode: str = "clamp", sat: bool = False, secop: str | None = None, dsel: str | None = None,
          asel: str | None = None, bsel: str | None = None) -> np.ndarray:
    """vshl/vshr.dtype.atype.u32{.sat}.mode{.secop} d{.dsel}, a{.asel}, b{.bsel}{, c}."""
    ta = _part(a, atype, asel)
    tb = _part(b, "u32", bsel)
    if mode == "clamp":
        tb = np.minimum(tb, 32)
    elif mode == "wrap":
        tb = tb & 0x1F
    else:
        raise ValueError(f"video shift mode .{mode}: expected clamp or wrap")
    if op == "vshl":
        tmp = ta.astype(object) << tb.astype(object)  # up to 65 bits: exact Python integers
    elif op == "vshr":
        tmp = ta >> tb
    else:
        raise ValueError(f"video shift op {op!r}: expected vshl or vshr")
    tmp = _sat(np.asarray(tmp, dtype=object), sat, _signed(dtype), dsel)
    tmp = np.array([int(v) & 0xFFFFFFFFFFFFFFFF for v in np.ravel(tmp)], np.uint64).reshape(np.shape(tmp))
    return _secondary(tmp.view(np.int64), c, secop, dsel, _signed(dtype))


def vset(a: T.Bits, b: T.Bits, cmp: str, c: T.Bits | None = None, atype: str = "u32", btype: str = "u32",
         secop: str | None = None, dsel: str | None = None, asel: str | None = None,
         bsel: str | None = None) -> np.ndarray:
    """vset.atype.btype.cmp{.secop} d{.dsel}, a{.asel}, b{.bsel}{, c}: 1 or 0 (unsigned)."""
    if cmp not in _CMPS:
        raise ValueError(f"vset comparison .{cmp}: expected one of {_CMPS}")
    ta, tb = _part(a, atype, asel), _part(b, btype, bsel)
    tmp = _compare(ta, tb, cmp).astype(np.int64)
    return _secondary(tmp, c, secop, dsel, False)


def vmad(a: T.Bits, b: T.Bits, c: T.Bits, dtype: str = "u32", atype: str = "u32", btype: str = "u32", sat: bool = False,
         scale: str | None = None, po: bool = False, neg_ab: bool = False, neg_c: bool = False, asel: str | None = None,
         bsel: str | None = None) -> np.ndarray:
    """vmad.dtype.atype.btype{.po}{.sat}{.scale} d, {-}a{.asel}, {-}b{.bsel}, {-}c.

    neg_ab: exactly one of a, b negated (the product is negated); scale: None, 'shr7' or 'shr15'.
    """
    ta, tb = _part(a, atype, asel), _part(b, btype, bsel)
    signed_final = _signed(atype) or _signed(btype) or neg_ab or neg_c
    out = []
    cv = T.raw(c, 32)
    for x, y, z in zip(np.ravel(ta), np.ravel(tb), np.ravel(np.broadcast_to(cv, np.shape(ta))), strict=True):
        tmp = (int(x) * int(y)) & ((1 << 128) - 1)
        cc = int(z)
        lsb = 0
        if po:
            lsb = 1
        elif neg_ab:
            tmp, lsb = ~tmp & ((1 << 128) - 1), 1
        elif neg_c:
            cc, lsb = ~cc & 0xFFFFFFFF, 1
        if signed_final and cc >> 31:
            cc -= 1 << 32
        tmp = (tmp + (cc & ((1 << 128) - 1)) + lsb) & ((1 << 128) - 1)
        if scale == "shr7":
            tmp >>= 7
        elif scale == "shr15":
            tmp >>= 15
        elif scale is not None:
            raise ValueError(f"vmad scale .{scale}: expected shr7 or shr15")
        result = tmp & ((1 << 64) - 1)
        if sat:
            if signed_final:
                sv = result - (1 << 64) if result >> 63 else result
                result = max(-(1 << 31), min((1 << 31) - 1, sv))
            else:
                result = min(result, 0xFFFFFFFF)
        out.append(result & 0xFFFFFFFF)
    return np.array(out, np.uint32).reshape(np.shape(ta))


def _compare(x, y, cmp):
    return {"eq": x == y, "ne": x != y, "lt": x < y, "le": x <= y, "gt": x > y, "ge": x >= y}[cmp]


def _simd_select(a, b, sel, n, ty):
    """extractAndSignExt: n elements picked from the bytes (n=4) or half-words (n=2) of {b, a}."""
    width = 32 // n
    pool = (T.raw(b, 32).astype(np.uint64) << np.uint64(32)) | T.raw(a, 32).astype(np.uint64)
    digits = [int(ch) for ch in sel[1:]]
    if len(digits) != n or sel[0] != ("b" if n == 4 else "h") or max(digits) >= 2 * n:
        raise ValueError(f"selector .{sel} does not fit a {n}-way SIMD video instruction")
    vals = []
    for i in range(n):  # element i comes from the digit at position n-1-i (written msb first)
        src = digits[n - 1 - i]
        v = ((pool >> np.uint64(width * src)) & np.uint64((1 << width) - 1)).astype(np.int64)
        if _signed(ty):
            v = np.where(v >> (width - 1) == 1, v - (1 << width), v)
        vals.append(v)
    return vals


def simd(op: str, a: T.Bits, b: T.Bits, c: T.Bits, n: int = 4, dtype: str = "u32", atype: str = "u32",
         btype: str = "u32", sat: bool = False, add: bool = False, mask: str | None = None, asel: str | None = None,
         bsel: str | None = None, cmp: str | None = None) -> np.ndarray:
    """vop2/vop4.dtype.atype.btype{.sat}|{.add} d{.mask}, a{.asel}, b{.bsel}, c; op 'vset' needs cmp.

    op in vadd vsub vavrg vabsdiff vmin vmax vset; n is 2 or 4.
    """
    if n not in (2, 4):
        raise ValueError("SIMD video instructions are 2- or 4-way")
    if op not in _SIMD_OPS + ("vset",):
        raise ValueError(f"SIMD video op {op!r}: expected one of {_SIMD_OPS + ('vset',)}")
    if sat and add:
        raise ValueError("saturation cannot be used with the secondary accumulate operation")
    pre = "b" if n == 4 else "h"
    asel = asel or (pre + "".join(str(i) for i in reversed(range(n))))
    bsel = bsel or (pre + "".join(str(i) for i in reversed(range(n, 2 * n))))
    mask = mask or (pre + "".join(str(i) for i in reversed(range(n))))
    enabled = {int(ch) for ch in mask[1:]}
    va = _simd_select(a, b, asel, n, atype)
    vb = _simd_select(a, b, bsel, n, btype)
    width = 32 // n
    ts = []
    for i in range(n):
        x, y = va[i], vb[i]
        if op == "vset":
            if cmp not in _CMPS:
                raise ValueError(f"vset{n} comparison .{cmp}: expected one of {_CMPS}")
            t = _compare(x, y, cmp).astype(np.int64)
        elif op == "vadd":
            t = x + y
        elif op == "vsub":
            t = x - y
        elif op == "vavrg":
            s = x + y
            t = np.where(s >= 0, (s + 1) >> 1, s >> 1)
        elif op == "vabsdiff":
            t = np.abs(x - y)
        elif op == "vmin":
            t = np.minimum(x, y)
        else:
            t = np.maximum(x, y)
        if sat and op != "vset":
            lo, hi = ((-(1 << (width - 1)), (1 << (width - 1)) - 1) if _signed(dtype) else (0, (1 << width) - 1))
            t = np.clip(t, lo, hi)
        ts.append(t)
    cu = T.raw(c, 32).astype(np.int64)
    if add:
        d = cu.copy() if np.ndim(cu) else cu
        for i in range(n):
            if i in enabled:
                d = d + ts[i]
        return (np.asarray(d) & 0xFFFFFFFF).astype(np.uint32)
    m = (1 << width) - 1
    d = np.zeros(np.broadcast(cu, ts[0]).shape, np.int64)
    for i in range(n):
        part = ts[i] if i in enabled else (cu >> (width * i))
        d = d | ((part & m) << (width * i))
    return (d & 0xFFFFFFFF).astype(np.uint32)


T.quiet_functions(globals())
