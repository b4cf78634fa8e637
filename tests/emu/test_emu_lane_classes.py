"""Each builder against its family's lane class in the ISA table (ptx/isa effects): a lane-local instruction
run on diverged lanes gives the active lanes results that do not depend on the inactive lanes' registers.
The one-instruction kernels of the GPU conformance run (tests/conformance/hw_ops.py) and a few more below
are run with every other lane switched off by a guard, twice: the second time with other values in the
switched-off lanes; the active lanes' results must be bit-identical."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest
from conformance.hw_ops import APPROX, EXACT, Case, _kernel, poisoned_output

from ptxforge.emu.compiler import REGISTRY
from ptxforge.ptx.isa import FAMILIES, lookup
from ptxforge.ptx.isa.effects import lane_local

N = 256
# lane-local families the conformance cases do not cover: one sample each
MORE = [
    Case("and.b32", "and.b32 {d}, {a}, {b}", ("b32", "b32"), "b32"),
    Case("or.b32", "or.b32 {d}, {a}, {b}", ("b32", "b32"), "b32"),
    Case("xor.b32", "xor.b32 {d}, {a}, {b}", ("b32", "b32"), "b32"),
    Case("not.b32", "not.b32 {d}, {a}", ("b32",), "b32"),
    Case("cnot.b32", "cnot.b32 {d}, {a}", ("b32",), "b32"),
    Case("shl.b32", "shl.b32 {d}, {a}, {b}", ("b32", "u32"), "b32", inputs="small"),
    Case("mov.b32", "mov.b32 {d}, {a}", ("b32",), "b32"),
    Case("mad24.lo.u32", "mad24.lo.u32 {d}, {a}, {b}, {c}", ("u32", "u32", "u32"), "u32"),
    Case("fns.b32", "fns.b32 {d}, {a}, {b}, 1", ("b32", "u32"), "b32"),
    Case("bmsk.clamp.b32", "bmsk.clamp.b32 {d}, {a}, {b}", ("u32", "u32"), "b32"),
    Case("szext.wrap.s32", "szext.wrap.s32 {d}, {a}, {b}", ("s32", "u32"), "s32"),
    Case("selp.b32", "selp.b32 {d}, {a}, {b}, 1", ("b32", "b32"), "b32"),
    Case("cvt.pack.sat.u8.s32.b32", "cvt.pack.sat.u8.s32.b32 {d}, {a}, {b}, {c}", ("s32", "s32", "b32"), "b32"),
    Case("vmin.u32.u32.u32", "vmin.u32.u32.u32 {d}, {a}, {b}", ("u32", "u32"), "u32"),
    Case("vmax2.u32.u32.u32", "vmax2.u32.u32.u32 {d}, {a}, {b}, {c}", ("u32", "u32", "u32"), "u32"),
    Case("vmin2.s32.s32.s32", "vmin2.s32.s32.s32 {d}, {a}, {b}, {c}", ("s32", "s32", "s32"), "s32"),
    Case("vsub2.u32.u32.u32", "vsub2.u32.u32.u32 {d}, {a}, {b}, {c}", ("u32", "u32", "u32"), "u32"),
    Case("vadd4.u32.u32.u32", "vadd4.u32.u32.u32 {d}, {a}, {b}, {c}", ("u32", "u32", "u32"), "u32"),
    Case("vabsdiff4.u32.u32.u32", "vabsdiff4.u32.u32.u32 {d}, {a}, {b}, {c}", ("u32", "u32", "u32"), "u32"),
    Case("mbarrier.pending_count.b64", "mbarrier.pending_count.b64 {d}, {a}", ("u64",), "u32"),
]
# lane-local families with a builder but no sample here, and why
NOT_SAMPLED = {
    "cvta": "its result depends on the launch's address windows, which both runs share; "
            "tests/emu/test_emu_cvta*.py cover it",
    "isspacep": "its result depends on the launch's address windows, which both runs share",
    "createpolicy": "its result is an opaque policy word computed from immediates",
}
SAMPLES = EXACT + APPROX + MORE


def _family(case: Case) -> str:
    spec = lookup(case.text.split()[0])
    assert spec is not None, case.text
    return spec.family


def diverged_ptx(case: Case) -> str:
    """The case's kernel with its instruction guarded: only even lanes run it."""
    text = case.ptx()
    line = "\t" + case.text.format(d="%y", a="%x0", b="%x1", c="%x2") + ";"
    assert line in text
    guarded = "\tand.b32 %t, %t, 1;\n\tsetp.eq.u32 %even, %t, 0;\n\t@%even " + line.lstrip("\t")
    return text.replace("\t.reg .pred %p;", "\t.reg .pred %p, %even;").replace(line, guarded)


def active_results(case: Case, ins: list[np.ndarray]) -> np.ndarray:
    out = poisoned_output(case, N)
    pad = [np.zeros(N, np.uint32)] * (3 - len(ins))
    _kernel(diverged_ptx(case), case.name).launch(grid=(1,), block=(N,), args=[*ins, *pad, out, np.uint32(N)],
                                                  device="emu")
    return out.view(f"u{out.dtype.itemsize}")[0::2].copy()


def depends_on_inactive_lanes(case: Case) -> bool:
    """Whether the even lanes' results change when only the odd (switched-off) lanes' inputs do."""
    rng = np.random.default_rng(7)
    ins = case.make_inputs(N, rng)
    other = [a.copy() for a in ins]
    for a, b in zip(other, case.make_inputs(N, np.random.default_rng(8)), strict=True):
        a[1::2] = b[1::2]
    return not np.array_equal(active_results(case, ins), active_results(case, other))


def test_every_lane_local_family_with_a_builder_has_a_sample_here():
    local = {f for f, spec in FAMILIES.items() if spec.effects is not None and spec.effects.lane_local
             and f in REGISTRY.builders}
    sampled = {_family(c) for c in SAMPLES}
    assert local - sampled - set(NOT_SAMPLED) == set(), "add a diverged-lane sample (MORE) for these"
    assert all(lane_local(c.text.split()[0]) for c in MORE)


@pytest.mark.parametrize("case", [c for c in SAMPLES if lane_local(c.text.split()[0])], ids=lambda c: c.name)
def test_a_lane_local_builder_ignores_the_inactive_lanes(case):
    assert not depends_on_inactive_lanes(case), f"{case.name}: lane class 'lane' in the ISA table, but the " \
                                                f"active lanes' results depend on the inactive lanes' registers"


def test_a_builder_that_reads_another_lane_is_caught(monkeypatch):
    """The check itself: an `add` builder that takes its second operand from the next lane (as a shfl would) is
    caught, while its lane class says 'lane'."""
    real = REGISTRY.builders["add"]

    def add_from_next_lane(ctx):
        op = real(ctx)
        ins = ctx.ins
        if ins.suffixes != ("u32",):  # the kernel's address arithmetic (add.s64) stays as it is
            return op
        a = ctx.read(ins.operands[1], ".u32")
        d = ctx.write(ins.operands[0], ".u32")

        def fn(st, m):
            d(st, np.roll(np.asarray(a(st), np.uint32), -1) + np.uint32(1), m)
        return dataclasses.replace(op, fn=fn)
    monkeypatch.setitem(REGISTRY.builders, "add", add_from_next_lane)
    case = Case("add.u32.next", "add.u32 {d}, {a}, {b}", ("u32", "u32"), "u32")
    assert lane_local("add.u32")
    assert depends_on_inactive_lanes(case)
