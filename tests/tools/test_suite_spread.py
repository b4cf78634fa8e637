"""How `make test` spreads the suite (tests/conftest.py): tests that share a fixture wider than a function
carry xdist_group(<that fixture>), so `--dist loadgroup` builds it on one worker, once; the modules holding
a `slow` test come first, each module's tests together. Checked on this session's own collection."""

import itertools
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def shared():
    return object()


def _group(item):
    mark = item.get_closest_marker("xdist_group")
    return mark.args[0] if mark else None


def test_a_test_with_a_module_fixture_is_grouped_by_it(request, shared):
    assert _group(request.node) == "tests/tools/test_suite_spread.py::shared"


def test_a_test_without_one_is_not_grouped(request):
    assert _group(request.node) is None


def test_every_collected_test_follows_the_rule(request):
    for item in request.session.items:
        info = item._fixtureinfo
        wide = [n for n in item.fixturenames if info.name2fixturedefs.get(n)
                and info.name2fixturedefs[n][-1].scope != "function" and info.name2fixturedefs[n][-1].baseid]
        assert (_group(item) is not None) == bool(wide), item.nodeid


def test_slow_modules_first_and_each_module_together(request):
    modules = [m for m, _ in itertools.groupby(item.nodeid.split("::")[0] for item in request.session.items)]
    assert len(modules) == len(set(modules)), "a module's tests are split"
    slow = {item.nodeid.split("::")[0] for item in request.session.items if item.get_closest_marker("slow")}
    assert modules[:len(slow)] == [m for m in modules if m in slow]


def test_make_test_uses_loadgroup():
    assert "pytest -n 2 --dist loadgroup" in (ROOT / "Makefile").read_text()
