"""Regression tests for constructs that PTX from other people's code uses (nvcc's output of CUTLASS-,
DeepEP- and DeepGEMM-style inline asm, curand, warp intrinsics): each kernel is minimal hand-written PTX and
each expected value was read off ptxas 13.0's SASS for the same kernel (sm_90a), where ptxas folds it."""

import math

import numpy as np
import pytest

import ptxforge as pf
from ptxforge.ptx.validator import validate
from ptxforge.toolchain import ToolNotFound, assemble, find_tool

try:
    find_tool("ptxas")
    HAVE_PTXAS = True
except ToolNotFound:
    HAVE_PTXAS = False

HEAD = ".version 8.0\n.target sm_90a\n.address_size 64\n"


def run(body: str, n_out: int = 4, block: int = 1, grid: int = 1, decls: str = "", dtype=np.uint32,
        params: str = ".param .u64 p", args=None, sanitize=False):
    text = HEAD + decls + f".visible .entry k({params})\n{{\n" + body + "\n}\n"
    if HAVE_PTXAS:  # every kernel here is valid PTX by ptxas's verdict too
        res = assemble(text, "sm_90a")
        assert res.ok, res.stderr
    out = np.zeros(n_out, dtype)
    pf.parse(text, "t.ptx").kernel("k").launch(grid=(grid,), block=(block,), args=[out] + (args or []),
                                              device="emu", options={"sanitize": sanitize})
    return out


PRELUDE = "  .reg .b32 %r<16>;\n  .reg .pred %q;\n  .reg .b64 %rd<8>;\n  ld.param.u64 %rd0, [p];\n"


# ---------------------------------------------------------------- labels are block-scoped

def test_same_label_in_sibling_blocks_each_branch_stays_in_its_block():
    # two expansions of one inline-asm loop, each with its own `L1` (ptxas: stores 53)
    body = PRELUDE + """  mov.u32 %r1, 0;
  { L1: add.u32 %r1, %r1, 1; setp.lt.u32 %q, %r1, 3; @%q bra L1; }
  { L1: add.u32 %r1, %r1, 10; setp.lt.u32 %q, %r1, 50; @%q bra L1; }
  st.global.u32 [%rd0], %r1;"""
    assert run(body, 1)[0] == 53


def test_branch_resolves_to_innermost_enclosing_label():
    # inner `bra L` takes the inner L (ptxas: 101 = 1 + 100; the outer L would give 100)
    body = PRELUDE + """  mov.u32 %r1, 0;
  { bra L; add.u32 %r1, %r1, 1000;
  L: add.u32 %r1, %r1, 1; }
L: add.u32 %r1, %r1, 100;
  st.global.u32 [%rd0], %r1;"""
    assert run(body, 1)[0] == 101


def test_branch_out_of_nested_blocks_to_a_later_label():
    body = PRELUDE + """  mov.u32 %r1, 0;
  { { bra OUT; add.u32 %r1, %r1, 1; } add.u32 %r1, %r1, 2; }
OUT: st.global.u32 [%rd0], %r1;"""
    assert run(body, 1)[0] == 0


def test_mbarrier_wait_loops_expanded_twice_do_not_hang():
    # the shape of an inline-asm `mbarrier_wait` helper used twice in one kernel: two blocks, same labels
    wait = """  {
  .reg .pred P1;
  LAB_WAIT:
  mbarrier.try_wait.parity.shared::cta.b64 P1, [bar], %r2;
  @P1 bra DONE;
  bra LAB_WAIT;
  DONE:
  }"""
    body = PRELUDE + """  .shared .align 8 .b64 bar;
  mov.u32 %r1, %tid.x;
  setp.eq.u32 %q, %r1, 0;
  @%q mbarrier.init.shared::cta.b64 [bar], 32;
  bar.sync 0;
  mov.u32 %r2, 0;
  mbarrier.arrive.shared::cta.b64 %rd1, [bar];
""" + wait + """
  mbarrier.arrive.shared::cta.b64 %rd1, [bar];
  mov.u32 %r2, 1;
""" + wait + """
  @%q st.global.u32 [%rd0], 7;"""
    assert run(body, 1, block=32)[0] == 7


# ---------------------------------------------------------------- WARP_SZ

def test_warp_sz_is_32():
    body = PRELUDE + """  mov.u32 %r1, WARP_SZ;
  add.u32 %r2, %r1, WARP_SZ;
  st.global.u32 [%rd0], %r2;"""
    assert run(body, 1)[0] == 64  # ptxas: MOV R5, 0x40


