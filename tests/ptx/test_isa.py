"""The ISA table and per-instruction checks (ptxforge.ptx.isa).

The ptxas verdict tables (TYPE_CASES, GATE_CASES) were recorded by running ptxas 13.0 (CUDA 13.0.88) on every line
(scratch probe, one PTX module per target/version); `test_recorded_verdicts_match_ptxas` re-runs ptxas
on them when it is installed, so the tables cannot drift from what the tool really does. The corpus
tests check that real nvcc/Triton PTX raises nothing, and that the same kernels moved to an older
target raise exactly the instruction lines ptxas rejects.
"""

from __future__ import annotations

import os
import re
import subprocess
import tempfile
from pathlib import Path

import pytest
from corpus_isa import CORPUS, walk
from cubin import find_tool, have
from hypothesis import given, settings
from hypothesis import strategies as st

import ptxforge as pf
from ptxforge.ptx import ir
from ptxforge.ptx.isa import (
    FAMILIES,
    InstrSpec,
    Requirement,
    check_instruction,
    lookup,
    modifier_slot,
    parse_target,
    requirements,
)

DATA = Path(__file__).resolve().parent / "data"  # recorded ptxas verdicts, one case a line
R = ir.Register


def ins(mnemonic: str, *operands, span=ir.NO_SPAN) -> ir.Instruction:
    opcode, *suffixes = mnemonic.split(".")
    return ir.Instruction(opcode, tuple(suffixes), tuple(operands), span=span)


REGS = {"%f1": ".f32", "%f2": ".f32", "%f3": ".f32", "%rd1": ".b64", "%r1": ".b32", "%r2": ".b32",
        "%rs1": ".b16", "%p1": ".pred", "%fd1": ".f64"}


def msgs(instr, version=(9, 0), target="sm_90a", regs=REGS):
    return [m for _, m in check_instruction(instr, regs, version, target)]


# --------------------------------------------------------------------------- lookup


@pytest.mark.parametrize("mnemonic, family", [
    ("add.f32", "add"), ("add.cc.u32", "add"), ("ld.global.nc.L1::no_allocate.L2::256B.v4.s32", "ld"),
    ("cp.async.bulk.tensor.2d.shared::cluster.global.mbarrier::complete_tx::bytes", "cp.async.bulk.tensor"),
    ("cp.async.bulk.prefetch.tensor.2d.L2.global", "cp.async.bulk.prefetch.tensor"),
    ("cp.async.wait_group", "cp.async.wait_group"), ("cp.async.ca.shared.global", "cp.async"),
    ("cp.async.mbarrier.arrive.noinc.shared.b64", "cp.async.mbarrier.arrive"),
    ("cp.reduce.async.bulk.tensor.1d.global.shared::cta.add.tile.bulk_group", "cp.reduce.async.bulk.tensor"),
    ("mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32", "mma"), ("mma.sp::ordered_metadata.sync", "mma"),
    ("wgmma.mma_async.sync.aligned.m64n8k16.f32.bf16.bf16", "wgmma.mma_async"),
    ("wgmma.mma_async.sp.sync.aligned.m64n8k32.f32.bf16.bf16", "wgmma.mma_async"),
    ("mbarrier.try_wait.parity.shared::cta.b64", "mbarrier.try_wait"),
    ("mbarrier.arrive.expect_tx.shared.b64", "mbarrier.arrive"),
    ("tcgen05.mma.cta_group::1.kind::f16", "tcgen05.mma"), ("tcgen05.fence::before_thread_sync", "tcgen05.fence"),
    ("tcgen05.wait::ld.sync.aligned", "tcgen05.wait"), ("bar.warp.sync", "bar.warp.sync"), ("bar.sync", "bar"),
    ("barrier.cluster.arrive.release.aligned", "barrier.cluster"), ("fence.proxy.async.shared::cta", "fence"),
    ("shfl.sync.bfly.b32", "shfl.sync"), ("red.async.relaxed.cluster", "red.async"), ("red.global.add.u32", "red"),
    ("st.async.shared::cluster", "st.async"), ("cvt.pack.sat.s8.s32.b32", "cvt.pack"), ("cvt.rn.f32.s32", "cvt"),
    ("cvta.to.global.u64", "cvta"), ("setmaxnreg.inc.sync.aligned.u32", "setmaxnreg"),
    ("griddepcontrol.wait", "griddepcontrol"), ("multimem.ld_reduce.relaxed.sys", "multimem.ld_reduce"),
    ("tensormap.cp_fenceproxy.global.shared::cta", "tensormap.cp_fenceproxy"),
    ("clusterlaunchcontrol.query_cancel.is_canceled.pred.b128", "clusterlaunchcontrol.query_cancel"),
    ("elect.sync", "elect.sync"), ("redux.sync.add.s32", "redux.sync"), ("match.any.sync.b32", "match"),
])
def test_lookup_finds_the_longest_family(mnemonic, family):
    spec = lookup(ins(mnemonic))
    assert isinstance(spec, InstrSpec) and spec.family == family
    assert lookup(mnemonic) is spec  # a mnemonic string works too


