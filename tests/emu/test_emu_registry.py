"""The emulator's builders against the ISA table (ptx/isa): every family has a builder or a declared reason
(`registry.UNSUPPORTED`), builders bind only table families, the modifiers a builder dispatches on are the
table's, and every `d|p` operand form the table allows runs."""

import numpy as np
import pytest

import ptxforge as pf
from ptxforge.emu.compiler import REGISTRY
from ptxforge.emu.errors import UnsupportedInstruction
from ptxforge.emu.registry import UNSUPPORTED, Registry
from ptxforge.emu.semantics import bitops
from ptxforge.ptx.isa import FAMILIES
from ptxforge.ptx.validator import validate
from ptxforge.runtime.sass import disassemble, nvdisasm_dir
from ptxforge.toolchain import ToolNotFound, assemble, find_tool

try:
    find_tool("ptxas")
    HAVE_PTXAS = True
except ToolNotFound:
    HAVE_PTXAS = False
try:  # decided up front, so that a disassembly failure is a failure, not a skip
    find_tool("cuobjdump")
    nvdisasm_dir()
    HAVE_DISASM = True
except ToolNotFound:
    HAVE_DISASM = False


def test_every_isa_family_has_a_builder_or_a_declared_reason():
    assert REGISTRY.missing() == [], "families with neither a builder nor an UNSUPPORTED entry"
    assert not set(REGISTRY.builders) & set(UNSUPPORTED)
    assert set(REGISTRY.builders) | set(UNSUPPORTED) == set(FAMILIES)
    assert all(len(reason) > 20 for reason in UNSUPPORTED.values())


def test_every_family_the_emulator_runs_has_effects_in_the_table():
    """Liveness, the divergence fast path and the sanitizer read an instruction's effects from the table: a
    family with a builder but no effects would be analysed as nothing at all."""
    assert [f for f in REGISTRY.builders if FAMILIES[f].effects is None] == []


def test_a_builder_for_a_name_outside_the_table_is_refused():
    reg = Registry()
    with pytest.raises(ValueError, match="names no instruction family"):
        reg.register("frobnicate", lambda ctx: None)
    reg.register("add", lambda ctx: None)
    with pytest.raises(ValueError, match="two builders for 'add'"):
        reg.register("add", lambda ctx: None)
    with pytest.raises(ValueError, match="does not have"):
        Registry(unsupported={"frobnicate": "no such instruction"})


def test_a_name_covering_several_families_binds_each_but_the_unsupported_ones():
    tcgen05 = {f for f in FAMILIES if f.startswith("tcgen05.")}
    assert tcgen05 - set(REGISTRY.builders) == {"tcgen05.cp", "tcgen05.shift"}
    assert REGISTRY.builders["cp.async.bulk.tensor"] is REGISTRY.builders["cp.async"]


def test_an_unsupported_family_fails_when_executed_naming_the_reason():
    text = """.version 7.3
.target sm_80
.address_size 64
.visible .entry k(.param .u64 p)
{
  .reg .b64 %rd<2>;
  stacksave.u64 %rd1;
  ret;
}
"""
    m = pf.parse(text, "s.ptx")
    assert not [d for d in validate(m) if d.severity == "error"]
    with pytest.raises(UnsupportedInstruction, match=r"s\.ptx:7: stacksave.u64: stacksave is not supported: "
                                                     r"the stack pointer is not modelled"):
        m.kernel("k").launch(grid=(1,), block=(1,), args=[np.zeros(1, np.uint64)], device="emu")


def test_a_longer_name_keeps_its_own_builder_whatever_the_order():
    """'st' binds st and st.async; 'st.bulk' (ops_async) keeps st.bulk, registered before or after 'st' (the st
    builder used to run st.bulk [a], size, 0 as a 4-byte store of `size`; tests/emu/test_emu_st_bulk.py)."""
    def st(ctx):
        return None

    def bulk(ctx):
        return None
    for order in (("st", st), ("st.bulk", bulk)), (("st.bulk", bulk), ("st", st)):
        reg = Registry()
        reg.register_all(dict(order))
        assert reg.builders["st.bulk"] is bulk and reg.builders["st"] is reg.builders["st.async"] is st
    assert REGISTRY.builders["st.bulk"] is not REGISTRY.builders["st"]
    assert "st.bulk" not in UNSUPPORTED


