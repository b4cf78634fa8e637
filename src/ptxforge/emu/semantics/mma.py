"""Warp-level matrix multiply (mma.sync) with the PTX manual's register fragment layouts, and the
element mappings of ldmatrix / stmatrix / movmatrix.

Fragments are per-warp arrays `[32, nregs]` of raw register bits (uint32; uint64 for .f64), row i being
lane i. Elements are packed low-to-high inside a register (a0 in bits 0..15 of the first .f16x2
register, a1 in bits 16..31, ...). `fragment_coords(shape, operand, dtype)` gives, for each lane and
element index, the (row, col) of the matrix element, transcribed from "Matrix Fragments for mma.mXnYkZ".

Numerics (PTX leaves accumulation order and internal precision unspecified): f16/bf16/tf32 inputs with
f32 accumulators follow the tensor cores' own summation, fitted bit for bit to an H200
(`dot_tensor_core`); other float forms give the exact value of a.b + c rounded once (.rn) to the
accumulator type (a float64 matmul whose certified error bound decides the rounding, with exact
rationals for the rare undecided elements); .tf32
operands use the upper 19 bits of their registers; integer mma is exact (wrapping, or clamped with
.satfinite); .f64 mma is a chain of correctly rounded fma over k (k = 0, 1, ...), starting from c.
"""

from __future__ import annotations

from fractions import Fraction

import numpy as np
from numpy.typing import ArrayLike

from . import _types as T
from .floating import fma
from .formats import BF16, E4M3, E5M2, F16, F32, F64, TF32, FloatFormat, decode, encode, round_fraction

_ELEM_BITS = {"f16": 16, "bf16": 16, "tf32": 32, "f32": 32, "f64": 64, "s8": 8, "u8": 8,
              "e4m3": 8, "e5m2": 8, "s32": 32}

_LANE = np.arange(32)
_G = _LANE >> 2
_T = _LANE & 3


def _coords(shape: str, operand: str, kind: str):
    """(rows[32, n], cols[32, n]) per the manual; kind is '16bit', 'tf32', '8bit' or 'f64'."""
    g, t = _G[:, None], _T[:, None]
    if operand in ("c", "d"):
        if shape in ("m8n8k4", "m8n8k16"):
            i = np.arange(2)[None, :]
            return np.broadcast_to(g, (32, 2)), t * 2 + i
        i = np.arange(4)[None, :]
        return g + 8 * (i >= 2), t * 2 + (i & 1)
    table = {
        ("m16n8k16", "a", "16bit"): (8, lambda i: (g + 8 * ((i >> 1) & 1), t * 2 + (i & 1) + 8 * (i >= 4))),
        ("m16n8k8", "a", "16bit"): (4, lambda i: (g + 8 * (i >= 2), t * 2 + (i & 1))),
        ("m16n8k8", "a", "tf32"): (4, lambda i: (g + 8 * (i & 1), t + 4 * (i >= 2))),
        ("m16n8k4", "a", "tf32"): (2, lambda i: (g + 8 * i, t + 0 * i)),
        ("m16n8k16", "a", "8bit"): (8, lambda i: (g + 8 * (i >= 4), t * 4 + (i & 3))),
        ("m16n8k32", "a", "8bit"): (16, lambda i: (g + 8 * ((i >> 2) & 1), t * 4 + (i & 3) + 16 * (i >= 8))),
        ("m8n8k4", "a", "f64"): (1, lambda i: (g + 0 * i, t + 0 * i)),
        ("m16n8k4", "a", "f64"): (2, lambda i: (g + 8 * i, t + 0 * i)),
        ("m16n8k8", "a", "f64"): (4, lambda i: (g + 8 * (i & 1), t + 4 * (i >= 2))),
        ("m16n8k16", "a", "f64"): (8, lambda i: (g + 8 * (i & 1), t + 4 * (i >> 1))),
        ("m8n8k16", "a", "8bit"): (4, lambda i: (g + 0 * i, t * 4 + i)),
        ("m16n8k16", "b", "16bit"): (4, lambda i: (t * 2 + (i & 1) + 8 * (i >= 2), g + 0 * i)),
        ("m16n8k8", "b", "16bit"): (2, lambda i: (t * 2 + i, g + 0 * i)),
        ("m16n8k8", "b", "tf32"): (2, lambda i: (t + 4 * i, g + 0 * i)),
        ("m16n8k4", "b", "tf32"): (1, lambda i: (t + 0 * i, g + 0 * i)),
        ("m16n8k16", "b", "8bit"): (4, lambda i: (t * 4 + i, g + 0 * i)),
        ("m16n8k32", "b", "8bit"): (8, lambda i: (t * 4 + (i & 3) + 16 * (i >= 4), g + 0 * i)),
        ("m8n8k4", "b", "f64"): (1, lambda i: (t + 0 * i, g + 0 * i)),
        ("m16n8k4", "b", "f64"): (1, lambda i: (t + 0 * i, g + 0 * i)),
        ("m16n8k8", "b", "f64"): (2, lambda i: (t + 4 * i, g + 0 * i)),
        ("m16n8k16", "b", "f64"): (4, lambda i: (t + 4 * i, g + 0 * i)),
        ("m8n8k16", "b", "8bit"): (4, lambda i: (t * 4 + i, g + 0 * i)),
    }
    try:
        n, fn = table[(shape, operand, kind)]
    except KeyError:
        raise ValueError(f"mma fragment for {shape} operand {operand} with {kind} elements is not supported") from None
    i = np.arange(n)[None, :]
    r, c = fn(i)
    return np.broadcast_to(r, (32, n)), np.broadcast_to(c, (32, n))


