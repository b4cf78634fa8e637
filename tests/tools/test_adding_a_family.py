"""Adding an instruction family touches four places, and leaving one out is caught: the ISA table (its facts and
effects, ptx/isa/data_*.py), one semantics function (emu/semantics), one builder (an ops module's BUILDERS) and
one DSL function (dsl/). This takes each part of `bmsk` (the last family completed that way) away in turn and
runs the project's own consistency check for it; each says what was forgotten, naming the family."""

from __future__ import annotations

import importlib.util
import shutil
from pathlib import Path

import pytest

from ptxforge.emu.compiler import REGISTRY
from ptxforge.emu.registry import UNSUPPORTED, Registry
from ptxforge.emu.semantics import bitops
from ptxforge.ptx.isa import FAMILIES
from ptxforge.ptx.isa import lookup as isa_lookup

TESTS = Path(__file__).resolve().parents[1]
LOOKUP = importlib.import_module("ptxforge.ptx.isa.lookup")  # the module (`ptxforge.ptx.isa.lookup` is its function)
FAMILY = "bmsk"


def _load(relative: str):
    """A test module of another area, by path (the test folders are not packages)."""
    spec = importlib.util.spec_from_file_location(Path(relative).stem + "_for_removal", TESTS / relative)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.fixture
def without_table_entry(monkeypatch):
    """The table as lookups see it, less the family (the lookup cache is emptied before and after)."""
    rest = {k: v for k, v in FAMILIES.items() if k != FAMILY}
    monkeypatch.setattr(LOOKUP, "FAMILIES", rest)
    LOOKUP._lookup.cache_clear()
    yield rest
    LOOKUP._lookup.cache_clear()


def test_the_family_is_complete_to_start_with():
    assert FAMILY in FAMILIES and FAMILIES[FAMILY].effects is not None
    assert REGISTRY.missing() == [] and hasattr(bitops, FAMILY)
    found, _ = _load("dsl/test_dsl_coverage.py").emitted_families()
    assert FAMILY in found


def test_without_its_table_entry_the_builder_and_the_dsl_name_it(without_table_entry):
    assert isa_lookup("bmsk.clamp.b32") is None
    with pytest.raises(ValueError, match="a builder for 'bmsk', which names no instruction family"):
        Registry(table=without_table_entry, unsupported={}).register(FAMILY, REGISTRY.builders[FAMILY])
    _, unknown = _load("dsl/test_dsl_coverage.py").emitted_families()
    assert [u for u in unknown if "(bmsk: bmsk)" in u], unknown


def test_without_its_effects_the_table_test_names_it(monkeypatch):
    import dataclasses

    monkeypatch.setitem(FAMILIES, FAMILY, dataclasses.replace(FAMILIES[FAMILY], effects=None))
    assert _load("ptx/test_isa_effects.py").families_without_effects() == [FAMILY]


def test_without_its_builder_the_registry_test_names_it(monkeypatch):
    monkeypatch.delitem(REGISTRY.builders, FAMILY)
    assert REGISTRY.missing() == [FAMILY]
    assert FAMILY not in UNSUPPORTED


def test_without_its_semantics_the_recorded_gpu_check_fails_naming_it(monkeypatch):
    monkeypatch.delattr(bitops, FAMILY)
    check = _load("emu/test_hw_reference.py").test_warp_operation_matches_the_h200
    with pytest.raises(AttributeError, match="semantics.bitops' has no attribute 'bmsk'"):
        check("bmsk.wrap")


def test_without_its_dsl_function_the_coverage_test_names_it(tmp_path, monkeypatch):
    coverage = _load("dsl/test_dsl_coverage.py")
    copy = tmp_path / "dsl"
    shutil.copytree(coverage.DSL, copy)
    arith = copy / "arith.py"
    text = arith.read_text()
    start = text.index("def bmsk(")
    end = text.index("\ndef ", start + 1)
    arith.write_text(text[:start] + text[end + 1:])
    monkeypatch.setattr(coverage, "DSL", copy)
    found, _ = coverage.emitted_families()
    assert sorted(set(FAMILIES) - set(found) - set(coverage.UNSUPPORTED)) == [FAMILY]
