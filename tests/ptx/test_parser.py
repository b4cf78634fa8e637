"""The parser on hand-written PTX: every construct of the IR, and precise syntax errors."""

import dataclasses

import pytest

import ptxforge as pf
from ptxforge.ptx import ir

HEADER = ".version 8.5\n.target sm_90a\n.address_size 64\n"


def body_of(text: str, header: str = HEADER):
    m = pf.parse(header + text, filename="t.ptx")
    return m.functions[-1].body


def entry(body: str, params: str = "") -> str:
    return f".visible .entry k({params})\n{{\n{body}\n}}\n"


def test_module_header_and_kernel_params():
    m = pf.parse(HEADER + ".visible .entry vadd(\n\t.param .u64 .ptr .global .align 16 vadd_param_0,\n"
                 "\t.param .align 8 .b8 vadd_param_1[16],\n\t.param .u32 vadd_param_2\n)\n"
                 ".maxntid 256, 1, 1\n.minnctapersm 2\n{\n\tret;\n}\n", filename="v.ptx")
    assert m.version == (8, 5) and m.target.arch == "sm_90a" and m.address_size == 64
    k = m.kernels[0]
    assert k.name == "vadd" and k.linkage == ".visible" and k.is_kernel
    p0, p1, p2 = k.params
    assert (p0.type, p0.ptr_space, p0.ptr_align) == (".u64", ".global", 16)
    assert (p1.align, p1.type, p1.array, p1.size) == (8, ".b8", (16,), 16)
    assert p2.type == ".u32"
    assert k.directives == ((".maxntid", (256, 1, 1)), (".minnctapersm", (2,)))


def test_register_ranges_and_lists():
    body = body_of(entry(".reg .pred %p<3>;\n.reg .f32 %f1, %f2;\n.reg .b64 %rd<2>, %x;\nret;"))
    decls = [s for s in body if isinstance(s, ir.RegisterDecl)]
    assert decls[0].declared() == ("%p0", "%p1", "%p2")
    assert decls[1].declared() == ("%f1", "%f2")
    assert decls[2].declared() == ("%rd0", "%rd1") and decls[3].declared() == ("%x",)


def test_variables_in_every_state_space():
    m = pf.parse(HEADER + ".global .align 4 .b8 gv[8] = {1, 2, 3, 4, 5, 6, 7, 8};\n"
                 ".const .f32 c = 0f3F800000;\n.extern .shared .align 16 .b8 dyn[];\n"
                 ".global .attribute(.managed) .align 4 .u32 managed_x;\n"
                 ".global .u64 ptr = generic(gv)+4;\n" + entry(
                     ".local .align 8 .b8 __local_depot0[32];\n.shared .align 4 .b8 s[1024];\nret;"))
    gv, c, dyn, man, ptr = m.variables
    assert (gv.space, gv.align, gv.array, gv.init.text, gv.size) == (".global", 4, (8,), "{1, 2, 3, 4, 5, 6, 7, 8}", 8)
    assert c.init.text == "0f3F800000"
    assert (dyn.linkage, dyn.array, dyn.size) == (".extern", (None,), 0)
    assert man.attributes == (".attribute(.managed)",)
    assert ptr.init.text == "generic(gv)+4"
    local, shared = [s for s in m.kernels[0].body if isinstance(s, ir.Variable)]
    assert (local.space, local.size) == (".local", 32) and (shared.space, shared.size) == (".shared", 1024)


def test_instruction_parts_and_guards():
    body = body_of(entry(".reg .pred %p<2>;\n.reg .f32 %f<5>;\n.reg .b64 %rd<3>;\n"
                         "@!%p1 ld.global.nc.L1::no_allocate.L2::256B.v4.f32 {%f1, %f2, _, %f4}, [%rd1+-4];\nret;"))
    ld = body[3]
    assert ld.guard == ir.Guard("%p1", True)
    assert ld.opcode == "ld" and ld.suffixes == ("global", "nc", "L1::no_allocate", "L2::256B", "v4", "f32")
    assert ld.types == (".f32",) and ".L2::256B" in ld.modifiers
    vec, addr = ld.operands
    assert isinstance(vec, ir.Vector) and isinstance(vec.elements[2], ir.Sink)
    assert addr == ir.Address(ir.Register("%rd1"), -4, written=True)


@pytest.mark.parametrize("text,value", [
    ("42", 42), ("0x2A", 42), ("052", 42), ("0b101010", 42), ("42U", 42), ("-1", -1),
    ("0f3F800000", 1.0), ("0d3FF0000000000000", 1.0), ("0fFF800000", float("-inf")), ("1.5", 1.5),
])
def test_immediates(text, value):
    body = body_of(entry(f".reg .b32 %r1;\nmov.b32 %r1, {text};"))
    imm = body[1].operands[1]
    assert imm.value == value and imm.text == text