# ---------------------------------------------------------------- carry flag of subtraction

@pytest.mark.parametrize("a,b,expect", [
    # (sub.cc d, addc 0+0+CF, subc 10-3 after sub.cc, subc 10-3 after add.cc a+b): from ptxas's SASS
    (5, 3, [2, 1, 7, 6]),
    (3, 5, [0xFFFFFFFE, 0, 6, 6]),
    (5, 5, [0, 1, 7, 6]),
])
def test_sub_cc_sets_carry_when_no_borrow_and_subc_adds_not_b_plus_carry(a, b, expect):
    body = PRELUDE + f"""  mov.u32 %r1, {a};
  mov.u32 %r2, {b};
  sub.cc.u32 %r3, %r1, %r2;
  addc.u32 %r4, 0, 0;
  sub.cc.u32 %r5, %r1, %r2;
  subc.u32 %r6, 10, 3;
  add.cc.u32 %r7, %r1, %r2;
  subc.u32 %r8, 10, 3;
  st.global.v4.u32 [%rd0], {{%r3, %r4, %r6, %r8}};"""
    assert run(body, 4).tolist() == expect


def test_128_bit_subtract_chain_then_add_chain_round_trips():
    rng = np.random.default_rng(3)
    xs = rng.integers(0, 2**32, (32, 4), dtype=np.uint64).astype(np.uint32)
    ys = rng.integers(0, 2**32, (32, 4), dtype=np.uint64).astype(np.uint32)
    xs[0], ys[0] = 0, 1  # borrow through every limb
    body = """  .reg .b32 %a<4>, %b<4>, %d<4>, %e<4>, %t;
  .reg .b64 %rd<8>;
  ld.param.u64 %rd0, [p];
  ld.param.u64 %rd1, [x];
  ld.param.u64 %rd2, [y];
  mov.u32 %t, %tid.x;
  mul.wide.u32 %rd3, %t, 16;
  add.u64 %rd1, %rd1, %rd3;
  add.u64 %rd2, %rd2, %rd3;
  add.u64 %rd4, %rd0, %rd3;
  ld.global.v4.u32 {%a0, %a1, %a2, %a3}, [%rd1];
  ld.global.v4.u32 {%b0, %b1, %b2, %b3}, [%rd2];
  sub.cc.u32 %d0, %a0, %b0;
  subc.cc.u32 %d1, %a1, %b1;
  subc.cc.u32 %d2, %a2, %b2;
  subc.u32 %d3, %a3, %b3;
  add.cc.u32 %e0, %d0, %b0;
  addc.cc.u32 %e1, %d1, %b1;
  addc.cc.u32 %e2, %d2, %b2;
  addc.u32 %e3, %d3, %b3;
  st.global.v4.u32 [%rd4], {%d0, %d1, %d2, %d3};
  add.u64 %rd4, %rd4, 512;
  st.global.v4.u32 [%rd4], {%e0, %e1, %e2, %e3};"""
    out = run(body, 32 * 8, block=32, params=".param .u64 p, .param .u64 x, .param .u64 y",
              args=[xs.reshape(-1), ys.reshape(-1)])
    val = lambda r: sum(int(v) << (32 * i) for i, v in enumerate(r))  # noqa: E731
    d, e = out[:128].reshape(32, 4), out[128:].reshape(32, 4)
    for k in range(32):
        assert val(d[k]) == (val(xs[k]) - val(ys[k])) % 2**128
        assert val(e[k]) == val(xs[k])


# ---------------------------------------------------------------- no internal errors

def test_cvt_pack_sat_s8_over_several_warps():
    body = PRELUDE + """  mov.u32 %r1, %tid.x;
  mul.lo.u32 %r2, %r1, 100;
  sub.u32 %r3, 50, %r2;
  cvt.pack.sat.s8.s32.b32 %r4, %r2, %r3, 0;
  mul.wide.u32 %rd3, %r1, 4;
  add.u64 %rd3, %rd0, %rd3;
  st.global.u32 [%rd3], %r4;"""
    out = run(body, 64, block=64)
    sat = lambda v: min(max(v, -128), 127) & 0xFF  # noqa: E731
    assert out.tolist() == [sat(50 - 100 * t) | sat(100 * t) << 8 for t in range(64)]