def test_prmt_modes_are_the_tables():
    """The byte-selection tables of semantics.prmt cover exactly the modes the ISA table lists."""
    assert {f".{m}" for m in bitops._PRMT_MODES} == set(FAMILIES["prmt"].modifiers)


# ---------------------------------------------------------------------------- d|p operand forms

def _head(version="8.0", target="sm_90a"):
    return f".version {version}\n.target {target}\n.address_size 64\n"


def _pair_kernel(setup: str, ins: str, head: str) -> str:
    """32 threads; out[2t] = d, out[2t+1] = p of `ins` (which writes %r1|%p1)."""
    return head + f""".visible .entry k(.param .u64 out)
{{
  .reg .b32 %t, %v, %r1, %s;
  .reg .pred %p1, %q;
  .reg .b64 %rd<3>;
  mov.u32 %t, %tid.x;
  {setup}
  {ins}
  selp.u32 %s, 1, 0, %p1;
  ld.param.u64 %rd0, [out];
  mul.wide.u32 %rd1, %t, 8;
  add.s64 %rd0, %rd0, %rd1;
  st.global.u32 [%rd0], %r1;
  st.global.u32 [%rd0+4], %s;
  ret;
}}
"""


T = np.arange(32)
# family -> (setup, instruction, head, expected d per thread, expected p per thread), from the ISA's semantics
PAIR_FORMS = {
    "setp": ("", "setp.lt.u32 %q|%p1, %t, 16; selp.u32 %r1, 1, 0, %q;", _head(),
             (T < 16).astype(int), (T >= 16).astype(int)),  # q = !p without a BoolOp
    "lop3": ("setp.eq.u32 %q, %t, 16;", "lop3.or.b32 %r1|%p1, %t, 15, 0, 0xc0, %q;", _head("8.2"),
             T & 15, ((T & 15) != 0) | (T == 16)),  # p = (d != 0) .or q
    "shfl.sync": ("", "shfl.sync.down.b32 %r1|%p1, %t, 4, 0x1f, 0xffffffff;", _head(),
                  np.where(T + 4 <= 31, T + 4, T), T + 4 <= 31),  # p: the source lane is in range
    "shfl": ("", "shfl.down.b32 %r1|%p1, %t, 4, 0x1f;", _head("6.3", "sm_75"),
             np.where(T + 4 <= 31, T + 4, T), T + 4 <= 31),
    "match": ("shr.u32 %v, %t, 5;", "match.all.sync.b32 %r1|%p1, %v, 0xffffffff;", _head(),
              np.full(32, 0xFFFFFFFF), np.ones(32, bool)),  # every lane holds 0: all match
    "elect.sync": ("", "elect.sync %r1|%p1, 0xffffffff;", _head(),
                   np.zeros(32, int), T == 0),  # d: the leader's lane id; p on the leader only
}


def test_every_family_with_a_paired_destination_has_a_form_here():
    paired = {f for f, s in FAMILIES.items() if any(r.pair for sig in s.signatures for r in sig.roles)}
    assert paired == set(PAIR_FORMS)


@pytest.mark.parametrize("family", sorted(PAIR_FORMS))
def test_paired_destination_runs(family):
    setup, ins, head, want_d, want_p = PAIR_FORMS[family]
    text = _pair_kernel(setup, ins, head)
    m = pf.parse(text, f"{family}.ptx")
    assert not [str(d) for d in validate(m) if d.severity == "error"]
    if HAVE_PTXAS:
        target = head.split(".target ")[1].split()[0]
        res = assemble(text, target)
        assert res.ok, res.stderr
    out = np.zeros(64, np.uint32)
    m.kernel("k").launch(grid=(1,), block=(32,), args=[out], device="emu")
    assert out[0::2].tolist() == [int(x) & 0xFFFFFFFF for x in want_d]
    assert out[1::2].tolist() == [int(x) for x in want_p]


