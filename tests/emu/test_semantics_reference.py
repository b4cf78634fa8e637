"""Independent reference rounding for the semantics tests (exact rationals, numpy/ml_dtypes values).

It shares no code with ptxforge: neighbours are found with numpy.nextafter (f32/f64) or a sorted table
of every value ml_dtypes decodes (16-bit and smaller formats), compared exactly as Fractions.
The tests at the bottom check the reference itself against numpy's and ml_dtypes' own casts.
"""

from __future__ import annotations

import bisect
import math
from fractions import Fraction

import ml_dtypes
import numpy as np
import pytest

pytestmark = pytest.mark.filterwarnings("ignore::RuntimeWarning")

NP = {"f64": np.float64, "f32": np.float32, "f16": np.float16, "bf16": ml_dtypes.bfloat16,
      "e4m3": ml_dtypes.float8_e4m3fn, "e5m2": ml_dtypes.float8_e5m2,
      "e2m1": getattr(ml_dtypes, "float4_e2m1fn", None), "e2m3": getattr(ml_dtypes, "float6_e2m3fn", None),
      "e3m2": getattr(ml_dtypes, "float6_e3m2fn", None)}
UINT = {64: np.uint64, 32: np.uint32, 16: np.uint16, 8: np.uint8}
_TABLES: dict[str, tuple[list, list, list]] = {}


def _table(name):
    """Sorted finite positive values with their codes, plus the 'next value past max' for overflow."""
    if name not in _TABLES:
        dt = NP[name]
        nbits = {"f16": 16, "bf16": 16}.get(name, 8)
        codes = np.arange(1 << nbits, dtype=np.uint32).astype(UINT[nbits])
        if name in ("e2m1",):
            codes = codes[:16]
        if name in ("e2m3", "e3m2"):
            codes = codes[:64]
        vals = codes.view(dt) if name not in ("e2m1", "e2m3", "e3m2") else \
            np.array(codes, np.uint8).view(dt)
        f = vals.astype(np.float64)
        sign_bit = {"e2m1": 8, "e2m3": 32, "e3m2": 32}.get(name, 1 << (nbits - 1))
        pos = [(Fraction(float(v)), int(c)) for v, c in zip(f, codes, strict=False)
               if np.isfinite(v) and not (int(c) & sign_bit)]
        pos.sort()
        _TABLES[name] = ([p[0] for p in pos], [p[1] for p in pos], sign_bit)
    return _TABLES[name]


def ref_round(fr: Fraction, fmt: str, rnd: str = "rn") -> int:
    """Bits of the exact rational `fr` rounded into fmt (nonzero fr; IEEE overflow, no satfinite)."""
    assert fr != 0
    if fmt in ("f32", "f64"):
        return _ref_ieee(fr, fmt, rnd)
    vals, codes, sign_bit = _table(fmt)
    a = abs(fr)
    neg = fr < 0
    # magnitude rounding, then sign: rm/rp swap for negative values
    mrnd = {"rm": "rp", "rp": "rm"}.get(rnd, rnd) if neg else rnd
    mrnd = {"rm": "rz", "rp": "up"}.get(mrnd, mrnd)
    i = bisect.bisect_right(vals, a) - 1
    lo, lo_c = vals[i], codes[i]
    if i + 1 < len(vals):
        hi, hi_c = vals[i + 1], codes[i + 1]
    else:  # past the largest finite value: the next binade step, which is infinity (or NaN)
        hi = vals[-1] + (vals[-1] - vals[-2])
        hi_c = None
    if lo == a:
        c = lo_c
    elif mrnd == "rz":
        c = lo_c
    elif mrnd == "up":
        c = hi_c
    else:
        dlo, dhi = a - lo, hi - a
        if dlo < dhi or (dlo == dhi and mrnd == "rn" and (lo_c & 1) == 0):
            c = lo_c
        else:
            c = hi_c
    if c is None:
        return None  # overflow to infinity / NaN: callers check separately
    return c | (sign_bit if neg else 0)


def _ref_ieee(fr, fmt, rnd):
    dt = NP[fmt]
    nb = 64 if fmt == "f64" else 32
    try:
        x = float(fr)
    except OverflowError:
        x = math.inf if fr > 0 else -math.inf
    with np.errstate(over="ignore"):
        g = dt(x)
    if np.isinf(g):
        g = np.nextafter(g, dt(0))
    while Fraction(float(g)) > fr:
        g = np.nextafter(g, dt(-np.inf))
        if np.isinf(g):
            break
    while True:
        up = np.nextafter(g, dt(np.inf))
        if np.isinf(up) or Fraction(float(up)) > fr:
            break
        g = up
    lo = g
    lo_f = Fraction(float(lo)) if np.isfinite(lo) else None
    hi = lo if lo_f == fr else np.nextafter(lo, dt(np.inf))
    to_bits = lambda v: int(np.array(v, dt).view(UINT[nb]))  # noqa: E731
    if lo_f == fr:
        return to_bits(lo)
    if np.isinf(hi):
        hi_f = Fraction(2) ** (1024 if fmt == "f64" else 128)
    else:
        hi_f = Fraction(float(hi))
    if np.isinf(lo):
        lo_f = -(Fraction(2) ** (1024 if fmt == "f64" else 128))
    if rnd == "rz":
        r = lo if fr > 0 else hi
    elif rnd == "rm":
        r = lo
    elif rnd == "rp":
        r = hi
    else:
        dlo, dhi = fr - lo_f, hi_f - fr
        if dlo < dhi:
            r = lo
        elif dhi < dlo:
            r = hi
        else:
            r = lo if (to_bits(lo) & 1) == 0 else hi
    if r == 0 and fr < 0:
        r = dt(-0.0)
    return to_bits(r)


# ----------------------------------------------------------------------------- self-tests


def test_reference_matches_numpy_rn_casts():
    rng = np.random.default_rng(1)
    xs = np.concatenate([rng.standard_normal(300) * 10.0 ** rng.integers(-40, 40, 300),
                         rng.standard_normal(100) * 1e-6])
    for x in xs:
        fr = Fraction(float(x))
        assert ref_round(fr, "f32") == int(np.float32(x).view(np.uint32))
        assert ref_round(fr, "f16") in (int(np.float16(x).view(np.uint16)), None)


def test_reference_directed_brackets():
    fr = Fraction(1) + Fraction(1, 3) * Fraction(2) ** -30
    lo, hi = ref_round(fr, "f32", "rm"), ref_round(fr, "f32", "rp")
    assert hi == lo + 1 and ref_round(fr, "f32", "rz") == lo and ref_round(-fr, "f32", "rz") == lo | 1 << 31
    assert ref_round(Fraction(3, 256) + 1, "bf16", "rn") == 0x3F82  # tie -> even
    assert ref_round(Fraction(1, 256) + 1, "bf16", "rn") == 0x3F80
