"""Bit manipulation: lop3, bfe, bfi, brev, prmt, popc, clz, bfind, fns, bmsk, szext. Operands and results are
raw unsigned bits of the type width. and/or/xor/not/cnot, shl/shr and shf are inline numpy in the emulator's
builders (emu/ops_alu.py), their one implementation."""

from __future__ import annotations

import numpy as np

from . import _types as T


def _w(ty):
    return T.width(T.norm(ty))


def _lop3_expr(lut: int, names=("a", "b", "c")) -> str:
    """A numpy expression for the 3-input truth table `lut` (Shannon expansion with simplification)."""
    if not names:
        return "ONES" if lut & 1 else "ZERO"
    n = len(names)
    half = 1 << (n - 1)
    width = 1 << n
    full = (1 << width) - 1
    lut &= full
    if lut == 0:
        return "ZERO"
    if lut == full:
        return "ONES"
    # split on the first variable: its bit is the most significant index bit
    lo = lut & ((1 << half) - 1)          # first variable = 0
    hi = lut >> half                      # first variable = 1
    v = names[0]
    if lo == hi:
        return _lop3_expr(lo, names[1:])
    sub_full = (1 << half) - 1
    if hi == (~lo & sub_full):
        rest = _lop3_expr(lo, names[1:])
        if rest == "ZERO":
            return v
        if rest == "ONES":
            return f"~{v}"
        return f"({v} ^ {rest})"
    e1, e0 = _lop3_expr(hi, names[1:]), _lop3_expr(lo, names[1:])
    if e0 == "ZERO":
        return f"({v} & {e1})" if e1 != "ONES" else v
    if e1 == "ZERO":
        return f"(~{v} & {e0})" if e0 != "ONES" else f"~{v}"
    if e1 == "ONES":
        return f"({v} | {e0})"
    if e0 == "ONES":
        return f"(~{v} | {e1})"
    return f"(({v} & {e1}) | (~{v} & {e0}))"


_LOP3_CACHE: dict[int, object] = {}


def _lop3_fn(lut: int):
    fn = _LOP3_CACHE.get(lut)
    if fn is None:
        expr = _lop3_expr(lut)
        fn = eval(f"lambda a, b, c, ZERO, ONES: {expr}")  # noqa: S307 - built from a truth table only
        _LOP3_CACHE[lut] = fn
    return fn


def lop3(a: T.Bits, b: T.Bits, c: T.Bits, imm_lut: int, bool_op: str | None = None,
         q: T.Bits | None = None) -> np.ndarray | tuple[np.ndarray, np.ndarray]:
    """lop3{.or,.and}.b32: F(a, b, c) from the 8-bit truth table; with bool_op returns (d, p)."""
    ua, ub, uc = T.raw(a, 32), T.raw(b, 32), T.raw(c, 32)
    shape = np.broadcast(ua, ub, uc).shape
    d = _lop3_fn(int(imm_lut) & 0xFF)(ua, ub, uc, np.uint32(0), np.uint32(0xFFFFFFFF))
    if np.shape(d) != shape or d is ua or d is ub or d is uc:
        d = np.broadcast_to(np.asarray(d, np.uint32), shape).copy()
    if bool_op is None:
        return d
    qq = np.asarray(q, bool)
    nz = d != 0
    if bool_op == "or":
        return d, nz | qq
    if bool_op == "and":
        return d, nz & qq
    raise ValueError(f"lop3 BoolOp {bool_op!r}: expected 'or' or 'and'")


def _low_mask(n: np.ndarray) -> np.ndarray:
    """uint64 masks of the n lowest bits (0 <= n <= 64)."""
    ones = (np.uint64(1) << np.minimum(n, 63).astype(np.uint64)) - np.uint64(1)
    return np.where(n >= 64, np.uint64(T.mask(64)), ones)


def _uniform(x):
    """The common value of an operand that is the same in every lane, else None."""
    arr = np.asarray(x)
    if arr.ndim == 0:
        return int(arr)
    if arr.size and (arr == arr.flat[0]).all():
        return int(arr.flat[0])
    return None


def _bfe_const(a, pos, ln, t, w):
    ud = T.udtype(w)
    x = T.raw(a, w)
    if ln == 0:
        return np.zeros(x.shape, ud)
    take = min(ln, w - pos) if pos < w else 0
    if take > 0:
        field = (x >> ud(pos)) & ud(T.mask(take))
    else:
        field = np.zeros(x.shape, ud)
    if T.is_signed(t):
        sbit = (x >> ud(min(pos + ln - 1, w - 1))) & ud(1)
        field = np.where(sbit == 1, field | ud(T.mask(w) ^ T.mask(take)), field)
    return field.astype(ud, copy=False)