@pytest.mark.parametrize("ins, shown", [("add.u32 %r1|%p1, %r2, %r3;", "%r1|%p1 is not a register"),
                                        ("add.u32 %r1, [%rd1+8], %r3;", "cannot read operand \\[%rd1\\+8\\]")])
def test_an_operand_form_a_builder_does_not_take_is_named_as_written(ins, shown):
    """The message shows the operand as the PTX printer writes it (it used to say 'PredPair', 'Address')."""
    text = _head() + f""".visible .entry k(.param .u64 p)
{{
  .reg .b32 %r<4>;
  .reg .pred %p<2>;
  .reg .b64 %rd<2>;
  {ins}
  ret;
}}
"""
    m = pf.parse(text, "o.ptx")
    with pytest.raises(UnsupportedInstruction, match=r"o\.ptx:9: add\.u32: " + shown):  # behind the validator
        m.kernel("k").launch(grid=(1,), block=(1,), args=[np.zeros(1, np.uint64)], device="emu", validate=False)


# ---------------------------------------------------------------------------- lop3.BoolOp against ptxas

LOP3 = _head("8.2") + """.visible .entry k(.param .u64 p)
{
  .reg .b32 %r<16>;
  .reg .pred %p<8>;
  .reg .b64 %rd<2>;
  ld.param.u64 %rd0, [p];
  mov.u32 %r1, 0xF0F0F0F0;
  mov.u32 %r2, 0x0FF00FF0;
  mov.u32 %r4, 0;
  setp.ne.u32 %p2, %r1, 0;
  setp.eq.u32 %p3, %r1, 0;
  lop3.or.b32 %r3|%p1, %r1, %r2, %r4, 0x80, %p3;
  lop3.or.b32 %r6|%p4, %r1, %r2, %r4, 0xfe, %p3;
  lop3.and.b32 %r8|%p5, %r1, %r2, %r4, 0xfe, %p3;
  lop3.and.b32 %r10|%p6, %r1, %r2, %r4, 0xfe, %p2;
  lop3.or.b32 %r12|%p7, %r1, %r2, %r4, 0x80, %p2;
  selp.u32 %r5, 1, 0, %p1;
  selp.u32 %r7, 1, 0, %p4;
  selp.u32 %r9, 1, 0, %p5;
  selp.u32 %r11, 1, 0, %p6;
  selp.u32 %r13, 1, 0, %p7;
  st.global.v2.u32 [%rd0], {%r3, %r5};
  st.global.v2.u32 [%rd0+8], {%r6, %r7};
  st.global.v2.u32 [%rd0+16], {%r8, %r9};
  st.global.v2.u32 [%rd0+24], {%r10, %r11};
  st.global.v2.u32 [%rd0+32], {%r12, %r13};
  ret;
}
"""
# (d, p) of each lop3 above: p = (d != 0) BoolOp q, q false for the first three and true for the last two
LOP3_WANT = [(0, 0), (0xFFF0FFF0, 1), (0xFFF0FFF0, 0), (0xFFF0FFF0, 1), (0, 1)]


def test_lop3_bool_ops_are_the_tables_and_each_has_its_semantics():
    from ptxforge.emu import ops_alu
    from ptxforge.ptx.isa import modifier_slot

    assert ops_alu.LOP3_BOOL_OPS == modifier_slot("lop3", "boolop")
    x = np.array([0, 1], np.uint32)
    for op in ops_alu.LOP3_BOOL_OPS:
        assert len(bitops.lop3(x, x, x, 0xF0, bool_op=op, q=np.array([False, True]))) == 2


def test_lop3_predicate_form_runs():
    m = pf.parse(LOP3, "lop3.ptx")
    assert not [d for d in validate(m) if d.severity == "error"]
    out = np.zeros(10, np.uint32)
    m.kernel("k").launch(grid=(1,), block=(1,), args=[out], device="emu")
    assert [(int(out[2 * i]), int(out[2 * i + 1])) for i in range(5)] == LOP3_WANT


