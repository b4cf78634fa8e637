"""The ISA table and per-instruction checks (ptxforge.ptx.isa).

The ptxas verdict tables at the bottom were recorded by running ptxas 13.0 (CUDA 13.0.88) on every line
(scratch probe, one PTX module per target/version); `test_recorded_verdicts_match_ptxas` re-runs ptxas
on them when it is installed, so the tables cannot drift from what the tool really does.
"""

from __future__ import annotations

import glob
import os
import re
import shutil
import subprocess
import tempfile
from pathlib import Path

import pytest

import ptxforge as pf
from ptxforge.ptx import ir
from ptxforge.ptx.isa import (
    FAMILIES,
    InstrSpec,
    Requirement,
    check_instruction,
    lookup,
    parse_target,
    requirements,
)

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
        "mul: type .s32 does not allow modifier .rn"]
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


# --------------------------------------------------------------------------- recorded ptxas 13.0 verdicts
# 'E' = ptxas reports an error for the line, '-' = it accepts it.

TYPE_CASES = '''
E add.f32 %f1, %f2, 1;
E mov.f32 %f1, 0;
- mov.f32 %f1, 1.0;
E setp.eq.f32 %p1, %f1, 0;
- mov.b32 %r1, 0f3F800000;
E mov.b32 %r1, 1.5;
E mov.u32 %r1, 0f3F800000;
E add.s32 %r1, %r2, 1.0;
E add.s32 %r1, %r2, 0f3F800000;
- mov.b16 %rs1, 0x3C00;
E mov.f16 %h1, 0x3C00;
- mov.b64 %rd1, 0d3FF0000000000000;
- mov.f64 %fd1, 0f3F800000;
- mov.f32 %f1, 0d3FF0000000000000;
E add.bf16 %h1, %h2, %h3;
- add.f16 %rs1, %rs2, %rs3;
- add.f16x2 %r1, %r2, %r3;
- add.f16x2 %hh1, %hh2, %hh3;
E add.f16x2 %f1, %f2, %f3;
- add.f16 %h1, %h2, %h3;
- add.f32 %r1, %r2, %r3;
E add.s32 %f1, %f2, %f3;
- add.u32 %s1, %s2, %u3;
E add.s32 %r1, %r2, %rd3;
E add.u16 %r1, %r2, %r3;
- mov.u32 %r1, %tid.x;
E mov.u64 %rd1, %tid.x;
- mov.u16 %rs1, %tid.x;
E mov.u32 %r1, %clock64;
- mov.u64 %rd1, %clock64;
- mov.b32 %r1, {%rs1, %rs2};
- mov.b64 %rd1, {%r1, %r2};
- mov.b64 {%r1, %r2}, %rd1;
- mov.b32 {%rs1, %rs2}, %r1;
E mov.b64 %rd1, {%rs1, %rs2};
E mov.u32 %r1, %rs1;
E mov.u16 %rs1, %r1;
- mov.b32 %f1, %r1;
- mov.f32 %r1, %f1;
- mov.f32 %f1, %r1;
E mov.f32 %f1, %rd1;
- mov.u64 %rd1, smem;
- mov.u32 %r1, smem;
- mov.u64 %rd1, p;
- cvt.u32.u16 %r1, %rs1;
- cvt.u32.u16 %r1, %r1;
- cvt.u16.u32 %r1, %r1;
- cvt.u16.u32 %rs1, %r1;
- cvt.u32.u16 %r1, %rd1;
E cvt.u32.u64 %r1, %rs1;
- cvt.f32.f16 %f1, %rs1;
- cvt.f32.f16 %f1, %r1;
- cvt.f32.f16 %f1, %h1;
E cvt.f32.f16 %f1, %f2;
- cvt.rn.f16.f32 %rs1, %f1;
- cvt.rn.f16.f32 %r1, %f1;
E cvt.rn.f16.f32 %f1, %f1;
- cvt.rn.f16.f32 %h1, %f1;
- cvt.f64.f32 %fd1, %f1;
- cvt.f64.f32 %rd1, %r1;
E cvt.f64.f32 %fd1, %fd1;
E cvt.u32.f32 %r1, %f1;
- cvt.rzi.u32.f32 %r1, %f1;
- cvt.rzi.u32.f32 %r1, %r2;
E cvt.rzi.u32.f32 %f1, %f2;
E cvt.rn.f32.s32 %f1, %f2;
- cvt.rn.f32.s32 %f1, %r2;
- cvt.rn.f32.s32 %r1, %r2;
- cvt.s64.s32 %rd1, %r1;
- cvt.s64.s32 %rd1, %rd1;
E cvt.s64.s32 %r1, %r1;
- cvt.u8.u32 %rs1, %r1;
- cvt.u8.u32 %uc1, %r1;
- ld.global.u8 %rs1, [%rd1];
- ld.global.u8 %r1, [%rd1];
- ld.global.u8 %rd1, [%rd1];
E ld.global.u8 %f1, [%rd1];
E ld.global.u8 %h1, [%rd1];
- ld.global.f32 %r1, [%rd1];
- ld.global.f32 %rd1, [%rd1];
E ld.global.f32 %fd1, [%rd1];
E ld.global.f16 %f1, [%rd1];
E ld.global.f16 %r1, [%rd1];
- ld.global.b16 %f1, [%rd1];
- ld.global.b32 %f1, [%rd1];
- ld.global.b32 %fd1, [%rd1];
E ld.global.s32 %f1, [%rd1];
E ld.global.u32 %rs1, [%rd1];
E ld.global.u64 %r1, [%rd1];
- st.global.u8 [%rd1], %r1;
E st.global.u8 [%rd1], %f1;
- st.global.b8 [%rd1], %f1;
- st.global.f32 [%rd1], %r1;
- st.global.f32 [%rd1], %rd1;
E st.global.f32 [%rd1], %fd1;
E st.global.u32 [%rd1], %rs1;
E st.global.u32 [%rd1], %f1;
- ld.global.v2.u8 {%rs1, %rs2}, [%rd1];
E ld.global.v2.u8 {%r1, %rs2}, [%rd1];
- ld.global.v4.f32 {%f1, %f2, _, %f4}, [%rd1];
- ld.global.v4.f32 {%f1, %f2, %f3, %r4}, [%rd1];
E ld.global.v4.f32 {%f1, %f2, %f3, %rd4}, [%rd1];
E ld.global.v4.f32 {%f1, %f2, %f3, %rs4}, [%rd1];
E ld.global.v2.f32 {%f1, %f2, %f3, %f4}, [%rd1];
E ld.global.v4.f32 {%f1, %f2}, [%rd1];
E ld.global.u32 %r1, %rd1;
E ld.global.u32 %r1, [%f1];
- ld.global.u32 %r1, [%r1];
- ld.global.u32 %r1, [%rs1];
- ld.shared.u32 %r1, [%r1];
E atom.global.add.u32 %r1, [%rd1], %rd2;
E atom.global.add.u32 %rd1, [%rd1], %r2;
E atom.global.add.u32 %rs1, [%rd1], %r2;
E atom.global.add.u32 %r1, [%rd1], %rs2;
- atom.global.add.f32 %f1, [%rd1], %r2;
E atom.global.add.f32 %f1, [%rd1], %rd2;
- atom.global.cas.b16 %rs1, [%rd1], %rs2, %rs3;
E atom.global.cas.b16 %r1, [%rd1], %r2, %r3;
E shl.b32 %r1, %r2, %rd1;
E shl.b32 %r1, %r2, %rs1;
E shl.b32 %r1, %r2, %f1;
- shl.b64 %rd1, %rd2, %r1;
- shr.s64 %rd1, %rd2, %u1;
- mul.wide.s32 %rd1, %r1, %r2;
E mul.wide.s32 %r1, %r1, %r2;
E mul.wide.s32 %rd1, %rd1, %r2;
- mul.lo.s32 %r1, %r1, %r2;
- mad.wide.u32 %rd1, %r1, %r2, %rd3;
E mad.wide.u32 %rd1, %r1, %r2, %r3;
E mul.hi.f32 %f1, %f2, %f3;
- selp.b32 %r1, 1, 0, %p1;
E selp.b32 %r1, %r1, %r2, %r3;
- selp.f32 %f1, %f1, 0f00000000, %p2;
- setp.lt.s32 %p1|%p2, %r1, %r2;
- setp.lt.and.s32 %p1, %r1, %r2, %p3;
- setp.lt.and.s32 %p1, %r1, %r2, !%p3;
E setp.lt.s32 %r1, %r1, %r2;
E setp.lt.s32 %p1, %r1, %rd2;
- set.lt.u32.f32 %r1, %f1, %f2;
- set.lt.u32.f32 %r1, %r1, %f2;
E set.lt.u32.f32 %f1, %f1, %f2;
- shfl.sync.idx.b32 %r1|%p1, %r2, 1, 31, -1;
- shfl.sync.idx.b32 %f1, %f2, 1, 31, -1;
E shfl.sync.idx.b32 %rd1, %r2, 1, 31, -1;
E shfl.sync.idx.b32 %r1, %r2, %rd1, 31, -1;
- and.pred %p1, %p2, %p3;
E and.b32 %p1, %p2, %p3;
- and.pred %p1, %p2, 1;
E and.pred %p1, %p2, %r1;
E and.b32 %r1, %p2, %r1;
- not.pred %p1, %p2;
- and.b32 %r1, %f1, %r2;
- and.b16 %rs1, %h1, %rs2;
- prmt.b32 %r1, %r2, %r3, %r4;
- bfe.u32 %r1, %r2, %r3, %r4;
- bfe.u64 %rd1, %rd2, %r3, %r4;
E bfe.u64 %rd1, %rd2, %rd3, %r4;
- bfi.b64 %rd1, %rd2, %rd3, %r4, %r5;
- popc.b64 %r1, %rd1;
E popc.b64 %rd1, %rd1;
- clz.b64 %r1, %rd1;
E clz.b64 %rd1, %rd1;
- bfind.u64 %r1, %rd1;
- brev.b64 %rd1, %rd2;
- fma.rn.f32 %f1, %f2, %f3, 0f3F800000;
E fma.rn.f32 %f1, %f2, %f3, 1;
- ex2.approx.f32 %f1, %r1;
- ex2.approx.ftz.f32 %f1, %f1;
- dp4a.s32.u32 %r1, %r2, %r3, %r4;
E dp4a.s32.u32 %rd1, %r2, %r3, %r4;
E add.f32 %f1, %f2;
E add.f32 %f1, %f2, %f3, %f4;
E add.hi.f32 %f1, %f2, %f3;
E mul.lo.f32 %f1, %f2, %f3;
E mul.rn.s32 %r1, %r2, %r3;
E add.b32 %r1, %r2, %r3;
E add.foo.s32 %r1, %r2, %r3;
E add %r1, %r2, %r3;
E add.s32.s32 %r1, %r2, %r3;
E foo.bar %r1;
E mul.wide.f32 %fd1, %f2, %f3;
E div.f32 %f1, %f2, %f3;
- div.s32 %r1, %r2, %r3;
E div.approx.f64 %fd1, %fd2, %fd3;
E sqrt.f32 %f1, %f2;
E rcp.f32 %f1, %f2;
E sin.f32 %f1, %f2;
E ex2.f32 %f1, %f2;
E tanh.f32 %f1, %f2;
E abs.u32 %r1, %r2;
E neg.u32 %r1, %r2;
E and.s32 %r1, %r2, %r3;
E and.u32 %r1, %r2, %r3;
E shl.u32 %r1, %r2, %r3;
E not.u32 %r1, %r2;
E popc.u32 %r1, %r2;
E clz.u32 %r1, %r2;
E brev.u32 %r1, %r2;
E bfe.b32 %r1, %r2, %r3, %r4;
E bfi.u32 %r1, %r2, %r3, %r4, %r5;
E selp.pred %p1, %p2, %p3, %p4;
E setp.lt.pred %p1, %p2, %p3;
E mov.f16 %rs1, %rs2;
E mov.s8 %rs1, %rs2;
E ld.global.f16 %rs1, [%rd1];
E ld.global.u8.u16 %rs1, [%rd1];
E ld.global.foo.u32 %r1, [%rd1];
E st.global.u32 [%rd1];
E st.global.u32 %rd1, %r1;
E ld.global.u32 %r1, [%rd1], %rd2, %rd3;
E cvt.s32 %r1, %r2;
E cvt.rn.f32.s32.s32 %f1, %r1;
E atom.global.add.f16 %rs1, [%rd1], %rs2;
E atom.global.add.u16 %rs1, [%rd1], %rs2;
E atom.global.cas.b32 %r1, [%rd1], %r2;
E shfl.sync.idx.b64 %rd1, %rd2, 1, 31, -1;
E shfl.sync.idx.b32 %r1, %r2, 1, 31;
E vote.sync.ballot.b32 %r1, %r2, -1;
E vote.sync.ballot.b32 %r1, %p1;
E bar.sync;
E fma.f32 %f1, %f2, %f3, %f4;
E fma.rn.s32 %r1, %r2, %r3, %r4;
E mad.f32 %f1, %f2, %f3, %f4;
E mad.lo.f32 %f1, %f2, %f3, %f4;
E mul24.lo.s64 %rd1, %rd2, %rd3;
E min.f32 %f1, %f2;
E testp.finite.f32 %r1, %f1;
E copysign.f16 %rs1, %rs2, %rs3;
E lop3.b64 %rd1, %rd2, %rd3, %rd4, 0x96;
E prmt.b64 %rd1, %rd2, %rd3, %rd4;
E cvta.to.global.u32 %r1, %rd1;
E mapa.shared::cluster.u64 %rd1, %rd2, %rd3;
E activemask.b64 %rd1;
E redux.sync.add.u64 %rd1, %rd2, -1;
E nanosleep.u64 %rd1;
E mbarrier.init.shared.b32 [%r1], 1;
E mbarrier.try_wait.parity.shared.b64 %r1, [%r1], %r2;
E setmaxnreg.inc.sync.aligned.u32 %r1;
E cvt.f32.s32 %f1, %r1;
E cvt.f64.s32 %fd1, %r1;
E cvt.f32.u16 %f1, %rs1;
E cvt.f32.f64 %f1, %fd1;
E cvt.f16.f32 %rs1, %f1;
E cvt.s32.f32 %r1, %f1;
E cvt.s32.f64 %r1, %fd1;
- cvt.rni.f32.f32 %f1, %f1;
- cvt.f32.f32 %f1, %f1;
- cvt.ftz.f32.f32 %f1, %f1;
- cvt.sat.f32.f32 %f1, %f1;
E cvt.rn.s32.f32 %r1, %f1;
E cvt.rzi.f32.s32 %f1, %r1;
E cvt.bf16.f32 %rs1, %f1;
- cvt.f32.bf16 %f1, %rs1;
- cvt.rn.bf16.f32 %rs1, %f1;
E cvt.s32.f16 %r1, %rs1;
E cvt.f16.s32 %rs1, %r1;
- cvt.rn.f16x2.f32 %r1, %f1, %f2;
- cvt.rn.satfinite.e4m3x2.f32 %rs1, %f1, %f2;
- cvt.rn.satfinite.e4m3x2.f16x2 %rs1, %r1;
- cvt.rn.f16x2.e4m3x2 %r1, %rs1;
- cvt.rna.tf32.f32 %r1, %f1;
- cvt.rn.relu.satfinite.e5m2x2.f32 %rs1, %f1, %f2;
- cvt.u16.u8 %rs1, %rs1;
- cvt.s8.s32 %rs1, %r1;
- cvt.rn.satfinite.e2m1x2.f32 %c1, %f1, %f2;
- cvt.rn.bf16x2.f32 %r1, %f1, %f2;
- cvt.rz.f16.f32 %rs1, %f1;
- cvt.rm.f16.f32 %rs1, %f1;
E cvt.rni.s32.s32 %r1, %r1;
E cvt.rn.f32.f32 %f1, %f1;
E cvt.rn.f64.f32 %fd1, %f1;
- cvt.rzi.s32.f16 %r1, %rs1;
E lop3.b32 %r1, %r2, %r3, %r4, %r5;
E cp.async.wait_group %r1;
E cp.async.bulk.wait_group %r1;
E applypriority.global.L2::evict_normal [%rd1], %rd2;
E discard.global.L2 [%rd1], %rd2;
E cp.async.ca.shared.global [%r1], [%rd1], %r2;
- mbarrier.init.shared.b64 [%r1], %r2;
- bar.sync %r1;
- bar.sync %r1, %r2;
- shfl.sync.idx.b32 %r1, %r2, %r3, %r4, %r5;
- prmt.b32 %r1, %r2, %r3, 0x3210;
- nanosleep.u32 %r1;
- div.full.f32 %f1, %f2, %f3;
E div.approx.ftz.f64 %fd1, %fd2, %fd3;
E div.full.f64 %fd1, %fd2, %fd3;
E rcp.approx.f64 %fd1, %fd2;
- rcp.approx.ftz.f64 %fd1, %fd2;
E sqrt.approx.f64 %fd1, %fd2;
- rsqrt.approx.f64 %fd1, %fd2;
- ex2.approx.f16 %rs1, %rs2;
E ex2.approx.ftz.f16 %rs1, %rs2;
- tanh.approx.f16x2 %r1, %r2;
- min.ftz.NaN.f32 %f1, %f2, %f3;
E max.NaN.f64 %fd1, %fd2, %fd3;
- add.sat.s32 %r1, %r2, %r3;
E add.sat.u32 %r1, %r2, %r3;
E add.sat.f64 %fd1, %fd2, %fd3;
E add.ftz.f64 %fd1, %fd2, %fd3;
E mul.ftz.f64 %fd1, %fd2, %fd3;
E fma.rn.ftz.f64 %fd1, %fd2, %fd3, %fd4;
E fma.rn.sat.f64 %fd1, %fd2, %fd3, %fd4;
E abs.ftz.f64 %fd1, %fd2;
E neg.ftz.f64 %fd1, %fd2;
E min.ftz.f64 %fd1, %fd2, %fd3;
- mul.hi.u64 %rd1, %rd2, %rd3;
E mul.wide.u64 %rd1, %rd2, %rd3;
- mad.hi.sat.s32 %r1, %r2, %r3, %r4;
E mad.hi.sat.u32 %r1, %r2, %r3, %r4;
- mad.rn.sat.f32 %f1, %f2, %f3, %f4;
E atom.global.add.noftz.f32 %f1, [%rd1], %f2;
E atom.global.inc.u64 %rd1, [%rd1], %rd2;
E atom.global.min.f32 %f1, [%rd1], %f2;
E atom.global.exch.f32 %f1, [%rd1], %f2;
E atom.global.and.u32 %r1, [%rd1], %r2;
E atom.global.add.b32 %r1, [%rd1], %r2;
E red.global.min.f64 [%rd1], %fd1;
- cvt.rn.ftz.f32.f64 %f1, %fd1;
- cvt.ftz.f64.f32 %fd1, %f1;
- cvt.sat.s32.s64 %r1, %rd1;
- cvt.rzi.sat.u8.f32 %rs1, %f1;
- cvt.relu.rn.f16.f32 %rs1, %f1;
E cvt.rn.relu.f32.f16 %f1, %rs1;
E add.sat.s16 %rs1, %rs2, %rs3;
- add.rn.f32.bf16 %f1, %rs1, %f2;
- fma.rn.f32.f16 %f1, %rs1, %rs2, %f2;
'''
GATE_COMBOS = [("sm_100a", "9.0"), ("sm_120a", "9.0"), ("sm_100a", "8.6"), ("sm_90a", "8.0"),
               ("sm_90", "8.0"), ("sm_89", "8.1"), ("sm_89", "7.8"), ("sm_80", "7.8"), ("sm_80", "7.0"),
               ("sm_75", "6.4")]