def bfe(a: T.Bits, b: T.Bits, c: T.Bits, ty: str = "u32") -> np.ndarray:
    """bfe.type: extract c&0xff bits at position b&0xff, zero or sign extended."""
    t = T.norm(ty)
    w = T.width(t)
    msb = w - 1
    pu, lu = _uniform(b), _uniform(c)
    if pu is not None and lu is not None:
        return _bfe_const(a, pu & 0xFF, lu & 0xFF, t, w)
    ua = T.raw(a, w).astype(np.uint64)
    pos = (T.raw(b, 32) & np.uint32(0xFF)).astype(np.int64)
    ln = (T.raw(c, 32) & np.uint32(0xFF)).astype(np.int64)
    # number of bits actually taken from a
    take = np.clip(np.minimum(ln, msb + 1 - pos), 0, w)
    shifted = ua >> np.minimum(pos, 63).astype(np.uint64)
    shifted = np.where(pos > msb, np.uint64(0), shifted)
    m = _low_mask(take)
    field = shifted & m
    if T.is_signed(t):
        sidx = np.minimum(pos + ln - 1, msb)
        sbit = ((ua >> np.maximum(sidx, 0).astype(np.uint64)) & np.uint64(1)).astype(bool) & (ln != 0)
        field = np.where(sbit, field | ~m, field)
    return (field & np.uint64(T.mask(w))).astype(T.udtype(w))


def bfi(a: T.Bits, b: T.Bits, c: T.Bits, d: T.Bits, ty: str = "b32") -> np.ndarray:
    """bfi.type f, a, b, c, d: insert the low d&0xff bits of a into b at position c&0xff."""
    w = _w(ty)
    ua, ub = T.raw(a, w).astype(np.uint64), T.raw(b, w).astype(np.uint64)
    pos = (T.raw(c, 32) & np.uint32(0xFF)).astype(np.int64)
    ln = (T.raw(d, 32) & np.uint32(0xFF)).astype(np.int64)
    take = np.clip(np.minimum(ln, w - pos), 0, w)
    m = _low_mask(take)
    sh = np.minimum(pos, 63).astype(np.uint64)
    m_at = np.where(pos >= w, np.uint64(0), m << sh)
    r = (ub & ~m_at) | ((ua << sh) & m_at)
    return (r & np.uint64(T.mask(w))).astype(T.udtype(w))


def brev(a: T.Bits, ty: str = "b32") -> np.ndarray:
    """brev.{b32,b64}: reverse the bit order."""
    w = _w(ty)
    x = T.raw(a, w)
    flat = np.ascontiguousarray(x.reshape(-1)).byteswap()
    return _REV8[flat.view(np.uint8)].view(T.udtype(w)).reshape(x.shape)


_REV8 = np.array([int(f"{i:08b}"[::-1], 2) for i in range(256)], np.uint8)

_PRMT_MODES = {
    "f4e": [[0, 1, 2, 3], [1, 2, 3, 4], [2, 3, 4, 5], [3, 4, 5, 6]],
    "b4e": [[0, 7, 6, 5], [1, 0, 7, 6], [2, 1, 0, 7], [3, 2, 1, 0]],
    "rc8": [[0, 0, 0, 0], [1, 1, 1, 1], [2, 2, 2, 2], [3, 3, 3, 3]],
    "ecl": [[0, 1, 2, 3], [1, 1, 2, 3], [2, 2, 2, 3], [3, 3, 3, 3]],
    "ecr": [[0, 0, 0, 0], [0, 1, 1, 1], [0, 1, 2, 2], [0, 1, 2, 3]],
    "rc16": [[0, 1, 0, 1], [2, 3, 2, 3], [0, 1, 0, 1], [2, 3, 2, 3]],
}  # per selector c[1:0]: source byte for d.b0, d.b1, d.b2, d.b3


def _prmt_const(ua, ub, c, mode):
    """prmt with the same selector in every lane: a gather of byte columns."""
    src = np.empty(ua.shape + (8,), np.uint8)
    src[..., :4] = np.ascontiguousarray(ua).view(np.uint8).reshape(ua.shape + (4,))
    src[..., 4:] = np.ascontiguousarray(ub).view(np.uint8).reshape(ub.shape + (4,))
    if mode is None:
        sel = [(c >> (4 * i)) & 0xF for i in range(4)]
    else:
        try:
            sel = _PRMT_MODES[mode][c & 3]
        except KeyError:
            raise ValueError(f"prmt mode {mode!r}: expected one of {sorted(_PRMT_MODES)}") from None
    out = np.empty(ua.shape + (4,), np.uint8)
    for i, sv in enumerate(sel):
        col = src[..., sv & 7]
        if mode is None and sv & 8:
            col = np.where(col >= 0x80, np.uint8(0xFF), np.uint8(0))
        out[..., i] = col
    return out.view(np.uint32).reshape(ua.shape)


