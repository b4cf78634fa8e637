"""`ptxforge sass`: the SASS machine code ptxas makes from a PTX file (ptxas, then cuobjdump -sass)."""

from __future__ import annotations

import argparse

from ptxforge.cli.common import check_output, input_files, print_error, read_source, write_output
from ptxforge.cli.errors import UserError
from ptxforge.ptx.errors import PTXError
from ptxforge.runtime.resources import target_arch
from ptxforge.runtime.sass import DisassemblyError, sass
from ptxforge.toolchain import ToolNotFound


def run(args: argparse.Namespace) -> int:
    inputs = input_files(args.file, role="the input file")
    check_output(args.output, "-o", inputs)
    text = read_source(args.file, args.arch)
    try:
        arch = args.arch or target_arch(text)
    except ValueError:
        raise UserError(f"{args.file}: no .target sm_XX line; pass --arch") from None
    try:
        out = sass(text, arch, kernel=args.kernel, encodings=args.encodings,
                   filename="<stdin>" if args.file == "-" else args.file)
    except PTXError as e:
        print_error(e)
        return 1
    except KeyError as e:
        raise UserError(e.args[0]) from None
    except (ToolNotFound, DisassemblyError) as e:
        raise UserError(str(e)) from None
    write_output(out, args.output, "-o", inputs)
    return 0
