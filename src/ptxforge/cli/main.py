"""`ptxforge` command line: a table of subcommands (`ptxforge.cli.commands`) and one module implementing each.

The table holds every subcommand's name, help and arguments and is cheap to import, so `--help` is fast;
`run_command` imports the chosen subcommand's module only when it runs.
User mistakes print `FILE:LINE:COL: error: ...` or `ptxforge: error: ...` and exit 1; a kernel that faults
prints `ptxforge: kernel fault: ...` and exits 2 (every family: `ptxforge.cli.errors`). No error of ptxforge's
shows a Python traceback.
"""

from __future__ import annotations

import argparse
import importlib
import sys
from typing import NoReturn

from ptxforge import __version__
from ptxforge.cli.commands import COMMANDS, add_commands
from ptxforge.cli.errors import UserError, report
from ptxforge.errors import Error

__all__ = ["COMMANDS", "UserError", "build_parser", "main", "run_command"]


class _Parser(argparse.ArgumentParser):
    """argparse, but a usage mistake exits 1 like every other user error (argparse's own default is 2)."""

    def error(self, message: str) -> NoReturn:
        self.print_usage(sys.stderr)
        self.exit(1, f"{self.prog}: error: {message}\n")


def build_parser() -> argparse.ArgumentParser:
    parser = _Parser(
        prog="ptxforge",
        description="PTX-level GPU programming from Python: format, check, retarget and run PTX.",
    )
    parser.add_argument("--version", action="version", version=f"ptxforge {__version__}")
    add_commands(parser.add_subparsers(dest="command", metavar="COMMAND"))
    return parser


def run_command(args: argparse.Namespace) -> int:
    """Run the subcommand `args` were parsed for (`args.entry`, "MODULE:FUNCTION"); its errors propagate."""
    module, _, function = args.entry.partition(":")
    # the one import of a subcommand's implementation, at run time: the emulator, numpy, the DSL kernels ...
    # load only for the subcommands that use them, and `ptxforge --help` loads none of them
    implementation = importlib.import_module(module)
    return int(getattr(implementation, function)(args) or 0)


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
    if getattr(args, "entry", None) is None:  # no subcommand (or `pipeline` without its own): the help
        getattr(args, "help_of", parser).print_help()
        return 1
    try:
        return run_command(args)
    except Error as e:
        return report(e)
    except BrokenPipeError:
        return 0
    except KeyboardInterrupt:
        print("ptxforge: interrupted", file=sys.stderr)
        return 130


if __name__ == "__main__":
    sys.exit(main())