@pytest.mark.skipif(not (HAVE_PTXAS and HAVE_DISASM), reason="needs ptxas, cuobjdump and nvdisasm")
def test_lop3_predicate_form_is_what_ptxas_compiles():
    """ptxas 13.0 compiles lop3.BoolOp to one LOP3.LUT writing the register and a predicate, .PAND for .and,
    with q as the predicate input (folded to PT / !PT here): the emulator's p = (d != 0) BoolOp q."""
    res = assemble(LOP3, "sm_90a")
    assert res.ok, res.stderr
    sass = disassemble(res.cubin)
    lop3 = [line.split("*/")[1].split(";")[0].split() for line in sass.splitlines() if "LOP3.LUT" in line]
    forms = [(w[0], w[-1]) for w in lop3]  # (opcode with its predicate mode, the predicate input)
    assert sorted(forms) == sorted([("LOP3.LUT", "!PT"), ("LOP3.LUT", "!PT"), ("LOP3.LUT.PAND", "!PT"),
                                    ("LOP3.LUT.PAND", "PT"), ("LOP3.LUT", "PT")])
    assert all(w[1].startswith("P") and w[1].rstrip(",")[1:].isdigit() for w in lop3)  # a predicate result


# ---------------------------------------------------------------------------- modifiers the builders test for

# modifiers builders test for on families whose table entry leaves the modifiers open (modifiers=None)
OPEN_MODIFIERS = {
    "multicast::cluster": "cp.async.bulk", "col": "wmma.load", "cta_group::2": "tcgen05.alloc",
    "pack::16b": "tcgen05.ld", "unpack::16b": "tcgen05.st", "mbarrier::arrive::one": "tcgen05.commit",
    "po": "vmad", "sp": "wgmma.mma_async",
}


def _known_spellings() -> set[str]:
    """Every modifier (of a family's list or a named group), type and family name part the ISA table lists,
    without the dot."""
    from ptxforge.ptx.ir import ALL_TYPES

    known = {t.lstrip(".") for t in ALL_TYPES}
    for spec in FAMILIES.values():
        known |= set(spec.family.split(".")) | {m.lstrip(".") for m in spec.modifiers or ()}
        known |= {m.lstrip(".") for _, values in spec.slots for m in values}
    return known


def _ops_trees():
    import ast
    from pathlib import Path

    import ptxforge.emu

    for path in sorted(Path(ptxforge.emu.__file__).parent.glob("ops_*.py")):
        yield path.name, ast.parse(path.read_text())


def test_every_modifier_a_builder_tests_for_is_one_the_table_knows():
    """`ins.has('x')` in an ops module names a modifier, type or name part the ISA table lists, so a builder
    cannot dispatch on a spelling the validator would refuse; the few on families whose entry leaves the
    modifiers open are listed above."""
    import ast

    assert all(FAMILIES[f].modifiers is None for f in OPEN_MODIFIERS.values())
    known = _known_spellings()
    bad, seen = [], 0
    for name, tree in _ops_trees():
        for n in ast.walk(tree):
            if isinstance(n, ast.Call) and isinstance(n.func, ast.Attribute) and n.func.attr == "has" and n.args \
                    and isinstance(n.args[0], ast.Constant):
                seen += 1
                if n.args[0].value not in known and n.args[0].value not in OPEN_MODIFIERS:
                    bad.append(f"{name}:{n.lineno}: {n.args[0].value!r}")
    assert seen > 100 and bad == []


# spellings the ops modules compare with that are not PTX modifiers: the state space of an address without one
NOT_MODIFIERS = {"generic"}