def _prmt_gather(ua, ub, cc):
    """Generic-mode prmt with per-lane selectors: one byte gather for the whole array."""
    n = ua.shape[0]
    src = np.empty((n, 8), np.uint8)
    src[:, :4] = np.ascontiguousarray(ua).view(np.uint8).reshape(n, 4)
    src[:, 4:] = np.ascontiguousarray(ub).view(np.uint8).reshape(n, 4)
    nib = np.ascontiguousarray(cc).view(np.uint8).reshape(n, 4)[:, :2]
    sel = np.empty((n, 4), np.uint8)
    sel[:, 0::2] = nib & 0xF
    sel[:, 1::2] = nib >> 4
    out = np.take_along_axis(src, (sel & 7).astype(np.intp), axis=1)
    sign = (sel & 8) != 0
    if sign.any():
        out = np.where(sign, np.where(out >= 0x80, np.uint8(0xFF), np.uint8(0)), out)
    return np.ascontiguousarray(out).view(np.uint32).reshape(n)


def prmt(a: T.Bits, b: T.Bits, c: T.Bits, mode: str | None = None) -> np.ndarray:
    """prmt.b32{.f4e,.b4e,.rc8,.ecl,.ecr,.rc16}: byte permute of {b, a}."""
    cu = _uniform(c)
    if cu is not None and np.ndim(a) and np.shape(a) == np.shape(b):
        return _prmt_const(T.raw(a, 32), T.raw(b, 32), cu, mode)
    if mode is None and np.ndim(a) == 1 and np.shape(a) == np.shape(b) == np.shape(c):
        return _prmt_gather(T.raw(a, 32), T.raw(b, 32), T.raw(c, 32))
    src = (T.raw(b, 32).astype(np.uint64) << np.uint64(32)) | T.raw(a, 32).astype(np.uint64)
    cc = T.raw(c, 32)
    d = np.zeros(np.broadcast(src, cc).shape, np.uint32)
    if mode is None:
        for i in range(4):
            sel = ((cc >> np.uint32(4 * i)) & np.uint32(0xF)).astype(np.uint64)
            byte = (src >> ((sel & np.uint64(7)) * np.uint64(8))) & np.uint64(0xFF)
            sign = (byte >> np.uint64(7)) & np.uint64(1)
            byte = np.where((sel & np.uint64(8)) != 0, sign * np.uint64(0xFF), byte)
            d = d | (byte.astype(np.uint32) << np.uint32(8 * i))
        return d
    try:
        table = np.array(_PRMT_MODES[mode], np.uint64)
    except KeyError:
        raise ValueError(f"prmt mode {mode!r}: expected one of {sorted(_PRMT_MODES)}") from None
    sel = (cc & np.uint32(3)).astype(np.intp)
    for i in range(4):
        s = table[sel, i]
        byte = (src >> (s * np.uint64(8))) & np.uint64(0xFF)
        d = d | (byte.astype(np.uint32) << np.uint32(8 * i))
    return d


def popc(a: T.Bits, ty: str = "b32") -> np.ndarray:
    """popc.{b32,b64} -> u32."""
    w = _w(ty)
    return np.bitwise_count(T.raw(a, w)).astype(np.uint32)


def _msb_index(x: np.ndarray, w: int) -> np.ndarray:
    """Index of the most significant set bit (int64), -1 for zero."""
    if w <= 32:
        _, e = np.frexp(x.astype(np.float64))
        return e.astype(np.int64) - 1  # frexp(0) gives exponent 0 -> -1
    x = x.astype(np.uint64)
    nz = x != 0
    # frexp on float64 is exact for < 2**53; split 64-bit values in halves
    hi = (x >> np.uint64(32)).astype(np.float64)
    lo = (x & np.uint64(0xFFFFFFFF)).astype(np.float64)
    _, eh = np.frexp(hi)
    _, el = np.frexp(lo)
    r = np.where(hi > 0, eh.astype(np.int64) - 1 + 32, np.where(lo > 0, el.astype(np.int64) - 1, -1))
    return np.where(nz, r, -1)


def clz(a: T.Bits, ty: str = "b32") -> np.ndarray:
    """clz.{b32,b64} -> u32 count of leading zeros."""
    w = _w(ty)
    return (w - 1 - _msb_index(T.raw(a, w), w)).astype(np.uint32)


