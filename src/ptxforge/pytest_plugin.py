"""pytest plugin: kernel launches under the sanitizer, and one test on the emulator and on a GPU.

Loaded by its entry point (installed ptxforge) or with `pytest -p ptxforge.pytest_plugin`.

- `@pytest.mark.sanitize`, the `ptxforge_sanitize` fixture, or `--ptxforge-sanitize` (every test): each kernel launch
  in the test runs under the sanitizer (on the emulator; Triton launches inside `ptxforge.triton.emulate`
  too), and a test whose launches got any report fails with the reports printed, also when the test itself
  caught the `SanitizerError`.
- the `device` fixture: the test runs once with "emu" and once with "cuda"; the cuda case is marked `gpu`
  and skipped up front where no GPU can be used. A module's own `device` fixture takes precedence.
- `PTXFORGE_TRITON=1` switches Triton launches onto the emulator for the whole run.
"""

from __future__ import annotations

import contextlib
from collections.abc import Generator, Iterator
from typing import Any

import pytest

from ptxforge import environment
from ptxforge.emu.sanitizer import SanitizerError
from ptxforge.runtime.kernel import DEPRECATED_LAUNCH_KEYWORDS, Kernel, cuda_available
from ptxforge.runtime.launch_config import EmulatorOptions

_NO_GPU = "no CUDA GPU, driver and cuda-bindings here (ptxforge.runtime.kernel.cuda_available())"


def pytest_addoption(parser: pytest.Parser) -> None:
    group = parser.getgroup("ptxforge")
    group.addoption("--ptxforge-sanitize", action="store_true",
                    help="run every kernel launch under ptxforge's sanitizer; any report fails the test")


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line("markers", "sanitize: run the test's kernel launches under ptxforge's sanitizer; "
                                       "any report fails the test")
    config.addinivalue_line("markers", "gpu: needs an NVIDIA GPU (the cuda case of ptxforge's device fixture)")
    if environment.triton_emulation()[0]:
        import ptxforge.triton  # noqa: F401  (optional dependency: switches Triton onto the emulator on import)


@pytest.fixture
def ptxforge_sanitize() -> None:
    """Asking for this fixture runs the test's kernel launches under the sanitizer (see the module)."""
    return None


@pytest.fixture(params=["emu", pytest.param("cuda", marks=[pytest.mark.gpu,
                                                           pytest.mark.skipif(not cuda_available(), reason=_NO_GPU)])])
def device(request: pytest.FixtureRequest) -> str:
    """ "emu", then "cuda" (skipped up front without a GPU): pass it as `launch(..., device=device)`."""
    param: str = request.param
    return param


def _wants_sanitizer(item: pytest.Item) -> bool:
    return (item.get_closest_marker("sanitize") is not None or "ptxforge_sanitize" in getattr(item, "fixturenames", ())
            or bool(item.config.getoption("--ptxforge-sanitize")))


@contextlib.contextmanager
def sanitizing(found: list[SanitizerError]) -> Iterator[None]:
    """Within the block every `Kernel.launch` that does not choose its own sanitizer (and does not name a
    GPU) runs with `sanitize=True`; each SanitizerError raised is appended to `found`."""
    original = Kernel.launch

    def launch(self: Kernel, *args: Any, **kwargs: Any) -> Any:
        device = kwargs.get("device")
        on_gpu = isinstance(device, str) and device.startswith("cuda")
        if not kwargs.get("sanitize") and kwargs.get("options") is None and not on_gpu:
            if any(k in kwargs for k in DEPRECATED_LAUNCH_KEYWORDS):  # the caller's own (deprecated) keyword form
                kwargs["sanitize"] = True
            else:
                kwargs["options"] = EmulatorOptions(sanitize=True)
        try:
            return original(self, *args, **kwargs)
        except SanitizerError as e:
            found.append(e)
            raise

    Kernel.launch = launch  # type: ignore[method-assign]
    try:
        yield
    finally:
        Kernel.launch = original  # type: ignore[method-assign]


@pytest.hookimpl(wrapper=True)
def pytest_runtest_call(item: pytest.Item) -> Generator[None, Any, Any]:
    if not _wants_sanitizer(item):
        return (yield)
    found: list[SanitizerError] = []
    with sanitizing(found):
        try:
            result = yield
        except SanitizerError as e:
            if all(e is not f for f in found):
                found.append(e)  # raised by a stream launch's synchronize, not by a launch itself
            result = None
    if found:
        n = sum(len(e.reports) for e in found)
        text = "\n\n".join(str(e) for e in found)
        pytest.fail(f"ptxforge sanitizer: {n} report{'s' * (n != 1)} in {len(found)} launch"
                    f"{'es' * (len(found) != 1)}\n{text}", pytrace=False)
    return result
