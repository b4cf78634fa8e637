"""`ptxforge emit FILE.py[:NAME] --arch ARCH`: print the PTX of the DSL kernels in a Python file.

The file is imported (its `if __name__ == "__main__":` block does not run); what its top level prints goes to
standard error, so standard output carries only the PTX."""

from __future__ import annotations

import argparse
import contextlib
import runpy
import sys
import traceback
from pathlib import Path

from ptxforge.cli.common import check_output, compile_cu, input_files, is_cuda, print_error, write_output
from ptxforge.cli.errors import UserError
from ptxforge.dsl.errors import DSLError
from ptxforge.dsl.kernel import Kernel, link
from ptxforge.ptx.retarget import target_min_ptx


def _split(target: str) -> tuple[str, str | None]:
    path, sep, name = target.rpartition(":")
    if sep and path.endswith(".py") and name:
        return path, name
    return target, None


def load_kernels(path: str) -> dict[str, Kernel]:
    """The @kernel objects defined at the top level of a Python file, by variable name."""
    p = Path(path)
    if not p.is_file():
        raise UserError(f"{path}: no such file")
    sys.path.insert(0, str(p.resolve().parent))
    try:
        # the file's own prints go to stderr, so that the PTX on stdout is only PTX
        with contextlib.redirect_stdout(sys.stderr):
            env = runpy.run_path(str(p), run_name="__ptxforge_emit__")
    except DSLError:
        raise
    except SystemExit as e:
        raise UserError(f"{path}: the file called exit({e.code}) while being loaded") from None
    except Exception as e:  # a mistake in the user's Python: point at its line, no traceback
        frames = [f for f in traceback.extract_tb(e.__traceback__) if Path(f.filename).resolve() == p.resolve()]
        where = f"{path}:{frames[-1].lineno}: " if frames else f"{path}: "
        raise UserError(f"{where}{type(e).__name__}: {e}") from None
    finally:
        sys.path.remove(str(p.resolve().parent))
    return {k: v for k, v in env.items() if isinstance(v, Kernel)}


def run(args: argparse.Namespace) -> int:
    path, name = _split(args.target)
    if is_cuda(path):  # CUDA C++: the PTX NVRTC makes of it for --arch
        inputs = input_files(path, role="the CUDA C++ file")
        check_output(args.output, "-o", inputs)
        arch = None if args.arch in (None, "auto") else args.arch
        write_output(compile_cu(path, arch).ptx, args.output, inputs=inputs)
        return 0
    if args.arch not in (None, "auto"):
        try:
            target_min_ptx(args.arch)
        except ValueError as e:
            raise UserError(f"--arch: {e}") from None
    inputs = input_files(path, role="the Python file")
    check_output(args.output, "-o", inputs)
    try:
        kernels = load_kernels(path)
        if not kernels:
            raise UserError(f"{path}: defines no @kernel (ptxforge.dsl) at top level")
        if name is not None:
            by_name = {k.name: k for k in kernels.values()} | kernels
            if name not in by_name:
                have = ", ".join(sorted({k.name for k in kernels.values()}))
                raise UserError(f"{path}: no kernel {name!r}; it has: {have}")
            chosen = [by_name[name]]
        else:
            chosen = list({id(k): k for k in kernels.values()}.values())
        arch = args.arch
        if arch is None:
            own = sorted({k.arch for k in chosen if k.arch not in (None, "auto")})
            if len(own) > 1:
                raise UserError(f"{path}: the kernels target different archs ({', '.join(own)}); choose one "
                                f"with --arch or name a kernel (FILE.py:NAME)")
            arch = own[0] if own else "auto"
        text = link(chosen, arch).to_ptx(canonical=True)
    except DSLError as e:
        print_error(e)
        return 1
    write_output(text, args.output, "-o", inputs)
    return 0
