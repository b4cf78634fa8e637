"""`ptxforge fmt`: print a PTX file in canonical layout."""

from __future__ import annotations

import argparse

from ptxforge.cli.common import check_output, input_files, load_module, write_output


def run(args: argparse.Namespace) -> int:
    inputs = input_files(args.file, role="the PTX file")
    check_output(args.output, "-o", inputs)
    m = load_module(args.file)
    if m is None:
        return 1
    write_output(m.to_ptx(canonical=not args.preserve), args.output, "-o", inputs)
    return 0
