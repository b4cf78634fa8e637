"""Approximate transcendental instructions: ex2, lg2, rcp, rsqrt, sqrt, sin, cos, tanh `.approx`.

The emulator evaluates each function in float64 and rounds once to the destination format, so every
result is within half an ulp of the exact value: inside every error bound the PTX manual states
(ex2 2 ulp, lg2 2**-22 abs/rel, rcp 1 ulp, rsqrt 2**-22.9 rel, sqrt 2**-23 rel, sin/cos 2**-20.5 abs,
tanh 2**-11 rel; f16 ex2 2**-9.9, bf16 ex2 2**-7 rel). Special inputs follow the manual's tables
(float64 IEEE semantics give exactly those). Hardware results may differ in the last bits; no
program may rely on them. NaN results are canonical.

ex2, lg2, sin, cos and tanh are the C library's float64 functions (what Python's math module calls), so the
native tier, which calls the same functions, gives the same bits. numpy's own function stands in where it
gives the C library's bits on a probe set (it calls the C library, or is as exact); numpy builds with SIMD
code of their own (exp2 and tanh on AVX-512 machines) are bypassed, element by element.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Callable

import numpy as np

from . import _types as T
from .formats import BF16, F16, F32, encode
from .half import f64_to_bf16_rn, ftz16

LIBM = {"ex2": "exp2", "lg2": "log2", "sin": "sin", "cos": "cos", "tanh": "tanh"}  # op -> C function
_NUMPY: dict[str, Callable[[np.ndarray], np.ndarray]] = {
    "ex2": np.exp2, "lg2": np.log2, "sin": np.sin, "cos": np.cos, "tanh": np.tanh}


def _domain(op: str, x: np.ndarray) -> np.ndarray:
    """Where the math module's function returns a value (elsewhere it raises; numpy and the C library agree
    there exactly: inf, -inf, 0 or NaN)."""
    if op == "ex2":
        return x < 1024.0
    if op == "lg2":
        return (x > 0.0) & np.isfinite(x)
    return np.isfinite(x)


def _probe_inputs() -> np.ndarray:
    """f32 inputs (as float64) to compare numpy with the C library on: edge values, every power of two, random
    bits."""
    rng = np.random.default_rng(2029)
    bits = np.concatenate([
        np.array([0, 1, 0x007FFFFF, 0x00800000, 0x3F800000, 0x3F800001, 0x3F7FFFFF, 0x7F7FFFFF, 0x42FE0000,
                  0x43000000, 0xC3150000, 0xC3160000, 0x40490FDB, 0x3FC90FDB, 0x4B800000, 0x7F800000],
                 np.uint32),
        (np.arange(1, 255, dtype=np.uint32) << 23),
        rng.integers(0, 1 << 32, 4096, dtype=np.uint64).astype(np.uint32)])
    bits = np.concatenate([bits, bits | np.uint32(1 << 31)])
    with np.errstate(invalid="ignore"):  # (signaling NaN bits among the random ones)
        x = bits.view(np.float32).astype(np.float64)
    return x[np.isfinite(x)]


def _by_element(op: str, x: np.ndarray) -> np.ndarray:
    """The C library's function of every element (numpy's outside the math module's domain)."""
    with np.errstate(all="ignore"):
        y = np.asarray(_NUMPY[op](x), np.float64)
    ok = _domain(op, x)
    if ok.any():
        y[ok] = np.frompyfunc(getattr(math, LIBM[op]), 1, 1)(x[ok]).astype(np.float64)
    return y


@functools.cache
def numpy_is_libm(op: str) -> bool:
    """numpy's float64 function for `op` gives the C library's bits on the probe inputs."""
    x = _probe_inputs()
    with np.errstate(all="ignore"):
        want = _NUMPY[op](x)
    got = _by_element(op, x)
    return bool(((want.view(np.uint64) == got.view(np.uint64)) | (np.isnan(want) & np.isnan(got))).all())


@functools.cache
def c_library(op: str) -> Callable[[np.ndarray], np.ndarray]:
    """The C library's float64 function for `op` (ex2 lg2 sin cos tanh) over an array: numpy's where it gives
    the same bits, otherwise element by element through the math module."""
    return _NUMPY[op] if numpy_is_libm(op) else functools.partial(_by_element, op)


