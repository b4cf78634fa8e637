"""wgmma.mma_async forms from real nvcc PTX (tests/corpus/src/cuda/wgmma_variants_sm90a.cu) on the emulator:
f16 accumulators, tf32 inputs, s8/u8 integer with and without .satfinite, 8-bit A in registers.

Integer results are checked exactly. Floating-point results are checked against a float64 reference with the
tolerance of the accumulator type, and bit for bit against an independent model of the rounding the emulator
documents: the exact sum (Python fractions) rounded once to nearest-even into .f32 / .f16, .tf32 inputs with
their low 13 bits dropped.
"""

from fractions import Fraction

import ml_dtypes
import numpy as np
import pytest
from emu_corpus import corpus_module

import ptxforge as pf
from ptxforge.emu.errors import UnsupportedInstruction
from ptxforge.emu.semantics.mma import FP8_WGMMA_BITS, dot_tensor_core

rng = np.random.default_rng(90)
F16 = (11, -14)   # significand bits, minimum normal exponent
F32 = (24, -126)


def kernel(name, flavor="sm_90a.O3"):
    return corpus_module("wgmma_variants_sm90a", flavor).kernel(name)


def run(name, *args, flavor="sm_90a.O3"):
    kernel(name, flavor).launch(grid=1, block=128, args=list(args), device="emu")


def round_rn(x: Fraction, fmt) -> float:
    """x rounded to nearest-even with `fmt`'s significand (subnormals below its minimum normal exponent)."""
    if x == 0:
        return 0.0
    bits, emin = fmt
    e = abs(x.numerator).bit_length() - x.denominator.bit_length()
    while Fraction(2) ** e > abs(x):
        e -= 1
    while Fraction(2) ** (e + 1) <= abs(x):
        e += 1
    q = Fraction(2) ** (max(e, emin) - (bits - 1))
    return float(round(x / q) * q)   # round() on a Fraction breaks ties to even


def tensor_core(A, B, C, f16=False, **kw):
    """A @ B + C into f32 (or f16) as the tensor cores sum it (fitted to an H200; see semantics/mma.py)."""
    from ptxforge.emu.semantics.formats import F16 as F16_FORMAT

    codes = dot_tensor_core(np.asarray(A, np.float64), np.asarray(B, np.float64), np.asarray(C, np.float64),
                            **kw, **({"out": F16_FORMAT} if f16 else {}))
    return codes.astype(np.uint16).view(np.float16) if f16 else codes.astype(np.uint32).view(np.float32)


def model(A, B, C, fmt):
    """RN(A @ B + C) computed exactly, element by element, from float64-exact inputs."""
    Af = [[Fraction(float(v)) for v in row] for row in A]
    Bf = [[Fraction(float(v)) for v in col] for col in B.T]
    out = np.zeros(C.shape)
    for i, arow in enumerate(Af):
        for j, bcol in enumerate(Bf):
            out[i, j] = round_rn(sum((a * b for a, b in zip(arow, bcol, strict=True)), Fraction(float(C[i, j]))), fmt)
    return out


def tf32(x):
    """The value a tf32 operand takes from 32-bit data: the low 13 bits dropped."""
    return (np.asarray(x, np.float32).view(np.uint32) & np.uint32(0xFFFFE000)).view(np.float32)


def f16_close(D, ref):
    """|D - ref| within half an f16 ulp of ref (plus half the smallest subnormal)."""
    ulp = np.spacing(np.abs(ref).astype(np.float16)).astype(np.float64)
    assert np.all(np.abs(D.astype(np.float64) - ref) <= 0.5 * ulp + 2.0 ** -25)


