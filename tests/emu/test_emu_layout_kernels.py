"""A kernel's layout holds its own code and the module's .func functions, not the module's other kernels
(which nothing can call): a module of many kernels (DeepEP's intranode.cu: 18) compiles each one alone."""

import numpy as np
import pytest

import ptxforge as pf
from ptxforge.emu.errors import EmulatorError
from ptxforge.emu.launch import EmuDevice

HEAD = """
.version 8.0
.target sm_90a
.address_size 64
.func (.reg .u32 r) twice(.reg .u32 x)
{
    add.u32 r, x, x;
    ret;
}
"""

FILLER = "\n".join(f"    add.u32 %r2, %r2, {i};" for i in range(200))

PTX = HEAD + f"""
.visible .entry big(.param .u64 out)
{{
    .reg .b32 %r<4>;
    .reg .b64 %rd<4>;
    mov.u32 %r2, 0;
{FILLER}
    ld.param.u64 %rd1, [out];
    st.global.u32 [%rd1], %r2;
    ret;
}}
.visible .entry small(.param .u64 out)
{{
    .reg .b32 %r<4>;
    .reg .b64 %rd<4>;
    ld.param.u64 %rd1, [out];
    mov.u32 %r1, %tid.x;
    call.uni (%r2), twice, (%r1);
    mov.u64 %rd2, big;
    cvt.u32.u64 %r3, %rd2;
    mul.wide.u32 %rd3, %r1, 4;
    add.s64 %rd1, %rd1, %rd3;
    st.global.u32 [%rd1], %r2;
    ret;
}}
"""


def test_a_kernel_is_laid_out_without_the_other_kernels():
    mod = pf.parse(PTX, filename="two_kernels.ptx")
    dev = EmuDevice()
    layout, ops = dev.image(mod).compiled(mod.function("small"))
    assert set(layout.functions) == {"small", "twice"}
    assert len(ops) < 20  # not big's 200 adds
    out = np.zeros(32, np.uint32)
    mod.kernel("small").launch(grid=(1,), block=(32,), args=[out])
    np.testing.assert_array_equal(out, 2 * np.arange(32, dtype=np.uint32))
    big = np.zeros(1, np.uint32)
    mod.kernel("big").launch(grid=(1,), block=(1,), args=[big])
    assert big[0] == sum(range(200))


CALLS_KERNEL = HEAD + """
.visible .entry target(.param .u64 out)
{
    ret;
}
.visible .entry caller(.param .u64 out)
{
    .reg .b64 %rd<4>;
    .param .b64 p;
    proto: .callprototype _ (.param .b64 _);
    mov.u64 %rd1, target;
    st.param.b64 [p], %rd1;
    call.uni %rd1, (p), proto;
    ret;
}
"""


def test_an_indirect_call_to_a_kernel_names_it():
    """It used to run the other kernel's body as if it were a function."""
    mod = pf.parse(CALLS_KERNEL, filename="calls_kernel.ptx")
    with pytest.raises(EmulatorError, match=r"kernel target \(\.entry\): only a \.func can be called"):
        mod.kernel("caller").launch(grid=(1,), block=(1,), args=[np.zeros(1, np.uint64)])


def test_a_direct_call_to_a_kernel_is_refused():
    src = CALLS_KERNEL.replace("    call.uni %rd1, (p), proto;", "    call.uni target, (p);")
    mod = pf.parse(src, filename="calls_kernel.ptx")
    with pytest.raises(Exception, match=r"call to target, a kernel \(\.entry\): only a \.func can be called"):
        mod.kernel("caller").launch(grid=(1,), block=(1,), args=[np.zeros(1, np.uint64)])