def _kind(ty):
    t = T.norm(ty)
    if t in ("f16", "bf16"):
        return "16bit"
    if t == "tf32":
        return "tf32"
    if t in ("s8", "u8", "e4m3", "e5m2"):
        return "8bit"
    if t == "f64":
        return "f64"
    raise ValueError(f"mma input type .{t} is not supported")


def fragment_coords(shape: str, operand: str, ty: str) -> tuple[np.ndarray, np.ndarray]:
    """(rows, cols) int arrays [32, elements] of each lane's fragment elements for operand a, b, c or d."""
    return _coords(shape, operand, _kind(ty) if operand in ("a", "b") else "acc")


def _dims(shape):
    m, rest = shape[1:].split("n")
    n, k = rest.split("k")
    return int(m), int(n), int(k)


def _unpack_elems(regs, ebits):
    """[..., 32, nregs] registers -> [..., 32, nregs * per] element codes (low bits first)."""
    regs = np.asarray(regs)
    if ebits >= regs.dtype.itemsize * 8:
        return regs.astype(np.uint64)
    per = regs.dtype.itemsize * 8 // ebits
    r = regs.astype(np.uint64)[..., None] >> (np.arange(per, dtype=np.uint64) * np.uint64(ebits))
    return (r & np.uint64((1 << ebits) - 1)).reshape(regs.shape[:-1] + (-1,))


def _pack_elems(codes, ebits, regbits):
    per = regbits // ebits
    codes = np.asarray(codes, np.uint64)
    codes = codes.reshape(codes.shape[:-1] + (-1, per))
    regs = (codes << (np.arange(per, dtype=np.uint64) * np.uint64(ebits))).sum(axis=-1, dtype=np.uint64)
    return regs.astype(T.udtype(regbits))


def _values(codes, ty):
    t = T.norm(ty)
    if t in ("s8", "u8"):
        v = codes.astype(np.int64)
        return np.where(v >= 128, v - 256, v) if t == "s8" else v
    if t == "s32":
        return codes.astype(np.uint32).view(np.int32).astype(np.int64)
    fmt = {"f16": F16, "bf16": BF16, "tf32": TF32, "f32": F32, "f64": F64, "e4m3": E4M3, "e5m2": E5M2}[t]
    return decode(codes, fmt)


