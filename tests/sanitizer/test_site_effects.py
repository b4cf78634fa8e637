"""The sanitizer's async-copy and mbarrier facts about an instruction come from the ISA table's effects
(`Effects.async_part`, `effects.STRONG_ORDERS`), not from lists of family names in the sanitizer."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

import ptxforge as pf
from ptxforge.emu.sanitizer import node_races, sites
from ptxforge.emu.sanitizer.sites import site_info
from ptxforge.ptx.isa import effects
from ptxforge.ptx.isa.build import fx
from ptxforge.ptx.isa.effects import STRONG_ORDERS

# one instruction of each kind, and the flags the sanitizer must see on it:
# (async_copy, bulk, async_commit, async_wait, async_via_mbarrier, mbarrier, is an mbarrier phase wait)
CASES = {
    "cp.async.ca.shared.global [%rd1], [%rd2], 4;": (True, False, False, "", False, False, False),
    "cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes [%rd1], [%rd2], 16, [%rd3];":
        (True, True, False, "", False, True, False),
    "cp.async.bulk.tensor.2d.shared::cluster.global.tile.mbarrier::complete_tx::bytes [%rd1], [%rd2, {%r1, %r2}],"
    " [%rd3];": (True, True, False, "", False, True, False),
    "cp.async.bulk.prefetch.L2.global [%rd1], 16;": (True, True, False, "", False, False, False),
    "cp.reduce.async.bulk.global.shared::cta.bulk_group.add.u32 [%rd1], [%rd2], 16;":
        (False, True, False, "", False, False, False),
    "cp.async.commit_group;": (False, False, True, "", False, False, False),
    "cp.async.bulk.commit_group;": (False, False, True, "", False, False, False),
    "cp.async.wait_group 0;": (False, False, False, "group", False, False, False),
    "cp.async.bulk.wait_group.read 0;": (False, False, False, "group", False, False, False),
    "cp.async.wait_all;": (False, False, False, "all", False, False, False),
    "cp.async.mbarrier.arrive.noinc.shared.b64 [%rd1];": (False, False, False, "", True, True, False),
    "mbarrier.init.shared.b64 [%rd1], 32;": (False, False, False, "", False, True, False),
    "mbarrier.arrive.shared.b64 %rd4, [%rd1];": (False, False, False, "", False, True, False),
    "mbarrier.expect_tx.relaxed.cta.shared::cta.b64 [%rd1], 16;": (False, False, False, "", False, True, False),
    "mbarrier.try_wait.parity.shared::cta.b64 %p1, [%rd1], %r1;": (False, False, False, "", False, True, True),
    "mbarrier.test_wait.shared.b64 %p1, [%rd1], %rd4;": (False, False, False, "", False, True, True),
    "mbarrier.pending_count.b64 %r1, %rd4;": (False, False, False, "", False, True, False),
    "ld.global.u32 %r1, [%rd1];": (False, False, False, "", False, False, False),
    "atom.global.add.u32 %r1, [%rd1], 1;": (False, False, False, "", False, False, False),
}


def _instructions():
    body = "\n".join(f"    {t}" for t in CASES)
    text = (".version 8.6\n.target sm_90a\n.address_size 64\n.visible .entry k()\n{\n"
            "    .reg .pred %p<2>;\n    .reg .b32 %r<4>;\n    .reg .b64 %rd<8>;\n" + body + "\n    ret;\n}\n")
    func = pf.parse(text, filename="sites.ptx").functions[0]
    return [s for s in func.body if hasattr(s, "opcode") and s.opcode != "ret"]


@pytest.mark.parametrize("i, text", list(enumerate(CASES)))
def test_flags_follow_the_table(i, text):
    ins = _instructions()[i]
    info = site_info(0, ins, None, wait_slot=7)
    got = (info.async_copy, info.bulk, info.async_commit, info.async_wait, info.async_via_mbarrier, info.mbarrier,
           info.mbar_wait == 7)
    assert got == CASES[text], text


def test_a_bulk_reduction_is_atomic_but_no_strong_write():
    ins = _instructions()[list(CASES).index(
        "cp.reduce.async.bulk.global.shared::cta.bulk_group.add.u32 [%rd1], [%rd2], 16;")]
    info = site_info(0, ins, None)
    assert info.atomic and not info.strong_write


def test_an_mbarrier_arrive_returns_no_value_to_acquire():
    ins = _instructions()[list(CASES).index("mbarrier.arrive.shared.b64 %rd4, [%rd1];")]
    info = site_info(0, ins, None)
    assert info.atomic and not info.acquire and not info.strong_read


def test_the_table_gives_each_async_family_its_part():
    assert effects("cp.async.wait_all").async_part == "wait_all"
    assert effects("mbarrier.try_wait.parity.shared::cta.b64").async_part == "mbarrier_wait"
    assert effects("add.u32").async_part == ""
    with pytest.raises(ValueError, match="async part 'copies'"):
        fx((), "async", part="copies")


def test_warp_sync_is_the_warp_fence():
    text = (".version 8.0\n.target sm_80\n.address_size 64\n.visible .entry k()\n{\n    .reg .b32 %r<4>;\n"
            "    bar.warp.sync -1;\n    bar.sync 0;\n    shfl.sync.idx.b32 %r1, %r2, 0, 31, -1;\n    ret;\n}\n")
    body = [s for s in pf.parse(text).functions[0].body if hasattr(s, "opcode")]
    assert [site_info(0, ins, None).warp_sync for ins in body] == [True, False, False, False]


def test_strong_orders_are_the_tables():
    assert STRONG_ORDERS == {"relaxed", "acquire", "release", "acq_rel", "sc", "volatile", "mmio"}
    assert sites.STRONG is STRONG_ORDERS and node_races.STRONG is STRONG_ORDERS


def test_the_sanitizer_names_no_async_or_mbarrier_family():
    """No string literal naming a cp.async / cp.reduce / mbarrier family in the sanitizer's site rules or the
    node's race check (the table says what each one does)."""
    for mod in (sites, node_races):
        tree = ast.parse(Path(mod.__file__).read_text())
        names = [n.value for n in ast.walk(tree) if isinstance(n, ast.Constant) and isinstance(n.value, str)
                 and n.value.startswith(("cp.async", "cp.reduce", "mbarrier.", "try_wait", "test_wait"))]
        assert not names, f"{mod.__name__}: {names}"