def test_lookup_unknown():
    assert lookup(ins("foo.bar")) is None
    assert msgs(ins("foo.bar", R("%r1"))) == ["unknown instruction 'foo.bar'"]


def test_table_covers_the_instruction_set():
    assert len(FAMILIES) >= 180
    for name in ("tex", "tld4", "suld", "sust", "txq", "call", "ret", "exit", "trap", "brkpt", "nanosleep",
                 "pmevent", "getctarank", "mapa", "applypriority", "discard", "createpolicy", "tensormap.replace",
                 "dp4a", "dp2a", "bfe", "bfi", "brev", "bfind", "fns", "lop3", "shf", "szext", "bmsk", "popc",
                 "clz", "testp", "copysign", "sad", "mul24", "mad24", "tanh", "ex2", "lg2", "sin", "cos", "rcp",
                 "rsqrt", "sqrt", "ldmatrix", "stmatrix", "movmatrix", "activemask", "vote.sync", "prmt",
                 "isspacep", "ldu", "prefetch", "st.bulk", "multimem.st", "multimem.red", "wmma.mma"):
        assert name in FAMILIES, name
    for spec in FAMILIES.values():
        assert spec.signatures, spec.family
        assert spec.requirement.what == spec.family


def test_modifier_slots_are_among_the_familys_modifiers():
    """A named modifier group (what a builder picks one of) lists only modifiers its family allows, each
    with its dot; families whose modifiers the table leaves open may still name their groups."""
    named = 0
    for spec in FAMILIES.values():
        names = [n for n, _ in spec.slots]
        assert len(names) == len(set(names)), spec.family
        for name, values in spec.slots:
            named += 1
            assert values and all(v.startswith(".") for v in values), (spec.family, name)
            assert spec.modifiers is None or values <= spec.modifiers, (spec.family, name, values - spec.modifiers)
    assert named >= 10
    assert modifier_slot("cvt", "irnd") == {"rni", "rzi", "rmi", "rpi"}
    with pytest.raises(KeyError, match="cvt has no modifier slot 'mode'; its slots: \\['rnd', 'irnd'\\]"):
        modifier_slot("cvt", "mode")


# --------------------------------------------------------------------------- targets


def test_parse_target():
    assert parse_target("sm_90a") == (90, "a")
    assert parse_target("sm_100f") == (100, "f")
    assert parse_target("compute_80") == (80, "")
    assert parse_target("sm_75") == (75, "")
    with pytest.raises(ValueError, match="not a PTX target"):
        parse_target("gfx90a")


def test_target_rules_plain_arch_and_family():
    plain = Requirement("x", (7, 0), 80)
    assert plain.target_ok("sm_80") and plain.target_ok("sm_90a") and plain.target_ok("compute_86")
    assert not plain.target_ok("sm_75")
    arch = Requirement("wgmma", (8, 0), 90, "a")
    assert arch.target_ok("sm_90a")
    assert not arch.target_ok("sm_90") and not arch.target_ok("sm_100a") and not arch.target_ok("sm_120a")
    fam = Requirement("f", (8, 8), 100, "f")
    assert fam.target_ok("sm_100f") and fam.target_ok("sm_103f") and fam.target_ok("sm_103a")
    assert fam.target_ok("sm_100a")
    assert not fam.target_ok("sm_100") and not fam.target_ok("sm_110f") and not fam.target_ok("sm_120a")
    assert Requirement("f", (8, 8), 110, "f").target_ok("sm_101f")  # sm_101 was renamed sm_110