def unpack_fragment(shape: str, operand: str, ty: str, regs: ArrayLike) -> np.ndarray:
    """Gather fragment registers [..., 32, nregs] (any number of warps) into the full matrices
    [..., rows, cols] of element values (float64, or int64 for integer types)."""
    m, n, k = _dims(shape)
    dims = {"a": (m, k), "b": (k, n), "c": (m, n), "d": (m, n)}[operand]
    t = T.norm(ty)
    codes = _unpack_elems(regs, _ELEM_BITS[t])
    r, c = fragment_coords(shape, operand, t)
    vals = _values(codes[..., : r.shape[1]], t)
    out = np.zeros(vals.shape[:-2] + dims, vals.dtype)
    out[..., r, c] = vals
    return out


def pack_fragment(shape: str, operand: str, ty: str, matrix_codes: ArrayLike) -> np.ndarray:
    """Scatter matrices of raw element codes [..., rows, cols] into fragment registers [..., 32, nregs]."""
    t = T.norm(ty)
    r, c = fragment_coords(shape, operand, t)
    codes = np.asarray(matrix_codes).astype(np.uint64)[..., r, c]
    regbits = 64 if t == "f64" else 32
    return _pack_elems(codes, _ELEM_BITS[t], regbits)


def mma_sync(shape: str, a: T.Bits, b: T.Bits, c: T.Bits, atype: str, btype: str, ctype: str, dtype: str | None = None,
             satfinite: bool = False) -> np.ndarray:
    """mma.sync.aligned.shape.row.col{.satfinite}.dtype.atype.btype.ctype d, a, b, c.

    a, b, c: fragment registers [..., 32, nregs]; leading dimensions are independent warps, so one call
    can serve every warp of a launch. Returns d with the same leading dimensions.
    """
    shape = shape.lstrip(".")
    at, bt, ct = T.norm(atype), T.norm(btype), T.norm(ctype)
    dt = T.norm(dtype) if dtype else ct
    A = unpack_fragment(shape, "a", at, a)
    B = unpack_fragment(shape, "b", bt, b)
    C = unpack_fragment(shape, "c", ct, c)
    return pack_fragment(shape, "d", dt, mma_codes(A, B, C, at, dt, satfinite))


def mma_codes(A: np.ndarray, B: np.ndarray, C: np.ndarray, atype: str, dtype: str, satfinite: bool = False,
              unit: str = "mma") -> np.ndarray:
    """Raw codes of D = A @ B + C for element values A [..., m, k], B [..., k, n], C [..., m, n].

    Integer inputs (.s8/.u8): exact, wrapped to 32 bits or clamped with `satfinite`; .f64: a chain of
    correctly rounded fma over k; f16/bf16/tf32 inputs (mma.sync, wmma and wgmma): the tensor cores'
    summation (`dot_tensor_core`, bit for bit with an H200 into f32 and f16); e4m3/e5m2 for wgmma (unit
    "wgmma"): the same summation keeping 13 bits (DeepSeek's "about 14 bits"; bit for bit into f16, 77% of
    the H200's f32 results, the rest one unit of the 13th bit off); fp8 mma.sync: the exact sum rounded
    once (.rn).
    """
    at, dt = T.norm(atype), T.norm(dtype)
    if at in ("s8", "u8"):
        acc = A.astype(np.int64) @ B.astype(np.int64) + C.astype(np.int64)
        if satfinite:
            acc = np.clip(acc, -(1 << 31), (1 << 31) - 1)
        return (acc & 0xFFFFFFFF).astype(np.uint64)
    if at == "f64":
        k = A.shape[-1]
        acc = np.ascontiguousarray(C, np.float64).view(np.uint64)
        for kk in range(k):
            av = np.broadcast_to(A[..., :, kk, None], C.shape)
            bv = np.broadcast_to(B[..., kk, None, :], C.shape)
            acc = fma(np.ascontiguousarray(av).view(np.uint64), np.ascontiguousarray(bv).view(np.uint64),
                      acc, "f64")
        return acc
    out = {"f32": F32, "f16": F16}[dt]
    if at in ("f16", "bf16", "tf32"):
        return dot_tensor_core(A, B, C, out=out)
    if unit == "wgmma" and at in ("e4m3", "e5m2"):
        return dot_tensor_core(A, B, C, block=32, bits=FP8_WGMMA_BITS, out=out)
    return _dot_rn(A, B, C, {"f32": F32, "f16": F16}[dt])


