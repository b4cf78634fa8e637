"""Approximate transcendentals within the manual's error bounds; atom/red value operations."""

from __future__ import annotations

import math
from fractions import Fraction

import ml_dtypes
import numpy as np
import pytest

from ptxforge.emu.semantics import approx, atomic, floating

pytestmark = pytest.mark.filterwarnings("ignore::RuntimeWarning")


def _f(*v):
    return np.array(v, np.float32).view(np.uint32)


def _ulp32(x):
    return np.spacing(np.abs(np.float32(x))).astype(np.float64)


def test_error_bounds_f32():
    rng = np.random.default_rng(0)
    x = np.concatenate([rng.uniform(-60, 60, 3000), rng.uniform(-2 * math.pi, 2 * math.pi, 3000)]).astype(np.float32)
    pos = np.abs(x) + np.float32(1e-3)
    xs = x.astype(np.float64)
    got = approx.ex2(x.view(np.uint32)).view(np.float32).astype(np.float64)
    ref = np.exp2(xs)
    assert np.all(np.abs(got - ref) <= 2 * _ulp32(ref))                     # 2 ulp
    got = approx.lg2(pos.view(np.uint32)).view(np.float32).astype(np.float64)
    ref = np.log2(pos.astype(np.float64))
    inside = (pos > 0.5) & (pos < 2)
    assert np.all(np.abs(got - ref)[inside] <= 2.0 ** -22)                   # absolute in (0.5, 2)
    assert np.all((np.abs(got - ref) <= 2.0 ** -22 * np.abs(ref))[~inside])  # relative elsewhere
    got = approx.rsqrt(pos.view(np.uint32)).view(np.float32).astype(np.float64)
    ref = 1 / np.sqrt(pos.astype(np.float64))
    assert np.all(np.abs(got - ref) <= 2.0 ** -22.9 * ref)
    small = (np.abs(xs) <= 2 * math.pi)
    for fn, rf in ((approx.sin, np.sin), (approx.cos, np.cos)):
        got = fn(x.view(np.uint32)).view(np.float32).astype(np.float64)
        err = np.abs(got - rf(xs))
        assert np.all(err[small] <= 2.0 ** -20.5) and np.all(err <= 2.0 ** -14.7)
    got = approx.tanh(x.view(np.uint32)).view(np.float32).astype(np.float64)
    assert np.all(np.abs(got - np.tanh(xs)) <= 2.0 ** -11 * np.abs(np.tanh(xs)) + 1e-300)
    got = floating.rcp(x.view(np.uint32), "f32", rnd="approx").view(np.float32).astype(np.float64)
    assert np.all(np.abs(got - 1 / xs) <= _ulp32(1 / xs))
    got = floating.sqrt(pos.view(np.uint32), "f32", rnd="approx").view(np.float32).astype(np.float64)
    assert np.all(np.abs(got - np.sqrt(pos.astype(np.float64))) <= 2.0 ** -23 * np.sqrt(pos.astype(np.float64)))


def test_special_value_tables():
    inp = _f(-np.inf, -0.0, 0.0, np.inf, np.nan)
    tables = {
        "ex2": [0.0, 1.0, 1.0, np.inf, np.nan], "lg2": [np.nan, -np.inf, -np.inf, np.inf, np.nan],
        "rsqrt": [np.nan, -np.inf, np.inf, 0.0, np.nan], "sin": [np.nan, -0.0, 0.0, np.nan, np.nan],
        "cos": [np.nan, 1.0, 1.0, np.nan, np.nan], "tanh": [-1.0, -0.0, 0.0, 1.0, np.nan],
    }
    for op, exp in tables.items():
        got = approx.approx(op, inp).view(np.float32)
        for g, e in zip(got, exp, strict=False):
            if np.isnan(e):
                assert np.isnan(g)
            else:
                assert g == e and np.signbit(g) == np.signbit(e), (op, g, e)
        assert np.all(approx.approx(op, _f(np.nan)) == 0x7FFFFFFF)
    sq = floating.sqrt(_f(-np.inf, -1.0, -0.0, 0.0, np.inf), "f32", rnd="approx").view(np.float32)
    assert np.isnan(sq[0]) and np.isnan(sq[1]) and np.signbit(sq[2]) and sq[4] == np.inf
    rc = floating.rcp(_f(-np.inf, -0.0, 0.0, np.inf), "f32", rnd="approx").view(np.float32)
    assert list(rc) == [-0.0, -np.inf, np.inf, 0.0] and np.signbit(rc[0])
    # ftz: subnormal input behaves as zero
    assert approx.lg2(_f(1e-40), ftz=True).view(np.float32)[0] == -np.inf
    assert approx.tanh(_f(1e-40)).view(np.float32)[0] == np.float32(1e-40)  # passes through


