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

from ptxforge import environment
from ptxforge.cli.common import is_cuda, kernel_names, load_launchable
from ptxforge.cli.errors import UserError, report
from ptxforge.emu.errors import EmulatorError
from ptxforge.emu.progress import CLI_TIME_LIMIT_S
from ptxforge.emu.sanitizer import Sanitizer, SanitizerError, write_json
from ptxforge.emu.sanitizer.sarif import write_sarif
from ptxforge.errors import DeviceUnavailable, KernelFault, LaunchError
from ptxforge.outputs import check_output, output_path
from ptxforge.ptx.ir import Param
from ptxforge.runtime.buffers import resolve_device
from ptxforge.runtime.device import is_emulated
from ptxforge.runtime.launch_config import EmulatorOptions


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
    check_output(path, where)
    return path


def _fits_in_memory(nbytes: int) -> None:
    try:
        total = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    except (ValueError, OSError, AttributeError):
        return
    if nbytes > total:
        raise MemoryError(f"{nbytes:,} bytes is more than this machine's {total / 2**30:.0f} GiB of memory")


def _time_limit(args: argparse.Namespace, device: str) -> float | None:
    """--time-limit, or on the emulator CLI_TIME_LIMIT_S when it is not given (a GPU takes none)."""
    if args.time_limit is not None:
        return float(args.time_limit)
    try:
        emulated = is_emulated(resolve_device(device))
    except (LaunchError, DeviceUnavailable):  # a device name the launch will refuse, no usable GPU: it says so
        return None
    return CLI_TIME_LIMIT_S if emulated else None


def _save(path: str, arr: np.ndarray, where: str) -> None:
    with output_path(path, where) as out, open(out, "wb") as f:
        np.save(f, arr)


def _check_outputs(args: argparse.Namespace, saves: list[tuple[str, str, Any]], in_place: set[int]) -> None:
    """Before the launch: no output is the PTX file, an array read as input (the saves numbered in `in_place`,
    `--arg a.npy` named by --out, are written back to their own file), the --report or another output."""
    inputs = {args.file: "the CUDA C++ file" if is_cuda(args.file) else "the PTX file"}
    for i, text in enumerate(args.arg):
        source = text.split("=", 1)[1].partition(":")[2] if "=" in text else text
        if source.endswith(".npy"):
            inputs.setdefault(source, f"the input array of --arg {i}")
    for j, (path, where, _) in enumerate(saves):
        others = {p: f"the output of {w}" for p, w, _ in saves[:j]}
        check_output(path, where, {p: r for p, r in inputs.items() if j not in in_place or p != path} | others)
    written = {p: f"the output of {w}" for p, w, _ in saves}
    if args.report:
        check_output(args.report, "--report", inputs | written)
    if args.sarif:
        check_output(args.sarif, "--sarif", inputs | written | ({args.report: "the --report"} if args.report else {}))


def _load_npy(path: str, where: str) -> np.ndarray:
    try:
        return np.load(path, allow_pickle=False)
    except (OSError, ValueError) as e:
        raise UserError(f"{where}: cannot read {path}: {e}") from None


# compute-sanitizer's --tool: which of the Sanitizer's check families run (bounds checks always do)
TOOLS = {"memcheck": {"races": False, "init": False, "sync": False},
         "racecheck": {"races": True, "init": False, "sync": False},
         "initcheck": {"races": False, "init": True, "sync": False},
         "synccheck": {"races": False, "init": False, "sync": True}}


def sanitizer_of(args: argparse.Namespace) -> Sanitizer | bool:
    """False, or the Sanitizer that --sanitize, --report, --sarif, --tool and --print-limit ask for."""
    if args.print_limit is not None and args.print_limit < 1:
        raise UserError(f"--print-limit {args.print_limit}: must be at least 1")
    if not (args.sanitize or args.report or args.sarif or args.tool or args.print_limit):
        return False
    return Sanitizer(**TOOLS.get(args.tool or "", {}), max_reports=args.print_limit or 100)


def _write_reports(args: argparse.Namespace, reports: list, kernel: str, suppressed: int = 0) -> None:
    if args.report:
        with output_path(args.report, "--report") as out:
            write_json(out, reports, kernel=kernel, suppressed=suppressed)
    if args.sarif:
        with output_path(args.sarif, "--sarif") as out:
            write_sarif(out, reports, kernel=kernel)


def run(args: argparse.Namespace) -> int:
    if args.arch is not None and not is_cuda(args.file):
        raise UserError(f"--arch {args.arch}: chooses the target a .cu file is compiled for; {args.file} is PTX "
                        f"(use ptxforge retarget to move PTX to another target)")
    m = load_launchable(args.file, args.arch, args.kernel)
    if m is None:
        return 1
    kernels = m.kernels
    if args.kernel is None:
        if len(kernels) != 1:
            raise UserError(f"{args.file} has {len(kernels)} kernels; pick one with --kernel: "
                            + ", ".join(kernel_names(m)))
        name = kernels[0].name
    else:
        name = args.kernel
    try:
        k = m.kernel(name)
    except KeyError as e:
        raise UserError(str(e.args[0])) from None
    grid, block = parse_dims(args.grid, "grid"), parse_dims(args.block, "block")
    sanitize = sanitizer_of(args)
    if len(args.arg) != len(k.params):
        sig = ", ".join(f"{p.type} {p.name}" for p in k.params)
        raise UserError(f"{name} takes {len(k.params)} argument(s) ({sig}); {len(args.arg)} --arg given")
    named = {t for t in args.arg if t.endswith(".npy")} | {p.name for p in k.params}
    unknown = [o for o in args.out if o not in named]
    if unknown:
        raise UserError(f"--out {unknown[0]}: not an --arg .npy file or a parameter of {name} "
                        f"({', '.join(p.name for p in k.params)})")
    values: list[Any] = []
    saves: list[tuple[str, str, Any]] = []  # (path, which --arg, array)
    in_place: set[int] = set()
    for i, (text, p) in enumerate(zip(args.arg, k.params, strict=False)):
        v, path = parse_arg(text, p, i, args.out)
        values.append(v)
        if path is not None:
            if "=" not in text:
                in_place.add(len(saves))
            saves.append((path, f"--arg {i} ({p.name})", v))
    _check_outputs(args, saves, in_place)
    device = args.device or environment.device() or "emu"
    try:
        res = k.launch(grid=grid, block=block, args=values, device=device, shared_mem=args.shared_mem,
                       cooperative=args.cooperative,
                       options=EmulatorOptions(sanitize=sanitize, num_sms=args.sms, watchdog_s=args.watchdog,
                                               time_limit_s=_time_limit(args, device)))
    except (EmulatorError, KernelFault) as e:  # the kernel ran: a fault, or the sanitizer's findings
        if isinstance(e, EmulatorError):  # the emulator copied back what completed in bounds: keep it
            for path, where, arr in saves:
                _save(path, arr, where)
        elif saves:  # a GPU fault leaves the context unusable: nothing came back
            print(f"ptxforge: {len(saves)} output file(s) not written: the GPU returned no results",
                  file=sys.stderr)
        if isinstance(e, SanitizerError):
            _write_reports(args, e.reports, e.kernel, e.suppressed)
        return report(e)
    # refused launches (LaunchError), a missing device, ptxas refusing the module: `main` reports them
    for path, where, arr in saves:
        _save(path, arr, where)
    _write_reports(args, [], k.name)
    print(res, file=sys.stderr)
    for path, _, _ in saves:
        print(f"wrote {Path(path)}", file=sys.stderr)
    return 0
