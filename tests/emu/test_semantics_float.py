"""f32/f64 arithmetic against exact rationals: every rounding mode, specials, subnormals, ftz, sat."""

from __future__ import annotations

import math
from fractions import Fraction

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from ptxforge.emu.semantics import compare, float_misc, floating

try:
    from emu.test_semantics_reference import ref_round
except ImportError:  # pragma: no cover - depends on the pytest import mode
    from test_semantics_reference import ref_round

pytestmark = pytest.mark.filterwarnings("ignore::RuntimeWarning")
RNDS = ("rn", "rz", "rm", "rp")

F32_SPECIAL = np.array([0.0, -0.0, 1e-45, -1e-45, 1.1754942e-38, 1.1754944e-38, 1.0, -1.0, 1.5, 3.0,
                        1 / 3, -2.75, 3.4028235e38, -3.4028235e38, np.inf, -np.inf, np.nan,
                        1e-40, 16777217.0, 2.0 ** -126, 0.1], np.float32)


def _exact(op, *xs):
    fr = [Fraction(float(x)) for x in xs]
    if op == "add":
        return fr[0] + fr[1]
    if op == "sub":
        return fr[0] - fr[1]
    if op == "mul":
        return fr[0] * fr[1]
    if op == "div":
        return fr[0] / fr[1]
    if op == "fma":
        return fr[0] * fr[1] + fr[2]
    raise ValueError(op)


def _expected(op, xs, rnd, fmt):
    """Reference bits, or None where only 'is NaN' is checked."""
    nb = 32 if fmt == "f32" else 64
    f64 = [float(x) for x in xs]
    with np.errstate(all="ignore"):
        naive = {"add": lambda a, b: a + b, "sub": lambda a, b: a - b, "mul": lambda a, b: a * b,
                 "div": lambda a, b: np.float64(a) / np.float64(b),
                 "fma": lambda a, b, c: np.float64(a) * np.float64(b) + c}[op](*f64)
    if op == "fma" and all(math.isfinite(x) for x in f64[:2]) and math.isinf(f64[2]):
        naive = f64[2]  # IEEE fma: the exact (finite) product plus an infinity is that infinity
    if any(math.isnan(x) for x in f64) or math.isnan(naive):
        return "nan"
    if any(math.isinf(x) for x in f64) or (op == "div" and f64[1] == 0):
        return int(np.array(naive, np.float32 if nb == 32 else np.float64).view(np.uint32 if nb == 32 else np.uint64))
    fr = _exact(op, *xs)
    if fr == 0:
        if op in ("mul", "div"):
            neg = (math.copysign(1, f64[0]) * math.copysign(1, f64[1])) < 0
        else:
            p = f64[0] * f64[1] if op == "fma" else f64[0]
            c = f64[2] if op == "fma" else (f64[1] if op == "add" else -f64[1])
            sp, sc = math.copysign(1, p) < 0, math.copysign(1, c) < 0
            neg = (sp and sc) if sp == sc else rnd == "rm"
        return (1 << (nb - 1)) if neg else 0
    return ref_round(fr, fmt, rnd)


def _check(op, xs_bits, rnd, fmt, got):
    nb = 32 if fmt == "f32" else 64
    dt = np.float32 if nb == 32 else np.float64
    for i in range(len(got)):
        xs = [np.array(x[i]).view(dt) for x in xs_bits]
        exp = _expected(op, xs, rnd, fmt)
        g = int(got[i])
        if exp == "nan":
            assert np.isnan(np.array(g, UINT[nb]).view(dt)), (op, rnd, xs, hex(g))
            if nb == 32:
                assert g == 0x7FFFFFFF
        else:
            assert g == exp, (op, rnd, [float(x) for x in xs], hex(g), hex(exp))


UINT = {32: np.uint32, 64: np.uint64}


def _grid(vals):
    a, b = np.meshgrid(vals, vals)
    return a.ravel(), b.ravel()


@pytest.mark.parametrize("rnd", RNDS)
@pytest.mark.parametrize("op", ["add", "sub", "mul", "div"])
def test_f32_special_grid(op, rnd):
    a, b = _grid(F32_SPECIAL)
    ab, bb = a.view(np.uint32), b.view(np.uint32)
    got = getattr(floating, op)(ab, bb, "f32", rnd=rnd)
    _check(op, (ab, bb), rnd, "f32", got)


