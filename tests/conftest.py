"""Shared test set-up: tests/ on sys.path (for corpus.py) and the GPU marker."""

import os
import sys
import tempfile
from pathlib import Path

# Launches that name no device run on the emulator, also on a machine with a GPU: the suite tests the
# emulator; tests/gpu and the DSL examples name device="cuda" where they mean the GPU.
os.environ.setdefault("PTXFORGE_DEVICE", "emu")
# ptxas builds are cached on disk (ptxforge.cache): the suite uses a cache of its own, not the user's
os.environ.setdefault("PTXFORGE_CACHE_DIR", tempfile.mkdtemp(prefix="ptxforge-test-cache-"))

TESTS = Path(__file__).resolve().parent
if str(TESTS) not in sys.path:
    sys.path.insert(0, str(TESTS))


# --------------------------------------------------------------------------- no internal errors, anywhere
# An "internal error while emulating" is a bug in the emulator whatever the input; every test that makes
# one fails, even where a `pytest.raises(EmulatorError)` would have swallowed it. This turns every corpus
# launch of tests/emu, tests/sanitizer and the fuzz tests into a check for them.

import pytest  # noqa: E402


@pytest.fixture(autouse=True)
def _no_internal_emulator_errors(monkeypatch, request):
    from ptxforge.emu.errors import InternalEmulatorError

    seen: list[str] = []
    original = InternalEmulatorError.__init__

    def record(self, *args, **kwargs):
        seen.append(str(args[0]) if args else "")
        original(self, *args, **kwargs)
    monkeypatch.setattr(InternalEmulatorError, "__init__", record)
    request.node.internal_emulator_errors = seen
    yield
    if seen:
        pytest.fail("internal error while emulating (a bug in the emulator):\n" + "\n".join(seen), pytrace=False)


@pytest.fixture(autouse=True)
def _every_kernel_cold():
    """Each test starts with every kernel cold (the native tier's heat, `ptxforge.emu.native.select`): under the
    default tier "auto", which tier runs a launch then depends on the test's own launches, not on the tests an
    xdist worker happened to run before it (a corpus module is shared between tests)."""
    select = sys.modules.get("ptxforge.emu.native.select")
    if select is not None:
        select.forget_heat()
    yield


# --------------------------------------------------------------------------- markers
# `gpu`: every test under tests/gpu (collected only where a GPU can be used) and every case parametrized
# with device="cuda" (the DSL examples, kernels/...); `pytest -m gpu` runs exactly what needs the GPU.
# `slow`: the big shapes, every build of the corpus and the many-seed sweeps mark themselves;
# `make test` (CI) runs `-m "not slow"`, `make test-all` everything.
GPU_TESTS = TESTS / "gpu"


@pytest.hookimpl(tryfirst=True)  # before pytest-xdist reads the xdist_group marks added here
def pytest_collection_modifyitems(config, items):
    for item in items:
        params = getattr(getattr(item, "callspec", None), "params", {})
        if GPU_TESTS in Path(str(item.fspath)).parents or params.get("device") == "cuda":
            item.add_marker(pytest.mark.gpu)
    _group_shared_fixtures(items)
    _name_groups(config, items)
    items[:] = _long_modules_first(items)


# --------------------------------------------------------------------------- spreading over xdist workers
# `make test` runs `pytest -n 2 --dist loadgroup`: each test is a unit of its own that either worker may take,
# so the two workers end together, except the tests that share a fixture wider than a function (a world of
# rank processes, a table computed once): those carry xdist_group(<that fixture>) and run on one worker,
# which builds the fixture once. The long modules start first; the short ones fill in at the end.

def _group_shared_fixtures(items) -> None:
    for item in items:
        info = getattr(item, "_fixtureinfo", None)
        for name in item.fixturenames if info is not None else ():
            defs = info.name2fixturedefs.get(name)
            # fixtures of the suite only (a plugin's, e.g. tmp_path_factory, has no baseid)
            if defs and defs[-1].scope != "function" and defs[-1].baseid:
                item.add_marker(pytest.mark.xdist_group(f"{defs[-1].baseid}::{name}"))
                break


def _name_groups(config, items) -> None:
    """In an xdist worker under --dist loadgroup, suffix each grouped test's id with its group ("id@group"), which
    is what the scheduler groups by. pytest-xdist 3.8 does it by setting `item._nodeid`, which pytest 9.2 no
    longer reads (a node's id is `item._id`, a NodeId): without this every group was split over the workers and
    each built its shared world (a 4-rank EP world built on both workers)."""
    if config.getoption("dist", default=None) != "loadgroup" and not config.getoption("loadgroup", default=False):
        return  # no xdist (-n 0 / -p no:xdist) or another --dist: nothing groups by the id
    for item in items:
        names = sorted({str(m.args[0]) for m in item.iter_markers("xdist_group") if m.args})
        if not names or "@" in item.nodeid:
            continue
        grouped = f"{item.nodeid}@{'_'.join(names)}"
        if hasattr(item, "_id"):  # pytest >= 9.2
            item._id = type(item._id).parse(grouped)
        else:
            item._nodeid = grouped


def _long_modules_first(items) -> list:
    """The modules holding a `slow` test first, each module's tests kept together and in their order (so a
    module-scoped fixture is set up once also without xdist)."""
    modules: dict[str, list] = {}
    for item in items:
        modules.setdefault(item.nodeid.split("::", 1)[0], []).append(item)
    slow = [m for m, its in modules.items() if any(it.get_closest_marker("slow") for it in its)]
    return [it for m in slow + [m for m in modules if m not in slow] for it in modules[m]]
