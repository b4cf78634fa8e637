"""`ptxforge run`: launch one kernel of a PTX file on the emulator (or, with --device cuda, a GPU).

Arguments, one `--arg` per kernel parameter in order:
  a.npy                 a numpy array loaded from a.npy (an input: not written back unless named by --out)
  out.npy=zeros:N:DTYPE a new zero array of N elements (DTYPE: float32, int32, uint8 ...) saved to out.npy
  out.npy=empty-like:a.npy   zeros shaped and typed like another .npy file, saved to out.npy
  null                  a null pointer
  NUMBER                a scalar, converted to the parameter's type (int or float)
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

import numpy as np

from ptxforge.cli.common import atomic_path, check_writable, load_module
from ptxforge.cli.errors import report
from ptxforge.cli.main import UserError
from ptxforge.errors import KernelFault


def register(sub) -> None:
    p = sub.add_parser("run", help="run a kernel on the CPU emulator or a GPU",
                       description="Launch a kernel of a PTX file on the SIMT emulator (default) or a GPU. "
                                   "Arrays come from and go back to .npy files.",
                       epilog=__doc__.split("\n\n", 1)[1], formatter_class=_raw())
    p.add_argument("file", metavar="FILE", help="PTX file")
    p.add_argument("--kernel", "-k", help="kernel name (default: the only kernel)")
    p.add_argument("--grid", default="1", help="X[,Y[,Z]] blocks (default 1)")
    p.add_argument("--block", default="1", help="X[,Y[,Z]] threads per block (default 1)")
    p.add_argument("--arg", "-a", action="append", default=[], help="a kernel argument (see below)")
    p.add_argument("--out", action="append", default=[], metavar="FILE.npy|PARAM",
                   help="also write this input array back after the launch (its .npy path or parameter name)")
    p.add_argument("--device", choices=("emu", "cuda", "auto"), default="emu",
                   help="where to run: the CPU emulator (default), the GPU (cuda), or the GPU when there is one")
    p.add_argument("--shared-mem", type=int, default=0, help="dynamic shared memory bytes per block")
    p.add_argument("--sms", type=int, default=None, help="number of SMs to emulate (default 132)")
    p.add_argument("--watchdog", type=float, default=60.0,
                   help="seconds without progress (the machine's state repeating) before stopping (default 60)")
    p.add_argument("--time-limit", type=float, default=None, metavar="S",
                   help="stop the launch after S seconds of wall time, progress or not (default: no limit)")
    p.add_argument("--sanitize", action="store_true", help="run under the memory/race sanitizer")
    p.add_argument("--cooperative", action="store_true",
                   help="a cooperative launch (every block resident at once; cooperative groups' grid.sync())")
    p.add_argument("--report", metavar="FILE", help="write the sanitizer's findings as JSON to FILE (implies "
                                                    "--sanitize; exit status 1 when it found errors)")
    p.set_defaults(func=run)


def _raw():
    import argparse

    return argparse.RawDescriptionHelpFormatter


def parse_dims(text: str, what: str) -> tuple[int, ...]:
    try:
        dims = tuple(int(x) for x in text.split(","))
    except ValueError:
        raise UserError(f"--{what} {text!r}: expected X[,Y[,Z]] positive integers") from None
    if not 1 <= len(dims) <= 3 or any(d < 1 for d in dims):
        raise UserError(f"--{what} {text!r}: expected 1 to 3 positive integers")
    if any(d >= 1 << 32 for d in dims):  # the target's own limits are checked at launch
        raise UserError(f"--{what} {text!r}: every dimension must be below 2^32")
    return dims


def parse_arg(text: str, param, index: int, outputs=()):
    """(value to pass, path to save the array to or None): arrays made here (`out.npy=zeros:...`) are saved,
    arrays read from a file only when `outputs` names the file or the parameter."""
    where = f"--arg {index} ({param.name}, {param.type})"
    if text == "null":
        return None, None
    if "=" in text:
        path, spec = text.split("=", 1)
        path = npy_path(path, where)
        parts = spec.split(":")
        if parts[0] == "zeros" and len(parts) == 3:
            try:
                n, dtype = int(parts[1]), np.dtype(parts[2])
                if n < 0:
                    raise ValueError(f"{n} elements")
                _fits_in_memory(n * dtype.itemsize)
                arr = np.zeros(n, dtype)
            except (ValueError, TypeError, MemoryError) as e:
                raise UserError(f"{where}: {spec!r}: {e}") from None
            return arr, path
        if parts[0] == "empty-like" and len(parts) == 2:
            like = _load_npy(parts[1], where)
            return np.zeros_like(like), path
        raise UserError(f"{where}: {spec!r}: expected zeros:N:DTYPE or empty-like:FILE.npy")
    if text.endswith(".npy"):
        written = text in outputs or param.name in outputs
        return _load_npy(text, where), npy_path(text, where) if written else None
    try:
        if param.type.startswith(".f"):
            v = float(text)
            return (np.float32(v) if param.type == ".f32" else np.float64(v) if param.type == ".f64"
                    else v), None
        return int(text, 0), None
    except ValueError:
        raise UserError(f"{where}: {text!r} is not a number, a .npy file or null") from None


def npy_path(path: str, where: str) -> str:
    """The file an array is saved to (numpy adds .npy, so the name says so); checked writable now."""
    if not path.endswith(".npy"):
        path += ".npy"
    check_writable(path, where)
    return path


def _fits_in_memory(nbytes: int) -> None:
    try:
        total = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    except (ValueError, OSError, AttributeError):
        return
    if nbytes > total:
        raise MemoryError(f"{nbytes:,} bytes is more than this machine's {total / 2**30:.0f} GiB of memory")


def _save(path: str, arr) -> None:
    with atomic_path(path) as tmp:
        np.save(tmp, arr)


def _load_npy(path: str, where: str) -> np.ndarray:
    try:
        return np.load(path, allow_pickle=False)
    except (OSError, ValueError) as e:
        raise UserError(f"{where}: cannot read {path}: {e}") from None


def run(args) -> int:
    from ptxforge.emu.errors import EmulatorError  # the emulator loads only for `run`
    from ptxforge.emu.sanitizer import SanitizerError, write_json

    m = load_module(args.file)
    if m is None:
        return 1
    kernels = m.kernels
    if args.kernel is None:
        if len(kernels) != 1:
            raise UserError(f"{args.file} has {len(kernels)} kernels; pick one with --kernel: "
                            + ", ".join(k.name for k in kernels))
        name = kernels[0].name
    else:
        name = args.kernel
    try:
        k = m.kernel(name)
    except KeyError as e:
        raise UserError(str(e.args[0])) from None
    grid, block = parse_dims(args.grid, "grid"), parse_dims(args.block, "block")
    if args.report:
        check_writable(args.report, "--report")
    if len(args.arg) != len(k.params):
        sig = ", ".join(f"{p.type} {p.name}" for p in k.params)
        raise UserError(f"{name} takes {len(k.params)} argument(s) ({sig}); {len(args.arg)} --arg given")
    named = {t for t in args.arg if t.endswith(".npy")} | {p.name for p in k.params}
    unknown = [o for o in args.out if o not in named]
    if unknown:
        raise UserError(f"--out {unknown[0]}: not an --arg .npy file or a parameter of {name} "
                        f"({', '.join(p.name for p in k.params)})")
    values, saves = [], []
    for i, (text, p) in enumerate(zip(args.arg, k.params, strict=False)):
        v, path = parse_arg(text, p, i, args.out)
        values.append(v)
        if path is not None:
            saves.append((path, v))
    try:
        res = k.launch(grid=grid, block=block, args=values, device=args.device, shared_mem=args.shared_mem,
                       num_sms=args.sms, watchdog_s=args.watchdog, time_limit_s=args.time_limit,
                       sanitize=args.sanitize or bool(args.report), cooperative=args.cooperative)
    except (EmulatorError, KernelFault) as e:  # the kernel ran: a fault, or the sanitizer's findings
        if isinstance(e, EmulatorError):  # the emulator copied back what completed in bounds: keep it
            for path, arr in saves:
                _save(path, arr)
        elif saves:  # a GPU fault leaves the context unusable: nothing came back
            print(f"ptxforge: {len(saves)} output file(s) not written: the GPU returned no results",
                  file=sys.stderr)
        if args.report and isinstance(e, SanitizerError):
            with atomic_path(args.report, "--report") as tmp:
                write_json(tmp, e.reports, kernel=e.kernel, suppressed=e.suppressed)
        return report(e)
    # refused launches (LaunchError), a missing device, ptxas refusing the module: `main` reports them
    for path, arr in saves:
        _save(path, arr)
    if args.report:
        with atomic_path(args.report, "--report") as tmp:
            write_json(tmp, [], kernel=name)
    print(res, file=sys.stderr)
    for path, _ in saves:
        print(f"wrote {Path(path)}", file=sys.stderr)
    return 0