_FUNCS: dict[str, Callable[[np.ndarray], np.ndarray]] = {
    "ex2": lambda x: c_library("ex2")(x),
    "lg2": lambda x: c_library("lg2")(x),
    "rcp": lambda x: 1.0 / x,
    "rsqrt": lambda x: 1.0 / np.sqrt(x),
    "sqrt": np.sqrt,
    "sin": lambda x: c_library("sin")(x),
    "cos": lambda x: c_library("cos")(x),
    "tanh": lambda x: c_library("tanh")(x),
}


def _flush32(b):
    return np.where((b & np.uint32(0x7F800000)) == 0, b & np.uint32(0x80000000), b).astype(np.uint32)


def _f32(fn, a, ftz):
    b = T.raw(a, 32)
    if ftz:
        b = _flush32(b)
    x = b.view(np.float32).astype(np.float64)
    with np.errstate(all="ignore"):
        y = fn(x)
    r = encode(y, F32, "rn")
    if ftz:
        r = _flush32(r)
    return r


def _half(fn, a, fmt, ftz):
    b = T.raw(a, 16)
    if ftz:
        b = ftz16(b, fmt)
    x = b.view(np.float16).astype(np.float64) if fmt is F16 else \
        (b.astype(np.uint32) << np.uint32(16)).view(np.float32).astype(np.float64)
    with np.errstate(all="ignore"):
        y = fn(x)
        r = y.astype(np.float16).view(np.uint16) if fmt is F16 else f64_to_bf16_rn(y)
    nan = np.isnan(y)
    r = np.where(nan, np.uint16(0x7FFF), r).astype(np.uint16)
    if ftz:
        r = ftz16(r, fmt)
    return r


def approx(op: str, a: T.Bits, ty: str = "f32", ftz: bool = False) -> np.ndarray:
    """op.approx{.ftz}.type for op in ex2 lg2 rcp rsqrt sqrt sin cos tanh; ty f32, f16(x2), bf16(x2), f64
    (f64: rcp and rsqrt only; their .ftz forms map NaN to 0x7fffffff00000000)."""
    try:
        fn = _FUNCS[op]
    except KeyError:
        raise ValueError(f"unknown approximate op {op!r}; expected one of {sorted(_FUNCS)}") from None
    t = T.norm(ty)
    if t == "f32":
        return _f32(fn, a, ftz)
    if t == "f64":
        if op not in ("rcp", "rsqrt"):
            raise ValueError(f"{op}.approx has no .f64 form")
        b = T.raw(a, 64)
        if ftz:
            b = np.where((b & np.uint64(0x7FF0000000000000)) == 0, b & np.uint64(1 << 63), b).astype(np.uint64)
        x = b.view(np.float64)
        with np.errstate(all="ignore"):
            r = fn(x).view(np.uint64)
        nan = np.isnan(r.view(np.float64))
        r = np.where(nan, np.uint64(0x7FFFFFFF00000000 if ftz else 0x7FFFFFFFFFFFFFFF), r)
        if ftz:
            r = np.where((r & np.uint64(0x7FF0000000000000)) == 0, r & np.uint64(1 << 63), r)
        return r.astype(np.uint64)
    if t in ("f16", "bf16", "f16x2", "bf16x2"):
        if op not in ("ex2", "tanh"):
            raise ValueError(f"{op}.approx has no .{t} form")
        fmt = F16 if t.startswith("f16") else BF16
        if t.endswith("x2"):
            lo, hi = T.split16(a)
            return T.pack16(_half(fn, lo, fmt, ftz), _half(fn, hi, fmt, ftz))
        return _half(fn, a, fmt, ftz)
    raise ValueError(f"{op}.approx on .{t} is not a PTX instruction")


def ex2(a: T.Bits, ty: str = "f32", ftz: bool = False) -> np.ndarray:
    return approx("ex2", a, ty, ftz)


def lg2(a: T.Bits, ty: str = "f32", ftz: bool = False) -> np.ndarray:
    return approx("lg2", a, ty, ftz)


def rsqrt(a: T.Bits, ty: str = "f32", ftz: bool = False) -> np.ndarray:
    return approx("rsqrt", a, ty, ftz)


def sin(a: T.Bits, ty: str = "f32", ftz: bool = False) -> np.ndarray:
    return approx("sin", a, ty, ftz)


def cos(a: T.Bits, ty: str = "f32", ftz: bool = False) -> np.ndarray:
    return approx("cos", a, ty, ftz)


def tanh(a: T.Bits, ty: str = "f32", ftz: bool = False) -> np.ndarray:
    return approx("tanh", a, ty, ftz)


T.quiet_functions(globals())