# at these two, one line aborts ptxas (a '_' sink before PTX 7.1), so each line was run on its own
PTXAS_ABORTS = [("sm_80", "7.0"), ("sm_75", "6.4")]
GATE_CASES = '''
---------- add.s32 %r1, %r2, %r3;
-----EEEEE add.u16x2 %r1, %r2, %r3;
-----EEEEE add.rn.bf16 %rs1, %rs2, %rs3;
-----EEEEE add.rn.bf16x2 %r1, %r2, %r3;
---------- add.f16 %rs1, %rs2, %rs3;
---------- add.cc.u64 %rd1, %rd2, %rd3;
---------- addc.cc.u32 %r1, %r2, %r3;
-----EEEEE mul.rn.bf16 %rs1, %rs2, %rs3;
---------E fma.rn.bf16 %rs1, %rs2, %rs3, %rs4;
---------E fma.rn.relu.f16 %rs1, %rs2, %rs3, %rs4;
---EEEEEEE fma.rn.oob.f16 %rs1, %rs2, %rs3, %rs4;
---------E min.NaN.f32 %f1, %f2, %f3;
-------EEE min.xorsign.abs.f32 %f1, %f2, %f3;
---------E max.bf16x2 %r1, %r2, %r3;
-----EEEEE max.relu.s32 %r1, %r2, %r3;
-----EEEEE min.s16x2 %r1, %r2, %r3;
---------E abs.bf16 %rs1, %rs2;
---------- neg.f16 %rs1, %rs2;
---------E tanh.approx.f32 %f1, %f2;
-----EEEEE tanh.approx.bf16 %rs1, %rs2;
---------E ex2.approx.f16 %rs1, %rs2;
-----EEEEE ex2.approx.ftz.bf16x2 %r1, %r2;
-----EEEEE setp.lt.bf16 %p1, %rs1, %rs2;
---------- setp.lt.f16x2 %p1|%p2, %r1, %r2;
---------E set.lt.u32.f16 %r1, %rs1, %rs2;
---------- dp4a.u32.u32 %r1, %r2, %r3, %r4;
---------- lop3.b32 %r1, %r2, %r3, %r4, 0x96;
---EEEEEEE lop3.or.b32 %r1|%p1, %r2, %r3, %r4, 0x96, %p2;
---------- shf.l.wrap.b32 %r1, %r2, %r3, %r4;
--------EE szext.clamp.s32 %r1, %r2, %r3;
--------EE bmsk.clamp.b32 %r1, %r2, %r3;
---------- fns.b32 %r1, %r2, %r3, %s4;
---------- bfind.shiftamt.u32 %r1, %r2;
---------- prmt.b32.f4e %r1, %r2, %r3, %r4;
---------- copysign.f32 %f1, %f2, %f3;
---------- testp.finite.f32 %p1, %f1;
---------- rcp.approx.ftz.f64 %fd1, %fd2;
---------- rsqrt.approx.ftz.f64 %fd1, %fd2;
--------EE ld.global.nc.L1::no_allocate.L2::256B.v4.s32 {%r1, %r2, %r3, %r4}, [%rd1];
--------EE ld.global.L2::64B.b32 %r1, [%rd1];
--------EE ld.global.L1::evict_last.b32 %r1, [%rd1];
---------- ld.relaxed.gpu.global.b32 %r1, [%rd1];
---------- ld.acquire.sys.global.b32 %r1, [%rd1];
-----EEEEE ld.acquire.cluster.global.b32 %r1, [%rd1];
-----EEEEE ld.shared::cluster.b32 %r1, [%rd1];
--------EE ld.global.L2::cache_hint.b32 %r1, [%rd1], %rd2;
---EEEEEEE ld.global.b128 %q1, [%rd1];
--EEEEEEEE ld.global.v8.b32 {%r1, %r2, %r3, %r4, %r5, %r6, %r7, %r8}, [%rd1];
--EEEEEEEE ld.global.v4.b64 {%rd1, %rd2, %rd3, %rd4}, [%rd1];
EEEEEEEEEE ld.global.L2::evict_last.b32 %r1, [%rd1];
---------- ld.volatile.global.b32 %r1, [%rd1];
---EEEEEEE ld.mmio.relaxed.sys.global.b32 %r1, [%rd1];
---------- st.release.gpu.global.b32 [%rd1], %r1;
--------EE st.global.L1::no_allocate.b32 [%rd1], %r1;
---EEEEEEE st.async.shared::cluster.mbarrier::complete_tx::bytes.b32 [%r1], %r2, [%r3];
---EEEEEEE red.async.relaxed.cluster.shared::cluster.mbarrier::complete_tx::bytes.add.u32 [%r1], %r2, [%r3];
-----EEEEE atom.global.add.noftz.bf16x2 %r1, [%rd1], %r2;
---------- atom.global.add.noftz.f16 %rs1, [%rd1], %rs2;
---------- atom.global.add.f64 %fd1, [%rd1], %fd2;
---------- atom.acq_rel.gpu.global.add.u32 %r1, [%rd1], %r2;
-----EEEEE atom.relaxed.cluster.global.add.u32 %r1, [%rd1], %r2;
EEEEEEEEEE atom.global.v4.f32.add %r1, [%rd1], %r2;
---EEEEEEE atom.global.v2.f32.add {%f1, %f2}, [%rd1], {%f3, %f4};
---EEEEEEE atom.global.exch.b128 %q1, [%rd1], %q2;
--------EE atom.global.L2::cache_hint.add.u32 %r1, [%rd1], %r2, %rd2;
-----EEEEE red.global.add.noftz.bf16 [%rd1], %rs1;
---------- red.release.gpu.global.add.u32 [%rd1], %r1;
---------- red.global.add.u64 [%rd1], %rd2;
------EEEE cvt.rn.satfinite.e4m3x2.f32 %rs1, %f1, %f2;
------EEEE cvt.rn.f16x2.e5m2x2 %r1, %rs1;
---------E cvt.rn.bf16.f32 %rs1, %f1;
-----EEEEE cvt.rn.bf16.s32 %rs1, %r1;
--------EE cvt.f32.bf16 %f1, %rs1;
---------E cvt.rn.relu.f16.f32 %rs1, %f1;
---------E cvt.rna.tf32.f32 %r1, %f1;
-----EEEEE cvt.rn.tf32.f32 %r1, %f1;
---EE-EEEE cvt.rn.satfinite.f16.f32 %rs1, %f1;
---EEEEEEE cvt.rn.satfinite.e2m1x2.f32 %c1, %f1, %f2;
---------E cvt.pack.sat.s8.s32.b32 %r1, %r2, %r3, %r4;
---------E cvt.pack.sat.u4.s32.b32 %r1, %r2, %r3, %r4;
---------- cvta.to.global.u64 %rd1, %rd2;
--------EE cvta.param.u64 %rd1, p;
-----EEEEE cvta.shared::cluster.u64 %rd1, %rd2;
-----EEEEE isspacep.shared::cluster %p1, %rd1;
-----EEEEE mapa.shared::cluster.u32 %r1, %r2, %r3;
-----EEEEE getctarank.shared::cluster.u32 %r1, %r2;
---------- shfl.sync.bfly.b32 %r1, %r2, 1, 31, -1;
--------EE prefetch.global.L2::evict_last [%rd1];
-----EEEEE prefetch.param.tensormap [p];
--------EE applypriority.global.L2::evict_normal [%rd1], 128;
--------EE discard.global.L2 [%rd1], 128;
--------EE createpolicy.fractional.L2::evict_last.b64 %rd1, 1.0;
---------E cp.async.ca.shared.global [%r1], [%rd1], 4;
--------EE cp.async.cg.shared.global.L2::128B [%r1], [%rd1], 16;
---------E cp.async.commit_group;
---------E cp.async.wait_group 0;
---------E cp.async.wait_all;
---------E cp.async.mbarrier.arrive.noinc.shared.b64 [%r1];
-----EEEEE cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes [%r1], [%rd1], 16, [%r2];
-----EEEEE cp.async.bulk.global.shared::cta.bulk_group [%rd1], [%r1], 16;
-----EEEEE cp.async.bulk.commit_group;
-----EEEEE cp.async.bulk.wait_group.read 0;
-----EEEEE cp.async.bulk.prefetch.L2.global [%rd1], 16;
-----EEEEE cp.reduce.async.bulk.global.shared::cta.bulk_group.add.u32 [%rd1], [%r1], 16;
-----EEEEE cp.async.bulk.tensor.2d.shared::cluster.global.mbarrier::complete_tx::bytes [%r1], [%rd1, {%r2, \
    %r3}], [%r4];
-----EEEEE cp.async.bulk.tensor.2d.global.shared::cta.bulk_group [%rd1, {%r2, %r3}], [%r1];
-----EEEEE cp.async.bulk.prefetch.tensor.2d.L2.global [%rd1, {%r2, %r3}];
---------E mbarrier.init.shared.b64 [%r1], 1;
---------E mbarrier.inval.shared.b64 [%r1];
---------E mbarrier.arrive.shared.b64 %rd1, [%r1];
--------EE mbarrier.arrive.shared::cta.b64 %rd1, [%r1];
-----EEEEE mbarrier.arrive.shared.b64 %rd1, [%r1], 2;
-----EEEEE mbarrier.arrive.expect_tx.shared.b64 %rd1, [%r1], 16;
-----EEEEE mbarrier.arrive.release.cluster.shared::cluster.b64 _, [%r1];
---EEEEEEE mbarrier.arrive.relaxed.cta.shared.b64 %rd1, [%r1];
-----EEEEE mbarrier.expect_tx.relaxed.cta.shared.b64 [%r1], 16;
---------E mbarrier.test_wait.shared.b64 %p1, [%r1], %rd1;
--------EE mbarrier.test_wait.parity.shared.b64 %p1, [%r1], %r2;
-----EEEEE mbarrier.try_wait.parity.shared.b64 %p1, [%r1], %r2;
-----EEEEE mbarrier.try_wait.acquire.cluster.shared::cta.b64 %p1, [%r1], %rd1, 1000;
---------E mbarrier.pending_count.b64 %r1, %rd1;
---------- bar.sync 0;
--------EE bar.cta.sync 0;
---------- barrier.sync.aligned 0, 128;
---------- bar.red.popc.u32 %r1, 0, %p1;
---------- bar.warp.sync -1;
-----EEEEE barrier.cluster.arrive.release.aligned;
-----EEEEE barrier.cluster.wait.acquire;
-----EEEEE barrier.cluster.arrive;
---------- membar.gl;
--------EE membar.proxy.alias;
---------- fence.acq_rel.gpu;
-----EEEEE fence.sc.cluster;
-----EEEEE fence.proxy.async;
-----EEEEE fence.proxy.async.shared::cta;
-----EEEEE fence.mbarrier_init.release.cluster;
---EEEEEEE fence.proxy.tensormap::generic.release.gpu;
---EEEEEEE fence.proxy.tensormap::generic.acquire.gpu [%rd1], 128;
---------- vote.sync.ballot.b32 %r1, %p1, -1;
---------- vote.sync.any.pred %p1, %p2, -1;
---------- match.any.sync.b64 %r1, %rd1, -1;
---------- match.all.sync.b32 %r1|%p1, %r2, -1;
---------E redux.sync.add.u32 %r1, %r2, -1;
-E-EEEEEEE redux.sync.min.f32 %f1, %f2, -1;
---------- activemask.b32 %r1;
-----EEEEE elect.sync %r1|%p1, -1;
-----EEEEE elect.sync _|%p1, -1;
-----EEEEE griddepcontrol.wait;
-----EEEEE griddepcontrol.launch_dependents;
----EEEEEE setmaxnreg.inc.sync.aligned.u32 232;
----EEEEEE setmaxnreg.dec.sync.aligned.u32 40;
---------- nanosleep.u32 100;
--------EE stacksave.u64 %rd1;
--------EE movmatrix.sync.aligned.m8n8.trans.b16 %r1, %r2;
---------E ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%r1, %r2, %r3, %r4}, [%r5];
--------EE ldmatrix.sync.aligned.m8n8.x2.trans.shared::cta.b16 {%r1, %r2}, [%r5];
-----EEEEE stmatrix.sync.aligned.m8n8.x4.shared.b16 [%r5], {%r1, %r2, %r3, %r4};
---------E mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%f1, %f2, %f3, %f4}, {%r1, %r2, %r3, %r4}, \
    {%r5, %r6}, {%f5, %f6, %f7, %f8};
---------E mma.sync.aligned.m16n8k8.row.col.f32.f16.f16.f32 {%f1, %f2, %f3, %f4}, {%r1, %r2}, {%r5}, {%f5, \
    %f6, %f7, %f8};
---EEEEEEE mma.sync.aligned.m16n8k32.row.col.f32.e4m3.e4m3.f32 {%f1, %f2, %f3, %f4}, {%r1, %r2, %r3, %r4}, \
    {%r5, %r6}, {%f5, %f6, %f7, %f8};
-----EEEEE mma.sync.aligned.m16n8k4.row.col.f64.f64.f64.f64 {%fd1, %fd2, %fd3, %fd4}, {%fd5, %fd6}, {%fd7}, \
    {%fd1, %fd2, %fd3, %fd4};
---------E mma.sync.aligned.m8n8k4.row.col.f64.f64.f64.f64 {%fd1, %fd2}, {%fd5}, {%fd7}, {%fd1, %fd2};
---------E mma.sync.aligned.m16n8k32.row.col.satfinite.s32.s8.s8.s32 {%r1, %r2, %r3, %r4}, {%r1, %r2, %r3, \
    %r4}, {%r5, %r6}, {%r1, %r2, %r3, %r4};
--------EE mma.sp.sync.aligned.m16n8k32.row.col.f32.bf16.bf16.f32 {%f1, %f2, %f3, %f4}, {%r1, %r2, %r3, %r4}, \
    {%r5, %r6, %r7, %r8}, {%f5, %f6, %f7, %f8}, %r1, 0;
EEE-EEEEEE wgmma.fence.sync.aligned;
EEE-EEEEEE wgmma.commit_group.sync.aligned;
EEE-EEEEEE wgmma.wait_group.sync.aligned 0;
EEE-EEEEEE wgmma.mma_async.sync.aligned.m64n8k16.f32.bf16.bf16 {%f1, %f2, %f3, %f4}, %rd1, %rd2, 1, 1, 1, 0, 0;
-E-EEEEEEE tcgen05.alloc.cta_group::1.sync.aligned.shared::cta.b32 [%r1], 32;
-E-EEEEEEE tcgen05.dealloc.cta_group::1.sync.aligned.b32 %r1, 32;
-E-EEEEEEE tcgen05.relinquish_alloc_permit.cta_group::1.sync.aligned;
-E-EEEEEEE tcgen05.fence::before_thread_sync;
-E-EEEEEEE tcgen05.wait::ld.sync.aligned;
-E-EEEEEEE tcgen05.commit.cta_group::1.mbarrier::arrive::one.shared::cluster.b64 [%r1];
-E-EEEEEEE tcgen05.ld.sync.aligned.32x32b.x2.b32 {%r1, %r2}, [%r3];
-E-EEEEEEE tcgen05.mma.cta_group::1.kind::f16 [%r1], %rd1, %rd2, %r2, %p1;
---EEEEEEE clusterlaunchcontrol.try_cancel.async.shared::cta.mbarrier::complete_tx::bytes.b128 [%r1], [%r2];
---EEEEEEE tensormap.cp_fenceproxy.global.shared::cta.tensormap::generic.release.gpu.sync.aligned [%rd1], \
    [%r1], 128;
---EEEEEEE tensormap.replace.tile.global_address.shared::cta.b1024.b64 [%r1], %rd1;
---EEEEEEE multimem.ld_reduce.relaxed.sys.global.add.f32 %f1, [%rd1];
---EEEEEEE multimem.st.relaxed.sys.global.f32 [%rd1], %f1;
---EEEEEEE multimem.red.relaxed.sys.global.add.u32 [%rd1], %r1;
---------- brkpt;
---------- pmevent.mask 1;
---------- trap;
---EEEEEEE add.f32x2 %rd1, %rd2, %rd3;
---EEEEEEE add.rn.f32x2 %rd1, %rd2, %rd3;
---EEEEEEE fma.rn.f32x2 %rd1, %rd2, %rd3, %rd4;
--EEEEEEEE min.f32 %f1, %f2, %f3, %f4;
EEEEEEEEEE max.s32 %r1, %r2, %r3, %r4;
---EEEEEEE add.f32.f16 %f1, %rs1, %f2;
---EEEEEEE add.rn.f32.bf16 %f1, %rs1, %f2;
---EEEEEEE fma.rn.f32.f16 %f1, %rs1, %rs2, %f2;
---EEEEEEE sub.f32.bf16 %f1, %rs1, %f2;
---EEEEEEE cvt.rn.f16x2.e2m1x2 %r1, %c1;
---EEEEEEE cvt.rz.satfinite.ue8m0x2.f32 %rs1, %f1, %f2;
---EEEEEEE cvt.rn.bf16x2.ue8m0x2 %r1, %rs1;
-EEEEEEEEE cvt.rs.satfinite.e4m3x4.f32 %r1, {%f1, %f2, %f3, %f4}, %r2;
-EEEEEEEEE cvt.rs.relu.satfinite.f16x2.f32 %r1, %f1, %f2, %r2;
EEEEEEEEEE cvt.rn.satfinite.e4m3x2.bf16x2 %rs1, %r1;
---EEEEEEE cvt.rn.satfinite.tf32.f32 %r1, %f1;
---EE-EEEE cvt.rna.satfinite.tf32.f32 %r1, %f1;
---EE-EEEE cvt.rn.satfinite.bf16x2.f32 %r1, %f1, %f2;
---EE-EEEE cvt.rn.relu.satfinite.bf16.f32 %rs1, %f1;
-----EEEEE cvt.ftz.f32.bf16 %f1, %rs1;
-----EEEEE cvt.rn.f16.bf16 %rs1, %rs1;
-----EEEEE cvt.rzi.s32.bf16 %r1, %rs1;
-----EEEEE cvt.rn.bf16.f64 %rs1, %fd1;
------EEEE cvt.rn.satfinite.e5m2x2.f16x2 %rs1, %r1;
-E-EEEEEEE redux.sync.max.abs.NaN.f32 %f1, %f2, -1;
---------E redux.sync.and.b32 %r1, %r2, -1;
--EEEEEEEE ld.global.v8.f32 {%f1, %f2, %f3, %f4, %f5, %f6, %f7, %f8}, [%rd1];
--EEEEEEEE ld.global.L2::evict_last.v8.b32 {%r1, %r2, %r3, %r4, %r5, %r6, %r7, %r8}, [%rd1];
--EEEEEEEE st.global.v4.b64 [%rd1], {%rd1, %rd2, %rd3, %rd4};
---EEEEEEE ld.global.nc.b128 %q1, [%rd1];
---EEEEEEE ld.relaxed.sys.global.b128 %q1, [%rd1];
---EEEEEEE st.release.gpu.global.b128 [%rd1], %q1;
---EEEEEEE atom.global.cas.b128 %q1, [%rd1], %q2, %q3;
---EEEEEEE atom.sys.global.exch.b128 %q1, [%rd1], %q2;
---EEEEEEE mov.b128 %q1, {%rd1, %rd2};
---EEEEEEE mov.b128 {%rd1, %rd2}, %q1;
---EEEEEEE atom.global.v4.f32.add {%f1, %f2, %f3, %f4}, [%rd1], {%f1, %f2, %f3, %f4};
---EEEEEEE red.global.v2.f16x2.add.noftz [%rd1], {%r1, %r2};
---------- red.global.add.noftz.f16 [%rd1], %rs1;
---------- atom.global.cas.b16 %rs1, [%rd1], %rs2, %rs3;
---EEEEEEE ldu.global.b128 %q1, [%rd1];
---EEEEEEE st.bulk.weak.shared::cta [%r1], 128, 0;
--EEEEEEEE st.async.release.gpu.global.b32 [%rd1], %r1;
--EEEEEEEE red.async.release.gpu.global.add.u32 [%rd1], %r1;
---EEEEEEE clusterlaunchcontrol.try_cancel.async.shared::cta.mbarrier::complete_tx::bytes.multicast::cluster::all.b128 \
    [%r1], [%r2];
---EEEEEEE ldmatrix.sync.aligned.m16n16.x1.trans.shared.b8 {%r1, %r2}, [%r3];
---EEEEEEE multimem.ld_reduce.relaxed.sys.global.add.acc::f32.v4.f16x2 {%r1, %r2, %r3, %r4}, [%rd1];
---EEEEEEE multimem.ld_reduce.relaxed.sys.global.add.e4m3x4 %r1, [%rd1];
EEEEEEEEEE multimem.st.relaxed.sys.global.e5m2 [%rd1], %rs1;
---EEEEEEE tensormap.replace.tile.swizzle_atomicity.shared::cta.b1024.b32 [%r1], 1;
-E-EEEEEEE cp.async.bulk.tensor.2d.shared::cluster.global.tile::gather4.mbarrier::complete_tx::bytes [%r1], \
    [%rd1, {%r2, %r3, %r4, %r5, %r6}], [%r7];
-E-EEEEEEE cp.async.bulk.tensor.2d.global.shared::cta.tile::scatter4.bulk_group [%rd1, {%r2, %r3, %r4, %r5, \
    %r6}], [%r1];
-E-EEEEEEE cp.async.bulk.tensor.3d.shared::cluster.global.im2col::w.mbarrier::complete_tx::bytes [%r1], \
    [%rd1, {%r2, %r3, %r4}], [%r7], {%rs1, %rs2};
-E-EEEEEEE cp.async.bulk.tensor.2d.shared::cta.global.tile.mbarrier::complete_tx::bytes.cta_group::2 [%r1], \
    [%rd1, {%r2, %r3}], [%r7];
-E-EEEEEEE cp.async.bulk.prefetch.tensor.2d.L2.global.tile::gather4 [%rd1, {%r2, %r3, %r4, %r5, %r6}];
---EEEEEEE cp.async.bulk.global.shared::cta.bulk_group.cp_mask [%rd1], [%r1], 16, %rs1;
--------EE prefetch.global.L2::evict_normal [%rd1];
--------EE isspacep.param %p1, %rd1;
--------EE cvta.param.u64 %rd1, %rd2;
---EEEEEEE cvta.to.param::entry.u64 %rd1, %rd2;
-----EEEEE ex2.approx.ftz.bf16 %rs1, %rs2;
-----EEEEE tanh.approx.bf16x2 %r1, %r2;
-------EEE min.xorsign.abs.bf16x2 %r1, %r2, %r3;
---------E min.NaN.f16 %rs1, %rs2, %rs3;
-----EEEEE max.relu.s16x2 %r1, %r2, %r3;
-----EEEEE setp.lt.bf16x2 %p1|%p2, %r1, %r2;
-----EEEEE set.lt.bf16x2.bf16x2 %r1, %r2, %r3;
-----EEEEE set.lt.u32.bf16 %r1, %rs1, %rs2;
-----EEEEE set.lt.bf16.f32 %rs1, %f1, %f2;
---------E fma.rn.relu.bf16x2 %r1, %r2, %r3, %r4;
---EEEEEEE fma.rn.oob.relu.bf16 %rs1, %rs2, %rs3, %rs4;
---------E abs.bf16x2 %r1, %r2;
---------E neg.bf16 %rs1, %rs2;
-----EEEEE mul.rn.bf16x2 %r1, %r2, %r3;
-----EEEEE sub.rn.bf16 %rs1, %rs2, %rs3;
-----EEEEE atom.add.noftz.bf16 %rs1, [%rd1], %rs2;
---EEEEEEE lop3.and.b32 %r1|%p1, %r2, %r3, %r4, 0x80, %p2;
EEEEEEEEEE wgmma.mma_async.sp.sync.aligned.m64n8k32.f32.bf16.bf16 {%f1, %f2, %f3, %f4}, %rd1, %rd2, %r1, 0, \
    1, 1, 1, 0, 0;
EEEEEEEEEE wgmma.mma_async.sync.aligned.m64n8k32.s32.u8.s8 {%r1, %r2, %r3, %r4}, %rd1, %rd2, 1;
---EEEEEEE mma.sp::ordered_metadata.sync.aligned.m16n8k32.row.col.f32.bf16.bf16.f32 {%f1, %f2, %f3, %f4}, \
    {%r1, %r2, %r3, %r4}, {%r5, %r6, %r7, %r8}, {%f5, %f6, %f7, %f8}, %r1, 0;
--EEEEEEEE mma.sync.aligned.m16n8k16.row.col.f32.e4m3.e4m3.f32 {%f1, %f2, %f3, %f4}, {%r1, %r2}, {%r5}, {%f5, \
    %f6, %f7, %f8};
--EEEEEEEE mma.sync.aligned.m16n8k32.row.col.f16.e4m3.e4m3.f16 {%r1, %r2}, {%r1, %r2, %r3, %r4}, {%r5, %r6}, \
    {%r7, %r8};
E-EEEEEEEE mma.sync.aligned.m16n8k32.row.col.kind::f8f6f4.f32.e2m1.e2m1.f32 {%f1, %f2, %f3, %f4}, {%r1, %r2, \
    %r3, %r4}, {%r5, %r6}, {%f5, %f6, %f7, %f8};
---------- mma.sync.aligned.m8n8k4.row.col.f32.f16.f16.f32 {%f1, %f2, %f3, %f4, %f5, %f6, %f7, %f8}, {%r1, \
    %r2}, {%r3, %r4}, {%f1, %f2, %f3, %f4, %f5, %f6, %f7, %f8};
---------E mma.sync.aligned.m8n8k16.row.col.s32.s8.s8.s32 {%r1, %r2}, {%r3}, {%r4}, {%r5, %r6};
--------EE mma.sync.aligned.m16n8k256.row.col.s32.b1.b1.s32.and.popc {%r1, %r2, %r3, %r4}, {%r1, %r2, %r3, \
    %r4}, {%r5, %r6}, {%r1, %r2, %r3, %r4};
---------- wmma.load.a.sync.aligned.row.m16n16k16.global.f16 {%r1, %r2, %r3, %r4, %r5, %r6, %r7, %r8}, [%rd1];
---------- wmma.load.a.sync.aligned.row.m16n16k16.global.s8 {%r1, %r2}, [%rd1];
---------E wmma.load.a.sync.aligned.row.m16n16k8.global.tf32 {%r1, %r2, %r3, %r4}, [%rd1];
EEEEEEEEEE tcgen05.ld.red.sync.aligned.32x32b.x2.min.f32 {%f1, %f2}, %f3, [%r3];
-E-EEEEEEE tcgen05.shift.cta_group::1.down [%r1];
-E-EEEEEEE tcgen05.mma.cta_group::1.kind::i8 [%r1], %rd1, %rd2, %r2, %p1;
-E-EEEEEEE tcgen05.cp.cta_group::1.128x256b [%r1], %rd1;
-E-EEEEEEE tcgen05.st.sync.aligned.32x32b.x2.b32 [%r3], {%r1, %r2};
-E-EEEEEEE tcgen05.wait::st.sync.aligned;
--------EE alloca.u64 %rd1, %rd2;
---------- nanosleep.u32 %r1;
---------- vote.sync.uni.pred %p1, %p2, -1;
---------- match.all.sync.b64 %r1|%p1, %rd1, -1;
---------- bar.warp.sync %r1;
---------- barrier.sync.aligned %r1, %r2;
---------- barrier.red.popc.aligned.u32 %r1, 0, %p1;
---------E mbarrier.arrive.noComplete.shared.b64 %rd1, [%r1], 2;
---------E mbarrier.arrive_drop.shared.b64 %rd1, [%r1];
---EEEEEEE mbarrier.arrive.expect_tx.relaxed.cluster.shared::cluster.b64 _, [%r1], 16;
-----EEEEE mbarrier.complete_tx.shared::cluster.b64 [%r1], 16;
------EEEE mbarrier.test_wait.parity.acquire.cta.shared::cta.b64 %p1, [%r1], %r2;
--------EE cp.async.mbarrier.arrive.shared::cta.b64 [%r1];
---------- fence.sc.gpu;
--------EE fence.proxy.alias;
-----EEEEE fence.proxy.async.global;
---EEEEEEE fence.acquire.sync_restrict::shared::cluster.cluster;
---EEEEEEE fence.proxy.async::generic.release.sync_restrict::shared::cta.cluster;
---------- membar.sys;
-----EEEEE cvt.f16.bf16 %rs1, %rs1;
-----EEEEE cvt.rn.bf16.f16 %rs1, %rs1;
---EEEEEEE cp.async.bulk.tensor.2d.shared::cta.global.tile::gather4.mbarrier::complete_tx::bytes [%r1], \
    [%rd1, {%r2, %r3, %r4, %r5, %r6}], [%r7];
EEEEEEEEEE add.f32x2 %f1, %rd2, %rd3;
'''


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
        out = subprocess.run(["ptxas", f"-arch={target}", str(path), "-o", os.devnull],
                             capture_output=True, text=True, timeout=60)
    bad = {int(m.group(1)) - first for m in re.finditer(r"line (\d+); error", out.stdout + out.stderr)}
    fatal = [ln for ln in (out.stdout + out.stderr).splitlines() if "fatal" in ln and "aborted" not in ln]
    assert not fatal, fatal
    return [i in bad for i in range(len(lines))]


@pytest.mark.skipif(shutil.which("ptxas") is None, reason="ptxas is not installed")
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

CORPUS = sorted(glob.glob(str(Path(__file__).parents[1] / "corpus" / "ptx" / "**" / "*.ptx"), recursive=True))


def _walk(body, regs, out):
    regs = {**regs, **{n: s.type for s in body if isinstance(s, ir.RegisterDecl) for n in s.declared()}}
    for s in body:
        if isinstance(s, ir.Block):
            _walk(s.body, regs, out)
        elif isinstance(s, ir.Instruction):
            out.append((s, regs))


@pytest.mark.skipif(not CORPUS, reason="tests/corpus/ptx is empty")
def test_corpus_has_no_isa_problems():
    problems, count = [], 0
    for path in CORPUS:
        mod = pf.parse_file(path)
        for fn in mod.functions:
            work = []
            _walk(fn.body or (), {p.name: p.type for p in fn.params if p.space == ".reg"}, work)
            for instr, regs in work:
                count += 1
                problems += [f"{path}:{span.line}: {m}" for span, m in
                             check_instruction(instr, regs, mod.version, mod.target.arch)]
    assert count > 10_000
    assert not problems, "\n".join(problems[:30])