def test_every_modifier_list_in_the_builders_is_spelled_as_the_table():
    """The lists builders pick a modifier from (`s in ("up", "down", "bfly", "idx")`, `ROUNDINGS = (...)`) are
    still typed in the ops modules; each spelling in them is one the ISA table lists (or an open family's,
    above), so a list cannot drift from the table unseen."""
    import ast

    def strings(node: ast.AST) -> list[str]:
        if isinstance(node, ast.Tuple | ast.Set | ast.List):
            return [e.value for e in node.elts if isinstance(e, ast.Constant) and isinstance(e.value, str)]
        if isinstance(node, ast.Call) and getattr(node.func, "id", "") in ("frozenset", "set") and node.args:
            return strings(node.args[0])
        return []

    known = _known_spellings() | set(OPEN_MODIFIERS) | NOT_MODIFIERS
    bad, seen = [], 0
    for name, tree in _ops_trees():
        for n in ast.walk(tree):
            spellings = []
            if isinstance(n, ast.Compare) and any(isinstance(o, ast.In | ast.NotIn) for o in n.ops):
                spellings = [v for c in n.comparators for v in strings(c)]
            elif isinstance(n, ast.Assign) and n in tree.body and not any(
                    isinstance(t, ast.Name) and t.id == "__all__" for t in n.targets):
                spellings = strings(n.value)
            seen += len(spellings)
            bad += [f"{name}:{n.lineno}: {v!r}" for v in spellings if v.lstrip(".") not in known]
    assert seen > 100 and bad == []


# ---------------------------------------------------------------------------- modifier groups read from the table

def _floats_pair():
    one, nan = np.float32(1.0).view(np.uint32), np.uint32(0x7FC00000)
    return np.array([one, nan, one], np.uint32), np.array([one, one, nan], np.uint32)


def test_float_builders_pick_their_modifiers_from_the_table():
    """ops_float's groups are the table's (adding a rounding or a comparison there is what makes the emulator
    take it), and every value of each has its semantics: no table value falls through unseen."""
    from ptxforge.emu import ops_alu, ops_float
    from ptxforge.emu.semantics import compare, float_misc
    from ptxforge.ptx.isa import modifier_slot

    rnd_families = {f for f, s in FAMILIES.items() if any(n == "rnd" for n, _ in s.slots)}
    assert {"add", "sub", "mul", "mad", "fma", "div", "rcp", "sqrt", "cvt"} <= rnd_families
    assert ops_float.ROUNDINGS == frozenset().union(*(modifier_slot(f, "rnd") for f in rnd_families))
    assert ops_float.IROUND == modifier_slot("cvt", "irnd") == set(ops_float.IROUND_NUMPY)
    assert ops_float.FLOAT_CMPS == modifier_slot("setp", "cmp_float") == modifier_slot("set", "cmp_float")
    assert set(ops_alu._INT_CMP) == modifier_slot("setp", "cmp_int") == modifier_slot("set", "cmp_int")
    assert set(ops_alu._BOOL) == modifier_slot("setp", "boolop") == modifier_slot("set", "boolop")
    a, b = _floats_pair()
    for cmp in ops_float.FLOAT_CMPS:  # each float comparison has its semantics (an unknown one raises)
        assert compare.compare(a, b, cmp, "f32").shape == (3,)
    assert ops_float.TESTP_CLASSES == modifier_slot("testp", "class")
    for cls in ops_float.TESTP_CLASSES:
        assert float_misc.testp(a, cls, "f32").shape == (3,)
    for rnd in modifier_slot("add", "rnd"):  # the float arithmetic's roundings all have semantics
        assert ops_float.sem("floating").add(a, b, "f32", rnd=rnd).shape == (3,)


def test_atomic_ops_are_the_tables_and_each_has_its_combine_on_every_type_the_table_allows():
    from ptxforge.emu import ops_atomic
    from ptxforge.ptx.isa import modifier_slot

    assert ops_atomic.OPS == modifier_slot("atom", "op") == modifier_slot("red", "op")
    allowed = dict(FAMILIES["atom"].mod_types)  # '.add' -> the types atom.add takes
    old, v, c = np.array([5, 0, 9], np.uint32), np.array([3, 3, 9], np.uint32), np.array([7, 7, 1], np.uint32)
    want = {"and": old & v, "or": old | v, "xor": old ^ v, "exch": v, "add": old + v,
            "inc": np.where(old >= v, 0, old + 1), "dec": np.where((old == 0) | (old > v), v, old - 1),
            "min": np.minimum(old, v), "max": np.maximum(old, v), "cas": np.where(old == v, c, old)}
    assert set(want) == ops_atomic.OPS
    for op in ops_atomic.OPS:
        for ty in sorted(allowed["." + op] - set(ATOMIC_TYPES_REFUSED)):
            step, _, _ = ops_atomic._combine(op, ty)  # a KeyError here is an op the emulator lost
            if ty in (".u32", ".s32", ".b32"):
                assert step(old, v, c).astype(np.uint32).tolist() == want[op].astype(np.uint32).tolist(), (op, ty)