# --------------------------------------------------------------------------- requirements


def _req(mnemonic, n=0):
    return requirements(ins(mnemonic, *[R("%r1")] * n))


def _worst(reqs):
    return max(r.min_ptx for r in reqs), max(r.min_sm for r in reqs)


def test_requirements_headline_cases():
    (w,) = _req("wgmma.mma_async.sync.aligned.m64n8k16.f32.bf16.bf16")
    assert (w.what, w.min_ptx, w.min_sm, w.arch_suffix) == ("wgmma.mma_async", (8, 0), 90, "a")
    (s,) = _req("setmaxnreg.inc.sync.aligned.u32")
    assert (s.min_ptx, s.min_sm, s.arch_suffix) == ((8, 0), 90, "a")
    assert s.target_ok("sm_90a") and s.target_ok("sm_100a") and s.target_ok("sm_120f")
    assert not s.target_ok("sm_90") and not s.target_ok("sm_89")
    (t,) = _req("tcgen05.alloc.cta_group::1.sync.aligned.shared::cta.b32")
    assert (t.min_ptx, t.min_sm, t.arch_suffix) == ((8, 6), 100, "a")
    assert _worst(_req("cvt.rn.satfinite.e4m3x2.f32", 3)) == ((7, 8), 89)
    e4 = _req("cvt.rn.satfinite.e4m3x2.f32", 3)[-1]
    assert e4.ptx_needed("sm_89") == (8, 1) and e4.ptx_needed("sm_90") == (7, 8)  # sm_89 got it in 8.1
    assert _worst(_req("ld.global.L2::256B.b32", 2)) == ((7, 4), 80)
    assert _worst(_req("add.rn.bf16", 3)) == ((7, 8), 90)
    assert _worst(_req("redux.sync.add.s32", 3)) == ((7, 0), 80)
    assert _worst(_req("elect.sync", 2)) == ((8, 0), 90)
    assert _worst(_req("mbarrier.init.shared.b64", 2)) == ((7, 0), 80)
    assert _worst(_req("mbarrier.try_wait.parity.shared.b64", 3)) == ((7, 8), 90)
    assert _worst(_req("cp.async.ca.shared.global", 3)) == ((7, 0), 80)
    assert _worst(_req("griddepcontrol.wait")) == ((7, 8), 90)
    assert _worst(_req("add.s32", 3)) == ((1, 0), 0)


def test_requirement_messages():
    assert msgs(ins("ld.global.L2::256B.b32", R("%r1"), ir.Address(R("%rd1"))), version=(7, 0)) == [
        "ld: modifier .L2::256B needs PTX ISA 7.4; this module is .version 7.0"]
    desc = [ir.Vector((R("%f1"),)), R("%rd1"), R("%rd1"), ir.Immediate(1, "1")]
    assert msgs(ins("wgmma.mma_async.sync.aligned.m64n8k16.f32.bf16.bf16", *desc), target="sm_80") == [
        "wgmma.mma_async needs sm_90a; this module targets sm_80"]
    assert msgs(ins("wgmma.fence.sync.aligned"), version=(7, 8), target="sm_90") == [
        "wgmma.fence needs PTX ISA 8.0; this module is .version 7.8",
        "wgmma.fence needs sm_90a; this module targets sm_90"]
    cvt = ins("cvt.rn.satfinite.e4m3x2.f32", R("%rs1"), R("%f1"), R("%f2"))
    assert msgs(cvt, version=(8, 0), target="sm_89") == [
        "cvt: types .e4m3x2/.e5m2x2 needs PTX ISA 8.1 on sm_89; this module is .version 8.0"]
    assert msgs(cvt, version=(8, 0), target="sm_90") == []
    assert msgs(cvt, version=(9, 0), target="sm_86") == [
        "cvt: types .e4m3x2/.e5m2x2 needs sm_89; this module targets sm_86"]
    assert msgs(ins("tcgen05.fence::before_thread_sync"), version=(8, 7), target="sm_90a") == [
        "tcgen05.fence needs sm_100a (or sm_110a, sm_100f, sm_110f); this module targets sm_90a"]
    vote = ins("vote.any.pred", R("%p1"), R("%p1"))
    assert msgs(vote, version=(6, 4), target="sm_70") == [
        "vote: vote without .sync is not supported on sm_70 or higher from PTX ISA 6.4; use vote.sync"]
    assert msgs(vote, version=(6, 3), target="sm_70") == []
    assert msgs(ins("add.s32", R("%r1"), R("%r1"), R("%r2")), version=None, target=None) == []


