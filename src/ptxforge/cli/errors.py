"""How the command line reports each family of `ptxforge.Error`: what it prints and the exit status.

    family                                   prints                                   exit
    UserError, LaunchError, other Errors     ptxforge: error: MESSAGE                 1  (a mistake in the input)
    PTXError (incl. DSLError, PtxasError)    FILE:LINE:COL: error: ... and a caret    1
    DeviceUnavailable                        ptxforge: device unavailable: MESSAGE    1
    SanitizerError                           the compute-sanitizer-style report       1
    KernelFault (a GPU's CudaError, the      ptxforge: kernel fault: MESSAGE          2  (the kernel ran and failed)
      emulator's MemoryFault, KernelTrap,
      WatchdogTimeout)
    InternalEmulatorError                    ptxforge: internal error: MESSAGE ...    3  (a bug in ptxforge)

Messages are put in the CLI's words (`device='emu'` becomes `--device emu`). Never a traceback.
"""

from __future__ import annotations

import re
import sys

from ptxforge.errors import DeviceUnavailable, Error, KernelFault
from ptxforge.ptx.errors import PTXError

EXIT_ERROR = 1  # a mistake in the input, a device not on this machine, or the sanitizer's findings
EXIT_FAULT = 2  # the kernel ran and faulted
EXIT_INTERNAL = 3  # a bug in ptxforge itself


class UserError(Error):
    """A mistake the user can fix; the CLI prints it without a traceback and exits 1."""


_API_TO_FLAGS = tuple((re.compile(p), flag) for p, flag in (
    (r"device='(emu|cuda|auto)'", r"--device \1"), (r"options=EmulatorOptions\(sanitize=True\)", "--sanitize"),
    (r"sanitize=True", "--sanitize"),
    (r"\bshared_mem\b", "--shared-mem"), (r"\bnum_sms\b", "--sms"), (r"\bwatchdog_s\b", "--watchdog"),
    (r"\btime_limit_s\b", "--time-limit")))


def cli_words(message: str) -> str:
    """A runtime message in the CLI's words: `device='emu'` becomes `--device emu`, `num_sms` `--sms` ..."""
    for pattern, flag in _API_TO_FLAGS:
        message = pattern.sub(flag, message)
    return message


def _is(e: Error, module: str, name: str) -> bool:
    """isinstance(e, module.name), without importing `module` (the emulator) when it is not loaded: an error
    of its class cannot exist then."""
    loaded = sys.modules.get(module)
    return loaded is not None and isinstance(e, getattr(loaded, name))


def report(e: Error) -> int:
    """Print `e` as its family is reported (see the module docstring) and return the exit status."""
    if isinstance(e, PTXError):
        print(e.format(), file=sys.stderr)
        return EXIT_ERROR
    if _is(e, "ptxforge.emu.sanitizer.report", "SanitizerError"):
        print(str(e), file=sys.stderr)
        return EXIT_ERROR
    if _is(e, "ptxforge.emu.errors", "InternalEmulatorError"):
        print(f"ptxforge: internal error: {e}\n(a bug in ptxforge's emulator, not in the kernel: please report it)",
              file=sys.stderr)
        return EXIT_INTERNAL
    text = str(e) if isinstance(e, UserError) else cli_words(str(e))
    if isinstance(e, KernelFault):
        print(f"ptxforge: kernel fault: {text}", file=sys.stderr)
        return EXIT_FAULT
    if isinstance(e, DeviceUnavailable):
        print(f"ptxforge: device unavailable: {text}", file=sys.stderr)
        return EXIT_ERROR
    print(f"ptxforge: error: {text}", file=sys.stderr)
    return EXIT_ERROR
