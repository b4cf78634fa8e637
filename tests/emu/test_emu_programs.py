"""Whole programs from nvcc: control flow (jump tables, indirect calls, goto), tiled matmul, softmax,
layer norm, transposes, memory spaces (dynamic shared, constants, globals, by-value structs, local arrays),
integer division."""

import numpy as np
import pytest
from emu_corpus import corpus_module

FLAVORS = ["sm_80.O3", "sm_80.G", "sm_90a.O3"]
rng = np.random.default_rng(6)


@pytest.mark.parametrize("flavor", FLAVORS)
def test_control_flow(flavor):
    m = corpus_module("control_flow", flavor)
    n = 200
    sel = rng.integers(-3, 12, n).astype(np.int32)
    a, b = rng.integers(-1000, 1000, n).astype(np.int32), rng.integers(-1000, 1000, n).astype(np.int32)
    out = np.zeros(n, np.int32)
    m.kernel("indirect_call").launch(grid=(2,), block=(128,), args=[sel, a, b, out, np.int32(n)])
    ops = [lambda x, y: x + y, lambda x, y: x - y, lambda x, y: x * y, lambda x, y: x ^ y]
    np.testing.assert_array_equal(out, [ops[s & 3](x, y) for s, x, y in zip(sel, a, b, strict=False)])

    def sw(s):
        return {0: 10, 1: 11, 2: 25, 3: 13, 4: 14, 5: 15, 6: -1, 7: 49, 9: 99}.get(int(s), -int(s))
    m.kernel("switch_dense").launch(grid=(2,), block=(128,), args=[sel, out, np.int32(n)])
    np.testing.assert_array_equal(out, [sw(s) for s in sel])
    x = rng.integers(1, 10**6, n).astype(np.uint32)

    def collatz(v):
        s = 0
        while v != 1 and s < 1000:
            v = 3 * v + 1 if v & 1 else v >> 1
            s += 1
        return s
    m.kernel("collatz_steps").launch(grid=(4,), block=(64,), args=[x, out, np.int32(n)])
    np.testing.assert_array_equal(out, [collatz(int(v)) for v in x])
    rows = rng.integers(0, 6, (n, 8)).astype(np.int32)
    key = rng.integers(0, 7, n).astype(np.int32)
    cls = np.zeros(n, np.int32)
    m.kernel("search_goto").launch(grid=(2,), block=(128,), args=[rows, key, out, cls, np.int32(n)])
    found = [int(np.flatnonzero(r == k)[0]) if (r == k).any() else -1 for r, k in zip(rows, key, strict=False)]
    np.testing.assert_array_equal(out, found)
    np.testing.assert_array_equal(cls, [0 if f < 0 else ((1 if f & 1 else 2) if f < 4 else (3 if f == 7 else 4))
                                        for f in found])
    inp = rng.integers(-100, 100, 3 * 64).astype(np.int32)
    o2 = np.zeros_like(inp)
    m.kernel("named_barrier_handoff").launch(grid=(3,), block=(128,), args=[inp, o2])
    np.testing.assert_array_equal(o2, inp * 2)
    su = rng.integers(0, 50, n).astype(np.uint32)
    m.kernel("brx_jump_table").launch(grid=(2,), block=(128,), args=[su, out, np.int32(n)])
    np.testing.assert_array_equal(out, np.array([100, 200, 300, 400])[su & 3] + su)