# --------------------------------------------------------------------------- operands, types, modifiers


def test_operand_type_error_message_and_span():
    span = ir.Span("k.ptx", 7, 20)
    instr = ins("add.f32", R("%f1"), R("%rd1", span), R("%f2"))
    assert check_instruction(instr, REGS, (9, 0), "sm_90a") == [
        (span, "add.f32: operand 2 is %rd1 (.b64), expected .f32")]


def test_operand_count_and_modifier_messages():
    assert msgs(ins("add.f32", R("%f1"), R("%f2"))) == ["add: expected 3 operands, got 2"]
    assert msgs(ins("add.hi.f32", R("%f1"), R("%f2"), R("%f3"))) == [
        "add: type .f32 does not allow modifier .hi"]
    assert msgs(ins("mul.rn.s32", R("%r1"), R("%r1"), R("%r2"))) == [
        "mul: type .s32 does not allow modifier .rn", "mul.rn.s32: needs one of .hi, .lo, .wide"]
    assert msgs(ins("add.foo.s32", R("%r1"), R("%r1"), R("%r2"))) == ["add: unknown modifier .foo"]
    assert msgs(ins("div.f32", R("%f1"), R("%f2"), R("%f3"))) == [
        "div.f32: needs one of .approx, .full, .rm, .rn, .rp, .rz"]
    assert msgs(ins("add.sat.u32", R("%r1"), R("%r1"), R("%r2"))) == [
        "add: modifier .sat is not allowed with type .u32 (only .f16, .f16x2, .f32, .f32x2, .s32)"]
    assert msgs(ins("cvt.u32.f32", R("%r1"), R("%f1"))) == [
        "cvt.u32.f32: a float-to-integer conversion needs a rounding modifier (.rni, .rzi, .rmi, .rpi)"]
    assert msgs(ins("st.global.u32", R("%rd1"), R("%r1"))) == [
        "st.global.u32: operand 1 must be a memory operand in brackets, e.g. [%rd1]"]
    assert msgs(ins("setmaxnreg.inc.sync.aligned.u32", R("%r1"))) == [
        "setmaxnreg.inc.sync.aligned.u32: operand 1 must be an integer constant"]


def test_relaxed_rules_for_ld_st_cvt():
    addr = ir.Address(R("%rd1"))
    assert msgs(ins("ld.global.u8", R("%r1"), addr)) == []  # narrow load into a wide register
    assert msgs(ins("ld.global.u8", R("%rs1"), addr)) == []
    assert msgs(ins("ld.global.u8", R("%f1"), addr)) == ["ld.global.u8: operand 1 is %f1 (.f32), expected .u8"]
    assert msgs(ins("ld.global.f32", R("%fd1"), addr)) == [
        "ld.global.f32: operand 1 is %fd1 (.f64), expected .f32"]
    assert msgs(ins("st.global.b8", addr, R("%f1"))) == []
    assert msgs(ins("cvt.u32.u16", R("%r1"), R("%r2"))) == []  # source wider than .u16 is chopped
    assert msgs(ins("mov.u32", R("%r1"), R("%rs1"))) == ["mov.u32: operand 2 is %rs1 (.b16), expected .u32"]


