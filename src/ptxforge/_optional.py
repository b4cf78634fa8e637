"""The optional dependencies, each imported here on first use: torch (the `torch` extra) and matplotlib
(the `plot` extra). cuda-bindings (the `cuda` extra) is loaded by `ptxforge.runtime.cuda_driver`.

`import ptxforge` and its ptx, emu, dsl and runtime layers never import these; the functions that need one
call `torch()`, `matplotlib()` or `pyplot()` and get the module, or a `MissingDependency` saying what to install.
"""

from __future__ import annotations

import functools
import importlib
from types import ModuleType

from ptxforge.errors import Error


class MissingDependency(Error, ImportError):
    """An optional dependency is not installed; the message names the extra that brings it (an ImportError,
    which the callers that fall back without it catch)."""


def _missing(package: str, extra: str, error: ImportError) -> MissingDependency:
    return MissingDependency(f"this needs {package}, which is not installed ({error}); "
                             f"install it with pip install 'ptxforge[{extra}]'")


@functools.cache
def torch() -> ModuleType:
    """The `torch` module (torch.distributed comes with it)."""
    try:
        import torch  # optional dependency: the `torch` extra
    except ImportError as e:
        raise _missing("torch", "torch", e) from e
    return torch


@functools.cache
def matplotlib() -> ModuleType:
    """The `matplotlib` package with `.figure` and `.patches` loaded (a Figure draws by Agg on savefig)."""
    try:
        import matplotlib  # optional dependency: the `plot` extra
        import matplotlib.figure  # optional dependency: the `plot` extra
        import matplotlib.patches  # optional dependency: the `plot` extra
    except ImportError as e:
        raise _missing("matplotlib", "plot", e) from e
    return matplotlib


@functools.cache
def pyplot() -> ModuleType:
    """`matplotlib.pyplot` on the file-only Agg backend."""
    matplotlib().use("Agg")
    import matplotlib.pyplot as plt  # optional dependency (the `plot` extra), there once matplotlib() succeeded

    return plt


@functools.cache
def triton() -> ModuleType:
    """The `triton` package, with the parts `ptxforge.triton` uses loaded: `triton.backends.compiler`
    (GPUTarget), `triton.backends.nvidia.driver` (its C types), `triton.runtime.cache` and `.driver`."""
    try:
        import triton  # optional dependency: the `triton` extra

        for part in ("backends.compiler", "backends.nvidia.driver", "runtime.cache", "runtime.driver"):
            importlib.import_module(f"triton.{part}")
    except ImportError as e:
        raise _missing("triton", "triton", e) from e
    return triton

