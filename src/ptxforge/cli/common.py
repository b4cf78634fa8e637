"""Helpers shared by the subcommands: reading PTX files, printing diagnostics, writing outputs (through
`ptxforge.outputs`: never over an input or a special file)."""

from __future__ import annotations

import sys
from collections.abc import Mapping
from pathlib import Path

from ptxforge import outputs
from ptxforge.cli.errors import UserError
from ptxforge.cli.errors import cli_words as cli_words  # re-exported: the subcommands take it from here
from ptxforge.outputs import STDOUT
from ptxforge.ptx.errors import PTXError
from ptxforge.ptx.ir import Module
from ptxforge.ptx.parser import parse


def read_text(path: str) -> str:
    if path == "-":
        return sys.stdin.read()
    p = Path(path)
    if not p.exists():
        raise UserError(f"{path}: no such file")
    if p.is_dir():
        raise UserError(f"{path}: is a directory, expected a .ptx file")
    try:
        return p.read_text(encoding="utf-8", errors="surrogateescape")
    except OSError as e:
        raise UserError(f"{path}: cannot read it: {e.strerror or e}") from None


def load_module(path: str) -> Module | None:
    """Parse a PTX file; on syntax errors print them all and return None."""
    text = read_text(path)
    try:
        return parse(text, filename="<stdin>" if path == "-" else path)
    except PTXError as e:
        print_error(e)
        return None


def print_error(e: PTXError) -> None:
    print(e.format(), file=sys.stderr)


def parse_version(text: str) -> tuple[int, int]:
    try:
        major, minor = text.split(".")
        return int(major), int(minor)
    except ValueError:
        raise UserError(f"--ptx-version {text!r}: expected MAJOR.MINOR such as 9.0") from None


def check_output(out: str | None, what: str, inputs: Mapping[str, str]) -> None:
    """Before any work: refuse an output (None or - is standard output) that is one of `inputs` or cannot be
    written (ptxforge.outputs)."""
    if out not in (None, STDOUT):
        outputs.check_output(out, what, inputs)


def write_output(text: str, out: str | None, what: str = "-o", inputs: Mapping[str, str] | None = None) -> None:
    """Write `text` to `out` (None or - is standard output) as ptxforge.outputs does: never over an input."""
    if out in (None, STDOUT):
        sys.stdout.write(text)
        return
    outputs.write_text(text, out, what, inputs)


def input_files(*paths: str | None, role: str = "the input") -> dict[str, str]:
    """{path: role} of a command's input files, for the output checks (None and - left out)."""
    return {p: role for p in paths if p not in (None, STDOUT)}
