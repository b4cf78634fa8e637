"""Each class of validation error, reported at the right file, line and column, all at once."""

import pytest

import ptxforge as pf
from ptxforge.ptx.validator import check, validate
from ptxforge.toolchain import ToolNotFound, assemble, find_tool


def module(body: str, target: str = "sm_90a", version: str = "8.5"):
    text = (f".version {version}\n.target {target}\n.address_size 64\n\n.visible .entry k(\n"
            f"\t.param .u64 k_param_0\n)\n{{\n{body}\n}}\n")
    return pf.parse(text, filename="v.ptx")


REGS = ("\t.reg .pred \t%p<3>;\n\t.reg .b32 \t%r<9>;\n\t.reg .f32 \t%f<9>;\n\t.reg .b64 \t%rd<9>;\n"
        "\t.reg .b16 \t%rs<9>;")  # lines 9-13; the first statement after REGS is on line 14


def problems(body: str, **kw):
    return [(d.line, d.col, d.message) for d in validate(module(REGS + "\n" + body, **kw))]


def only(body: str, **kw):
    ps = problems(body, **kw)
    assert len(ps) == 1, ps
    return ps[0]


def test_clean_kernel_has_no_problems():
    assert problems("\tld.param.u64 \t%rd1, [k_param_0];\n\tadd.f32 \t%f1, %f2, %f3;\n\tret;") == []


def test_undeclared_register():
    assert only("\tadd.s32 \t%r1, %r2, %r99;\n\tret;") == (14, 21, "add.s32: register '%r99' is not declared")


def test_redeclared_register_and_variable():
    line, col, msg = only("\t.reg .b32 \t%r3;\n\tret;")
    assert (line, col) == (14, 2) and msg == "register '%r3' is already declared at line 10"


def test_redeclared_label():
    line, col, msg = only("$L1:\n\tret;\n$L1:\n\tret;")
    assert (line, col, msg) == (16, 1, "label '$L1' is already declared at line 14")


def test_branch_to_missing_label():
    assert only("\tbra.uni \t$L__BB0_9;\n\tret;") == (14, 11, "bra.uni: branch to missing label '$L__BB0_9'")


def test_operand_type_not_allowed():
    line, col, msg = only("\tadd.f32 \t%f1, %rd1, %f2;\n\tret;")
    assert (line, col) == (14, 16)
    assert msg == "add.f32: operand 2 is %rd1 (.b64), expected .f32"


def test_wrong_operand_count():
    line, col, msg = only("\tadd.s32 \t%r1, %r2;\n\tret;")
    assert (line, col) == (14, 2) and "expected 3 operands, got 2" in msg


def test_instruction_not_on_target():
    line, col, msg = only("\tsetmaxnreg.inc.sync.aligned.u32 \t240;\n\tret;", target="sm_80")
    assert (line, col) == (14, 2)
    assert "needs sm_90a" in msg and "sm_80" in msg


def test_fp8_conversion_needs_sm_89():
    line, _, msg = only("\tcvt.rn.satfinite.e4m3x2.f32 \t%rs1, %f1, %f2;\n\tret;", target="sm_80")
    assert line == 14 and "sm_89" in msg


def test_modifier_needs_newer_ptx_version():
    line, col, msg = only("\tld.global.L2::256B.f32 \t%f1, [%rd1];\n\tret;", target="sm_80", version="7.0")
    assert (line, col) == (14, 2) and "7.4" in msg and "7.0" in msg


def test_guard_must_be_a_declared_predicate():
    ps = problems("\t@%r1 bra \t$L1;\n$L1:\n\t@%p7 ret;")
    assert [p[:2] for p in ps] == [(14, 2), (16, 2)]
    assert "is .b32, expected .pred" in ps[0][2] and "'%p7' is not declared" in ps[1][2]


def test_all_errors_are_reported_together():
    m = module(REGS + "\n\tadd.s32 \t%r1, %r2, %r99;\n\tbra \t$nowhere;\n\tadd.f32 \t%f1, %rd1, %f2;\n\tret;")
    with pytest.raises(pf.PTXValidationError) as ei:
        check(m)
    e = ei.value
    assert [d.line for d in e.diagnostics] == [14, 15, 16]
    text = str(e)
    assert text.startswith("v.ptx:14:21: error: add.s32: register '%r99' is not declared\n")
    assert "\tbra" not in text and "  \tbra" not in text  # tabs expand to spaces under the caret
    assert text.endswith("3 errors")


