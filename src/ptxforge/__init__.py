"""ptxforge: PTX-level GPU programming from Python.

Parse, print, validate and retarget real PTX; write kernels in a typed DSL; run them on a CPU
emulator (with a sanitizer) or a GPU.
"""

from ptxforge import dsl
from ptxforge.dsl import DSLArchError, DSLError, DSLTypeError, func, kernel, ptr
from ptxforge.errors import DeviceUnavailable, Error, KernelFault, LaunchError
from ptxforge.ptx.errors import PTXError, PTXSyntaxError, PTXValidationError
from ptxforge.ptx.parser import parse, parse_file


def _version() -> str:
    """The installed distribution's version (pyproject.toml is its one source)."""
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("ptxforge")
    except PackageNotFoundError:  # run from a source tree that was never installed
        return "0+unknown"


__version__ = _version()
__all__ = [
    "parse", "parse_file", "PTXError", "PTXSyntaxError", "PTXValidationError",
    "dsl", "kernel", "func", "ptr", "DSLError", "DSLTypeError", "DSLArchError", "SanitizerError", "__version__",
    "example_path", "Error", "LaunchError", "KernelFault", "DeviceUnavailable", "EmulatorError",
]


def example_path(name: str = "vadd.ptx") -> str:
    """The path of a PTX file shipped with ptxforge (the README tour's `vadd.ptx`, the demo's kernels)."""
    from importlib import resources

    path = resources.files("ptxforge") / "data" / name
    if not path.is_file():
        have = ", ".join(sorted(p.name for p in (resources.files("ptxforge") / "data").iterdir()
                                if p.name.endswith(".ptx")))
        raise FileNotFoundError(f"ptxforge ships no {name!r}; it has: {have}")
    return str(path)


def __getattr__(name: str) -> type[Exception]:
    # The sanitizer pulls in the emulator and numpy; load it only when asked for.
    if name == "SanitizerError":
        from ptxforge.emu.sanitizer import SanitizerError

        return SanitizerError
    if name == "EmulatorError":
        from ptxforge.emu.errors import EmulatorError

        return EmulatorError
    raise AttributeError(f"module 'ptxforge' has no attribute {name!r}")
