"""Every class of DSL error: raised at the kernel's Python line, with an llvmlite-style message."""

import inspect

import pytest

from ptxforge.dsl import (
    DSLArchError,
    DSLError,
    DSLTypeError,
    add,
    bar_sync,
    cvt,
    else_,
    f16,
    f32,
    guard,
    if_,
    kernel,
    ld,
    mbarrier_try_wait,
    mbarriers,
    ptr,
    range_,
    raw,
    reg,
    s32,
    setmaxnreg,
    shfl_down,
    st,
    tid,
    u32,
    wgmma_fence,
)

HERE = __file__


def line_of(marker: str) -> int:
    """The line of this file that contains `marker` (a comment at the faulty call)."""
    for i, text in enumerate(open(HERE).read().splitlines(), 1):
        if marker in text and "line_of(" not in text:
            return i
    raise AssertionError(marker)


def build_error(fn, arch="sm_80", cls=DSLError):
    with pytest.raises(cls) as e:
        kernel(fn, arch=arch)
    return e.value


# --------------------------------------------------------------------------- type errors


def test_operands_must_share_type():
    def k(a: ptr(f32), n: u32):
        x = ld(a[tid.x])
        n + x  # MARK-share

    e = build_error(k, cls=DSLTypeError)
    assert e.msg == "add: operands must share type .u32, got .u32 and .f32"
    assert (e.file, e.line) == (HERE, line_of("MARK-share"))
    assert str(e).startswith(f"{HERE}:{e.line}:")
    assert "n + x" in str(e)  # the source line, with a caret under the call
    assert isinstance(e, TypeError)  # and a Python TypeError, like llvmlite's


def test_function_form_names_all_types():
    def k(a: ptr(f32), n: u32):
        add(n, ld(a[0]), type=None)  # MARK-fn

    e = build_error(k, cls=DSLTypeError)
    assert e.msg == "add: operands must share type .u32, got .u32 and .f32"
    assert e.line == line_of("MARK-fn")


def test_store_through_pointer_of_other_type():
    def k(a: ptr(f32), n: u32):
        st(a[0], n)  # MARK-st

    e = build_error(k, cls=DSLTypeError)
    assert "st: storing %r" in e.msg and "(.u32) through a pointer to .f32" in e.msg
    assert e.line == line_of("MARK-st")


def test_isa_table_operand_error_through_raw():
    def k(a: ptr(f32)):
        x = reg.f32(1.0)
        raw("add.f32 {x}, {x}, 1;", x=x)  # MARK-raw

    e = build_error(k, cls=DSLTypeError)
    assert e.msg.startswith("add.f32: operand 3: 1 is an integer literal, expected a .f32 literal")
    assert e.line == line_of("MARK-raw")


def test_isa_table_conversion_rule():
    def k(a: ptr(f32)):
        cvt(ld(a[0]), u32, rnd="rn")  # MARK-cvt

    e = build_error(k, cls=DSLTypeError)
    assert e.msg == ("cvt.rn.u32.f32: rounding .rn is not allowed on a float-to-integer conversion; "
                     "use one of .rni, .rzi, .rmi, .rpi")
    assert e.line == line_of("MARK-cvt")


def test_shift_amount_and_shuffle_width():
    def k(a: ptr(f32)):
        x = reg.u32(1)
        x << reg.u64(3)  # MARK-shift

    assert build_error(k, cls=DSLTypeError).msg == "shl: the shift amount must be a 32-bit integer, got .u64"

    def k2(a: ptr(f32)):
        shfl_down(reg.u64(1), 1)

    assert "shfl: shuffles 32-bit values, got .u64" in build_error(k2, cls=DSLTypeError).msg


def test_view_across_float_and_int_is_refused():
    def k(a: ptr(f32)):
        reg.f32(1.0).view(u32)  # MARK-view

    e = build_error(k, cls=DSLTypeError)
    assert "PTX cannot read it as .u32" in e.msg and "bitcast(" in e.msg


# --------------------------------------------------------------------------- arch errors


def test_setmaxnreg_needs_sm90a():
    def k(a: ptr(f32)):
        setmaxnreg(240, inc=True)  # MARK-arch

    e = build_error(k, arch="sm_80", cls=DSLArchError)
    assert e.msg.startswith("setmaxnreg needs sm_90a; this kernel targets sm_80")
    assert e.line == line_of("MARK-arch")
    kernel(k, arch="sm_90a")  # the same kernel builds for sm_90a


def test_arch_errors_name_the_feature():
    def k(a: ptr(f32)):
        wgmma_fence()

    assert build_error(k, arch="sm_90", cls=DSLArchError).msg == \
        "wgmma.fence needs sm_90a; this kernel targets sm_90"

    def k2(a: ptr(f32)):
        mbarrier_try_wait(mbarriers(1)[0], 0)

    assert build_error(k2, arch="sm_80", cls=DSLArchError).msg == \
        "mbarrier.try_wait needs sm_90; this kernel targets sm_80"

    def k3(a: ptr(f32)):
        ld(a[0], L2="256B")

    assert build_error(k3, arch="sm_75", cls=DSLArchError).msg == \
        "ld: modifier .L2::256B needs sm_80; this kernel targets sm_75"

    def k4(a: ptr(f16)):
        x = ld(a[0])
        x + x  # add.f16 needs sm_53

    assert build_error(k4, arch="sm_52", cls=DSLArchError).msg == \
        "add: type .f16/.f16x2 needs sm_53; this kernel targets sm_52"