def test_immediates_and_vectors():
    one, half = ir.Immediate(1, "1"), ir.Immediate(1.5, "1.5")
    assert msgs(ins("add.f32", R("%f1"), R("%f2"), one)) == [
        "add.f32: operand 3: 1 is an integer literal, expected a .f32 literal (e.g. 0f3F800000 or 1.0)"]
    assert msgs(ins("add.s32", R("%r1"), R("%r2"), half)) == [
        "add.s32: operand 3: 1.5 is a floating-point literal, expected an integer (.s32)"]
    assert msgs(ins("mov.b32", R("%r1"), ir.Immediate(1.0, "0f3F800000"))) == []
    v4 = ir.Vector((R("%f1"), R("%f2"), ir.Sink(), R("%f3")))
    assert msgs(ins("ld.global.v4.f32", v4, ir.Address(R("%rd1")))) == []
    assert msgs(ins("ld.global.v2.f32", v4, ir.Address(R("%rd1")))) == [
        "ld.global.v2.f32: operand 1 has 4 elements, .v2 needs 2"]
    assert msgs(ins("ld.global.b32", ir.Vector((R("%r1"),)), ir.Address(R("%rd1")))) == []  # Triton style
    assert msgs(ins("mov.b32", R("%r1"), ir.Vector((R("%rs1"), R("%rs1"))))) == []
    assert msgs(ins("mov.b64", R("%rd1"), ir.Vector((R("%rs1"), R("%rs1"))))) == [
        "mov.b64: operand 2 packs 2 registers of 16 bits, but .b64 is 64 bits"]
    pair = ir.PredPair(R("%r1"), R("%p1"))
    assert msgs(ins("shfl.sync.idx.b32", pair, R("%r2"), one, ir.Immediate(31, "31"),
                    ir.Immediate(-1, "-1"))) == []


def test_unknown_registers_and_symbols_are_not_checked():
    instr = ins("add.f32", R("%f1"), R("%nope"), R("smem"))
    assert msgs(instr, regs={**REGS, "smem": ".b8"}) == ["add.f32: operand 3 is smem (.b8), expected .f32"]
    assert [m for _, m in check_instruction(instr, {**REGS, "smem": ".b8"}, symbols={"smem"})] == []


_TYPE_NAMES = sorted(ir.ALL_TYPES)
_SUFFIXES = st.sampled_from([t[1:] for t in _TYPE_NAMES] + ["v2", "v4", "rn", "wide", "hi", "L2::256B",
                                                             "shared::cta", "sync", "aligned", "nope"])
_OPERAND = st.recursive(
    st.one_of(st.sampled_from([R(f"%x{i}") for i in range(len(_TYPE_NAMES))] + [R("%undeclared")]),
              st.builds(ir.Immediate, st.sampled_from([0, 1, -1, 1.5]), st.sampled_from(["1", "0f3F800000", "1.5"])),
              st.sampled_from([ir.SpecialRegister("%tid.x"), ir.SpecialRegister("%clock64"), ir.Sink(),
                               ir.Symbol("lbl"), ir.Expr("sym+4"), ir.Address(R("%x3"), 8), ir.Address(None, 16)])),
    lambda inner: st.one_of(st.builds(lambda xs: ir.Vector(tuple(xs)), st.lists(inner, max_size=5)),
                            st.builds(ir.PredPair, inner, inner), st.builds(ir.Negated, inner)),
    max_leaves=6)


@settings(max_examples=300, deadline=None)
@given(family=st.sampled_from(sorted(FAMILIES)), extra=st.lists(_SUFFIXES, max_size=4),
       operands=st.lists(_OPERAND, max_size=6), version=st.sampled_from([(6, 0), (9, 0), None]),
       target=st.sampled_from(["sm_90a", "sm_52", "compute_100f", "not-a-target", None]))
def test_checks_never_raise(family, extra, operands, version, target):
    opcode, *fam_suffixes = family.split(".")
    instr = ir.Instruction(opcode, (*fam_suffixes, *extra), tuple(operands))
    regs = {f"%x{i}": t for i, t in enumerate(_TYPE_NAMES)}
    for span, message in check_instruction(instr, regs, version, target):
        assert isinstance(span, ir.Span) and isinstance(message, str) and message
    assert all(isinstance(r, Requirement) for r in requirements(instr))


