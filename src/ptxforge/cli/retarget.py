"""`ptxforge retarget`: rewrite .target/.version, refusing code the new target lacks."""

from __future__ import annotations

import argparse

from ptxforge.cli.common import check_output, input_files, load_module, parse_version, print_error, write_output
from ptxforge.cli.errors import UserError
from ptxforge.ptx.errors import PTXError
from ptxforge.ptx.isa.targets import version_problem
from ptxforge.ptx.retarget import retarget


def run(args: argparse.Namespace) -> int:
    version = parse_version(args.ptx_version) if args.ptx_version else None
    if version is not None and version_problem(version):
        raise UserError(f"--ptx-version: {version_problem(version)}")
    inputs = input_files(args.file, role="the PTX file")
    check_output(args.output, "-o", inputs)
    m = load_module(args.file)
    if m is None:
        return 1
    try:
        out = retarget(m, args.arch, version)
    except ValueError as e:
        raise UserError(f"--arch: {e}") from None
    except PTXError as e:
        print_error(e)
        return 1
    write_output(out.to_ptx(), args.output, "-o", inputs)
    return 0