# How an H200's tensor cores sum f16/bf16/tf32 products into f32 (fitted to recorded results, bit for bit on
# every element of tests/conformance/data: m16n8k16 f16 and bf16, m16n8k8 f16 and tf32, wide exponents):
# the products are exact; each block of up to 16 products, with the running sum c, is aligned to the
# largest exponent, where a product's exponent is the sum of its factors' exponents (the product of two
# significands in [1, 2) is not renormalized first); every term is truncated to a multiple of
# 2**(largest - 25); the terms are summed exactly and the sum is rounded toward zero to f32.
TC_BLOCK, TC_BITS = 16, 25
# wgmma with fp8 inputs keeps far fewer bits: one block of 32 products with c, truncated 13 bits below the
# largest exponent (77% of the recorded H200 results bit for bit; mma.sync fp8 is not this narrow).
FP8_WGMMA_BITS = 13
_NO_EXP = -(10**6)


def _exponent(x, emin: int):
    """floor(log2|x|), at least the format's smallest normal exponent `emin` (subnormals keep it); zero
    gives _NO_EXP."""
    _, e = np.frexp(np.abs(x))
    return np.where(x == 0, _NO_EXP, np.maximum(e - 1, emin))


def dot_tensor_core(A: ArrayLike, B: ArrayLike, C: ArrayLike, emin_ab: int = -126, block: int = TC_BLOCK,
                    bits: int = TC_BITS, out: FloatFormat = F32) -> np.ndarray:
    """Codes of A @ B + C summed as the tensor cores do (see the comment above), in `out`: f32 (each block's
    sum rounded toward zero) or f16 (rounded to nearest, as the H200 does for f16 accumulators).

    Leading dimensions of A [..., m, k], B [..., k, n] and C [..., m, n] are independent problems (one per
    warp or warpgroup), summed in one pass over [..., m, n, block] arrays.
    """
    rnd = "rz" if out is F32 else "rn"
    A, B, C = (np.asarray(x, np.float64) for x in (A, B, C))
    finite_a, finite_b = np.isfinite(A), np.isfinite(B)
    special = ~np.isfinite(C) | ~finite_a.all(-1)[..., :, None] | ~finite_b.all(-2)[..., None, :]  # type: ignore[index]
    # Terms are laid out [..., k, m, n] so the reductions over k run across contiguous rows. Exponents are
    # int16 (zeros get _ZERO_EXP, so a product with a zero factor stays far below any real term);
    # non-finite inputs are zeroed here and their elements recomputed by the exact path below.
    ak = np.swapaxes(np.where(finite_a, A, 0.0), -1, -2)[..., :, :, None]     # [..., k, m, 1]
    bk = np.where(finite_b, B, 0.0)[..., :, None, :]                          # [..., k, 1, n]
    ea, eb = _exponent16(ak, emin_ab), _exponent16(bk, emin_ab)
    acc = np.where(np.isfinite(C), C, 0.0)
    codes = None
    for s in range(0, A.shape[-1], block):
        ks = (Ellipsis, slice(s, s + block), slice(None), slice(None))
        top = np.maximum((ea[ks] + eb[ks]).max(-3), _exponent16(acc, -126))
        scale = np.exp2(np.where(top < _NO_TERM, 0, bits - top.astype(np.int64)).astype(np.float64))
        terms = ak[ks] * bk[ks]                                               # exact products
        terms *= scale[..., None, :, :]
        np.trunc(terms, out=terms)
        total = (terms.sum(-3) + np.trunc(acc * scale)) / scale
        codes = encode(total, out, rnd)
        acc = decode(codes, out)
    if codes is None:
        codes = encode(acc, out, rnd)
    codes = codes.astype(np.uint64)
    if special.any():  # infinities and NaN follow IEEE rules: the exact path handles them
        codes = np.where(special, _dot_rn(A, B, C, out), codes)
    return codes