# --------------------------------------------------------------------------- recorded ptxas 13.0 verdicts
# 'E' = ptxas reports an error for the line, '-' = it accepts it.

TYPE_CASES = (DATA / "isa_type_cases.txt").read_text()
GATE_COMBOS = [("sm_100a", "9.0"), ("sm_120a", "9.0"), ("sm_100a", "8.6"), ("sm_90a", "8.0"),
               ("sm_90", "8.0"), ("sm_89", "8.1"), ("sm_89", "7.8"), ("sm_80", "7.8"), ("sm_80", "7.0"),
               ("sm_75", "6.4")]
# at these two, one line aborts ptxas (a '_' sink before PTX 7.1), so each line was run on its own
PTXAS_ABORTS = [("sm_80", "7.0"), ("sm_75", "6.4")]
GATE_CASES = (DATA / "isa_gate_cases.txt").read_text()


DECL = """.reg .b16 %rs<9>; .reg .b32 %r<9>; .reg .b64 %rd<9>; .reg .f32 %f<9>; .reg .f64 %fd<9>; .reg .pred %p<9>;
.reg .u16 %us<9>; .reg .s16 %ss<9>; .reg .u32 %u<9>; .reg .s32 %s<9>; .reg .u64 %ud<9>; .reg .s64 %sd<9>;
.reg .f16 %h<9>; .reg .f16x2 %hh<9>; .reg .b8 %c<9>; .reg .u8 %uc<9>; .reg .s8 %sc<9>;{b128}
.shared .align 16 .b8 smem[1024];"""


def _module_text(lines: list[str], version: str, target: str) -> str:
    decl = DECL.replace("{b128}", " .reg .b128 %q<9>;" if tuple(map(int, version.split("."))) >= (8, 3) else "")
    return (f".version {version}\n.target {target}\n.address_size 64\n\n.visible .entry k(.param .u64 p)\n{{\n"
            f"{decl}\n" + "\n".join(lines) + "\nret;\n}\n")


def _our_verdicts(lines: list[str], version: str, target: str) -> list[list[str]]:
    mod = pf.parse(_module_text(lines, version, target), filename="probe.ptx")
    (fn,) = mod.functions
    regs = {n: s.type for s in fn.body if isinstance(s, ir.RegisterDecl) for n in s.declared()}
    body = [s for s in fn.body if isinstance(s, ir.Instruction)][:-1]
    assert len(body) == len(lines)
    v = tuple(map(int, version.split(".")))
    return [[m for _, m in check_instruction(i, regs, v, target)] for i in body]


def _cases(table: str) -> list[tuple[str, str]]:
    """'<verdicts> <ptx line>' rows; a row ending in a backslash continues on the next line."""
    text = re.sub(r" \\\n\s+", " ", table.strip())
    return [tuple(line.split(" ", 1)) for line in text.splitlines()]


def test_type_rules_agree_with_ptxas():
    cases = _cases(TYPE_CASES)
    ours = _our_verdicts([c[1] for c in cases], "9.0", "sm_100a")
    wrong = [(flag, line, got) for (flag, line), got in zip(cases, ours, strict=True) if (flag == "E") != bool(got)]
    assert not wrong, "\n".join(f"{f} {line}  ours: {got}" for f, line, got in wrong)
    assert sum(f == "E" for f, _ in cases) > 150  # the table exercises errors, not only clean code


@pytest.mark.parametrize("combo", range(len(GATE_COMBOS)))
def test_version_and_target_gates_agree_with_ptxas(combo):
    target, version = GATE_COMBOS[combo]
    cases = _cases(GATE_CASES)
    ours = _our_verdicts([c[1] for c in cases], version, target)
    wrong = [(flags[combo], line, got) for (flags, line), got in zip(cases, ours, strict=True)
             if (flags[combo] == "E") != bool(got)]
    assert not wrong, "\n".join(f"{f} {line}  ours: {got}" for f, line, got in wrong)


