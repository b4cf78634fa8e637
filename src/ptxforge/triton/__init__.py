"""Unmodified `@triton.jit` kernels on ptxforge's emulator (and its sanitizer), with no GPU.

    import ptxforge.triton
    with ptxforge.triton.emulate(sanitize=True, arch="sm_90a"):
        add_kernel[grid](x, y, out, n, BLOCK=256)        # torch CPU tensors

Inside `emulate` Triton compiles for `arch` as it would for that GPU (its own compiler and bundled ptxas,
no driver) and ptxforge runs the PTX: block = num_warps * 32, the kernel's shared memory, the hidden
scratch arguments. Sanitizer reports name the Triton source line (the PTX's .loc). `PTXFORGE_TRITON=1`
(in the spirit of TRITON_INTERPRET=1) switches the emulator on for the whole process when this module is
imported (the pytest plugin imports it); `PTXFORGE_TRITON_SANITIZE=1` and `PTXFORGE_TRITON_ARCH` choose the
options then. `python -m ptxforge.triton script.py ARGS` runs a script with it on. Triton is the `triton`
extra: `pip install 'ptxforge[triton]'`.
"""

from __future__ import annotations

import contextlib
import sys
from collections.abc import Iterator
from typing import Any

from ptxforge import _optional, environment
from ptxforge.triton.driver import EmulatorDriver, Settings, capability

_settings: list[Settings] = []  # the innermost emulate() last; the process-wide one (PTXFORGE_TRITON=1) first
_driver: EmulatorDriver | None = None


def _current() -> Settings:
    return _settings[-1] if _settings else Settings()


def _triton_runtime() -> Any:
    return _optional.triton().runtime.driver  # the DriverConfig; MissingDependency names the extra when it is absent


def _activate() -> None:
    global _driver
    runtime = _triton_runtime()
    if _driver is None:
        _driver = EmulatorDriver(_current)
    runtime.set_active(_driver)


def _deactivate() -> None:
    runtime = _triton_runtime()
    if runtime._active is _driver:  # leave a driver someone else set in place
        # unset, not reset_active(): that creates Triton's default driver now, which raises on a machine
        # without a GPU; unset, the next use picks it (a GPU's, where there is one)
        runtime._active = None


@contextlib.contextmanager
def emulate(sanitize: Any = False, arch: str = "sm_90a", num_sms: int | None = None) -> Iterator[Settings]:
    """Run Triton launches on the emulator inside the block. `sanitize`: False, True or a
    `ptxforge.emu.sanitizer.Sanitizer` (a launch with findings raises `ptxforge.SanitizerError`); `arch`: the
    target Triton compiles for; `num_sms`: the emulated GPU's SMs."""
    capability(arch)  # refuse a malformed arch now
    settings = Settings(sanitize, arch, num_sms)
    _settings.append(settings)
    try:
        _activate()
        yield settings
    finally:
        _settings.remove(settings)
        if not _settings:
            _deactivate()


def enabled() -> bool:
    """Whether Triton launches now run on the emulator."""
    return bool(_settings)


def _from_environment() -> None:
    """Switch the emulator on for the process when PTXFORGE_TRITON is set (once)."""
    on, sanitize, arch = environment.triton_emulation()
    if on and not _settings:
        _settings.insert(0, Settings(sanitize, arch))
        _activate()


try:
    _from_environment()
except environment.EnvironmentVariableError:
    if sys.argv[:1] != ["-m"]:  # under `python -m ptxforge.triton` (argv[0] is "-m" while runpy imports the
        raise  # package) __main__ reports it as a usage error, without a traceback

__all__ = ["EmulatorDriver", "Settings", "emulate", "enabled"]