def test_target_override_reports_what_the_new_target_lacks():
    m = module(REGS + "\n\twgmma.fence.sync.aligned;\n\tret;")
    assert validate(m) == []
    (d,) = validate(m, target="sm_80")
    assert d.line == 14 and "sm_90a" in d.message


def test_cluster_directives_need_sm_90():
    text = (".version 8.5\n.target sm_80\n.address_size 64\n.visible .entry k()\n.reqnctapercluster 2, 1, 1\n"
            "{\n\tret;\n}\n")
    (d,) = validate(pf.parse(text, filename="c.ptx"))
    assert (d.line, d.col) == (4, 1) and d.message == "k: .reqnctapercluster needs sm_90; this module targets sm_80"


def test_labels_are_scoped_by_block_as_ptxas_scopes_them():
    # the same label in sibling blocks and shadowing an outer one: ptxas accepts both
    assert problems("\t{\nL:\n\tbra L;\n\t}\n\t{\nL:\n\tbra L;\n\t}\nL:\n\tret;") == []
    # a label inside a block is not visible outside it or in a sibling (ptxas: "Unknown symbol")
    assert only("\tbra IN;\n\t{\nIN:\n\tret;\n\t}") == (14, 6, "bra: branch to missing label 'IN'")
    assert only("\t{\n\tbra IN;\n\t}\n\t{\nIN:\n\tret;\n\t}")[2] == "bra: branch to missing label 'IN'"
    # one block's labels are visible in the blocks inside it, forward and backward
    assert problems("\t{\nTOP:\n\t{\n\tbra TOP;\n\tbra END;\n\t}\nEND:\n\t}\n\tret;") == []
    # a duplicate inside one block is still an error
    assert only("\t{\nL:\nL:\n\t}\n\tret;")[2] == "label 'L' is already declared at line 15"


def test_warp_sz_is_a_predefined_constant():
    assert problems("\tmov.u32 \t%r1, WARP_SZ;\n\tadd.s32 \t%r2, %r1, WARP_SZ;\n\tret;") == []


def test_register_plus_immediate_as_ptxas_takes_it():
    assert problems("\tadd.s64 \t%rd1, %rd2+8, 1;\n\tst.global.u64 \t[%rd1], %rd2+-2;\n\tret;") == []
    # ptxas 13.0 crashes on a float one and rejects one in a vector; `%rd2-2` is its syntax error
    assert "needs an integer type, not .f32" in only("\tadd.f32 \t%f1, %f2+1, %f3;\n\tret;")[2]
    assert "vector element" in only("\tst.global.v2.u64 \t[%rd1], {%rd2+1, %rd3};\n\tret;")[2]
    with pytest.raises(pf.PTXSyntaxError):
        module(REGS + "\n\tst.global.u64 \t[%rd1], %rd2-2;\n\tret;")
    m = module(REGS + "\n\tst.global.u64 \t[%rd1], %rd2+2+3;\n\tret;")
    assert pf.parse(m.to_ptx(canonical=True), "v.ptx") == m
    assert "%rd2+5" in m.to_ptx(canonical=True)


def test_vector_registers_as_ptxas_checks_them():
    decl = "\t.reg .v4 .u32 \t%v, %w;\n\t.reg .v2 .u64 \t%d;\n"
    ok = ("\tld.global.v4.u32 \t%v, [%rd1];\n\tmov.v4.u32 \t%w, %v;\n\tadd.u32 \t%r1, %v.x, %w.a;\n"
          "\tmov.v4.u32 \t%w, %r1;\n\tmov.v2.u64 \t%d, {%d.y, %d.x};\n\tst.global.v4.u32 \t[%rd1], %w;\n\tret;")
    assert problems(decl + ok) == []
    # each of these is an error for ptxas 13.0 too
    assert "is a vector" in only(decl + "\tadd.u32 \t%r1, %v, 1;\n\tret;")[2]
    assert "'%d.z' is not declared" in only(decl + "\tmov.u64 \t%rd1, %d.z;\n\tret;")[2]
    assert "has 3 elements" in only(decl + "\tmov.v4.u32 \t%w, {1, 2, 3};\n\tret;")[2]
    m = module(REGS + "\n" + decl + ok)
    assert pf.parse(m.to_ptx(canonical=True), "v.ptx") == m


