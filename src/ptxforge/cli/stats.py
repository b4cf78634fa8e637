"""`ptxforge stats`: registers, spills, shared memory and occupancy of each kernel, from `ptxas -v`."""

from __future__ import annotations

import argparse
import math

from ptxforge.cli.commands import DEFAULT_BLOCK
from ptxforge.cli.common import load_module, print_error
from ptxforge.cli.errors import UserError
from ptxforge.ptx.errors import PTXError
from ptxforge.ptx.ir import Function
from ptxforge.runtime.occupancy import occupancy, sm_limits
from ptxforge.runtime.resources import resource_usage
from ptxforge.toolchain import ToolNotFound


def block_size(function: Function | None, override: int | None) -> tuple[int, str]:
    """(threads per block, where it came from) for the occupancy column."""
    if override is not None:
        return override, "--block"
    dims = dict(function.directives) if function is not None else {}
    for d in (".reqntid", ".maxntid"):
        if dims.get(d):
            return math.prod(dims[d]), d
    return DEFAULT_BLOCK, "default"


def run(args: argparse.Namespace) -> int:
    if args.block is not None and not 1 <= args.block <= 1024:
        raise UserError(f"--block {args.block}: must be 1..1024")
    m = load_module(args.file, args.arch)
    if m is None:
        return 1
    text = m.source if m.source is not None else m.to_ptx()
    arch = args.arch or m.target.arch
    try:
        usage = resource_usage(text, arch, filename=args.file)
    except PTXError as e:
        print_error(e)
        return 1
    except ToolNotFound as e:
        raise UserError(str(e)) from None
    try:
        sm_limits(arch)
        occ_known = True
    except KeyError:
        occ_known = False
    funcs = {f.name: f for f in m.functions if f.body is not None}
    rows = [("function", "regs", "bars", "stack", "spill st/ld", "smem", "block", "blocks/SM", "occupancy",
             "limited by")]
    notes = []
    for name, r in usage.items():
        spill = f"{r.spill_stores}/{r.spill_loads}"
        if not r.entry:
            rows.append((f"{name} (.func)", "-", "-", str(r.stack_frame), spill, "-", "-", "-", "-", "-"))
            continue
        threads, source = block_size(funcs.get(name), args.block)
        occ_cols = ("n/a", "n/a", f"no figures for {arch}")
        if occ_known:
            try:
                o = occupancy(arch, threads, r.registers or 0, r.shared)
                occ_cols = (str(o.blocks_per_sm), f"{o.occupancy:.0%}", ", ".join(o.limited_by))
            except ValueError as e:
                occ_cols = ("0", "0%", "cannot launch")
                notes.append(f"{name}: {e}")
        block = f"{threads}" + ("" if source in ("--block", "default") else f" ({source})")
        rows.append((name, str(r.registers), str(r.barriers if r.barriers is not None else "-"),
                     str(r.stack_frame), spill, str(r.shared), block, *occ_cols))
    widths = [max(len(row[i]) for row in rows) for i in range(len(rows[0]))]
    print(f"{args.file}: {arch}")
    for row in rows:
        print("  ".join(c.ljust(w) if i == 0 or i == len(row) - 1 else c.rjust(w)
                        for i, (c, w) in enumerate(zip(row, widths, strict=True))).rstrip())
    for n in notes:
        print(f"note: {n}")
    return 0