def test_special_registers_pairs_negation_and_symbols():
    body = body_of(entry(".reg .b32 %r<4>;\n.reg .pred %p<3>;\nmov.u32 %r1, %tid.x;\n"
                         "shfl.sync.down.b32 %r2|%p1, %r1, 1, 31, -1;\n"
                         "setp.eq.and.s32 %p2, %r1, 0, !%p1;\nmov.u32 %r3, %laneid;\nbra.uni $L__BB0_1;\n"
                         "$L__BB0_1:\nret;"))
    assert body[2].operands[1] == ir.SpecialRegister("%tid.x")
    assert isinstance(body[3].operands[0], ir.PredPair)
    assert body[4].operands[3] == ir.Negated(ir.Register("%p1"))
    assert body[5].operands[1] == ir.SpecialRegister("%laneid")
    assert body[6].operands[0] == ir.Symbol("$L__BB0_1") and body[7] == ir.Label("$L__BB0_1")


def test_calls_prototypes_and_nested_blocks():
    text = (HEADER + ".extern .func (.param .b32 func_retval0) vprintf(.param .b64 a, .param .b64 b);\n"
            + entry("{\n.reg .b32 temp;\n.param .b64 param0;\nst.param.b64 [param0], 0;\n"
                    ".param .b32 retval0;\nprototype_0 : .callprototype (.param .b32 _) _ (.param .b64 _);\n"
                    "call.uni (retval0), vprintf, (param0, param0);\n}\nret;"))
    m = pf.parse(text)
    decl = m.functions[0]
    assert decl.body is None and decl.linkage == ".extern" and decl.returns[0].name == "func_retval0"
    block = m.kernels[0].body[0]
    assert isinstance(block, ir.Block)
    proto = block.body[4]
    assert isinstance(proto, ir.CallPrototype) and proto.text.startswith(".callprototype")
    call = block.body[5]
    assert call.operands[0] == ir.ParenList((ir.Symbol("retval0"),))
    assert block.body[0].declared() == ("temp",)


def test_branch_target_lists():
    body = body_of(entry(".reg .b32 %r<2>;\nts: .branchtargets $A, $B;\nbrx.idx %r1, ts;\n$A:\nret;\n$B:\nret;"))
    tl = body[1]
    assert tl == ir.TargetList("ts", ".branchtargets", ("$A", "$B"))
    assert body[2].operands[1] == ir.Symbol("ts")


def test_texture_and_tma_address_lists():
    body = body_of(entry(".reg .b32 %r<3>;\n.reg .b64 %rd<3>;\n"
                         "cp.async.bulk.tensor.2d.shared::cluster.global.mbarrier::complete_tx::bytes "
                         "[%r1], [%rd1, {%r1, %r2}], [%r2];\nret;"))
    cp = body[2]
    assert isinstance(cp.operands[1], ir.AddressList) and len(cp.operands[1].items) == 2


def test_debug_directives_kept():
    text = (HEADER + entry(".loc 1 5 3\nret;\n.loc 1 6 1, function_name $L__info_string0, inlined_at 1 9 2")
            + '.file 1 "/tmp/k.cu", 1700000000, 512\n.section .debug_abbrev\n{\n.b8 1\n.b8 17\n}\n')
    m = pf.parse(text)
    loc1, _, loc2 = m.kernels[0].body
    assert (loc1.file, loc1.line, loc1.col) == (1, 5, 3)
    assert loc2.extra == ", function_name $L__info_string0, inlined_at 1 9 2"
    f, sec = m.items[1], m.items[2]
    assert (f.index, f.path, f.extra) == (1, "/tmp/k.cu", "1700000000, 512")
    assert sec.name == ".debug_abbrev" and sec.lines == (".b8 1", ".b8 17")


def test_canonical_print_reparses_to_equal_ir():
    text = HEADER + entry(".reg .b32 %r<3>;\nmov.u32 %r1, %tid.x;  // comment\nadd.s32 %r2, %r1, 0x10;\nret;")
    m = pf.parse(text)
    assert m.to_ptx() == text
    canon = m.to_ptx(canonical=True)
    assert "comment" not in canon and pf.parse(canon) == m


def test_editing_one_instruction_keeps_the_rest_of_the_layout():
    text = HEADER + "// keep me\n" + entry(".reg .f32 %f<4>;\n\tadd.f32   %f3, %f1, %f2;   // sum\nret;")
    m = pf.parse(text)
    k = m.kernels[0]
    add = k.body[1]
    sub = dataclasses.replace(add, opcode="sub")
    k2 = dataclasses.replace(k, body=(k.body[0], sub, k.body[2]))
    out = dataclasses.replace(m, items=(k2,)).to_ptx()
    assert "// keep me" in out and "sub.f32 \t%f3, %f1, %f2;" in out and "add.f32" not in out
    assert out.replace("sub.f32 \t%f3, %f1, %f2;", "add.f32   %f3, %f1, %f2;   // sum") == text


def test_span_positions():
    m = pf.parse(HEADER + entry(".reg .b32 %r<2>;\n  mov.u32 %r1, 7;"), filename="s.ptx")
    mov = m.kernels[0].body[1]
    assert (mov.span.file, mov.span.line, mov.span.col) == ("s.ptx", 7, 3)
    assert (mov.operands[1].span.line, mov.operands[1].span.col) == (7, 16)


