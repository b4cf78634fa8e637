"""Floating-point formats and correctly rounded conversion into them.

`encode(v, fmt, rnd)` rounds float64 values into any small format (f32, f16, bf16, tf32, the fp8/fp6/fp4
formats) with one rounding. It is exact for any float64 input, so an operation computed *exactly* or
*rounded to odd* in float64 (53 bits, at least two more than any target here) and then encoded is
correctly rounded in every mode. `round_fraction` does the same for exact Python rationals (the slow
fallback and the test reference for float64 results).
"""

from __future__ import annotations

from dataclasses import dataclass
from fractions import Fraction

import numpy as np
from numpy.typing import ArrayLike

from . import _types as T

ROUNDINGS = ("rn", "rna", "rz", "rm", "rp", "rs")


@dataclass(frozen=True)
class FloatFormat:
    """An IEEE-like binary format: `ebits` exponent and `mbits` stored fraction bits."""

    name: str
    bits: int          # storage width of one element
    ebits: int
    mbits: int
    has_inf: bool      # all-ones exponent with zero fraction encodes infinity
    nan: int | None    # canonical NaN bit pattern (positive); None: the format has no NaN
    ieee_nan: bool = True  # all-ones exponent with nonzero fraction is NaN (False for e4m3)
    signed: bool = True
    shift: int = 0     # tf32: the 19 bits sit in the top of a 32-bit word

    @property
    def bias(self) -> int:
        return (1 << (self.ebits - 1)) - 1

    @property
    def emin(self) -> int:
        return 1 - self.bias

    @property
    def max_finite(self) -> float:
        if self.name == "e4m3":
            return 448.0
        top = (1 << self.ebits) - 1
        emax_field = top - 1 if (self.has_inf or self.ieee_nan and self.nan is not None) else top
        return float(np.ldexp(2.0 - 2.0 ** -self.mbits, emax_field - self.bias))

    @property
    def sign_bit(self) -> int:
        return 1 << (self.ebits + self.mbits) if self.signed else 0


F64 = FloatFormat("f64", 64, 11, 52, True, 0x7FFFFFFFFFFFFFFF)
F32 = FloatFormat("f32", 32, 8, 23, True, 0x7FFFFFFF)
F16 = FloatFormat("f16", 16, 5, 10, True, 0x7FFF)
BF16 = FloatFormat("bf16", 16, 8, 7, True, 0x7FFF)
TF32 = FloatFormat("tf32", 32, 8, 10, True, 0x7FFFE000 >> 13, shift=13)
E4M3 = FloatFormat("e4m3", 8, 4, 3, False, 0x7F, ieee_nan=False)
E5M2 = FloatFormat("e5m2", 8, 5, 2, True, 0x7F)
E2M3 = FloatFormat("e2m3", 8, 2, 3, False, None, ieee_nan=False)
E3M2 = FloatFormat("e3m2", 8, 3, 2, False, None, ieee_nan=False)
E2M1 = FloatFormat("e2m1", 8, 2, 1, False, None, ieee_nan=False)

FORMATS = {f.name: f for f in (F64, F32, F16, BF16, TF32, E4M3, E5M2, E2M3, E3M2, E2M1)}


def fmt_of(name: str) -> FloatFormat:
    n = name[1:] if name.startswith(".") else name
    try:
        return FORMATS[n]
    except KeyError:
        raise ValueError(f"unknown floating-point format {name!r}") from None


_UD = {8: np.uint8, 16: np.uint16, 32: np.uint32, 64: np.uint64}


# --------------------------------------------------------------------------- decoding


def _decode_table(fmt: FloatFormat) -> np.ndarray:
    codes = np.arange(1 << (1 + fmt.ebits + fmt.mbits), dtype=np.int64)
    sign = np.where(codes >> (fmt.ebits + fmt.mbits) & 1, -1.0, 1.0)
    e = (codes >> fmt.mbits) & ((1 << fmt.ebits) - 1)
    m = codes & ((1 << fmt.mbits) - 1)
    val = np.where(e == 0, np.ldexp(m.astype(np.float64), fmt.emin - fmt.mbits),
                   np.ldexp((m + (1 << fmt.mbits)).astype(np.float64), e - fmt.bias - fmt.mbits))
    val = sign * val
    top = (1 << fmt.ebits) - 1
    if fmt.has_inf:
        val = np.where((e == top) & (m == 0), sign * np.inf, val)
    if fmt.ieee_nan and fmt.nan is not None:
        val = np.where((e == top) & (m != 0), np.nan, val)
    if fmt.name == "e4m3":
        val = np.where((e == top) & (m == (1 << fmt.mbits) - 1), np.nan, val)
    return val