@pytest.mark.parametrize("ty, k", [(".f16", 16), (".bf16", 16), (".tf32", 8), (".e4m3", 32), (".u8", 32)])
def test_fragment_coordinates_cover_each_element_once(ty, k):
    from ptxforge.emu.semantics import mma as S

    r, c = S.wgmma_a_coords(ty)
    assert r.shape == (128, 64 * k // 128)
    assert sorted(zip(r.ravel(), c.ravel(), strict=True)) == [(i, j) for i in range(64) for j in range(k)]
    for n in (8, 24, 256):
        r, c = S.wgmma_d_coords(n)
        assert sorted(zip(r.ravel(), c.ravel(), strict=True)) == [(i, j) for i in range(64) for j in range(n)]


# ---------------------------------------------------------------- f16 accumulators


@pytest.mark.parametrize("use_c", [1, 0])
def test_f16_accumulator_f16_inputs(use_c):
    """.f16.f16.f16 m64n16k16 from shared memory, imm-scale-b = -1: D = A @ (-B) + C in f16."""
    A = rng.standard_normal((64, 16)).astype(np.float16)
    B = rng.standard_normal((16, 16)).astype(np.float16)
    C = rng.standard_normal((64, 16)).astype(np.float16)
    D = np.zeros((64, 16), np.float16)
    run("wgmma_f16acc_m64n16k16", A, np.ascontiguousarray(B.T), C, D, np.int32(use_c))
    Cr = C.astype(np.float64) if use_c else np.zeros((64, 16))
    ref = A.astype(np.float64) @ -B.astype(np.float64) + Cr
    f16_close(D, ref)
    np.testing.assert_array_equal(D, model(A, -B.astype(np.float64), Cr, F16).astype(np.float16))


@pytest.mark.parametrize("flavor", ["sm_90a.O3", "sm_90a.G"])
def test_f16_accumulator_a_registers_n_major_b(flavor):
    """.f16.f16.f16 with A in registers and B read N-major (imm-trans-b = 1) from the no-swizzle layout whose
    K groups sit at the leading byte offset and N chunks at the stride byte offset."""
    A = rng.standard_normal((64, 16)).astype(np.float16)
    B = rng.standard_normal((16, 16)).astype(np.float16)
    D = np.zeros((64, 16), np.float16)
    run("wgmma_f16acc_m64n16k16_rs_tb", A, B, D, flavor=flavor)
    ref = A.astype(np.float64) @ B.astype(np.float64)
    f16_close(D, ref)
    np.testing.assert_array_equal(D, model(A, B, np.zeros((64, 16)), F16).astype(np.float16))


def test_f16_accumulator_e4m3_inputs():
    A = rng.standard_normal((64, 32)).astype(ml_dtypes.float8_e4m3fn)
    B = rng.standard_normal((32, 16)).astype(ml_dtypes.float8_e4m3fn)
    C = rng.standard_normal((64, 16)).astype(np.float16)
    D = np.zeros((64, 16), np.float16)
    run("wgmma_f16acc_e4m3_m64n16k32", A, np.ascontiguousarray(B.T), C, D, np.int32(1))
    Af, Bf = A.astype(np.float64), B.astype(np.float64)
    terms = np.abs(Af) @ np.abs(Bf) + np.abs(C.astype(np.float64))  # fp8 sums keep 13 bits, then f16 rounding
    exact = Af @ Bf + C
    assert np.all(np.abs(D - exact) <= 2.0 ** -(FP8_WGMMA_BITS - 6) * terms + np.spacing(np.abs(D)))
    np.testing.assert_array_equal(D, tensor_core(Af, Bf, C, f16=True, block=32, bits=FP8_WGMMA_BITS))


def test_f16_accumulator_e5m2_a_registers_mixed():
    """.f16.e5m2.e4m3 with A (e5m2) in registers, imm-scale-a = -1."""
    A = rng.standard_normal((64, 32)).astype(ml_dtypes.float8_e5m2)
    B = rng.standard_normal((32, 8)).astype(ml_dtypes.float8_e4m3fn)
    C = rng.standard_normal((64, 8)).astype(np.float16)
    D = np.zeros((64, 8), np.float16)
    run("wgmma_f16acc_e5m2_e4m3_m64n8k32_rs", A, np.ascontiguousarray(B.T), C, D, np.int32(1))
    Af, Bf = -A.astype(np.float64), B.astype(np.float64)
    terms = np.abs(Af) @ np.abs(Bf) + np.abs(C.astype(np.float64))  # fp8 sums keep 13 bits, then f16 rounding
    exact = Af @ Bf + C
    assert np.all(np.abs(D - exact) <= 2.0 ** -(FP8_WGMMA_BITS - 6) * terms + np.spacing(np.abs(D)))
    np.testing.assert_array_equal(D, tensor_core(Af, Bf, C, f16=True, block=32, bits=FP8_WGMMA_BITS))


def test_f16_accumulator_rounds_once():
    """The f16-accumulator result is the exact sum rounded once: 1 + 2^-11 (a tie) + 2^-24 rounds up to
    1 + 2^-10, where rounding each partial sum to f16 would first drop the 2^-24 and tie down to 1 (an H200
    gives 1 + 2^-10 too)."""
    A = np.zeros((64, 16), np.float16)
    B = np.zeros((16, 16), np.float16)
    A[:, 0], A[:, 1], A[:, 2] = 1.0, 2.0 ** -11, 2.0 ** -12
    B[0, :], B[1, :], B[2, :] = -1.0, -1.0, -2.0 ** -12   # imm-scale-b = -1 negates B back
    C = np.zeros((64, 16), np.float16)
    D = np.zeros((64, 16), np.float16)
    run("wgmma_f16acc_m64n16k16", A, np.ascontiguousarray(B.T), C, D, np.int32(0))
    assert np.all(D == np.float16(1 + 2.0 ** -10))


# ---------------------------------------------------------------- tf32


@pytest.mark.parametrize("use_c", [1, 0])
def test_tf32_shared_memory(use_c):
    A = rng.standard_normal((64, 8)).astype(np.float32)
    B = rng.standard_normal((8, 16)).astype(np.float32)
    C = rng.standard_normal((64, 16)).astype(np.float32)
    D = np.zeros((64, 16), np.float32)
    run("wgmma_tf32_m64n16k8", A, np.ascontiguousarray(B.T), C, D, np.int32(use_c))
    Cr = C.astype(np.float64) if use_c else np.zeros((64, 16))
    At, Bt = tf32(A).astype(np.float64), tf32(B).astype(np.float64)
    exact_inputs = At @ Bt + Cr
    terms = np.abs(At) @ np.abs(Bt) + np.abs(Cr)
    assert np.all(np.abs(D - exact_inputs) <= 2.0 ** -21 * terms)
    # against the untruncated inputs: each operand is off by up to 2^-10 of itself
    bound = 2 * 2.0 ** -10 * (np.abs(A).astype(np.float64) @ np.abs(B)) + 2.0 ** -21 * terms
    assert np.all(np.abs(D - (A.astype(np.float64) @ B + Cr)) <= bound)
    np.testing.assert_array_equal(D, tensor_core(At, Bt, Cr))
    assert not np.array_equal(D, tensor_core(A, B, Cr))  # the input truncation is visible


def test_tf32_a_registers_negated():
    """.f32.tf32.tf32 m64n8k8 with A in registers and imm-scale-a = -1."""
    A = rng.standard_normal((64, 8)).astype(np.float32)
    B = rng.standard_normal((8, 8)).astype(np.float32)
    C = rng.standard_normal((64, 8)).astype(np.float32)
    D = np.zeros((64, 8), np.float32)
    run("wgmma_tf32_m64n8k8_rs", A, np.ascontiguousarray(B.T), C, D, np.int32(1))
    At, Bt = -tf32(A).astype(np.float64), tf32(B).astype(np.float64)
    assert np.all(np.abs(D - (At @ Bt + C)) <= 2.0 ** -21 * (np.abs(At) @ np.abs(Bt) + np.abs(C)))
    np.testing.assert_array_equal(D, tensor_core(At, Bt, C))


# ---------------------------------------------------------------- integer


def _int_inputs(at, bt, k, n):
    lo = {"s8": (-128, 128), "u8": (0, 256)}
    A = rng.integers(*lo[at], (64, k)).astype(np.int8 if at == "s8" else np.uint8)
    B = rng.integers(*lo[bt], (k, n)).astype(np.int8 if bt == "s8" else np.uint8)
    C = rng.integers(-2**31, 2**31, (64, n))
    C[::3] = 2**31 - 1 - rng.integers(0, 2000, C[::3].shape)      # sums near INT32_MAX and INT32_MIN overflow
    C[1::3] = -2**31 + rng.integers(0, 2000, C[1::3].shape)
    return A, B, C.astype(np.int32)


@pytest.mark.parametrize("at, bt", [("s8", "s8"), ("u8", "u8"), ("s8", "u8"), ("u8", "s8")])
def test_integer_wrap_and_satfinite(at, bt):
    A, B, C = _int_inputs(at, bt, 32, 16)
    D, Ds = np.zeros((64, 16), np.int32), np.zeros((64, 16), np.int32)
    run(f"wgmma_s32_{at}{bt}_m64n16k32", A, np.ascontiguousarray(B.T), C, D, Ds)
    exact = A.astype(np.int64) @ B.astype(np.int64) + C
    np.testing.assert_array_equal(D, exact.astype(np.uint64).astype(np.uint32).view(np.int32))
    np.testing.assert_array_equal(Ds, np.clip(exact, -2**31, 2**31 - 1))
    assert (D != Ds).any()   # some sums overflowed


@pytest.mark.parametrize("use_c", [1, 0])
def test_integer_a_registers(use_c):
    """.s32.s8.u8 m64n8k32 with A (s8) in registers, wrapping and .satfinite."""
    A, B, C = _int_inputs("s8", "u8", 32, 8)
    D, Ds = np.zeros((64, 8), np.int32), np.zeros((64, 8), np.int32)
    run("wgmma_s32_s8u8_m64n8k32_rs", A, np.ascontiguousarray(B.T), C, D, Ds, np.int32(use_c))
    exact = A.astype(np.int64) @ B.astype(np.int64) + (C if use_c else 0)
    np.testing.assert_array_equal(D, exact.astype(np.uint64).astype(np.uint32).view(np.int32))
    np.testing.assert_array_equal(Ds, np.clip(exact, -2**31, 2**31 - 1))


# ---------------------------------------------------------------- 8-bit float A in registers, f32 accumulators


def test_e4m3_a_registers_f32():
    A = rng.standard_normal((64, 32)).astype(ml_dtypes.float8_e4m3fn)
    B = rng.standard_normal((32, 16)).astype(ml_dtypes.float8_e5m2)
    C = rng.standard_normal((64, 16)).astype(np.float32)
    D = np.zeros((64, 16), np.float32)
    run("wgmma_e4m3_e5m2_m64n16k32_rs", A, np.ascontiguousarray(B.T), C, D, np.int32(1))
    Af, Bf = A.astype(np.float64), B.astype(np.float64)
    # fp8 wgmma keeps about 13 bits below the largest term (DeepSeek-V3: "about 14 bits")
    terms = np.abs(Af) @ np.abs(Bf) + np.abs(C)
    assert np.all(np.abs(D - (Af @ Bf + C)) <= 2.0 ** -(FP8_WGMMA_BITS - 6) * terms)
    np.testing.assert_array_equal(D, tensor_core(Af, Bf, C, block=32, bits=FP8_WGMMA_BITS))


# ---------------------------------------------------------------- forms that are refused


HEAD = ".version 8.4\n.target sm_90a\n.address_size 64\n"


@pytest.mark.parametrize("body, message", [
    ("wgmma.mma_async.sync.aligned.m64n8k256.s32.b1.b1.and.popc {%r0,%r1,%r2,%r3}, %rd0, %rd1, 1;", ".b1"),
    ("wgmma.mma_async.sync.aligned.m64n8k16.f32.tf32.tf32 {%r0,%r1,%r2,%r3}, %rd0, %rd1, 1, 1, 1;", "K = 8"),
    ("wgmma.mma_async.sync.aligned.m64n8k8.f32.tf32.tf32 {%r0,%r1,%r2,%r3}, %rd0, %rd1, 1, 1, 1, 0, 1;",
     "expected 2 immediate"),
    ("wgmma.mma_async.sync.aligned.m64n8k16.f32.f16.f16 %r0, %rd0, %rd1, 1, 1, 1, 0, 0;",
     r"D needs a vector of 4 registers, got %r0"),
])
def test_unsupported_forms_raise(body, message):
    src = HEAD + (".visible .entry k() {\n.reg .b32 %r<4>;\n.reg .b64 %rd<2>;\n"
                  "mov.b64 %rd0, 0;\nmov.b64 %rd1, 0;\n" + body + "\nret;\n}\n")
    k = pf.parse(src).kernel("k")
    with pytest.raises(UnsupportedInstruction, match=message):
        k.launch(grid=1, block=128, args=[], device="emu")