_ZERO_EXP = -16000   # int16 exponent of zero: a sum with it stays below _NO_TERM, any real one above
_NO_TERM = -10000


def _exponent16(x, emin: int):
    """`_exponent` as int16 with _ZERO_EXP for zeros (x finite)."""
    _, e = np.frexp(x)
    return np.where(x == 0, _ZERO_EXP, np.maximum(e - 1, emin)).astype(np.int16)


def _dot_rn(A, B, C, fmt):
    """Codes of RN(A @ B + C) computed exactly: a float64 matmul with a certified error bound, and
    exact rational arithmetic for the (rare) elements whose bound straddles a rounding boundary."""
    k = A.shape[-1]
    with np.errstate(all="ignore"):
        acc = A @ B + C
        bound = (np.abs(A) @ np.abs(B) + np.abs(C)) * ((k + 2) * 2.0 ** -52)
        codes = encode(acc, fmt, "rn").astype(np.uint64)
        lo = encode(acc - bound, fmt, "rn")
        hi = encode(acc + bound, fmt, "rn")
    unsure = np.isfinite(acc) & (lo != hi)
    if fmt is F16:
        codes = np.where(np.isnan(acc), np.uint64(0x7FFF), codes)
    if unsure.any():
        codes = codes.copy()
        for idx in zip(*np.nonzero(unsure), strict=True):
            *w, i, j = idx
            a_row, b_col = A[(*w, i)], B[(*w, slice(None), j)]
            exact = sum((Fraction(float(x)) * Fraction(float(y)) for x, y in zip(a_row, b_col, strict=True)),
                        Fraction(float(C[idx])))
            codes[idx] = round_fraction(exact, fmt, "rn") if exact != 0 else \
                (int(encode(acc[idx], fmt, "rn")) if acc[idx] == 0 else 0)
    return codes


# --------------------------------------------------------------------------- wgmma (warpgroup) fragments

WGMMA_K = {"16bit": 16, "tf32": 8, "8bit": 32}  # the K of wgmma.mma_async.m64nNkK for each input kind


def wgmma_k(ty: str) -> int:
    """K of the wgmma shape for input type `ty` (.f16/.bf16: 16, .tf32: 8, .e4m3/.e5m2/.s8/.u8: 32)."""
    kind = _kind(ty)
    if kind not in WGMMA_K:
        raise ValueError(f"wgmma input type .{T.norm(ty)} is not supported")
    return WGMMA_K[kind]


def wgmma_a_coords(ty: str) -> tuple[np.ndarray, np.ndarray]:
    """(rows, cols) [128, elements] of matrix A (64 x K) held in registers by a warpgroup.

    Warp w of the warpgroup holds rows 16w..16w+15 with the layout of the mma.m16n8kK A fragment of the
    same element kind (the manual's wgmma figures for .m64nNk16, .m64nNk8 and .m64nNk32 A): 4 registers
    of 2 (16-bit), 1 (.tf32) or 4 (8-bit) elements, low bits first.
    """
    kind = _kind(ty)
    k = wgmma_k(ty)
    r, c = _coords(f"m16n8k{k}", "a", kind)
    w = np.repeat(np.arange(4), 32)[:, None]
    return np.tile(r, (4, 1)) + 16 * w, np.tile(c, (4, 1))