_TABLES: dict[str, np.ndarray] = {}


def decode(bits: T.Bits, fmt: FloatFormat) -> np.ndarray:
    """Raw bits of `fmt` -> float64 values (exact)."""
    b = np.asarray(bits)
    if fmt is F64:
        return b.astype(np.uint64).view(np.float64)
    if fmt is F32:
        return b.astype(np.uint32).view(np.float32).astype(np.float64)
    if fmt is TF32:
        return (b.astype(np.uint32) & np.uint32(0xFFFFE000)).view(np.float32).astype(np.float64)
    if fmt is F16:
        return b.astype(np.uint16).view(np.float16).astype(np.float64)
    if fmt is BF16:
        return (b.astype(np.uint32) << 16).view(np.float32).astype(np.float64)
    tab = _TABLES.get(fmt.name)
    if tab is None:
        tab = _TABLES[fmt.name] = _decode_table(fmt)
    return tab[b.astype(np.intp) & ((1 << (1 + fmt.ebits + fmt.mbits)) - 1)]


# --------------------------------------------------------------------------- encoding


def encode(v: ArrayLike, fmt: FloatFormat, rnd: str = "rn", *, satfinite: bool = False, rbits: T.Bits | None = None,
           nan_bits: int | None = None) -> np.ndarray:
    """Round float64 `v` into `fmt` with rounding `rnd` (rn rna rz rm rp rs); returns raw bits.

    NaN -> the canonical NaN (or `nan_bits`); formats without NaN give +MAX_NORM under satfinite.
    Overflow follows IEEE for the rounding mode (inf or MAX_NORM); `satfinite` clamps to +-MAX_NORM,
    infinities included. Formats without infinities saturate (or give NaN, e4m3 without satfinite).
    `rbits` (integers) are the random bits of stochastic rounding `rs`, aligned with the discarded bits
    of a float32 source (13 bits for f16, 16 for bf16).
    """
    if rnd not in ROUNDINGS:
        raise ValueError(f"unknown rounding mode {rnd!r}; expected one of {ROUNDINGS}")
    v = np.asarray(v, dtype=np.float64)
    ud = _UD[fmt.bits]
    if fmt is F64:
        return _nan_fix(v, fmt, nan_bits)
    if rnd == "rn" and not satfinite and fmt is BF16 and nan_bits is None:
        return f64_to_bf16_rn(v)
    if rnd == "rn" and not satfinite and fmt in (F32, F16):
        with np.errstate(over="ignore", invalid="ignore"):
            r = v.astype(np.float32 if fmt is F32 else np.float16).view(ud)
        return _nan_fix_bits(r, np.isnan(v), fmt, nan_bits)
    if rnd == "rz" and not satfinite and fmt is F32:  # round to nearest, then one step back toward zero
        with np.errstate(over="ignore", invalid="ignore"):
            r = v.astype(np.float32)
            r = np.where(np.abs(r) > np.abs(v), np.nextafter(r, np.float32(0)), r).astype(np.float32)
        return _nan_fix_bits(r.view(ud), np.isnan(v), fmt, nan_bits)
    neg = np.signbit(v)
    a = np.abs(v)
    finite = np.isfinite(a)
    with np.errstate(invalid="ignore", over="ignore"):
        a0 = np.where(finite, a, 0.0)
        _, e = np.frexp(a0)
        E = e.astype(np.int64) - 1
        q = np.maximum(E, fmt.emin) - fmt.mbits
        scaled = np.ldexp(a0, -q)
        n = np.floor(scaled)
        frac = scaled - n
        n = n.astype(np.int64)
        if rnd == "rn":
            up = (frac > 0.5) | ((frac == 0.5) & ((n & 1) == 1))
        elif rnd == "rna":
            up = frac >= 0.5
        elif rnd == "rz":
            up = np.zeros(a.shape, bool)
        elif rnd == "rp":
            up = (frac > 0) & ~neg
        elif rnd == "rm":
            up = (frac > 0) & neg
        else:  # rs
            if rbits is None:
                raise ValueError("rounding mode 'rs' needs rbits")
            k = 23 - fmt.mbits if fmt.mbits < 23 else 0
            disc = np.floor(frac * (1 << k)).astype(np.int64)
            up = ((disc + (np.asarray(rbits).astype(np.int64) & ((1 << k) - 1))) >> k) > 0
        n = n + up
    # n * 2**q with n < 2**(mbits+2); renormalise a carry into the next binade
    carry = n >= (1 << (fmt.mbits + 1))
    n = np.where(carry, n >> 1, n)
    q = q + carry
    normal = n >= (1 << fmt.mbits)
    efield = np.where(normal, q + fmt.mbits + fmt.bias, 0)
    mant = np.where(normal, n - (1 << fmt.mbits), n)
    code = (efield << fmt.mbits) | mant
    max_code = _max_code(fmt)
    over = finite & (code > max_code)
    if over.any():
        if satfinite or not (fmt.has_inf or fmt.name == "e4m3"):
            code = np.where(over, max_code, code)
        elif fmt.name == "e4m3":
            code = np.where(over, fmt.nan, code)
        else:
            inf_code = ((1 << fmt.ebits) - 1) << fmt.mbits
            to_inf = {"rn": True, "rna": True, "rz": False, "rs": False}.get(rnd)
            if to_inf is None:
                to_inf_arr = ~neg if rnd == "rp" else neg
            else:
                to_inf_arr = np.full(a.shape, to_inf)
            code = np.where(over, np.where(to_inf_arr, inf_code, max_code), code)
    inf_in = np.isinf(a)
    if inf_in.any():
        if fmt.has_inf and not satfinite:
            code = np.where(inf_in, ((1 << fmt.ebits) - 1) << fmt.mbits, code)
        elif satfinite or fmt.name != "e4m3":
            code = np.where(inf_in, max_code, code)
        else:
            code = np.where(inf_in, fmt.nan, code)
    if fmt.signed:
        code = code | (neg.astype(np.int64) << (fmt.ebits + fmt.mbits))
    else:
        code = np.where(neg & (code != 0), 0, code)
    nan_in = np.isnan(v)
    if nan_in.any():
        if fmt.nan is None:
            code = np.where(nan_in, max_code, code)
        else:
            code = np.where(nan_in, fmt.nan if nan_bits is None else nan_bits >> fmt.shift, code)
    return (code << fmt.shift).astype(ud)