def test_mbarrier_expect_tx_by_every_lane():
    body = PRELUDE + """  .shared .align 8 .b64 bar;
  mov.u32 %r1, %tid.x;
  setp.eq.u32 %q, %r1, 0;
  @%q mbarrier.init.shared.b64 [bar], 1;
  bar.sync 0;
  mbarrier.expect_tx.shared.b64 [bar], 4;
  mbarrier.complete_tx.shared.b64 [bar], 4;
  bar.sync 0;
  @%q mbarrier.arrive.shared.b64 %rd2, [bar];
  bar.sync 0;
  mbarrier.test_wait.parity.shared.b64 %q, [bar], 0;
  selp.u32 %r4, 1, 0, %q;
  mul.wide.u32 %rd3, %r1, 4;
  add.u64 %rd3, %rd0, %rd3;
  st.global.u32 [%rd3], %r4;"""
    assert run(body, 64, block=64).tolist() == [1] * 64  # 64 x 4 bytes expected and completed: phase 0 done


# ---------------------------------------------------------------- .reg parameters of .func

REG_FUNCS = """.func (.reg .b32 r) f(.reg .b32 a, .reg .b32 b)
{
  add.u32 r, a, b;
  mul.lo.u32 r, r, 3;
  ret;
}
.func (.reg .b64 s) g(.reg .b64 x)
{
  add.u64 s, x, 1;
  ret;
}
.func (.reg .b32 r) fact(.reg .b32 n)
{
  .reg .pred %q;
  .reg .b32 %t;
  setp.le.u32 %q, n, 1;
  @%q bra BASE;
  sub.u32 %t, n, 1;
  call (%t), fact, (%t);
  mul.lo.u32 r, %t, n;
  ret;
BASE:
  mov.u32 r, 1;
  ret;
}
"""


def test_reg_params_and_results_take_registers_and_immediates():
    body = PRELUDE + """  mov.u32 %r1, 5;
  mov.u32 %r2, 7;
  call (%r3), f, (%r1, %r2);
  call (%r4), f, (%r3, 1);
  mov.u64 %rd1, 41;
  call (%rd2), g, (%rd1);
  cvt.u32.u64 %r5, %rd2;
  st.global.v4.u32 [%rd0], {%r3, %r4, %r5, %r5};"""
    # ptxas: UIADD3/UIMAD on 5, 7 and 1
    assert run(body, 4, decls=REG_FUNCS, sanitize=True).tolist() == [36, 111, 42, 42]


def test_recursive_function_with_reg_params_keeps_each_frame():
    body = PRELUDE + """  mov.u32 %r1, %tid.x;
  call (%r2), fact, (%r1);
  mul.wide.u32 %rd1, %r1, 4;
  add.u64 %rd1, %rd0, %rd1;
  st.global.u32 [%rd1], %r2;"""
    assert run(body, 13, block=13, decls=REG_FUNCS).tolist() == [math.factorial(i) for i in range(13)]


# ---------------------------------------------------------------- a register plus a constant as a source

@pytest.mark.parametrize("ins,expect", [
    # each value read off ptxas's SASS (it folds t = 40, %r1 = 3)
    ("st.global.u64 [%rd0], t+2;", 42),
    ("st.global.u64 [%rd0], t+0x10;", 56),
    ("st.global.u64 [%rd0], t+2+3;", 45),
    ("st.global.u64 [%rd0], t+-2;", 38),
    ("st.global.u64 [%rd0], %r1+2;", 5),  # a 32-bit register into a 64-bit store: zero-extended
    ("add.u64 d, 1, t+2; st.global.u64 [%rd0], d;", 43),
    ("mad.lo.u64 d, t+1, t, 0; st.global.u64 [%rd0], d;", 1640),
    ("add.u64 d, t+2, t+3; st.global.u64 [%rd0], d;", 85),
    ("add.u32 %r1, %r1+0x7fffffff, 0; st.global.u32 [%rd0], %r1;", 0x80000002),  # wraps at 32 bits
])
def test_register_plus_immediate_source(ins, expect):
    body = f"""  .reg .b64 t, d, %rd0;
  .reg .b32 %r1;
  ld.param.u64 %rd0, [p];
  mov.u64 t, 40;
  mov.u32 %r1, 3;
  {ins}"""
    assert run(body, 1, dtype=np.uint64, sanitize=True)[0] == expect


# ---------------------------------------------------------------- vector registers

