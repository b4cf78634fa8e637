"""The spellings CuPy and cuda.core users know, over `compile_cuda` and `Kernel.launch`.

CuPy: `RawKernel(code, name, options=())` called as `kernel(grid, block, args, shared_mem=0)`, and
`RawModule(code=..., name_expressions=...)` with `get_function(name)`; `import ptxforge.front.cupy_style as cp`
then `cp.RawKernel(...)` is the one line to change (arrays are numpy arrays, torch tensors or DeviceBuffers).
cuda.core: `Program(code, "c++", ProgramOptions(arch=...)).compile("ptx").get_kernel(name)` and
`launch(stream, LaunchConfig(grid=..., block=..., shmem_size=...), kernel, *args)`. Launches run where
`Kernel.launch` would (`device=` picks: "emu", "cuda"; by default $PTXFORGE_DEVICE, else a GPU when one can be
used, else the emulator).
"""

from __future__ import annotations

import os
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ptxforge.front.cuda import CudaKernel, CudaModule, compile_cuda
from ptxforge.ptx.parser import parse_file
from ptxforge.runtime.kernel import Kernel
from ptxforge.runtime.launch_config import LaunchConfig


class RawModule:
    """CuPy's RawModule: CUDA C++ `code` (or a .cu / .ptx file at `path`) compiled once; kernels by C++ name."""

    def __init__(self, code: str | None = None, *, path: str | os.PathLike | None = None, options: Iterable[str] = (),
                 name_expressions: Iterable[str] = (), arch: str = "sm_90a") -> None:
        if (code is None) == (path is None):
            raise ValueError("RawModule takes code= or path=, one of them")
        self._ptx = None
        if path is not None and str(path).endswith(".ptx"):
            self._ptx = parse_file(str(path))
            self.module: CudaModule | None = None
        elif path is not None:
            text = Path(path).read_text(encoding="utf-8", errors="surrogateescape")
            self.module = compile_cuda(text, arch, options, name_expressions, filename=str(path))
        else:
            assert code is not None
            self.module = compile_cuda(code, arch, options, name_expressions)

    def get_function(self, name: str) -> Kernel:
        """The kernel `name` (a C++ name for CUDA source, the PTX name for a .ptx file)."""
        if self.module is not None:
            return self.module.kernel(name)
        assert self._ptx is not None
        kernel: Kernel = self._ptx.kernel(name)
        return kernel


class RawKernel:
    """CuPy's RawKernel: one kernel of CUDA C++ `code`, compiled on first use, called as
    `kernel(grid, block, args, shared_mem=0)` (plus `launch`'s keywords: `device`, `sanitize` ...)."""

    def __init__(self, code: str, name: str, options: Iterable[str] = (), *, name_expressions: Iterable[str] = (),
                 arch: str = "sm_90a") -> None:
        self.code, self.name, self.options, self.arch = code, name, tuple(options), arch
        names = tuple(name_expressions) or ((name,) if "<" in name else ())
        self.name_expressions = names
        self._kernel: CudaKernel | None = None

    @property
    def kernel(self) -> CudaKernel:
        if self._kernel is None:
            mod = compile_cuda(self.code, self.arch, self.options, self.name_expressions)
            self._kernel = mod.kernel(self.name)
        return self._kernel

    def __call__(self, grid: Any, block: Any, args: Any, *, shared_mem: int = 0, **options: Any) -> Any:
        return self.kernel(grid, block, args, shared_mem=shared_mem, **options)


@dataclass(frozen=True)
class ProgramOptions:
    """cuda.core's ProgramOptions, the part NVRTC needs here: the target and extra compiler options."""

    arch: str = "sm_90a"
    extra: tuple[str, ...] = ()
    name_expressions: tuple[str, ...] = ()


class Program:
    """cuda.core's Program for CUDA C++: `Program(code, "c++", options).compile("ptx")` gives the module,
    whose `get_kernel(name)` is `kernel(name)`. Needs no driver (cuda.core's own calls one)."""

    def __init__(self, code: str, code_type: str = "c++", options: ProgramOptions | None = None) -> None:
        if code_type.lower() not in ("c++", "cpp", "cu"):
            raise ValueError(f"Program: code_type {code_type!r} is not supported; use 'c++'")
        self.code = code
        self.options = options or ProgramOptions()

    def compile(self, target_type: str = "ptx", name_expressions: Iterable[str] = ()) -> CudaModule:
        if target_type != "ptx":
            raise ValueError(f"Program.compile: target {target_type!r} is not supported; 'ptx' is (ptxforge runs "
                             f"PTX; ptxforge.runtime builds cubins for a GPU from it)")
        names = (*self.options.name_expressions, *name_expressions)
        return compile_cuda(self.code, self.options.arch, self.options.extra, names)


def launch(stream: Any, config: LaunchConfig, kernel: Kernel, *kernel_args: Any, **options: Any) -> Any:
    """cuda.core's `launch(stream, config, kernel, *kernel_args)`: `stream` None (the launch runs now), a
    `ptxforge.emu.Node` GPU's stream or a GreenStream; `options` are `Kernel.launch`'s (`device`, `sanitize`)."""
    if not isinstance(config, LaunchConfig):
        raise TypeError(f"launch(stream, config, kernel, *args): config is a {type(config).__name__}, expected a "
                        f"LaunchConfig")
    return kernel.launch(config, kernel_args, stream=stream, **options)


__all__ = ["LaunchConfig", "Program", "ProgramOptions", "RawKernel", "RawModule", "launch"]
