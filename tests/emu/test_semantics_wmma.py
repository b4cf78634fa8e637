"""wmma load / mma / store round trips against numpy matmul."""

from __future__ import annotations

import ml_dtypes
import numpy as np
import pytest

from ptxforge.emu.semantics import wmma
from ptxforge.emu.semantics.mma import dot_tensor_core

pytestmark = pytest.mark.filterwarnings("ignore::RuntimeWarning")

FLOAT_CASES = [("m16n16k16", "f16", np.float16, "f32"), ("m8n32k16", "f16", np.float16, "f16"),
               ("m32n8k16", "bf16", ml_dtypes.bfloat16, "f32"), ("m8n32k16", "bf16", ml_dtypes.bfloat16, "f32"),
               ("m16n16k8", "tf32", np.float32, "f32"), ("m16n16k16", "bf16", ml_dtypes.bfloat16, "f32")]
U = {1: np.uint8, 2: np.uint16, 4: np.uint32, 8: np.uint64}


@pytest.mark.parametrize("shape,ab,dt,acc", FLOAT_CASES)
def test_wmma_float(shape, ab, dt, acc):
    m, rest = shape[1:].split("n")
    n, k = (int(v) for v in rest.split("k"))
    m = int(m)
    rng = np.random.default_rng(0)
    A, B = rng.standard_normal((2, m, k)).astype(dt), rng.standard_normal((2, k, n)).astype(dt)
    if ab == "tf32":
        A = (A.view(np.uint32) & np.uint32(0xFFFFE000)).view(np.float32)
        B = (B.view(np.uint32) & np.uint32(0xFFFFE000)).view(np.float32)
    cdt = np.float32 if acc == "f32" else np.float16
    C = rng.standard_normal((2, m, n)).astype(cdt)
    a = wmma.load(shape, "a", ab, A.view(U[A.itemsize]))
    b = wmma.load(shape, "b", ab, B.view(U[B.itemsize]))
    c = wmma.load(shape, "c", acc, C.view(U[C.itemsize]))
    regs_a, per_a = wmma.fragment_shape(shape, "a", ab)
    assert a.shape == (2, 32, regs_a) and per_a == (2 if ab in ("f16", "bf16") else 1)
    assert c.shape == (2, 32, 8 if acc == "f32" else 4)
    d = wmma.mma(shape, a, b, c, ab, acc)
    D = wmma.store(shape, acc, d).astype(U[C.itemsize]).view(cdt)
    exact = A.astype(np.float64) @ B.astype(np.float64) + C.astype(np.float64)
    if acc == "f32":  # the tensor cores' summation (mma.dot_tensor_core), within 2 ulp of the exact sum
        ref = dot_tensor_core(A.astype(np.float64), B.astype(np.float64), C.astype(np.float64))
        assert np.array_equal(D.view(np.uint32), ref.astype(np.uint32))
        terms = np.abs(A.astype(np.float64)) @ np.abs(B.astype(np.float64)) + np.abs(C.astype(np.float64))
        assert np.all(np.abs(D - exact) <= 2.0**-21 * terms)  # truncation error: relative to the terms
    else:
        assert np.array_equal(D, exact.astype(cdt))
    # a loaded fragment stores back to the same matrix (duplicated slots agree)
    assert np.array_equal(wmma.store(shape, ab, a, "a"), A.view(U[A.itemsize]))


@pytest.mark.parametrize("shape", ["m16n16k16", "m8n32k16", "m32n8k16"])
def test_wmma_int8(shape):
    m, rest = shape[1:].split("n")
    n, k = (int(v) for v in rest.split("k"))
    m = int(m)
    rng = np.random.default_rng(1)
    A, B = rng.integers(-128, 128, (m, k)), rng.integers(0, 256, (k, n))
    C = rng.integers(-(2**31), 2**31, (m, n))
    a = wmma.load(shape, "a", "s8", (A & 0xFF))
    b = wmma.load(shape, "b", "u8", B)
    c = wmma.load(shape, "c", "s32", C & 0xFFFFFFFF)
    for sat in (False, True):
        D = wmma.store(shape, "s32", wmma.mma(shape, a, b, c, "s8", "s32", satfinite=sat, btype="u8")).astype(np.uint32)
        exact = A @ B + C
        want = np.clip(exact, -(2**31), 2**31 - 1) if sat else exact
        assert np.array_equal(D.view(np.int32).astype(np.int64), ((want + 2**31) % 2**32) - 2**31)


def test_wmma_f64_and_offsets():
    rng = np.random.default_rng(2)
    A, B, C = rng.standard_normal((8, 4)), rng.standard_normal((4, 8)), rng.standard_normal((8, 8))
    d = wmma.mma("m8n8k4", wmma.load("m8n8k4", "a", "f64", A.view(np.uint64)),
                 wmma.load("m8n8k4", "b", "f64", B.view(np.uint64)),
                 wmma.load("m8n8k4", "c", "f64", C.view(np.uint64)), "f64", "f64")
    D = wmma.store("m8n8k4", "f64", d).view(np.float64)
    assert np.allclose(D, A @ B + C, rtol=1e-14, atol=1e-14)
    off = wmma.element_offsets(2, 3, "row", 5, 2)
    assert off.tolist() == [[0, 2, 4], [10, 12, 14]]
    off = wmma.element_offsets(2, 3, "col", 4, 4)
    assert off.tolist() == [[0, 16, 32], [4, 20, 36]]