# ---------------------------------------------------------------------------- syntax errors


def syntax_error(text: str) -> pf.PTXSyntaxError:
    with pytest.raises(pf.PTXSyntaxError) as ei:
        pf.parse(text, filename="bad.ptx")
    return ei.value


def test_error_points_at_file_line_col_with_caret():
    e = syntax_error(HEADER + entry(".reg .b32 %r<2>;\nadd.s32 %r1, %r1 %r1;\nret;"))
    assert (e.file, e.line, e.col) == ("bad.ptx", 7, 18)
    assert "expected ',' or ';'" in e.msg
    text = str(e)
    assert text.startswith("bad.ptx:7:18: error:") and "\n  add.s32 %r1, %r1 %r1;\n" in text
    assert text.splitlines()[2] == "  " + " " * 17 + "^"


def test_every_syntax_error_is_reported():
    e = syntax_error(HEADER + entry(".reg .b32 %r<2>;\nadd.s32 %r1 %r1;\nmov.u32 %r1, [;\nret;")
                     + ".global .b32 ;\n")
    assert [(d.line, d.col) for d in e.diagnostics] == [(7, 13), (8, 15), (11, 14)]
    assert str(e).endswith("3 errors")


@pytest.mark.parametrize("text,line,col,words", [
    (".version 8.5\n.target sm_80\n.entry k() {\n ret;\n", 5, 1, "missing '}'"),
    (".version x\n", 1, 10, "expected a version"),
    (".version 8.5\n.target sm_80\n.entry k() {\n.reg .b32 %r<x>;\n}\n", 4, 14, "register count"),
    (".version 8.5\n.target sm_80\n.entry k() {\n.bogus 1;\n}\n", 4, 1, "unknown directive '.bogus'"),
    (".version 8.5\n.target sm_80\n.address_size 48\n", 3, 1, ".address_size must be 32 or 64"),
    (".version 8.5\n.target sm_80\n.entry k(.param q) {\n}\n", 3, 17, "parameter type"),
    (".version 8.5\n.target sm_80\n.entry k() {\nld.global.f32 %f1, [%rd1+];\n}\n", 4, 26, "address offset"),
    (".target sm_80\n.entry k() { ret; }\n", 1, 1, "missing .version"),
])
def test_syntax_error_cases(text, line, col, words):
    e = syntax_error(text)
    assert (e.line, e.col) == (line, col), str(e)
    assert words in e.msg


def test_parse_rejects_bytes_with_a_clear_message():
    with pytest.raises(TypeError, match="takes PTX text as str"):
        pf.parse(b".version 8.5")


def test_absurd_register_range_is_an_error_not_an_out_of_memory():
    e = syntax_error(".version 8.5\n.target sm_80\n.entry k() {\n.reg .b32 %r<999999999999999999>;\nret;\n}\n")
    assert (e.line, e.col) == (4, 14) and "the count must be 1 to 1,048,576" in e.msg


VIDEO = """.version 8.0
.target sm_80
.address_size 64
.visible .entry k(.param .u64 p)
{
 .reg .b32 %r<6>;
 vmad.s32.s32.s32.sat.shr15 %r1, -%r2.h0, %r3.h1, %r4;
 vmad.s32.s32.s32 %r5, %r2.h0, %r3.h1, -%r4;
 vset4.u32.u32.ne %r1.b30, %r2, %r3, %r1;
 vadd.u32.u32.u32.sat.add %r1, %r2.b0, %r3.h1, %r1;
 ret;
}
"""


def test_video_operands_negation_and_selectors():
    from ptxforge.ptx.validator import validate

    m = pf.parse(VIDEO, filename="v.ptx")
    assert m.to_ptx() == VIDEO
    first = next(m.kernels[0].instructions())
    assert isinstance(first.operands[1], ir.Minus) and first.operands[1].operand.name == "%r2.h0"
    assert ir.split_selector("%r2.h0") == ("%r2", "h0") and ir.split_selector("%r1.b30") == ("%r1", "b30")
    assert ir.split_selector("%r2") == ("%r2", None)
    assert not validate(m)
    canon = m.to_ptx(canonical=True)
    assert "-%r2.h0" in canon and pf.parse(canon).to_ptx(canonical=True) == canon
    bad = pf.parse(VIDEO.replace("%r3.h1, -%r4", "%r9.h1, -%r4"), filename="v.ptx")
    assert [d.message for d in validate(bad)] == ["vmad.s32.s32.s32: register '%r9.h1' is not declared"]


def test_malformed_escape_in_a_file_name_parses():
    """Found by the fuzzer: a stray \\x in a .file string used to raise UnicodeDecodeError."""
    m = pf.parse('.version 8.0\n.target sm_80\n.address_size 64\n.file 1 "d\\xemo.cu"\n')
    assert m.to_ptx().endswith('.file 1 "d\\xemo.cu"\n')
