"""`ptxforge fmt`: print a PTX file in canonical layout."""

from __future__ import annotations

from ptxforge.cli.common import load_module, write_output


def register(sub) -> None:
    p = sub.add_parser("fmt", help="print PTX in canonical layout",
                       description="Parse a PTX file and print it in ptxforge's canonical layout "
                                   "(ptxas builds the same code from it).")
    p.add_argument("file", help="PTX file, or - for standard input")
    p.add_argument("-o", "--output", help="write here instead of standard output")
    p.add_argument("--preserve", action="store_true",
                   help="keep the original text (round-trip check: output equals input)")
    p.set_defaults(func=run)


def run(args) -> int:
    m = load_module(args.file)
    if m is None:
        return 1
    write_output(m.to_ptx(canonical=not args.preserve), args.output)
    return 0