def _have_ptxas() -> bool:
    try:
        find_tool("ptxas")
        return True
    except ToolNotFound:
        return False


def _module_text(decls: str) -> str:
    return ".version 8.0\n.target sm_90a\n.address_size 64\n" + decls + "\n"


@pytest.mark.parametrize("decls,message", [
    # each one rejected by ptxas 13.0 ("Non-external variable 'x' has incomplete type", "Variable 'a' cannot be
    # allocated in .param state space", "Parameter to entry function cannot be an incomplete array", ...)
    (".global .b32 x[];", "variable 'x' has an incomplete type"),
    (".const .b32 x[];", "variable 'x' has an incomplete type"),
    (".visible .entry k() { .shared .b32 x[]; ret; }", "variable 'x' has an incomplete type"),
    (".global .b32 x[2][];", "only the first array dimension can be unsized"),
    (".visible .func f(.param .v2 .b32 a) { ret; }", "parameter 'a' cannot be a vector (.v2)"),
    (".visible .entry k(.param .u32 a[]) { ret; }", "kernel parameter 'a' cannot be an unsized array"),
    (".visible .entry k() .noreturn { ret; }", ".noreturn applies only to a .func"),
])
def test_declarations_ptxas_rejects(decls, message):
    ps = validate(pf.parse(_module_text(decls), "d.ptx"))
    assert len(ps) == 1 and message in ps[0].message, ps
    if _have_ptxas():
        assert not assemble(_module_text(decls), "sm_90a").ok


@pytest.mark.parametrize("decls", [
    ".extern .global .b32 x[];", ".global .b32 x[] = {1, 2, 3};", ".extern .shared .align 16 .b8 dyn[];",
    ".visible .func f() .noreturn { trap; }", ".global .v2 .b32 x;",
])
def test_declarations_ptxas_accepts(decls):
    assert validate(pf.parse(_module_text(decls), "d.ptx")) == []
    if _have_ptxas() and not decls.startswith(".extern .global"):  # ptxas wants a definition at link time
        res = assemble(_module_text(decls), "sm_90a")
        assert res.ok, res.stderr


@pytest.mark.parametrize("decls", [
    ".visible .func f(.param .b32 .v2 a) { ret; }", ".global .b32 .v2 x;",
    ".visible .entry k() { .reg .u32 .v4 %v; ret; }",
])
def test_vector_size_after_the_type_is_a_syntax_error(decls):
    with pytest.raises(pf.PTXSyntaxError, match="must come before the type"):
        pf.parse(_module_text(decls), "d.ptx")
    if _have_ptxas():
        assert "syntax error" in assemble(_module_text(decls), "sm_90a").stderr


def test_ld_nc_needs_the_global_state_space():
    """ptxas: `ld.nc` without `.global` is refused (the non-coherent path reads global memory only)."""
    assert [m for _, _, m in problems("ld.nc.f32 %f1, [%rd1];")] == ["ld.nc.f32: needs one of .global"]
    assert problems("ld.global.nc.f32 %f1, [%rd1];") == []


FTZ_CASES = [  # (instruction, ptxas 13.0 accepts it): .ftz needs .f32 as the source or the destination
    ("cvt.ftz.s32.s16 %r1, %rs1", False), ("cvt.rn.ftz.f16.f64 %rs1, %fd1", False),
    ("cvt.rzi.ftz.s32.f64 %r1, %fd1", False), ("cvt.rn.ftz.f16.s32 %rs1, %r1", False),
    ("cvt.ftz.f32.f16 %f1, %rs1", True), ("cvt.rzi.ftz.s32.f32 %r1, %f1", True),
    ("cvt.rn.ftz.f32.f64 %f1, %fd1", True), ("cvt.ftz.f64.f32 %fd1, %f1", True),
    ("cvt.rn.ftz.f16.f32 %rs1, %f1", True), ("cvt.rn.ftz.f32.s32 %f1, %r1", True),
    ("cvt.rni.ftz.f32.f32 %f1, %f2", True),
]


@pytest.mark.parametrize("ins, ok", FTZ_CASES)
def test_cvt_ftz_needs_an_f32_side(ins, ok):
    body = ".reg .f64 %fd<3>;\n" + ins + ";"
    found = [m for _, _, m in problems(body)]
    assert (found == []) == ok, found
    if not ok:
        assert found == [f"{ins.split()[0]}: .ftz applies only to conversions from or to .f32"]