@pytest.mark.parametrize("flavor", [*FLAVORS, "nvrtc:sm_80"])
def test_matmul_tiled(flavor):
    m = corpus_module("matmul_tiled", flavor)
    M, N, K = 40, 24, 37  # not multiples of the 16x16 tile
    A = rng.standard_normal((M, K)).astype(np.float32)
    B = rng.standard_normal((K, N)).astype(np.float32)
    C = np.zeros((M, N), np.float32)
    m.kernel("matmul_tiled_f32").launch(grid=(2, 3), block=(16, 16),
                                        args=[A, B, C, np.int32(M), np.int32(N), np.int32(K)])
    np.testing.assert_allclose(C, A @ B, rtol=1e-5, atol=1e-5)
    M, N, K = 64, 32, 48
    A = rng.standard_normal((M, K)).astype(np.float32)
    B = rng.standard_normal((K, N)).astype(np.float32)
    Cd = np.zeros((M, N))
    m.kernel("matmul_tiled_4x1_f64acc").launch(grid=(N // 16, M // 64), block=(16, 16),
                                               args=[A, B, Cd, np.int32(M), np.int32(N), np.int32(K)])
    np.testing.assert_allclose(Cd, A.astype(np.float64) @ B.astype(np.float64), rtol=1e-12)


@pytest.mark.parametrize("flavor", FLAVORS)
def test_softmax_layernorm(flavor):
    m = corpus_module("softmax_layernorm", flavor)
    rows, cols = 4, 1000
    x = (rng.standard_normal((rows, cols)) * 4).astype(np.float32)
    e = np.exp(x.astype(np.float64) - x.max(1, keepdims=True))
    ref = e / e.sum(1, keepdims=True)
    for name in ("softmax_rows", "softmax_rows_online"):
        y = np.zeros_like(x)
        m.kernel(name).launch(grid=(rows,), block=(256,), args=[x, y, np.int32(cols)])
        np.testing.assert_allclose(y, ref, rtol=1e-5, atol=1e-8, err_msg=name)
    g, b = rng.standard_normal(cols).astype(np.float32), rng.standard_normal(cols).astype(np.float32)
    y, mu, rs = np.zeros_like(x), np.zeros(rows, np.float32), np.zeros(rows, np.float32)
    m.kernel("layernorm_rows").launch(grid=(rows,), block=(256,),
                                      args=[x, g, b, y, mu, rs, np.int32(cols), np.float32(1e-5)])
    xf = x.astype(np.float64)
    mean = xf.mean(1, keepdims=True)
    rstd = 1 / np.sqrt(xf.var(1, keepdims=True) + 1e-5)
    np.testing.assert_allclose(y, (xf - mean) * rstd * g + b, rtol=1e-4, atol=1e-4)
    np.testing.assert_allclose(rs, rstd[:, 0], rtol=1e-5)


@pytest.mark.parametrize("flavor", FLAVORS)
def test_transposes(flavor):
    m = corpus_module("transpose", flavor)
    r, c = 70, 45
    x = rng.standard_normal((r, c)).astype(np.float32)
    for name in ("transpose_padded", "transpose_naive"):
        out = np.zeros((c, r), np.float32)
        m.kernel(name).launch(grid=(-(-c // 32), -(-r // 32)), block=(32, 8), args=[x, out, np.int32(r), np.int32(c)])
        np.testing.assert_array_equal(out, x.T, err_msg=name)
    xd = rng.standard_normal((64, 96))
    od = np.zeros((96, 64))
    m.kernel("transpose_swizzled_f64").launch(grid=(3, 2), block=(32, 8), args=[xd, od, np.int32(64), np.int32(96)])
    np.testing.assert_array_equal(od, xd.T)


def test_memory_spaces():
    m = corpus_module("memory_spaces", "sm_80.O3")
    n, B = 512, 128
    x = rng.standard_normal(n).astype(np.float32)
    out, idx = np.zeros(n, np.float32), np.zeros(n, np.int32)
    m.kernel("dynamic_smem_reverse").launch(grid=(n // B,), block=(B,), args=[x, out, idx, np.int32(n)],
                                            shared_mem=B * 8)
    np.testing.assert_array_equal(out.reshape(-1, B), x.reshape(-1, B)[:, ::-1])
    vals = rng.integers(-50, 50, n * 8).astype(np.int32)
    o = np.zeros(n, np.int32)
    m.kernel("local_array_select").launch(grid=(4,), block=(128,), args=[vals, o, np.int32(5), np.int32(n)])
    np.testing.assert_array_equal(o, np.sort(vals.reshape(n, 8), 1)[:, 5])
    rec = np.zeros((), np.dtype([("m", "<f4", (2, 2)), ("t", "<f4", 2), ("n", "<i4"), ("mode", "u1"),
                                 ("pad", "u1", 3), ("weight", "<f8")]))
    rec["m"] = [[1, 2], [3, 4]]
    rec["t"] = [0.5, -1]
    rec["n"] = 10
    rec["mode"] = 1
    rec["weight"] = 2.0
    p = rng.standard_normal((10, 2)).astype(np.float32)
    q = np.zeros_like(p)
    m.kernel("struct_param_affine").launch(grid=(1,), block=(32,), args=[rec, p, q])
    M = np.array([[1, 3], [2, 4]], np.float32)  # mode 1: transposed off-diagonals
    np.testing.assert_allclose(q, ((p @ M.T) + [0.5, -1]) * 2, rtol=1e-6, atol=1e-6)


def test_int_division():
    m = corpus_module("int_division", "sm_80.O3")
    n = 300
    a = rng.integers(-2**31, 2**31, n).astype(np.int32)
    b = rng.integers(-1000, 1000, n).astype(np.int32)
    b[b == 0] = 7
    a[:2], b[:2] = -2**31, -1
    qs, rs, qu, ru = (np.zeros(n, np.int32), np.zeros(n, np.int32), np.zeros(n, np.uint32), np.zeros(n, np.uint32))
    m.kernel("int_divmod").launch(grid=(3,), block=(128,), args=[a, b, qs, rs, qu, ru, np.int32(n)])
    x, y = a.astype(np.int64), b.astype(np.int64)
    q = np.trunc(x / y).astype(np.int64)
    q[:2] = -2**31  # INT_MIN / -1 wraps
    np.testing.assert_array_equal(qs, q.astype(np.int32))
    np.testing.assert_array_equal(rs[2:], (x - np.trunc(x / y).astype(np.int64) * y)[2:])
    ua, ub = a.view(np.uint32).astype(np.uint64), b.view(np.uint32).astype(np.uint64)
    np.testing.assert_array_equal(qu, (ua // ub).astype(np.uint32))
    np.testing.assert_array_equal(ru, (ua % ub).astype(np.uint32))


@pytest.mark.parametrize("flavor", FLAVORS)
def test_constants_globals_and_struct_params(flavor):
    m = corpus_module("memory_spaces", flavor)
    n = 300
    x = rng.standard_normal(n).astype(np.float32)
    u = rng.integers(0, 2**32, n, dtype=np.uint64).astype(np.uint32)
    y, bits = np.zeros(n, np.float32), np.zeros(n, np.int32)
    m.kernel("constant_poly_lut").launch(grid=(3,), block=(128,), args=[x, y, u, bits, np.int32(n)])
    coeffs = [1.0, -0.5, 0.25, -0.125, 0.0625, 0.0, 0.0, 0.0]
    np.testing.assert_allclose(y, np.polyval(coeffs[::-1], x.astype(np.float64)), rtol=1e-5, atol=1e-6)
    np.testing.assert_array_equal(bits, [bin(int(v) & 0xFF).count("1") for v in u])
    out, misc = np.zeros(n, np.float32), np.zeros(4, np.int32)
    m.kernel("device_globals").launch(grid=(3,), block=(128,), args=[out, misc, np.int32(n)])
    np.testing.assert_array_equal(out, np.array([0.5, 1.5, 2.5, 3.5], np.float32)[np.arange(n) & 3] * 3 + 0.25)
    assert misc.tolist() == [0x89ABCDEF - 2**32, -7, ord("y"), ord("e")]
    rec = np.zeros((), np.dtype([("m", "<f4", (2, 2)), ("t", "<f4", 2), ("n", "<i4"), ("mode", "u1"),
                                 ("pad", "u1", 3), ("weight", "<f8")]))
    rec["m"], rec["t"], rec["n"], rec["mode"], rec["weight"] = [[1, 2], [3, 4]], [0.5, -1], 10, 0, 0.5
    p = rng.standard_normal((10, 2)).astype(np.float32)
    q = np.zeros_like(p)
    m.kernel("struct_param_affine").launch(grid=(1,), block=(32,), args=[rec, p, q])
    np.testing.assert_allclose(q, (p @ np.array([[1, 2], [3, 4]], np.float32).T + [0.5, -1]) * 0.5, rtol=1e-6,
                               atol=1e-6)  # nvcc may contract to fma