def _max_code(fmt: FloatFormat) -> int:
    if fmt.name == "e4m3":
        return 0x7E
    top = (1 << fmt.ebits) - 1
    if fmt.has_inf or (fmt.ieee_nan and fmt.nan is not None):
        return ((top - 1) << fmt.mbits) | ((1 << fmt.mbits) - 1)
    return (top << fmt.mbits) | ((1 << fmt.mbits) - 1)


def _nan_fix(v, fmt, nan_bits):
    r = v.view(np.uint64).copy()
    return _nan_fix_bits(r, np.isnan(v), fmt, nan_bits)


def _nan_fix_bits(r, isnan, fmt, nan_bits):
    if isnan.any():
        r = np.where(isnan, r.dtype.type(fmt.nan if nan_bits is None else nan_bits), r)
    return r


# --------------------------------------------------------------------------- exact helpers


def two_sum(a: np.ndarray, b: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """s = fl(a+b) and the exact error e with a + b == s + e (no overflow)."""
    s = a + b
    z = s - a
    e = (a - (s - z)) + (b - z)
    return s, e


def round_to_odd(s: np.ndarray, e: np.ndarray) -> np.ndarray:
    """Float64 round-to-odd of the exact value s + e, where s = fl(s + e) (a `two_sum` pair)."""
    with np.errstate(invalid="ignore"):
        need = (e != 0) & np.isfinite(e)
    if not need.any():
        return s
    sb = s.view(np.int64)
    even = (sb & 1) == 0
    step = np.where(np.signbit(e) == np.signbit(s), 1, -1)
    return np.where(need & even, sb + step, sb).view(np.float64)


_SPLIT = 134217729.0  # 2**27 + 1


def two_prod(a: np.ndarray, b: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """p = fl(a*b) and the exact error (Dekker); valid for |a|,|b| < 2**995 and no underflow."""
    p = a * b
    t = _SPLIT * a
    ah = t - (t - a)
    al = a - ah
    t = _SPLIT * b
    bh = t - (t - b)
    bl = b - bh
    e = ((ah * bh - p) + ah * bl + al * bh) + al * bl
    return p, e


def fix_directed(f: np.ndarray, resid_sign: np.ndarray, rnd: str) -> np.ndarray:
    """Given f = RN(x) (a neighbour of x) and sign(x - f), return x rounded in mode `rnd`."""
    if rnd in ("rn", "rna"):
        return f
    dt = f.dtype.type
    if rnd == "rp":
        move = resid_sign > 0
        target = dt(np.inf)
    elif rnd == "rm":
        move = resid_sign < 0
        target = dt(-np.inf)
    elif rnd == "rz":
        move = (resid_sign != 0) & ((resid_sign < 0) != np.signbit(f))
        target = dt(0.0)
    else:
        raise ValueError(f"unknown rounding mode {rnd!r}")
    if not move.any():
        return f
    return np.where(move, np.nextafter(f, target), f)


# --------------------------------------------------------------------------- exact rationals


def round_fraction(x: Fraction, fmt: FloatFormat, rnd: str = "rn") -> int:
    """Round an exact rational into `fmt`; returns the bit pattern (IEEE overflow rules)."""
    neg = x < 0
    a = -x if neg else x
    sign = (1 << (fmt.ebits + fmt.mbits)) if neg else 0
    if a == 0:
        return sign
    num, den = a.numerator, a.denominator
    E = num.bit_length() - den.bit_length()
    if Fraction(num, den) < Fraction(2) ** E:
        E -= 1
    q = max(E, fmt.emin) - fmt.mbits
    scaled = a / Fraction(2) ** q
    n = scaled.numerator // scaled.denominator
    rem = scaled - n
    if rnd == "rn":
        up = rem > Fraction(1, 2) or (rem == Fraction(1, 2) and n & 1)
    elif rnd == "rna":
        up = rem >= Fraction(1, 2)
    elif rnd == "rz":
        up = False
    elif rnd == "rp":
        up = rem > 0 and not neg
    elif rnd == "rm":
        up = rem > 0 and neg
    else:
        raise ValueError(f"unknown rounding mode {rnd!r}")
    n += up
    if n >= 1 << (fmt.mbits + 1):
        n >>= 1
        q += 1
    if n >= 1 << fmt.mbits:
        code = ((q + fmt.mbits + fmt.bias) << fmt.mbits) | (n - (1 << fmt.mbits))
    else:
        code = n
    mc = _max_code(fmt)
    if code > mc:
        if fmt.has_inf and (rnd in ("rn", "rna") or (rnd == "rp" and not neg) or (rnd == "rm" and neg)):
            code = ((1 << fmt.ebits) - 1) << fmt.mbits
        else:
            code = mc
    return (sign | code) << fmt.shift


NAN16 = np.uint16(0x7FFF)  # the canonical f16/bf16 NaN


def f64_to_bf16_rn(v: np.ndarray) -> np.ndarray:
    """Correctly rounded float64 -> bf16 bits.

    The float32 cast can only mislead the final rounding when it lands exactly on a bf16 halfway point
    (low 16 bits 0x8000) without being exact; those lanes are nudged one float32 ulp towards v first.
    """
    with np.errstate(over="ignore", invalid="ignore"):
        f = np.asarray(v, np.float64).astype(np.float32)
        fb = f.view(np.uint32)
        cand = (fb & np.uint32(0xFFFF)) == np.uint32(0x8000)
        if cand.any():
            back = f.astype(np.float64)
            above = np.abs(v) > np.abs(back)
            below = np.abs(v) < np.abs(back)
            fb = np.where(cand & above, fb + np.uint32(1), np.where(cand & below, fb - np.uint32(1), fb))
    return f32_to_bf16_rn(fb)


def f32_to_bf16_rn(bits: T.Bits) -> np.ndarray:
    """float32 bits -> bf16 bits, round to nearest even; NaN -> 0x7fff."""
    b = T.raw(bits, 32)
    r = ((b + np.uint32(0x7FFF) + ((b >> np.uint32(16)) & np.uint32(1))) >> np.uint32(16)).astype(np.uint16)
    nan = (b & np.uint32(0x7FFFFFFF)) > np.uint32(0x7F800000)
    return np.where(nan, NAN16, r).astype(np.uint16)


T.quiet_functions(globals())
