"""`ptxforge` command line: one subcommand per module in this package.

Each subcommand module exposes `register(subparsers)`, which adds its parser and sets `func`.
User mistakes print `FILE:LINE:COL: error: ...` or `ptxforge: error: ...` and exit 1; a kernel that faults
prints `ptxforge: kernel fault: ...` and exits 2 (every family: `ptxforge.cli.errors`). No error of ptxforge's
shows a Python traceback.
"""

from __future__ import annotations

import argparse
import importlib
import sys

from ptxforge.cli.errors import UserError, report
from ptxforge.errors import Error

__all__ = ["COMMANDS", "UserError", "build_parser", "main"]

# Subcommand modules, in the order `--help` lists them.
COMMANDS = ("fmt", "check", "retarget", "run", "emit", "stats", "sass", "devices", "demo", "pipeline_cmd",
            "plan", "cache_cmd")


class _Parser(argparse.ArgumentParser):
    """argparse, but a usage mistake exits 1 like every other user error (argparse's own default is 2)."""

    def error(self, message: str):
        self.print_usage(sys.stderr)
        self.exit(1, f"{self.prog}: error: {message}\n")


def build_parser() -> argparse.ArgumentParser:
    parser = _Parser(
        prog="ptxforge",
        description="PTX-level GPU programming from Python: format, check, retarget and run PTX.",
    )
    parser.add_argument("--version", action="version", version=_version())
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    for name in COMMANDS:
        try:
            mod = importlib.import_module(f"ptxforge.cli.{name}")
        except ModuleNotFoundError as e:
            if e.name == f"ptxforge.cli.{name}":
                continue  # a subcommand not built yet
            raise
        mod.register(sub)
    return parser


def _version() -> str:
    from ptxforge import __version__

    return f"ptxforge {__version__}"


def _tolerant_streams() -> None:
    """Bytes that are not UTF-8 (read with surrogateescape) go out as they came; messages quote them."""
    for stream, errors in ((sys.stdout, "surrogateescape"), (sys.stderr, "backslashreplace")):
        reconfigure = getattr(stream, "reconfigure", None)
        if reconfigure is not None:
            reconfigure(errors=errors)


def main(argv: list[str] | None = None) -> int:
    _tolerant_streams()
    parser = build_parser()
    args = parser.parse_args(argv)
    if not getattr(args, "func", None):
        parser.print_help()
        return 1
    try:
        return int(args.func(args) or 0)
    except Error as e:
        return report(e)
    except BrokenPipeError:
        return 0
    except KeyboardInterrupt:
        print("ptxforge: interrupted", file=sys.stderr)
        return 130


if __name__ == "__main__":
    # `python -m ptxforge.cli.main` runs this file as __main__; the subcommands raise the UserError of the
    # imported module ptxforge.cli.main, so run that module's main for their errors to be caught
    from ptxforge.cli.main import main as _main

    sys.exit(_main())
