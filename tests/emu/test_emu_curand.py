"""curand's device API (tests/corpus/src/cuda/curand_xorwow.cu) on the emulator against XORWOW written here in
numpy: the kernels read the headers' skip-ahead matrices from .global initializers, so matching the exact
outputs for many subsequences and an offset checks those tables, the 64-bit skip-ahead loops and curand()."""

import numpy as np
import pytest
from emu_corpus import corpus_module

M32 = 0xFFFFFFFF
WEYL = 362437  # added to the Weyl counter d at each step


def initial_state(seed: int):
    """curand_init's state before any skip-ahead: (v[0..4], d)."""
    s0 = (seed & M32) ^ 0xAAD26B49
    s1 = (seed >> 32) ^ 0xF7DCEFDD
    t0 = (1099087573 * s0) & M32
    t1 = (2591861531 * s1) & M32
    v = [(123456789 + t0) & M32, 362436069 ^ t0, (521288629 + t1) & M32, 88675123 ^ t1, (5783321 + t0) & M32]
    return v, (6615241 + t1 + t0) & M32


def step(v):
    """One XORWOW step of the xorshift part: the new v (the output is v[4] + d)."""
    t = v[0] ^ (v[0] >> 2)
    new = ((v[4] ^ (v[4] << 4)) ^ (t ^ (t << 1))) & M32
    return v[1:] + [new]


def _bits(v):
    return np.array([(v[i // 32] >> (i % 32)) & 1 for i in range(160)], np.int64)


def _words(b):
    return [int(sum(int(b[32 * w + i]) << i for i in range(32))) for w in range(5)]


def step_matrix():
    """The xorshift step as a 160x160 matrix over GF(2) (column j = the step of basis state j)."""
    cols = []
    for j in range(160):
        e = [0] * 5
        e[j // 32] = 1 << (j % 32)
        cols.append(_bits(step(e)))
    return np.array(cols, np.int64).T


def mat_pow2(m, k):
    for _ in range(k):
        m = (m @ m) & 1
    return m


def mat_pow(m, n):
    r = np.eye(160, dtype=np.int64)
    while n:
        if n & 1:
            r = (r @ m) & 1
        m = (m @ m) & 1
        n >>= 1
    return r


def reference(seed: int, subsequences: int, offset: int, count: int) -> np.ndarray:
    """curand() outputs: `count` per subsequence 0..subsequences-1 after curand_init(seed, s, offset)."""
    m = step_matrix()
    jump_sequence = mat_pow2(m, 67)  # subsequences are 2^67 steps apart
    jump_offset = mat_pow(m, offset)
    v0, d0 = initial_state(seed)
    out = np.zeros((subsequences, count), np.uint32)
    b = _bits(v0)
    for s in range(subsequences):
        v = _words((jump_offset @ b) & 1)
        d = (d0 + WEYL * offset) & M32  # the sequence jump leaves d alone (a multiple of 2^32 steps)
        for i in range(count):
            v = step(v)
            d = (d + WEYL) & M32
            out[s, i] = (v[4] + d) & M32
        b = (jump_sequence @ b) & 1
    return out


@pytest.fixture(scope="module")
def module():
    return corpus_module("curand_xorwow", "sm_90a.O3")


def test_curand_raw_outputs_match_xorwow_for_each_subsequence_and_an_offset(module):
    threads, per = 16, 4
    out = np.zeros(threads * per, np.uint32)
    module.kernel("xorwow_raw").launch(grid=(1,), block=(threads,),
                                       args=[out, np.uint64(1234), np.uint64(1000003), np.int32(per)], device="emu")
    assert out.reshape(threads, per).tolist() == reference(1234, threads, 1000003, per).tolist()


def test_curand_uniform_is_the_raw_output_scaled_into_0_1(module):
    threads, per = 8, 6
    seed = 0x0123456789ABCDEF  # both halves of the seed take part
    out = np.zeros(threads * per, np.float32)
    module.kernel("xorwow_uniform").launch(grid=(1,), block=(threads,), args=[out, np.uint64(seed), np.int32(per)],
                                           device="emu")
    raw = reference(seed, threads, 0, per).reshape(-1)
    # curand_uniform(x) = float(x) * 2^-32 + 2^-33: nvcc writes cvt.rn.f32.u32 then one fma.rn.f32, so the
    # value is float32(x) scaled, plus 2^-33, rounded once (exact in float64, then rounded to float32)
    expect = (raw.astype(np.float32).astype(np.float64) * 2.0**-32 + 2.0**-33).astype(np.float32)
    assert np.array_equal(out, expect)
    assert 0 < out.min() and out.max() <= 1