def test_half_and_f64_forms():
    h = np.array([0.5, -3.0, 10.0, -np.inf, np.nan], np.float16)
    got = approx.ex2(h.view(np.uint16), "f16").view(np.float16).astype(np.float64)
    ref = np.exp2(h.astype(np.float64))
    ok = np.isnan(ref) | (np.abs(got - ref) <= 2.0 ** -9.9 * np.abs(ref))
    assert ok.all()
    bf = np.array([0.5, -3.0, 1e-39], ml_dtypes.bfloat16)
    got = approx.ex2(bf.view(np.uint16), "bf16", ftz=True).view(ml_dtypes.bfloat16).astype(np.float64)
    assert abs(got[0] - 2 ** 0.5) <= 2.0 ** -7 * 2 ** 0.5 and got[2] == 1.0
    packed = np.array([0x3C00BC00], np.uint32)
    t = approx.tanh(packed, "f16x2")
    assert (int(t[0]) & 0xFFFF) == int(np.float16(np.tanh(-1.0)).view(np.uint16))
    d = np.array([4.0, np.nan, 5e-324], np.float64).view(np.uint64)
    r = approx.approx("rcp", d, "f64", ftz=True)
    assert r[0] == np.array([0.25]).view(np.uint64)[0] and r[1] == 0x7FFFFFFF00000000
    assert r[2] == 0x7FF0000000000000  # subnormal input flushed -> 1/+0


def test_atomic_integer_ops():
    old = np.array([5, 0, 10, 0xFFFFFFFF, 7], np.uint32)
    b = np.array([5, 3, 3, 1, 9], np.uint32)
    assert list(atomic.apply("inc", old, b, "u32")) == [0, 1, 0, 0, 8]
    assert list(atomic.apply("dec", old, b, "u32")) == [4, 3, 3, 1, 6]
    assert list(atomic.apply("add", old, b, "u32")) == [10, 3, 13, 0, 16]
    assert list(atomic.apply("min", old, b, "s32")) == [5, 0, 3, 0xFFFFFFFF, 7]
    assert list(atomic.apply("max", old, b, "u32")) == [5, 3, 10, 0xFFFFFFFF, 9]
    assert list(atomic.apply("cas", old, b, "b32", c=np.full(5, 42, np.uint32))) == [42, 0, 10, 0xFFFFFFFF, 7]
    assert list(atomic.apply("exch", old, b, "b32")) == list(b)
    assert list(atomic.apply("xor", old, b, "b32")) == [int(x) ^ int(y) for x, y in zip(old, b, strict=False)]
    o64 = np.array([2**63, 5], np.uint64)
    assert list(atomic.apply("min", o64, np.array([1, 2], np.uint64), "s64")) == [2**63, 2]
    assert list(atomic.apply("add", o64, np.array([2**63, 1], np.uint64), "u64")) == [0, 6]
    o128 = np.array([[1, 2], [3, 4]], np.uint64)
    got = atomic.apply("cas", o128, np.array([[1, 2], [3, 5]], np.uint64), "b128",
                       c=np.array([[9, 9], [8, 8]], np.uint64))
    assert got.tolist() == [[9, 9], [3, 4]]
    assert atomic.apply("exch", o128, o128[::-1], "b128").tolist() == [[3, 4], [1, 2]]
    b16 = np.array([0x1234], np.uint16)
    assert atomic.apply("cas", b16, b16, "b16", c=np.array([7], np.uint16))[0] == 7


def test_atomic_float_adds():
    sub = _f(1e-40)
    assert atomic.apply("add", sub, sub, "f32", space="global")[0] == 0           # flushed on global
    assert atomic.apply("add", sub, sub, "f32", space="shared").view(np.float32)[0] == np.float32(1e-40) * 2
    x = np.array([0.1, 1e300]).view(np.uint64)
    got = atomic.apply("add", x, x, "f64").view(np.float64)
    assert got[0] == 0.2 and got[1] == 2e300
    h = np.array([1.0, 6e-8], np.float16).view(np.uint16)
    got = atomic.apply("add", h, h, "f16").view(np.float16)
    assert got[0] == 2.0 and got[1] == np.float16(6e-8) * 2                      # .noftz keeps subnormals
    bf2 = np.array([0x3F804000], np.uint32)                                      # (2.0, 1.0) bf16x2
    assert atomic.apply("add", bf2, bf2, "bf16x2")[0] == 0x40004080
    assert atomic.apply("max", np.array([0xBC00], np.uint16), np.array([0x3C00], np.uint16), "f16")[0] == 0x3C00
    r = atomic.apply("add", _f(1.0), _f(2.0 ** -24 + 2.0 ** -40), "f32")
    assert int(r[0]) == int(_f(float(np.float32(1.0) + np.float32(2.0 ** -24 + 2.0 ** -40)))[0])
    assert Fraction(float(r.view(np.float32)[0])) == 1 + Fraction(2) ** -23  # rounds to nearest


@pytest.mark.parametrize("op", ["ex2", "lg2", "sin", "cos", "tanh"])
def test_f32_transcendentals_are_the_c_librarys_rounded_once(op):
    """Whatever numpy's build does (its AVX-512 exp2 and its tanh are SIMD code of their own), the interpreter
    gives the C library's float64 function rounded once to f32: the bits the native tier computes."""
    rng = np.random.default_rng(5)
    bits = np.concatenate([rng.integers(0, 1 << 32, 4000, dtype=np.uint64).astype(np.uint32),
                           _f(0.0, -0.0, 1.0, -1.0, 127.5, 128.0, -150.0, 1e30, -1e30, np.inf, -np.inf)])
    fn = getattr(math, approx.LIBM[op])
    want = []
    for v in bits.view(np.float32).astype(np.float64):
        try:
            y = fn(v)
        except (ValueError, OverflowError):
            y = {"ex2": math.inf, "lg2": -math.inf if v == 0 else math.nan}.get(op, math.nan)
        want.append(np.float32(y).view(np.uint32) if not math.isnan(y) else np.uint32(0x7FFFFFFF))
    got = approx.approx(op, bits, "f32")
    assert np.array_equal(got, np.array(want, np.uint32))