# types the table allows an atomic on that the emulator refuses before any atomic is built, and why
ATOMIC_TYPES_REFUSED = {".b128": "the register file refuses .b128 registers ('.b128 registers are not supported')"}


def test_warp_builders_pick_their_modes_from_the_table_and_each_has_its_entry():
    from ptxforge.emu import ops_warp
    from ptxforge.ptx.isa import modifier_slot

    assert ops_warp.SHFL_MODES == modifier_slot("shfl.sync", "mode") == modifier_slot("shfl", "mode") \
        == set(ops_warp._SHFL_SOURCE)
    assert ops_warp.VOTE_MODES == modifier_slot("vote.sync", "mode") == modifier_slot("vote", "mode") \
        == set(ops_warp._VOTE_RESULT)
    assert ops_warp.REDUX_OPS == set(ops_warp.REDUX_BITWISE) | set(ops_warp.REDUX_ARITH)
    assert set(ops_warp.REDUX_TYPES) >= ops_warp.REDUX_OPS


REDUX = _head("8.6", "sm_100a") + """.visible .entry k(.param .u64 p)
{{
  .reg .{ty} %x<3>;
  mov.{ty} %x1, 1;
  redux.sync.{op}.{ty} %x2, %x1, 0xffffffff;
  ret;
}}
"""


@pytest.mark.parametrize("op, ty", [("add", "f32"), ("and", "u32"), ("min", "b32")])
def test_a_redux_type_the_table_refuses_for_its_op_is_refused_not_run_as_another_op(op, ty):
    """ptxas: "Incorrect type '.f32' for operation '.add' in instruction 'redux'"; the emulator ran add.f32 as
    max."""
    text = REDUX.format(op=op, ty=ty).replace("mov.f32 %x1, 1;", "mov.f32 %x1, 0f3F800000;")
    m = pf.parse(text, "r.ptx")
    assert [d for d in validate(m) if d.severity == "error"]
    if HAVE_PTXAS:
        assert not assemble(text, "sm_100a").ok
    with pytest.raises(UnsupportedInstruction, match=f"redux.sync.{op} does not take .{ty}"):  # behind the validator
        m.kernel("k").launch(grid=(1,), block=(32,), args=[np.zeros(1, np.uint64)], device="emu", validate=False)


def test_video_builders_pick_their_groups_from_the_table_and_each_has_its_semantics():
    from ptxforge.emu import ops_video
    from ptxforge.emu.semantics import video
    from ptxforge.ptx.isa import modifier_slot

    scalar = "vadd vsub vabsdiff vmin vmax vshl vshr vset".split()
    assert all(modifier_slot(f, "secop") == ops_video._SECOPS for f in scalar)
    assert all(modifier_slot(f, "cmp") == ops_video._CMPS for f in ("vset", "vset2", "vset4"))
    assert ops_video._SCALES == modifier_slot("vmad", "scale")
    a, b, c = (np.array([x], np.uint32) for x in (0x01020304, 0x05060708, 7))
    for secop in ops_video._SECOPS:
        assert np.asarray(video.scalar("vadd", a, b, c, "u32", "u32", "u32", False, secop, None)).shape == (1,)
    for cmp in ops_video._CMPS:
        assert np.asarray(video.vset(a, b, cmp, None, "u32", "u32", None, None)).shape == (1,)
        assert np.asarray(video.simd("vset", a, b, c, 4, dtype="u32", atype="u32", btype="u32", cmp=cmp)).shape \
            == (1,)
    for scale in ops_video._SCALES:
        assert np.asarray(video.vmad(a, b, c, "u32", "u32", "u32", False, scale, False, False, False)).shape == (1,)