def wgmma_d_coords(n: int) -> tuple[np.ndarray, np.ndarray]:
    """(rows, cols) [128, n/2] of accumulator element i of each thread of a warpgroup (m64nN, any K).

    Element i sits at row 16w + g + 8*((i >> 1) & 1), col 8*(i >> 2) + 2t + (i & 1) (w warp, g = lane >> 2,
    t = lane & 3); .f32/.s32 put one element in each register, .f16 two (element 2j low in register j).
    """
    t = np.arange(128)[:, None]
    i = np.arange(n // 2)[None, :]
    w, lane = t // 32, t % 32
    return 16 * w + lane // 4 + 8 * ((i >> 1) & 1), 8 * (i >> 2) + 2 * (lane % 4) + (i & 1)


def element_values(codes: ArrayLike, ty: str) -> np.ndarray:
    """Raw element codes -> values (float64, or int64 for integer types; .tf32 drops its low 13 bits)."""
    return _values(np.asarray(codes).astype(np.uint64), T.norm(ty))


def unpack_elements(regs: ArrayLike, ty: str) -> np.ndarray:
    """Registers [..., nregs] (uint32) -> element values [..., nregs * per] (low bits first)."""
    t = T.norm(ty)
    return _values(_unpack_elems(np.asarray(regs, np.uint32), _ELEM_BITS[t]), t)


def pack_elements(codes: ArrayLike, ty: str) -> np.ndarray:
    """Element codes [..., elements] -> 32-bit registers [..., elements * bits / 32] (low bits first)."""
    return _pack_elems(codes, _ELEM_BITS[T.norm(ty)], 32)


# --------------------------------------------------------------------------- ldmatrix / stmatrix / movmatrix


def ldmatrix_address_lanes(num: int) -> np.ndarray:
    """[num, 8] lane ids whose address operand gives row r of matrix j (.x1/.x2/.x4 -> num 1/2/4)."""
    if num not in (1, 2, 4):
        raise ValueError("ldmatrix/stmatrix .num must be .x1, .x2 or .x4")
    return np.arange(num * 8).reshape(num, 8)


def ldmatrix(rows: ArrayLike, trans: bool = False) -> np.ndarray:
    """ldmatrix.sync.aligned.m8n8.xN{.trans}.shared.b16.

    rows: uint16 [..., num, 8, 8], the eight b16 elements read at each row address (matrix j, row r,
    col); leading dimensions are independent warps. Returns [..., 32, num] uint32: register j of lane
    l holds matrix j elements (l//4, 2*(l%4)) low and (l//4, 2*(l%4)+1) high; with .trans, elements
    (2*(l%4), l//4) and (2*(l%4)+1, l//4).
    """
    rows = np.asarray(rows, np.uint16)
    g, t = _G, _T
    if trans:
        lo, hi = rows[..., 2 * t, g], rows[..., 2 * t + 1, g]
    else:
        lo, hi = rows[..., g, 2 * t], rows[..., g, 2 * t + 1]
    regs = lo.astype(np.uint32) | (hi.astype(np.uint32) << np.uint32(16))   # [..., num, 32]
    return np.ascontiguousarray(np.swapaxes(regs, -1, -2))


def stmatrix(regs: ArrayLike, trans: bool = False) -> np.ndarray:
    """stmatrix.sync.aligned.m8n8.xN{.trans}.shared.b16: inverse of `ldmatrix`.

    regs: [..., 32, num] uint32. Returns uint16 [..., num, 8, 8]: row r of matrix j goes to the address
    of lane 8*j + r (see `ldmatrix_address_lanes`).
    """
    regs = np.asarray(regs, np.uint32)
    num = regs.shape[-1]
    out = np.zeros(regs.shape[:-2] + (num, 8, 8), np.uint16)
    lo = np.swapaxes((regs & np.uint32(0xFFFF)).astype(np.uint16), -1, -2)
    hi = np.swapaxes((regs >> np.uint32(16)).astype(np.uint16), -1, -2)
    g, t = _G, _T
    if trans:
        out[..., 2 * t, g], out[..., 2 * t + 1, g] = lo, hi
    else:
        out[..., g, 2 * t], out[..., g, 2 * t + 1] = lo, hi
    return out


def movmatrix(regs: ArrayLike) -> np.ndarray:
    """movmatrix.sync.aligned.m8n8.trans.b16: [..., 32] uint32 fragment of M -> fragment of M^T."""
    r = np.asarray(regs, np.uint32)
    m = stmatrix(r[..., None])
    return ldmatrix(m, trans=True)[..., 0]


T.quiet_functions(globals())