def _random_bits(rng, n, nb):
    """Random floats: uniform bit patterns mixed with values near 1 (so sums are not all trivial)."""
    dt, ut = (np.float32, np.uint32) if nb == 32 else (np.float64, np.uint64)
    raw = rng.integers(0, 1 << nb, n, dtype=np.uint64 if nb == 64 else np.int64).astype(ut)
    near = (rng.standard_normal(n) * 4).astype(dt).view(ut)
    return np.where(rng.random(n) < 0.5, raw, near)


@pytest.mark.parametrize("fmt", ["f32", "f64"])
@pytest.mark.parametrize("op", ["add", "mul", "div", "fma"])
def test_random_all_modes(op, fmt):
    nb = 32 if fmt == "f32" else 64
    rng = np.random.default_rng({"add": 1, "mul": 2, "div": 3, "fma": 4}[op] + nb)
    n = 1000
    xs = [_random_bits(rng, n, nb) for _ in range(3 if op == "fma" else 2)]
    if op == "fma":  # near-cancellation cases: c close to -(a*b)
        dt = np.float32 if nb == 32 else np.float64
        p = (xs[0].view(dt)[:100].astype(np.float64) * xs[1].view(dt)[:100].astype(np.float64))
        xs[2][:100] = (-p).astype(dt).view(xs[2].dtype)
    for rnd in RNDS:
        got = getattr(floating, op)(*xs, ty=fmt, rnd=rnd)
        _check(op, xs, rnd, fmt, got)


def test_f64_extreme_exponents_use_exact_fallback():
    vals = np.array([2.0 ** 1000 * 1.3, 2.0 ** -1000 * 1.7, 5e-324, 2.0 ** -1022 * 1.1, 2.0 ** 990 * 1.9,
                     -2.0 ** 997 * 1.01, 3.0, 2.0 ** -1074 * 3], np.float64)
    a, b = _grid(vals)
    ab, bb = a.view(np.uint64), b.view(np.uint64)
    for rnd in RNDS:
        for op in ("mul", "div", "add"):
            _check(op, (ab, bb), rnd, "f64", getattr(floating, op)(ab, bb, "f64", rnd=rnd))
        cb = np.roll(bb, 3)
        _check("fma", (ab, bb, cb), rnd, "f64", floating.fma(ab, bb, cb, "f64", rnd=rnd))


finite32 = st.floats(width=32, allow_nan=False, allow_infinity=False)


@settings(max_examples=150, deadline=None)
@given(finite32, finite32, finite32, st.sampled_from(RNDS))
def test_hypothesis_f32_directed(a, b, c, rnd):
    xs = [np.array([v], np.float32).view(np.uint32) for v in (a, b, c)]
    _check("add", xs[:2], rnd, "f32", floating.add(*xs[:2], "f32", rnd=rnd))
    _check("mul", xs[:2], rnd, "f32", floating.mul(*xs[:2], "f32", rnd=rnd))
    _check("fma", xs, rnd, "f32", floating.fma(*xs, "f32", rnd=rnd))


@settings(max_examples=150, deadline=None)
@given(st.floats(allow_nan=False, allow_infinity=False), st.floats(allow_nan=False, allow_infinity=False),
       st.floats(allow_nan=False, allow_infinity=False), st.sampled_from(RNDS))
def test_hypothesis_f64_fma(a, b, c, rnd):
    xs = [np.array([v], np.float64).view(np.uint64) for v in (a, b, c)]
    _check("fma", xs, rnd, "f64", floating.fma(*xs, "f64", rnd=rnd))


@pytest.mark.parametrize("fmt", ["f32", "f64"])
def test_sqrt_all_modes(fmt):
    nb = 32 if fmt == "f32" else 64
    dt = np.float32 if nb == 32 else np.float64
    rng = np.random.default_rng(7)
    x = np.abs(_random_bits(rng, 400, nb).view(dt)).astype(dt)
    top = np.finfo(dt).max
    x = np.concatenate([x, np.array([0.0, -0.0, 4.0, np.inf, -1.0, 2.0 ** -1074 if nb == 64 else 1e-45, top,
                                     np.nextafter(top, dt(0)), top / 3], dt)])
    xb = x.view(UINT[nb])
    for rnd in RNDS:
        got = floating.sqrt(xb, fmt, rnd=rnd).view(dt)
        for xi, g in zip(x, got, strict=False):
            if np.isnan(xi) or xi < 0:
                assert np.isnan(g)
                continue
            if xi == 0 or np.isinf(xi):
                assert g == xi and np.signbit(g) == np.signbit(xi)
                continue
            fr = Fraction(float(xi))
            gf = Fraction(float(g))
            nxt = Fraction(float(np.nextafter(g, dt(np.inf))))
            prv = Fraction(float(np.nextafter(g, dt(0))))
            if rnd in ("rz", "rm"):
                assert gf * gf <= fr < nxt * nxt
            elif rnd == "rp":
                assert prv * prv < fr <= gf * gf
            else:
                mid_lo, mid_hi = (prv + gf) / 2, (gf + nxt) / 2
                assert mid_lo * mid_lo <= fr <= mid_hi * mid_hi


