"""NVRTC, NVIDIA's runtime compiler of CUDA C++ to PTX, called through ctypes: no driver, no GPU.

The library is found as ptxforge finds tools (see toolchain.py): an explicit path ($PTXFORGE_NVRTC or the
`library=` argument), $CUDA_HOME/lib64 (or lib), the lib folder next to an `nvcc` on PATH, then the pip
wheel nvidia-cuda-nvrtc (`nvidia/cu13/lib`, `nvidia/cuda_nvrtc/lib`) in this interpreter's site-packages.
Calling the C API directly keeps that order (cuda-bindings' loader has its own) and needs no package
besides the wheel.
"""

from __future__ import annotations

import ctypes
import functools
import os
from dataclasses import dataclass
from pathlib import Path

from ptxforge import environment
from ptxforge.errors import Error
from ptxforge.toolchain import ToolNotFound, _site_packages

_NAMES = ("libnvrtc.so.13", "libnvrtc.so.12", "libnvrtc.so")
_WHEEL_DIRS = ("nvidia/cu13/lib", "nvidia/cuda_nvrtc/lib", "nvidia/cu12/lib")


class NvrtcError(Error, RuntimeError):
    """NVRTC refused a call for a reason other than the source (the library itself failed)."""


def find_nvrtc(explicit: str | os.PathLike | None = None) -> Path:
    """The NVRTC shared library, searched in the documented order; ToolNotFound lists where it looked."""
    explicit = explicit or environment.nvrtc_path()
    if explicit:
        p = Path(explicit)
        for cand in ([p / n for n in _NAMES] if p.is_dir() else [p]):
            if cand.is_file():
                return cand
        raise ToolNotFound(f"libnvrtc: the path given, {explicit}, is not the NVRTC library")
    folders: list[Path] = []
    cuda_home = environment.cuda_home()  # absolute only (a relative CUDA_HOME is refused, naming it)
    if cuda_home:
        folders += [cuda_home / "lib64", cuda_home / "lib"]
    nvcc = environment.which("nvcc")  # absolute PATH entries only
    if nvcc:
        root = Path(nvcc).resolve().parent.parent
        folders += [root / "lib64", root / "lib"]
    folders += [root / sub for root in _site_packages() for sub in _WHEEL_DIRS]
    for folder in folders:
        for n in _NAMES:
            if (folder / n).is_file():
                return folder / n
    raise ToolNotFound("libnvrtc not found; looked in: " + ", ".join(map(str, folders)) + ". Install the tools "
                       "extra (pip install 'ptxforge[tools]': NVIDIA's nvidia-cuda-nvrtc wheel), set CUDA_HOME, "
                       "or point PTXFORGE_NVRTC at libnvrtc.so")


@dataclass
class NvrtcOutput:
    """One compile: `ok`, NVRTC's log, the PTX (when ok) and each name expression's lowered (mangled) name."""

    ok: bool
    log: str
    ptx: str
    lowered: dict[str, str]


@functools.lru_cache(maxsize=4)
def _library(path: str) -> ctypes.CDLL:
    # NVRTC dlopens its builtins library by name at each compile; loaded first from the same folder, it is
    # found whether or not that folder is on the loader's path
    for builtins in sorted(Path(path).parent.glob("libnvrtc-builtins.so.*")):
        if ".alt." not in builtins.name:
            ctypes.CDLL(str(builtins), mode=ctypes.RTLD_GLOBAL)
    lib = ctypes.CDLL(path)
    P, C, I, S = ctypes.c_void_p, ctypes.c_char_p, ctypes.c_int, ctypes.c_size_t
    for name, args in (("nvrtcCreateProgram", [ctypes.POINTER(P), C, C, I, ctypes.POINTER(C), ctypes.POINTER(C)]),
                       ("nvrtcDestroyProgram", [ctypes.POINTER(P)]),
                       ("nvrtcAddNameExpression", [P, C]),
                       ("nvrtcCompileProgram", [P, I, ctypes.POINTER(C)]),
                       ("nvrtcGetProgramLogSize", [P, ctypes.POINTER(S)]),
                       ("nvrtcGetProgramLog", [P, C]),
                       ("nvrtcGetPTXSize", [P, ctypes.POINTER(S)]),
                       ("nvrtcGetPTX", [P, C]),
                       ("nvrtcGetLoweredName", [P, C, ctypes.POINTER(C)]),
                       ("nvrtcVersion", [ctypes.POINTER(I), ctypes.POINTER(I)])):
        fn = getattr(lib, name)
        fn.argtypes, fn.restype = args, I
    lib.nvrtcGetErrorString.argtypes, lib.nvrtcGetErrorString.restype = [I], C
    return lib


def version(library: str | os.PathLike | None = None) -> tuple[int, int]:
    """NVRTC's (major, minor)."""
    lib = _library(str(find_nvrtc(library)))
    major, minor = ctypes.c_int(), ctypes.c_int()
    _check(lib, lib.nvrtcVersion(ctypes.byref(major), ctypes.byref(minor)), "nvrtcVersion")
    return major.value, minor.value


def _check(lib: ctypes.CDLL, status: int, what: str) -> None:
    if status != 0:
        raise NvrtcError(f"{what}: {lib.nvrtcGetErrorString(status).decode()}")


def compile_program(source: str, filename: str, options: list[str], name_expressions: list[str],
                    headers: dict[str, str], library: str | os.PathLike | None = None) -> NvrtcOutput:
    """Compile `source` (named `filename` in messages and .file) to PTX with NVRTC."""
    lib = _library(str(find_nvrtc(library)))
    prog = ctypes.c_void_p()
    n = len(headers)
    contents = (ctypes.c_char_p * max(n, 1))(*[h.encode() for h in headers.values()])
    names = (ctypes.c_char_p * max(n, 1))(*[h.encode() for h in headers])
    _check(lib, lib.nvrtcCreateProgram(ctypes.byref(prog), source.encode("utf-8", "surrogateescape"),
                                       filename.encode(), n, contents, names), "nvrtcCreateProgram")
    try:
        for expr in name_expressions:
            _check(lib, lib.nvrtcAddNameExpression(prog, expr.encode()), f"name expression {expr!r}")
        argv = (ctypes.c_char_p * max(len(options), 1))(*[o.encode() for o in options])
        status = lib.nvrtcCompileProgram(prog, len(options), argv)
        size = ctypes.c_size_t()
        _check(lib, lib.nvrtcGetProgramLogSize(prog, ctypes.byref(size)), "nvrtcGetProgramLogSize")
        buf = ctypes.create_string_buffer(size.value)
        _check(lib, lib.nvrtcGetProgramLog(prog, buf), "nvrtcGetProgramLog")
        log = buf.value.decode("utf-8", "replace")
        if status != 0:
            return NvrtcOutput(False, log or lib.nvrtcGetErrorString(status).decode(), "", {})
        _check(lib, lib.nvrtcGetPTXSize(prog, ctypes.byref(size)), "nvrtcGetPTXSize")
        buf = ctypes.create_string_buffer(size.value)
        _check(lib, lib.nvrtcGetPTX(prog, buf), "nvrtcGetPTX")
        lowered = {}
        for expr in name_expressions:
            out = ctypes.c_char_p()
            _check(lib, lib.nvrtcGetLoweredName(prog, expr.encode(), ctypes.byref(out)), f"lowered name of {expr}")
            lowered[expr] = (out.value or b"").decode()
        return NvrtcOutput(True, log, buf.value.decode("utf-8", "surrogateescape"), lowered)
    finally:
        lib.nvrtcDestroyProgram(ctypes.byref(prog))
