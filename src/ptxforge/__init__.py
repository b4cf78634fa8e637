"""ptxforge: PTX-level GPU programming from Python.

Parse, print, validate and retarget real PTX; write kernels in a typed DSL; run them on a CPU
emulator (with a sanitizer) or a GPU.
"""

import importlib
from importlib.metadata import PackageNotFoundError, version
from typing import TYPE_CHECKING, Any

from ptxforge.errors import DeviceUnavailable, Error, KernelFault, LaunchError
from ptxforge.ptx import ir
from ptxforge.ptx.errors import PTXError, PTXSyntaxError, PTXValidationError
from ptxforge.ptx.parser import parse, parse_file


def _version() -> str:
    """The installed distribution's version (pyproject.toml is its one source)."""
    try:
        return version("ptxforge")
    except PackageNotFoundError:  # run from a source tree that was never installed
        return "0+unknown"


__version__ = _version()
__all__ = [
    "parse", "parse_file", "PTXError", "PTXSyntaxError", "PTXValidationError",
    "dsl", "kernel", "func", "ptr", "DSLError", "DSLTypeError", "DSLArchError", "SanitizerError", "__version__",
    "example_path", "Error", "LaunchError", "KernelFault", "DeviceUnavailable", "EmulatorError",
    "compile_cuda", "compile_cuda_file", "CudaCompileError",
]


def example_path(name: str = "vadd.ptx") -> str:
    """The path of a PTX file shipped with ptxforge (the README tour's `vadd.ptx`, the demo's kernels)."""
    from importlib import resources  # ~50 ms to import, and only this function needs it

    path = resources.files("ptxforge") / "data" / name
    if not path.is_file():
        have = ", ".join(sorted(p.name for p in (resources.files("ptxforge") / "data").iterdir()
                                if p.name.endswith(".ptx")))
        raise FileNotFoundError(f"ptxforge ships no {name!r}; it has: {have}")
    return str(path)


def _kernel(module: ir.Module, function: ir.Function) -> Any:
    """`Module.kernel`'s factory: the runtime's Kernel."""
    from ptxforge.runtime.kernel import Kernel  # the runtime (numpy, the emulator) loads with the first kernel

    return Kernel(module, function)


def _set_constant(module: ir.Module, name: str, values: Any, *, device: Any = None, offset: int = 0) -> None:
    """`Module.set_constant`: the runtime's."""
    from ptxforge.runtime.constants import set_constant  # the runtime loads on first use, as for _kernel

    set_constant(module, name, values, device=device, offset=offset)


# The IR knows nothing about execution: the package, above every layer, hands it the runtime's entry points.
ir.bind_execution(kernel=_kernel, set_constant=_set_constant)


# Names from the heavier layers, loaded on first use: the DSL brings the runtime, the emulator and numpy,
# which `pf.parse` and the PTX tools do not need.
_LAZY = {
    "dsl": "ptxforge.dsl", "kernel": "ptxforge.dsl", "func": "ptxforge.dsl", "ptr": "ptxforge.dsl",
    "DSLError": "ptxforge.dsl", "DSLTypeError": "ptxforge.dsl", "DSLArchError": "ptxforge.dsl",
    "SanitizerError": "ptxforge.emu.sanitizer", "EmulatorError": "ptxforge.emu.errors",
    "compile_cuda": "ptxforge.front.cuda", "compile_cuda_file": "ptxforge.front.cuda",
    "CudaCompileError": "ptxforge.front.cuda",
}

if TYPE_CHECKING:  # what the lazy names are, for type checkers and editors
    from ptxforge import dsl
    from ptxforge.dsl import DSLArchError, DSLError, DSLTypeError, func, ptr
    from ptxforge.dsl.kernel import kernel
    from ptxforge.emu.errors import EmulatorError
    from ptxforge.emu.sanitizer import SanitizerError
    from ptxforge.front.cuda import CudaCompileError, compile_cuda, compile_cuda_file


def __getattr__(name: str) -> Any:
    if name not in _LAZY:
        raise AttributeError(f"module 'ptxforge' has no attribute {name!r}")
    module = importlib.import_module(_LAZY[name])  # deferred on purpose: see _LAZY
    value = module if name == "dsl" else getattr(module, name)
    globals()[name] = value
    return value
