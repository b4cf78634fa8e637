"""`ptxforge retarget`: rewrite .target/.version, refusing code the new target lacks."""

from __future__ import annotations

from ptxforge.cli.common import load_module, parse_version, print_error, write_output
from ptxforge.cli.main import UserError
from ptxforge.ptx.errors import PTXError


def register(sub) -> None:
    p = sub.add_parser("retarget", help="move PTX to another GPU target or PTX ISA version",
                       description="Rewrite .target (and .version) of a PTX file. Every instruction the "
                                   "new target or version lacks is reported with its line, and nothing is "
                                   "written.")
    p.add_argument("file", help="PTX file, or - for standard input")
    p.add_argument("--arch", required=True, help="new target, e.g. sm_80, sm_90a, sm_100a")
    p.add_argument("--ptx-version", help="new .version, e.g. 9.0 (default: keep the module's)")
    p.add_argument("-o", "--output", help="write here instead of standard output")
    p.set_defaults(func=run)


def run(args) -> int:
    from ptxforge.ptx.retarget import retarget

    version = parse_version(args.ptx_version) if args.ptx_version else None
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
    write_output(out.to_ptx(), args.output)
    return 0
