"""`ptxforge sass`: the SASS machine code ptxas makes from a PTX file (ptxas, then cuobjdump -sass)."""

from __future__ import annotations

from ptxforge.cli.common import print_error, read_text, write_output
from ptxforge.cli.main import UserError
from ptxforge.ptx.errors import PTXError
from ptxforge.toolchain import ToolNotFound


def register(sub) -> None:
    p = sub.add_parser("sass", help="disassemble the SASS ptxas makes from PTX",
                       description="Assemble PTX with ptxas (no GPU needed) and print the SASS of each "
                                   "function, or of --kernel alone, as cuobjdump -sass lists it.")
    p.add_argument("file", help="PTX file, or - for standard input")
    p.add_argument("--arch", help="assemble for this target instead of the module's .target")
    p.add_argument("--kernel", metavar="K", help="print only this function")
    p.add_argument("--encodings", action="store_true", help="keep the hex instruction words")
    p.add_argument("-o", "--output", help="write here instead of standard output")
    p.set_defaults(func=run)


def run(args) -> int:
    from ptxforge.runtime.resources import target_arch
    from ptxforge.runtime.sass import DisassemblyError, sass

    text = read_text(args.file)
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
    write_output(out, args.output)
    return 0