def test_per_arch_build_of_an_auto_kernel():
    @kernel
    def k(a: ptr(f32)):
        setmaxnreg(240, inc=True)

    assert ".target sm_90a" in k.ptx()  # arch='auto' without a GPU: sm_90a
    with pytest.raises(DSLArchError):
        k.ptx(arch="sm_80")


# --------------------------------------------------------------------------- operator sugar and misuse


def test_ambiguous_float_division_is_refused():
    def k(a: ptr(f32)):
        x = ld(a[0])
        x / x  # MARK-div

    e = build_error(k, cls=DSLTypeError)
    assert "'/' on .f32 is ambiguous" in e.msg and e.line == line_of("MARK-div")


def test_division_sugar_only_where_python_and_ptx_agree():
    def k(a: ptr(f32), n: u32):
        n / 2  # MARK-tdiv

    assert build_error(k, cls=DSLTypeError).msg == "'/' on .u32 would be true division in Python; use // " \
        "(unsigned) or div(a, b)"

    def k2(a: ptr(f32), n: s32):
        n // 2

    assert build_error(k2, cls=DSLTypeError).msg.startswith("'//' on .s32 is ambiguous: Python rounds toward -inf")

    def k3(a: ptr(f32), n: s32):
        n % 2

    assert "use rem(a, b)" in build_error(k3, cls=DSLTypeError).msg


def test_register_has_no_python_truth_value():
    def k(a: ptr(f32), n: u32):
        if tid.x < n:  # MARK-bool
            pass

    e = build_error(k)
    assert "not a Python value" in e.msg and e.line == line_of("MARK-bool")


def test_unordered_bit_comparison_is_refused():
    def k(a: ptr(f32)):
        _ = reg.b32(1) < reg.b32(2)

    assert build_error(k, cls=DSLTypeError).msg.startswith("setp.lt: .b32 registers have no order")


def test_control_flow_misuse():
    def no_if(a: ptr(f32)):
        with else_():
            pass

    assert build_error(no_if).msg == "else_ must directly follow a `with if_(...)` block"

    def branch_in_guard(a: ptr(f32), n: u32):
        with guard(tid.x < n), if_(tid.x < 4):
            pass

    assert "if_ inside `with guard(...)`" in build_error(branch_in_guard).msg

    def broken_loop(a: ptr(f32), n: u32):
        for _ in range_(n):
            break

    assert "still open" in build_error(broken_loop).msg


def test_parameters_need_types_and_ops_need_a_kernel():
    def k(a, n: u32):
        pass

    with pytest.raises(DSLError, match="parameter 'a' needs a PTX type annotation"):
        kernel(k, arch="sm_80")
    with pytest.raises(DSLError, match="only be used inside a @kernel"):
        bar_sync()


def test_bad_constant_and_setmaxnreg_range():
    def k(a: ptr(f32)):
        reg.u32(1) + 2**40

    assert build_error(k, cls=DSLTypeError).msg == "1099511627776 does not fit a .u32 operand"

    def k2(a: ptr(f32)):
        setmaxnreg(100, inc=True)

    assert "multiple of 8" in build_error(k2, arch="sm_90a").msg


def test_errors_point_into_helpers_the_user_wrote():
    def helper(v):
        return v + 1.5  # MARK-helper

    def k(a: ptr(f32), n: u32):
        helper(n)

    e = build_error(k, cls=DSLTypeError)
    assert e.line == line_of("MARK-helper")
    assert inspect.getsourcefile(helper) == e.file


def test_special_registers_are_read_only():
    def k(a: ptr(f32)):
        lane = tid.x.get()
        lane += 1  # MARK-ro

    e = build_error(k)
    assert e.msg.startswith("%tid.x is read-only; copy it first") and e.line == line_of("MARK-ro")

    @kernel(arch="sm_80")
    def ok(a: ptr(u32)):
        lane = tid.x.copy()
        lane += 1
        st(a[tid.x], lane)


def test_setting_a_special_register_by_keyword_is_the_same_error():
    def k(a: ptr(f32)):
        tid.x.get().set(value=3)  # MARK-ro-kw

    e = build_error(k)
    assert e.msg.startswith("%tid.x is read-only; copy it first") and e.line == line_of("MARK-ro-kw")


def test_bad_target_name():
    def k(a: ptr(f32)):
        pass

    with pytest.raises(DSLError, match="not a PTX target: 'sm80'"):
        kernel(k, arch="sm80")


def test_string_annotations_resolve_in_the_decorating_scope():
    """`from __future__ import annotations` with the DSL types imported inside a function."""
    import numpy as np

    ns: dict = {}
    exec(
        "from __future__ import annotations\n"
        "def make():\n"
        "    from ptxforge.dsl import kernel, ptr, f32, u32, tid, st\n"
        "    @kernel(arch='sm_80')\n"
        "    def fill(y: ptr(f32), n: u32):\n"
        "        st(y[tid.x], 1.0)\n"
        "    return fill\n", ns)
    k = ns["make"]()
    y = np.zeros(32, np.float32)
    k.launch(grid=(1,), block=(32,), args=[y, np.uint32(32)], device="emu")
    assert (y == 1).all()