def test_rcp_and_div_ieee():
    x = np.array([3.0, -7.0, 0.0, -0.0, np.inf, 1e-45, 3e38], np.float32).view(np.uint32)
    for rnd in RNDS:
        got = floating.rcp(x, "f32", rnd=rnd)
        one = np.full_like(x, 0x3F800000)
        _check("div", (one, x), rnd, "f32", got)


def test_ftz_and_sat():
    sub = np.array([1e-40, -1e-40], np.float32).view(np.uint32)
    one = np.full(2, 0x3F800000, np.uint32)
    assert list(floating.add(sub, sub, "f32", ftz=True)) == [0, 0x80000000]
    assert list(floating.add(sub, sub, "f32")) == list((sub.view(np.float32) * 2).view(np.uint32))
    # ftz flushes the input: 1 * subnormal -> signed zero; and subnormal results
    assert list(floating.mul(one, sub, "f32", ftz=True)) == [0, 0x80000000]
    tiny = np.array([2.0 ** -80], np.float32).view(np.uint32)
    assert floating.mul(tiny, tiny, "f32", ftz=True)[0] == 0
    assert floating.mul(tiny, tiny, "f32", rnd="rp")[0] == 1  # without ftz: min subnormal
    v = np.array([-3.0, 0.5, 2.0, np.nan, -0.0, np.inf], np.float32).view(np.uint32)
    z = np.zeros_like(v)
    got = floating.add(v, z, "f32", sat=True).view(np.float32)
    assert list(got) == [0.0, 0.5, 1.0, 0.0, 0.0, 1.0] and not np.signbit(got).any()


def test_nan_results():
    inf = np.array([np.inf], np.float32).view(np.uint32)
    ninf = np.array([-np.inf], np.float32).view(np.uint32)
    assert floating.add(inf, ninf, "f32")[0] == 0x7FFFFFFF
    payload = np.array([0x7FF0000000000123], np.uint64)
    one = np.array([1.0]).view(np.uint64)
    assert floating.add(payload, one, "f64")[0] == 0x7FF8000000000123  # payload kept, quieted
    assert floating.mul(one, payload, "f64")[0] == 0x7FF8000000000123
    assert floating.add(np.array([np.inf]).view(np.uint64), np.array([-np.inf]).view(np.uint64), "f64")[0] == \
        0x7FFFFFFFFFFFFFFF


def test_div_approx_and_full():
    rng = np.random.default_rng(3)
    a = (rng.standard_normal(2000) * 100).astype(np.float32)
    b = (rng.standard_normal(2000) * 0.01).astype(np.float32)
    for mode in ("approx", "full"):
        got = floating.div(a.view(np.uint32), b.view(np.uint32), "f32", rnd=mode).view(np.float32)
        exact = a.astype(np.float64) / b.astype(np.float64)
        ulp = np.spacing(np.abs(exact).astype(np.float32)).astype(np.float64)
        assert np.all(np.abs(got - exact) <= 2 * ulp)
    big = np.array([2.0 ** 127], np.float32).view(np.uint32)
    x = np.array([5.0, -np.inf, -5.0, np.nan], np.float32).view(np.uint32)
    r = floating.div(x, np.repeat(big, 4), "f32", rnd="approx").view(np.float32)
    assert r[0] == 0 and not np.signbit(r[0]) and np.isnan(r[1]) and r[2] == 0 and np.signbit(r[2])
    assert np.isnan(r[3])
    # full range: still within 2 ulp for huge divisors
    r = floating.div(np.array([3e38], np.float32).view(np.uint32), big, "f32", rnd="full").view(np.float32)
    assert abs(float(r[0]) - 3e38 / 2.0 ** 127) <= 2 * float(np.spacing(np.float32(3e38 / 2.0 ** 127)))