def test_vector_registers_load_move_access_and_store():
    # the values ptxas's SASS computes for this kernel: {1,2,3,4} loaded; %v.x = 3 + 4; %w.a = %h.w + %h.r
    body = """  .reg .v4 .u32 %v, %w;
  .reg .v2 .u64 %d;
  .reg .v4 .u16 %h;
  .reg .b32 %r<8>;
  .reg .b64 %rd<4>;
  ld.param.u64 %rd0, [p];
  ld.global.v4.u32 %v, [%rd0];
  mov.v4.u32 %w, %v;
  add.u32 %r1, %w.x, %w.y;
  add.u32 %r2, %v.z, %v.w;
  mov.u32 %v.x, %r2;
  mov.v4.u16 %h, {1, 2, 3, 4};
  cvt.u32.u16 %r3, %h.w;
  cvt.u32.u16 %r4, %h.r;
  add.u32 %r3, %r3, %r4;
  mov.u32 %w.a, %r3;
  st.global.v4.u32 [%rd0+16], %v;
  st.global.v4.u32 [%rd0+32], %w;
  mov.v2.u64 %d, {7, 9};
  st.global.v2.u64 [%rd0+48], %d;
  st.global.v4.u16 [%rd0+64], %h;
  st.global.u32 [%rd0+72], %r1;
  mov.v2.u64 %d, {%d.y, %d.x};
  st.global.v2.u64 [%rd0+80], %d;"""
    text = HEAD + ".visible .entry k(.param .u64 p)\n{\n" + body + "\n}\n"
    out = np.zeros(24, np.uint32)
    out[:4] = [1, 2, 3, 4]
    pf.parse(text).kernel("k").launch(grid=(1,), block=(1,), args=[out], device="emu")
    assert out[4:8].tolist() == [7, 2, 3, 4]
    assert out[8:12].tolist() == [1, 2, 3, 5]
    assert out[12:16].tolist() == [7, 0, 9, 0]
    assert out[16:18].tolist() == [0x00020001, 0x00040003]  # four 16-bit elements, not 4-bit fields
    assert out[18] == 3
    assert out[20:24].tolist() == [9, 0, 7, 0]  # a swap reads both sources before writing


def test_mov_vector_from_a_scalar_unpacks_its_bits_zero_extended():
    # ptxas 13.0 compiles mov.v4.s32 %w, 0x80ff7f01 to the elements 1, 0x7f, 0xff, 0x80 (PRMT byte extracts)
    body = """  .reg .v4 .s32 %w;
  .reg .v2 .u64 %d;
  .reg .b64 %rd0;
  ld.param.u64 %rd0, [p];
  mov.v4.s32 %w, 0x80ff7f01;
  st.global.v4.u32 [%rd0], %w;
  mov.v2.u64 %d, 5;
  st.global.v2.u64 [%rd0+16], %d;"""
    assert run(body, 8, sanitize=True).tolist() == [1, 0x7F, 0xFF, 0x80, 5, 0, 0, 0]


def test_constant_expressions_as_operands_fold_as_ptxas_folds_them():
    """`WARP_SZ-1`, `WARP_SZ*2`, `(1<<5)|3`, `-7/2` as operands: ptxas accepts them (C operators on 64-bit
    integers, division toward zero); they parse, print back as written, and run."""
    text = (".version 8.0\n.target sm_80\n.address_size 64\n.visible .entry k(.param .u64 p)\n{\n"
            "  .reg .b32 %r<5>;\n  .reg .b64 %rd<2>;\n  ld.param.u64 %rd1, [p];\n"
            "  mov.u32 %r1, WARP_SZ-1;\n  add.u32 %r2, %r1, WARP_SZ*2;\n  mov.u32 %r3, (1<<5)|3;\n"
            "  mov.u32 %r4, -7/2;\n"
            "  st.global.v4.u32 [%rd1], {%r1, %r2, %r3, %r4};\n  ret;\n}\n")
    m = pf.parse(text, filename="expr.ptx")
    assert m.to_ptx() == text and pf.parse(m.to_ptx(canonical=True)).to_ptx(canonical=True) == m.to_ptx(canonical=True)
    assert validate(m) == []
    out = np.zeros(4, np.uint32)
    m.kernel("k").launch(grid=(1,), block=(1,), args=[out], device="emu")
    assert out.tolist() == [31, 95, 35, (-3) & 0xFFFFFFFF]
    if HAVE_PTXAS:
        assert assemble(text, "sm_80").ok


def test_a_malformed_constant_expression_is_a_syntax_error():
    with pytest.raises(pf.PTXSyntaxError, match="division by zero"):
        pf.parse(".version 8.0\n.target sm_80\n.address_size 64\n.visible .entry k()\n{\n  .reg .b32 %r1;\n"
                 "  mov.u32 %r1, 4/0;\n  ret;\n}\n")