BAR_RED = _head() + """.visible .entry k(.param .u64 out)
{{
  .reg .b32 %t, %r1, %s;
  .reg .pred %p1, %q;
  .reg .b64 %rd<3>;
  mov.u32 %t, %tid.x;
  setp.lt.u32 %q, %t, 40;
  {ins}
  ld.param.u64 %rd0, [out];
  mul.wide.u32 %rd1, %t, 4;
  add.s64 %rd0, %rd0, %rd1;
  st.global.u32 [%rd0], %s;
  ret;
}}
"""
# bar.red's ops, keyed by the table's values: the instruction and what every thread gets when 40 of 64 vote true
BAR_RED_WANT = {"popc": ("bar.red.popc.u32 %s, 0, %q;", 40),
                "and": ("bar.red.and.pred %p1, 0, %q; selp.u32 %s, 1, 0, %p1;", 0),
                "or": ("bar.red.or.pred %p1, 0, %q; selp.u32 %s, 1, 0, %p1;", 1)}


def test_bar_red_ops_are_the_tables_and_each_runs():
    from ptxforge.emu import ops_control
    from ptxforge.ptx.isa import modifier_slot

    assert ops_control.BAR_RED_OPS == modifier_slot("bar", "redop") == modifier_slot("barrier", "redop")
    for op in sorted(ops_control.BAR_RED_OPS):
        ins, want = BAR_RED_WANT[op]
        m = pf.parse(BAR_RED.format(ins=ins), f"bar_{op}.ptx")
        assert not [str(d) for d in validate(m) if d.severity == "error"]
        out = np.zeros(64, np.uint32)
        m.kernel("k").launch(grid=(1,), block=(64,), args=[out], device="emu")
        assert out.tolist() == [want] * 64, op


def test_bulk_reductions_are_the_tables_and_each_has_its_combine():
    from ptxforge.emu import ops_atomic, ops_tma
    from ptxforge.ptx.isa import modifier_slot

    assert ops_tma.BULK_RED_OPS == modifier_slot("cp.reduce.async.bulk", "redop") \
        == modifier_slot("cp.reduce.async.bulk.tensor", "redop") == set(ops_tma.REDUCE_TYPES)
    for op, types in ops_tma.REDUCE_TYPES.items():
        for ty in types:
            ops_atomic._combine(op, ".b" + ty[2:] if op in ("and", "or", "xor") else ty)


BULK_RED = _head() + """.visible .entry k(.param .u64 p)
{{
  .reg .b64 %rd<2>;
  .reg .b32 %r<2>;
  .shared .align 16 .b8 buf[64];
  ld.param.u64 %rd1, [p];
  mov.u32 %r1, buf;
  cp.reduce.async.bulk.global.shared::cta.bulk_group.{op}.u32 [%rd1], [%r1], 64;
  cp.async.bulk.commit_group;
  cp.async.bulk.wait_group 0;
  ret;
}}
"""


def test_a_bulk_reduction_takes_only_the_tables_ops():
    """ptxas: "Illegal reduction operation for instruction 'cp.reduce.async.bulk'" for .exch; the emulator took
    atom's ops and ran it as an exchange."""
    out = np.zeros(16, np.uint32)
    pf.parse(BULK_RED.format(op="add"), "a.ptx").kernel("k").launch(grid=(1,), block=(1,), args=[out], device="emu")
    m = pf.parse(BULK_RED.format(op="exch"), "x.ptx")
    assert [d for d in validate(m) if d.severity == "error"]
    if HAVE_PTXAS:
        assert not assemble(BULK_RED.format(op="exch"), "sm_90a").ok
    with pytest.raises(UnsupportedInstruction, match=r"exch.u32: \.exch is no reduction; needs one of add, and, dec"):
        m.kernel("k").launch(grid=(1,), block=(1,), args=[out], device="emu", validate=False)  # behind the validator