def test_min_max_rules():
    f = lambda *v: np.array(v, np.float32).view(np.uint32)  # noqa: E731
    nan = f(np.nan)[0]
    a = f(1.0, np.nan, np.nan, -0.0, 0.0, -2.0, 1e-40)
    b = f(2.0, 3.0, np.nan, 0.0, -0.0, 3.0, 1.0)
    assert list(float_misc.min(a, b, ty="f32").view(np.float32)[[0, 1]]) == [1.0, 3.0]
    mn = float_misc.min(a, b, ty="f32")
    assert mn[2] == 0x7FFFFFFF and mn[3] == 0x80000000 and mn[4] == 0x80000000
    mx = float_misc.max(a, b, ty="f32")
    assert mx[3] == 0 and mx[4] == 0
    assert float_misc.min(a, b, ty="f32", NaN=True)[1] == 0x7FFFFFFF
    assert float_misc.min(a, b, ty="f32", ftz=True)[6] == 0  # subnormal flushed to +0 then min
    xs = float_misc.min(f(-2.0), f(3.0), ty="f32", xorsign_abs=True).view(np.float32)
    assert xs[0] == -2.0
    xs = float_misc.max(f(-2.0), f(-3.0), ty="f32", xorsign_abs=True).view(np.float32)
    assert xs[0] == 3.0
    assert float_misc.max(f(-2.0), f(-3.0), ty="f32", relu=True)[0] == 0
    three = float_misc.max(f(1.0), f(np.nan), f(5.0), ty="f32").view(np.float32)
    assert three[0] == 5.0
    three = float_misc.min(f(-1.0), f(-3.0), f(2.0), ty="f32", abs=True).view(np.float32)
    assert three[0] == 1.0
    assert float_misc.max(f(-1.0), f(np.nan), f(-7.0), ty="f32", abs=True, NaN=True)[0] == 0x7FFFFFFF
    del nan


def test_abs_neg_copysign_testp():
    f = lambda *v: np.array(v, np.float32).view(np.uint32)  # noqa: E731
    x = f(1.0, -0.0, np.nan, 1e-40, -np.inf, 3e-39, 1e-45)
    assert list(float_misc.abs(x, "f32").view(np.float32)[[0, 1, 4]]) == [1.0, 0.0, np.inf]
    assert float_misc.neg(f(1e-40), "f32", ftz=True)[0] == 0x80000000
    assert float_misc.copysign(f(-1.0), f(2.0), "f32").view(np.float32)[0] == -2.0
    exp = {"finite": [1, 1, 0, 1, 0, 1, 1], "infinite": [0, 0, 0, 0, 1, 0, 0],
           "number": [1, 1, 0, 1, 1, 1, 1], "notanumber": [0, 0, 1, 0, 0, 0, 0],
           "normal": [1, 0, 0, 0, 0, 0, 0], "subnormal": [0, 0, 0, 1, 0, 1, 1]}
    for op, e in exp.items():
        assert list(float_misc.testp(x, op, "f32").astype(int)) == e, op
    d = np.array([5e-324, 1.0, 0.0]).view(np.uint64)
    assert list(float_misc.testp(d, "subnormal", "f64")) == [True, False, False]


def test_setp_float_ordered_unordered():
    f = lambda *v: np.array(v, np.float32).view(np.uint32)  # noqa: E731
    a = f(1.0, np.nan, 2.0, -0.0)
    b = f(1.0, 1.0, 1.0, 0.0)
    cases = {"eq": [1, 0, 0, 1], "ne": [0, 0, 1, 0], "lt": [0, 0, 0, 0], "ge": [1, 0, 1, 1],
             "equ": [1, 1, 0, 1], "neu": [0, 1, 1, 0], "ltu": [0, 1, 0, 0], "gtu": [0, 1, 1, 0],
             "num": [1, 0, 1, 1], "nan": [0, 1, 0, 0], "leu": [1, 1, 0, 1], "geu": [1, 1, 1, 1]}
    for cmp, e in cases.items():
        p, q = compare.setp(a, b, cmp, "f32")
        assert list(p.astype(int)) == e, cmp
        assert list(q.astype(int)) == [1 - v for v in e]
    c = np.array([True, False, True, False])
    p, q = compare.setp(a, b, "eq", "f32", bool_op="and", c=c)
    assert list(p) == [True, False, False, False] and list(q) == [False, False, True, False]
    p, _ = compare.setp(a, b, "eq", "f32", bool_op="xor", c=c)
    assert list(p) == [False, False, True, True]
    s = compare.set_(a, b, "equ", "f32", "f32")
    assert list(s.view(np.float32)) == [1.0, 1.0, 0.0, 1.0]
    assert list(compare.set_(a, b, "lt", "u32", "f32")) == [0, 0, 0, 0]


