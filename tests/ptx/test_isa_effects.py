"""The ISA table's effects (ptx/isa: spec.Effects, effects.py): every family has them, they are well formed,
modifiers refine them, the order and scope come from the suffixes, and the analyses that used to keep their
own opcode lists read them (the validator's "result register required" here; liveness, the sanitizer and
the runtime's parameter analysis in their own tests)."""

from __future__ import annotations

import pytest

import ptxforge as pf
from ptxforge.ptx.isa import FAMILIES, Effects, effects
from ptxforge.ptx.isa.build import fx
from ptxforge.ptx.isa.effects import addresses_memory, lane_local, reads_own_lane_only, writes_result
from ptxforge.ptx.isa.spec import LANE_CLASSES, MEMORY_KINDS
from ptxforge.ptx.validator import validate


def families_without_effects(table=FAMILIES) -> list[str]:
    """The families the table describes no effects for (what a newcomer adding a family may forget)."""
    return [name for name, spec in table.items() if spec.effects is None]


def test_every_family_has_effects():
    assert families_without_effects() == [], "give these families effects=fx(...) in ptx/isa/data_*.py"


def test_effects_are_well_formed():
    for name, spec in FAMILIES.items():
        for e in (spec.effects, *(e for _, e in spec.effects_when)):
            assert e.memory in MEMORY_KINDS and e.lanes in LANE_CLASSES, name
            assert all(0 <= i < 8 for i in e.writes) and set(e.loaded) <= set(e.writes), name
            assert not (e.carry and e.memory != "none"), name


def test_a_kind_outside_the_lists_is_refused_naming_the_choices():
    with pytest.raises(ValueError, match=r"memory kind 'read': expected one of \('none', 'load'"):
        fx((0,), "read")
    with pytest.raises(ValueError, match=r"lane class 'thread': expected one of \('lane', 'warp'"):
        fx(lanes="thread")


@pytest.mark.parametrize(("mnemonic", "want"), [
    ("add.u32", Effects((0,))),
    ("add.cc.u32", Effects((0,), carry=True)),  # .cc refines add: it writes the carry flag
    ("addc.cc.u32", Effects((0,), carry=True)),
    ("bar.sync", Effects((), "fence", "block")),
    ("bar.red.popc.u32", Effects((0,), "fence", "block")),  # .red refines bar: it writes a result
    ("ld.global.acquire.gpu.u32", Effects((0,), "load", loaded=(0,), order="acquire", scope="gpu")),
    ("st.volatile.global.u32", Effects((), "store", order="volatile")),
    ("atom.global.acq_rel.cluster.add.u32", Effects((0,), "atomic", loaded=(0,), order="acq_rel", scope="cluster")),
    ("membar.gl", Effects((), "fence", scope="gpu")),
    ("fence.sc.sys", Effects((), "fence", order="sc", scope="sys")),
    ("shfl.sync.idx.b32", Effects((0,), lanes="warp")),
    ("mapa.shared::cluster.u32", Effects((0,), lanes="cluster")),
    ("cp.async.ca.shared.global", Effects((), "async", async_part="copy")),  # pending until its group's wait
    ("wgmma.mma_async.sync.aligned.m64n8k16.f32.f16.f16", Effects((0,), "async", "block")),
])
def test_effects_of_an_instruction(mnemonic, want):
    assert effects(mnemonic) == want


def test_what_the_analyses_derive():
    assert lane_local("add.u32") and lane_local("cvta.to.global.u64") and not lane_local("add.cc.u32")
    assert not lane_local("addc.u32") and not lane_local("mapa.shared::cluster.u32")
    assert not lane_local("shfl.sync.idx.b32") and not lane_local("ld.global.u32")
    assert reads_own_lane_only("ld.global.u32") and reads_own_lane_only("mbarrier.try_wait.shared.b64")
    assert not reads_own_lane_only("vote.sync.ballot.b32") and not reads_own_lane_only("cp.async.ca.shared.global")
    assert writes_result("addc.u32") and not writes_result("st.global.u32") and not writes_result("bar.sync")
    assert effects("frobnicate.u32") is None


def _kernel_with(line: str) -> pf.ptx.ir.Module:
    return pf.parse(".version 8.0\n.target sm_90\n.address_size 64\n.visible .entry k(.param .u64 p)\n{\n"
                    ".reg .b32 %r<4>;\n.reg .b64 %rd<4>;\n" + line + "\nret;\n}\n", "t.ptx")


@pytest.mark.parametrize("line", ["addc.u32 5, %r1, %r2;", "vadd.u32.u32.u32 5, %r1, %r2;",
                                  "bmsk.clamp.b32 7, %r1, %r2;"])
def test_a_result_that_is_not_a_register_is_refused_for_every_family_that_writes_one(line):
    """ptxas 13.0: "Result register required for instruction 'addc'" (and 'mov' for vadd, 'bmsk'); the
    hand-kept list the validator read before missed addc, subc, madc and the video instructions."""
    errors = [d.message for d in validate(_kernel_with(line)) if d.severity == "error"]
    assert errors == [f"{line.split()[0]}: operand 1 is the result; it must be a register"]


def test_the_parameter_analysis_counts_every_address_operand():
    """A parameter used as an mbarrier's address is a pointer (the list params.py kept had ld/st/atom/red/cp/
    prefetch/multimem/cvta/isspacep only), so an integer passed for it is checked as an address."""
    from ptxforge.runtime.params import pointer_params  # the runtime is above ptx; only this test needs it

    m = _kernel_with("ld.param.u64 %rd1, [p];\nmbarrier.init.b64 [%rd1], 1;")
    init = next(i for i in m.function("k").instructions() if i.opcode == "mbarrier")
    assert addresses_memory(init) and pointer_params(m.function("k")) == frozenset({"p"})
