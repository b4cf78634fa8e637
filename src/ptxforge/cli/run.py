"""`ptxforge run`: launch one kernel of a PTX file on the emulator (or, with --device cuda, a GPU).

The forms of `--arg` (a .npy file, `out.npy=zeros:N:DTYPE`, `null`, a number ...) are listed with the other
arguments in commands.py (`RUN_ARGUMENTS`, the epilog of `ptxforge run --help`).
"""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Collection
from pathlib import Path
from typing import Any

import numpy as np

from ptxforge.cli.common import atomic_path, check_writable, load_module
from ptxforge.cli.errors import UserError, report
from ptxforge.emu.errors import EmulatorError
from ptxforge.emu.progress import CLI_TIME_LIMIT_S
from ptxforge.emu.sanitizer import SanitizerError, write_json
from ptxforge.errors import DeviceUnavailable, KernelFault, LaunchError
from ptxforge.ptx.ir import Param
from ptxforge.runtime.buffers import resolve_device
from ptxforge.runtime.device import is_emulated


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


def parse_arg(text: str, param: Param, index: int, outputs: Collection[str] = ()) -> tuple[Any, str | None]:
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


def _time_limit(args: argparse.Namespace) -> float | None:
    """--time-limit, or on the emulator CLI_TIME_LIMIT_S when it is not given (a GPU takes none)."""
    if args.time_limit is not None:
        return float(args.time_limit)
    try:
        emulated = is_emulated(resolve_device(args.device))
    except (LaunchError, DeviceUnavailable):  # a device name the launch will refuse, no usable GPU: it says so
        return None
    return CLI_TIME_LIMIT_S if emulated else None


def _save(path: str, arr: np.ndarray) -> None:
    with atomic_path(path) as tmp:
        np.save(tmp, arr)


def _load_npy(path: str, where: str) -> np.ndarray:
    try:
        return np.load(path, allow_pickle=False)
    except (OSError, ValueError) as e:
        raise UserError(f"{where}: cannot read {path}: {e}") from None


def run(args: argparse.Namespace) -> int:
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
                       num_sms=args.sms, watchdog_s=args.watchdog, time_limit_s=_time_limit(args),
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