def test_manual_rules_stricter_than_ptxas():
    """Two rules where we follow the PTX ISA manual although ptxas 13.0 accepts the code."""
    # manual: fence .acquire/.release (without .proxy) introduced in PTX ISA 8.6, sm_90
    assert _our_verdicts(["fence.acquire.cta;"], "8.0", "sm_90") == [
        ["fence: fence.acquire/.release needs PTX ISA 8.6; this module is .version 8.0"]]
    # manual: the ::cta sub-qualifier on cp.async's .shared introduced in PTX ISA 7.8
    assert _our_verdicts(["cp.async.ca.shared::cta.global [%r1], [%rd1], 4;"], "7.0", "sm_80") == [
        ["cp.async: modifier .shared::cta needs PTX ISA 7.8; this module is .version 7.0"]]


def _ptxas_errors(lines: list[str], version: str, target: str) -> list[bool]:
    text = _module_text(lines, version, target)
    first = text[: text.index(lines[0])].count("\n") + 1
    with tempfile.TemporaryDirectory() as d:
        path = Path(d) / "probe.ptx"
        path.write_text(text)
        out = subprocess.run([str(find_tool("ptxas")), f"-arch={target}", str(path), "-o", os.devnull],
                             capture_output=True, text=True, timeout=60)
    bad = {int(m.group(1)) - first for m in re.finditer(r"line (\d+); error", out.stdout + out.stderr)}
    fatal = [ln for ln in (out.stdout + out.stderr).splitlines() if "fatal" in ln and "aborted" not in ln]
    assert not fatal, fatal
    return [i in bad for i in range(len(lines))]


@pytest.mark.skipif(not have("ptxas"), reason="ptxas is not installed")
def test_recorded_verdicts_match_ptxas():
    cases = _cases(TYPE_CASES)
    assert _ptxas_errors([c[1] for c in cases], "9.0", "sm_100a") == [f == "E" for f, _ in cases]
    gates = _cases(GATE_CASES)
    for combo, (target, version) in enumerate(GATE_COMBOS):
        if (target, version) in PTXAS_ABORTS:
            continue
        got = _ptxas_errors([c[1] for c in gates], version, target)
        assert got == [flags[combo] == "E" for flags, _ in gates], (target, version)


# --------------------------------------------------------------------------- real PTX: zero false positives

# (test_corpus_isa_<k>.py: every instruction of every corpus file raises nothing; corpus_isa.py)


def _problem_lines(mod: ir.Module) -> set[int]:
    lines = set()
    for fn in mod.functions:
        work = []
        walk(fn.body or (), {p.name: p.type for p in fn.params if p.space == ".reg"}, work)
        for instr, regs in work:
            lines |= {span.line for span, _ in check_instruction(instr, regs, mod.version, mod.target.arch)}
    return lines


HOPPER = [p for p in CORPUS if re.search(r"^\.target sm_90a", Path(p).read_text(), re.M)
          and re.search(r"wgmma|setmaxnreg|cp\.async\.bulk", Path(p).read_text())][:8]


@pytest.mark.skipif(not have("ptxas") or not HOPPER, reason="needs ptxas and sm_90a corpus files")
@pytest.mark.parametrize("target, version", [("sm_80", "7.8"), ("sm_90", "8.0")])
def test_retargeted_corpus_errors_match_ptxas(target, version, tmp_path):
    """Real sm_90a kernels moved to an older target: we flag exactly the instruction lines ptxas rejects."""
    flagged = 0
    for path in HOPPER:
        text = re.sub(r"^\.target [^\n]*", f".target {target}", Path(path).read_text(), count=1, flags=re.M)
        text = re.sub(r"^\.version [^\n]*", f".version {version}", text, count=1, flags=re.M)
        src = tmp_path / "k.ptx"
        src.write_text(text)
        out = subprocess.run([str(find_tool("ptxas")), f"-arch={target}", str(src), "-o", os.devnull],
                             capture_output=True, text=True, timeout=120)
        lines = text.splitlines()
        theirs = {int(n) for n in re.findall(r"line (\d+); error", out.stdout + out.stderr)}
        theirs = {n for n in theirs if not lines[n - 1].lstrip().startswith(".")}  # directives: not ours
        ours = _problem_lines(pf.parse(text, filename=path))
        assert ours == theirs, (path, sorted(ours - theirs), sorted(theirs - ours))
        flagged += len(ours)
    assert flagged > 0
