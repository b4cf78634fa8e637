"""Helpers shared by the subcommands: reading PTX files, printing diagnostics, writing outputs (through
`ptxforge.outputs`: never over an input or a special file)."""

from __future__ import annotations

import sys
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from ptxforge import outputs
from ptxforge.cli.errors import UserError
from ptxforge.cli.errors import cli_words as cli_words  # re-exported: the subcommands take it from here
from ptxforge.outputs import STDOUT
from ptxforge.ptx.errors import PTXError
from ptxforge.ptx.ir import Module
from ptxforge.ptx.parser import parse
from ptxforge.toolchain import ToolNotFound

CUDA_SUFFIXES = (".cu", ".cuh")
DEFAULT_CUDA_ARCH = "sm_90a"  # what a .cu file is compiled for without --arch


def is_cuda(path: str) -> bool:
    return path.endswith(CUDA_SUFFIXES)


def compile_cu(path: str, arch: str | None, kernel: str | None = None) -> Any:
    """The `CudaModule` of a .cu file compiled with NVRTC for `arch` (sm_90a by default); a compile error
    is printed as FILE:LINE:COL by the caller (a PTXError), a missing NVRTC or a bad arch is a UserError.
    `kernel`, a template-id such as `scale<float>`, is instantiated (a name expression)."""
    from ptxforge.front.cuda import compile_cuda_file  # the front layer loads NVRTC: only for .cu input

    read_text(path)  # the file's own errors first: missing, a directory, unreadable
    try:
        names = (kernel,) if kernel and "<" in kernel and "(" not in kernel else ()
        return compile_cuda_file(path, arch or DEFAULT_CUDA_ARCH, name_expressions=names)
    except (ToolNotFound, ValueError) as e:
        raise UserError(f"{path}: {e}") from None


def read_source(path: str, arch: str | None = None) -> str:
    """The PTX text of a .ptx file, or of a .cu file compiled for `arch`."""
    return compile_cu(path, arch).ptx if is_cuda(path) else read_text(path)


def read_text(path: str) -> str:
    if path == "-":
        return sys.stdin.read()
    p = Path(path)
    if not p.exists():
        raise UserError(f"{path}: no such file")
    if p.is_dir():
        raise UserError(f"{path}: is a directory, expected a .ptx file")
    try:
        return p.read_text(encoding="utf-8", errors="surrogateescape")
    except OSError as e:
        raise UserError(f"{path}: cannot read it: {e.strerror or e}") from None


def load_module(path: str, arch: str | None = None) -> Module | None:
    """Parse a PTX file (or compile a .cu file for `arch`); on errors print them all and return None."""
    try:
        if is_cuda(path):
            return compile_cu(path, arch).ir
        return parse(read_text(path), filename="<stdin>" if path == "-" else path)
    except PTXError as e:
        print_error(e)
        return None


def load_launchable(path: str, arch: str | None = None, kernel: str | None = None) -> Any:
    """What `ptxforge run` launches from: the parsed PTX module, or a .cu file's `CudaModule` (kernels by C++
    name, pointee types checked); None after printing its errors."""
    if not is_cuda(path):
        return load_module(path)
    try:
        return compile_cu(path, arch, kernel)
    except PTXError as e:
        print_error(e)
        return None


def kernel_names(m: Any) -> list[str]:
    """The names `--kernel` takes: C++ names for a .cu file, PTX names otherwise."""
    return list(getattr(m, "kernel_names", None) or [k.name for k in m.kernels])


def print_error(e: PTXError) -> None:
    print(e.format(), file=sys.stderr)


def parse_version(text: str) -> tuple[int, int]:
    try:
        major, minor = text.split(".")
        return int(major), int(minor)
    except ValueError:
        raise UserError(f"--ptx-version {text!r}: expected MAJOR.MINOR such as 9.0") from None


def check_output(out: str | None, what: str, inputs: Mapping[str, str]) -> None:
    """Before any work: refuse an output (None or - is standard output) that is one of `inputs` or cannot be
    written (ptxforge.outputs)."""
    if out not in (None, STDOUT):
        outputs.check_output(out, what, inputs)


def write_output(text: str, out: str | None, what: str = "-o", inputs: Mapping[str, str] | None = None) -> None:
    """Write `text` to `out` (None or - is standard output) as ptxforge.outputs does: never over an input."""
    if out in (None, STDOUT):
        sys.stdout.write(text)
        return
    outputs.write_text(text, out, what, inputs)


def input_files(*paths: str | None, role: str = "the input") -> dict[str, str]:
    """{path: role} of a command's input files, for the output checks (None and - left out)."""
    return {p: role for p in paths if p not in (None, STDOUT)}