def test_vector_and_matrix_counts_and_store_orders_are_the_tables():
    from ptxforge.emu import ops_matrix, ops_memory
    from ptxforge.ptx.isa import modifier_slot

    assert set(ops_memory.VECTOR_COUNTS) == modifier_slot("ld", "vec") == modifier_slot("st", "vec")
    assert all(ops_memory.VECTOR_COUNTS[v] == int(v[1:]) for v in ops_memory.VECTOR_COUNTS)
    assert set(ops_matrix.MATRIX_COUNTS) == modifier_slot("ldmatrix", "num") == modifier_slot("stmatrix", "num")
    assert ops_memory.STRONG == modifier_slot("st", "sem") - {"weak"} and "weak" in modifier_slot("st", "sem")
    assert ops_memory.SPACES == {s.split("::")[0] for s in modifier_slot("ld", "space")}
    assert ops_matrix.WMMA_MATRICES == {"a", "b", "c", "d"}  # the fragments wmma.load / wmma.store name


def test_tcgen05_fence_and_wait_forms_are_the_tables():
    from ptxforge.emu import ops_tcgen05
    from ptxforge.ptx.isa import lookup

    assert ops_tcgen05.FENCE_FORMS == {"fence::before_thread_sync", "fence::after_thread_sync"}
    assert ops_tcgen05.WAIT_FORMS == {"wait::ld", "wait::st"}
    for form in ops_tcgen05.FENCE_FORMS | ops_tcgen05.WAIT_FORMS:  # each form names its family
        assert lookup(f"tcgen05.{form}").family == "tcgen05." + form.split("::")[0]


def _f32_bits(*xs):
    return np.array([np.float32(x).view(np.uint32) for x in xs] + [0x7FC00000] * (32 - len(xs)), np.uint32)


REDUX_F32 = _head("8.6", "sm_100a") + """.visible .entry k(.param .u64 inp, .param .u64 out)
{{
  .reg .b32 %t, %x, %r;
  .reg .b64 %rd<4>;
  mov.u32 %t, %tid.x;
  ld.param.u64 %rd0, [inp];
  ld.param.u64 %rd2, [out];
  mul.wide.u32 %rd1, %t, 4;
  add.s64 %rd0, %rd0, %rd1;
  add.s64 %rd2, %rd2, %rd1;
  ld.global.u32 %x, [%rd0];
  redux.sync.{mods}.f32 %r, %x, 0xffffffff;
  st.global.u32 [%rd2], %r;
  ret;
}}
"""
CANON = 0x7FFFFFFF


@pytest.mark.parametrize("mods, lanes, want", [
    ("min", _f32_bits(-3.0, 2.0, -0.0, 0.0), np.float32(-3.0).view(np.uint32)),  # NaN lanes are skipped
    ("max", _f32_bits(-3.0, 2.0, -0.0, 0.0), np.float32(2.0).view(np.uint32)),
    ("min.abs", _f32_bits(-3.0, 2.0, -0.0, 0.5), 0),  # |-0.0| = +0.0
    ("max.abs", _f32_bits(-3.0, 2.0, -0.0, 0.5), np.float32(3.0).view(np.uint32)),
    ("min.NaN", _f32_bits(-3.0, 2.0), CANON), ("max.abs.NaN", _f32_bits(-3.0, 2.0), CANON),
    ("min", _f32_bits(0.0, -0.0, 0.0), 0x80000000), ("max", _f32_bits(-0.0, 0.0, -0.0), 0),  # -0.0 < +0.0
    ("max", _f32_bits(), CANON),  # every input NaN
    ("min", np.array([np.float32(x).view(np.uint32) for x in range(1, 33)], np.uint32), 0x3F800000),
])
def test_redux_f32_takes_abs_and_nan_as_the_table_lists_them(mods, lanes, want):
    """PTX ISA 9.7.13.x redux.sync: .abs reduces |x|, -0.0 < +0.0, NaN inputs are skipped (canonical NaN when all
    are NaN) and with .NaN any NaN input makes the result canonical NaN; the emulator ignored .abs and .NaN."""
    text = REDUX_F32.format(mods=mods)
    m = pf.parse(text, "r.ptx")
    assert not [str(d) for d in validate(m) if d.severity == "error"]
    if HAVE_PTXAS:
        assert assemble(text, "sm_100a").ok
    out = np.zeros(32, np.uint32)
    m.kernel("k").launch(grid=(1,), block=(32,), args=[lanes, out], device="emu")
    assert out.tolist() == [int(want)] * 32
