"""Device-function calls with a per-thread stack (recursion, mutual recursion, struct returns), printf."""

import math

import numpy as np
import pytest
from emu_corpus import corpus_module

FLAVORS = ["sm_80.O3", "sm_80.G", "sm_90a.O3"]
rng = np.random.default_rng(2)


@pytest.mark.parametrize("flavor", FLAVORS)
def test_recursion(flavor):
    m = corpus_module("recursion", flavor)
    n = 70
    v = rng.integers(0, 15, n).astype(np.uint32)  # divergent depths across lanes of a warp
    fib, fact, par = np.zeros(n, np.uint32), np.zeros(n, np.uint64), np.zeros(n, np.int32)
    m.kernel("recursive_fib_fact").launch(grid=(2,), block=(64,), args=[v, fib, fact, par, np.int32(n)])

    def f(k):
        return k if k < 2 else f(k - 1) + f(k - 2)
    np.testing.assert_array_equal(fib, [f(int(k)) for k in v])
    np.testing.assert_array_equal(fact, [math.factorial(int(k)) % 2**64 for k in v])
    np.testing.assert_array_equal(par, (v % 2 == 0).astype(np.int32))
    a = rng.integers(-10**12, 10**12, n).astype(np.int64)
    b = rng.integers(-10**6, 10**6, n).astype(np.int64)
    out = np.zeros(n, np.int64)
    m.kernel("recursive_gcd").launch(grid=(1,), block=(96,), args=[a, b, out, np.int32(n)])

    def g(x, y):
        while y:
            x, y = y, int(np.fmod(x, y))
        return abs(x)
    np.testing.assert_array_equal(out, [g(int(x), int(y)) for x, y in zip(a, b, strict=False)])
    rows, cols = 40, 13
    x = rng.standard_normal((rows, cols)).astype(np.float32)
    mm = np.zeros(2 * rows, np.float32)
    m.kernel("recursive_minmax").launch(grid=(2,), block=(32,), args=[x, mm, np.int32(rows), np.int32(cols)])
    np.testing.assert_array_equal(mm.reshape(rows, 2), np.stack([x.min(1), x.max(1)], 1))


@pytest.mark.parametrize("flavor", FLAVORS)
def test_printf(flavor):
    m = corpus_module("printf_kernel", flavor)
    x = np.array([0.5, 1.25, -2.0, 3.14159], np.float32)
    out = np.zeros(4, np.int32)
    lines = []
    r = m.kernel("printf_basic").launch(grid=1, block=4, args=[x, out], options={"printf": lines.append})
    text = "".join(lines)
    for t in range(4):
        assert f"thread {t} of 4: x={x[t]:.3f} i={2**40 + t} c={chr(97 + t)} s=ok\n" in text
    assert "no-arg line\n" in text
    np.testing.assert_array_equal(out, 2 * np.arange(4) + 1)
    assert r.printf == lines
    d = np.array([1.5, 2.0, 1e-3, 7.0])
    lines.clear()
    m.kernel("printf_divergent").launch(grid=1, block=4, args=[d, np.uint32(0b0101)], options={"printf": lines.append})
    assert sorted(lines) == sorted(["lane 0: 1.5 0x00000000\n", "lane 1 idle\n", "lane 2: 0.001 0x02020202\n",
                                    "lane 3 idle\n"])


_PARAM_VAR_OPERAND = """
.version 8.0
.target sm_90
.address_size 64
.func (.param .b32 r) f(.param .b64 p)
{
    .reg .b32 %r<2>;
    OPERATION
    mov.u32 %r1, 1;
    st.param.b32 [r], %r1;
    ret;
}
.visible .entry k(.param .u64 out)
{
    .reg .b32 %r<2>;
    .reg .b64 %rd<2>;
    .param .b64 a;
    .param .b32 b;
    st.param.b64 [a], 0;
    call (b), f, (a);
    ld.param.b32 %r1, [b];
    ld.param.u64 %rd1, [out];
    st.global.u32 [%rd1], %r1;
    ret;
}
"""


@pytest.mark.parametrize("operation", ["mbarrier.inval.shared.b64 [p];", "mbarrier.init.shared.b64 [p], 32;",
                                       "mbarrier.arrive.shared.b64 _, [p];"])
def test_a_memory_operand_naming_a_function_param_variable_is_an_error_naming_it(operation):
    """Only ld, st (and atom, with its own message) read a function's .param variable as a memory operand; any
    other instruction given one fails naming the variable, not with an internal error."""
    import ptxforge as pf
    from ptxforge.emu.errors import UnsupportedInstruction

    k = pf.parse(_PARAM_VAR_OPERAND.replace("OPERATION", operation), filename="p.ptx").kernel("k")
    out = np.zeros(1, np.uint32)
    with pytest.raises(UnsupportedInstruction, match=r"p\.ptx:8: .*: p is a \.param variable of the function: "
                                                     r"only ld and st access those"):
        k.launch(grid=(1,), block=(1,), args=[out], device="emu")