def bfind(a: T.Bits, ty: str = "u32", shiftamt: bool = False) -> np.ndarray:
    """bfind{.shiftamt}.{u32,s32,u64,s64}: position of the most significant non-sign bit, or ~0."""
    t = T.norm(ty)
    w = T.width(t)
    x = T.raw(a, w)
    if T.is_signed(t):
        x = np.where((x >> T.udtype(w)(w - 1)) == 1, ~x, x)
    i = _msb_index(x, w)
    if shiftamt:
        i = np.where(i >= 0, w - 1 - i, -1)
    return np.where(i >= 0, i, 0xFFFFFFFF).astype(np.uint32)


def fns(mask: T.Bits, base: T.Bits, offset: T.Bits) -> np.ndarray:
    """fns.b32: position of the n-th set bit of mask counting from base (offset signed)."""
    m: np.ndarray = T.raw(mask, 32).astype(np.uint64)
    bs: np.ndarray = T.raw(base, 32).astype(np.int64)
    off: np.ndarray = T.signed_view(offset, 32).astype(np.int64)
    shape = np.broadcast(m, bs, off).shape
    m, bs, off = (np.broadcast_to(v, shape) for v in (m, bs, off))
    res = np.full(shape, 0xFFFFFFFF, np.uint32)
    bits = ((m[..., None] >> np.arange(32, dtype=np.uint64)) & np.uint64(1)).astype(np.int64)
    pos = np.arange(32)
    z = off == 0
    bit_at_base = np.take_along_axis(bits, np.clip(bs, 0, 31)[..., None], axis=-1)[..., 0]
    res = np.where(z & (bit_at_base == 1) & (bs >= 0) & (bs <= 31), bs, res)
    # forward: the k-th set bit at position >= base (k = offset)
    fwd_cum = np.cumsum(bits * (pos >= bs[..., None]), axis=-1)
    k = np.abs(off)
    fwd_hit = (fwd_cum == k[..., None]) & (bits == 1) & (pos >= bs[..., None])
    fwd_any = fwd_hit.any(axis=-1)
    fwd_pos = np.argmax(fwd_hit, axis=-1)
    res = np.where((off > 0) & fwd_any, fwd_pos, res)
    # backward: the k-th set bit at position <= base, counting downwards
    bsel = bits * (pos <= bs[..., None])
    bwd_cum = np.cumsum(bsel[..., ::-1], axis=-1)[..., ::-1]
    bwd_hit = (bwd_cum == k[..., None]) & (bsel == 1)
    bwd_any = bwd_hit.any(axis=-1)
    bwd_pos = 31 - np.argmax(bwd_hit[..., ::-1], axis=-1)
    res = np.where((off < 0) & bwd_any, bwd_pos, res)
    return res.astype(np.uint32)


def bmsk(a: T.Bits, b: T.Bits, mode: str = "clamp") -> np.ndarray:
    """bmsk.{clamp,wrap}.b32: mask of b bits starting at bit a."""
    ua, ub = T.raw(a, 32).astype(np.int64), T.raw(b, 32).astype(np.int64)
    a1, b1 = ua & 31, ub & 31
    full = (1 << 32) - 1
    mask0 = (full << a1) & full
    s = a1 + b1
    mask1 = np.where(s >= 32, 0, (full << np.minimum(s, 31)) & full)
    kill = s >= 32
    if mode == "clamp":
        mask0 = np.where(ua >= 32, 0, mask0)
        kill = kill | (ua >= 32) | (ub >= 32)
    elif mode != "wrap":
        raise ValueError(f"bmsk mode {mode!r}: expected 'clamp' or 'wrap'")
    mask1 = np.where(kill, 0, np.where(b1 == 0, full, mask1))
    return (mask0 & ~mask1 & full).astype(np.uint32)


def szext(a: T.Bits, b: T.Bits, ty: str = "u32", mode: str = "clamp") -> np.ndarray:
    """szext.{clamp,wrap}.{u32,s32}: sign/zero-extend the low b bits of a."""
    ua, ub = T.raw(a, 32).astype(np.int64), T.raw(b, 32).astype(np.int64)
    b1 = ub & 31
    if mode not in ("clamp", "wrap"):
        raise ValueError(f"szext mode {mode!r}: expected 'clamp' or 'wrap'")
    too_large = (ub >= 32) & (mode == "clamp")
    full = (1 << 32) - 1
    m = np.where(too_large, 0, (full << b1) & full)
    sign_pos = (b1 - 1) & 31
    if T.is_signed(ty):
        sbit = ((ua >> sign_pos) & 1).astype(bool) & (b1 != 0) & ~too_large
    else:
        sbit = np.zeros(ua.shape, bool)
    return ((ua & ~m & full) | np.where(sbit, m, 0)).astype(np.uint32)


T.quiet_functions(globals())