def test_f32x2_packed_add():
    lo = np.array([1.0, 2.0], np.float32).view(np.uint32).astype(np.uint64)
    hi = np.array([3.0, np.inf], np.float32).view(np.uint32).astype(np.uint64)
    x = lo | (hi << np.uint64(32))
    r = floating.add(x, x, "f32x2")
    assert list((r & np.uint64(0xFFFFFFFF)).astype(np.uint32).view(np.float32)) == [2.0, 4.0]
    assert list((r >> np.uint64(32)).astype(np.uint32).view(np.float32)) == [6.0, np.inf]


def test_fma_f32_no_double_rounding_at_midpoints():
    # a*b = 1 + 2**-11 + 2**-24 is exactly halfway between two floats; a tiny c decides the direction,
    # which a float64 sum followed by a float32 cast would lose (ties-to-even would round down).
    a = np.array([1 + 2.0 ** -12] * 4, np.float32).view(np.uint32)
    c = np.array([2.0 ** -80, -(2.0 ** -80), 0.0, 2.0 ** -149], np.float32).view(np.uint32)
    got = floating.fma(a, a, c, "f32")
    for ci, g in zip(c, got, strict=True):
        exact = Fraction(1 + 2.0 ** -12) ** 2 + Fraction(float(np.array(ci).view(np.float32)))
        assert int(g) == ref_round(exact, "f32", "rn")
    assert int(got[0]) == int(got[2]) + 1


def test_mixed_precision_and_f64_rcp():
    h = np.array([1.5, -2.0, 6e-8], np.float16).view(np.uint16)
    c = np.array([0.25, 2.0 ** -30, 1.0], np.float32).view(np.uint32)
    got = floating.add_mixed(h, c, "f16").view(np.float32)
    assert list(got) == [1.75, np.float32(-2.0 + 2.0 ** -30), np.float32(1.0 + float(np.float16(6e-8)))]
    bf = np.array([0x3FC0], np.uint16)  # 1.5 in bf16
    got = floating.fma_mixed(bf, bf, np.array([0.5], np.float32).view(np.uint32), "bf16")
    assert got.view(np.float32)[0] == 2.75
    assert floating.sub_mixed(bf, np.array([1.5], np.float32).view(np.uint32), "bf16")[0] == 0
    x = np.array([3.0, -7.0, 1e-310, 1e308, 0.0]).view(np.uint64)
    one = np.full_like(x, np.array([1.0]).view(np.uint64)[0])
    for rnd in RNDS:
        _check("div", (one, x), rnd, "f64", floating.rcp(x, "f64", rnd=rnd))


def test_f64_div_directed_of_a_huge_dividend():
    """x near the largest double over a moderate y: the quotient's remainder check must not overflow (it
    returned the round-to-nearest quotient in every mode)."""
    x = np.array([0x7FEFFFFFFFFFFFFF, 0xFFEFFFFFFFFFFFFF, 0x7FE0000000000001], np.uint64)
    y = np.array([0x47EFFFFFE0000000, 0x47EFFFFFE0000000, 0x4008000000000000], np.uint64)
    for rnd in RNDS:
        _check("div", (x, y), rnd, "f64", floating.div(x, y, "f64", rnd=rnd))
    assert floating.div(x[:1], y[:1], "f64", rnd="rz")[0] == 0x77F000001000000F


def test_f64_fma_special_operands():
    d = lambda *v: np.array(v, np.float64).view(np.uint64)  # noqa: E731
    big = 2.0 ** 600
    # a*b overflows float64 but is finite exactly: with c = -inf the result is -inf, not NaN
    got = floating.fma(d(big, big, 0.0, np.inf, 2.0), d(big, -big, np.inf, 0.0, 3.0),
                       d(-np.inf, 1.0, 1.0, 1.0, np.nan), "f64").view(np.float64)
    assert got[0] == -np.inf and got[1] == -np.inf and np.isnan(got[2]) and np.isnan(got[3])
    assert np.isnan(got[4])
    for rnd, exp in (("rn", np.inf), ("rz", np.finfo(np.float64).max), ("rm", np.finfo(np.float64).max),
                     ("rp", np.inf)):
        assert floating.fma(d(big), d(big), d(1.0), "f64", rnd=rnd).view(np.float64)[0] == exp


@settings(max_examples=150, deadline=None)
@given(finite32, finite32, st.sampled_from(RNDS), st.sampled_from(["f32", "f64"]))
def test_hypothesis_div_directed(a, b, rnd, fmt):
    dt, ut = (np.float32, np.uint32) if fmt == "f32" else (np.float64, np.uint64)
    xs = [np.array([v], dt).view(ut) for v in (a, b)]
    _check("div", xs, rnd, fmt, floating.div(*xs, ty=fmt, rnd=rnd))
