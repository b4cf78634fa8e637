"""Helpers shared by the subcommands: reading PTX files and printing diagnostics."""

from __future__ import annotations

import re
import sys
from pathlib import Path

from ptxforge.cli.main import UserError
from ptxforge.ptx.errors import PTXError


def read_text(path: str) -> str:
    if path == "-":
        return sys.stdin.read()
    p = Path(path)
    if not p.exists():
        raise UserError(f"{path}: no such file")
    if p.is_dir():
        raise UserError(f"{path}: is a directory, expected a .ptx file")
    return p.read_text(encoding="utf-8", errors="surrogateescape")


def load_module(path: str):
    """Parse a PTX file; on syntax errors print them all and return None."""
    from ptxforge.ptx.parser import parse

    text = read_text(path)
    try:
        return parse(text, filename="<stdin>" if path == "-" else path)
    except PTXError as e:
        print_error(e)
        return None


_API_TO_FLAGS = tuple((re.compile(p), flag) for p, flag in (
    (r"device='(emu|cuda|auto)'", r"--device \1"), (r"sanitize=True", "--sanitize"),
    (r"\bshared_mem\b", "--shared-mem"), (r"\bnum_sms\b", "--sms"), (r"\bwatchdog_s\b", "--watchdog")))


def cli_words(message: str) -> str:
    """A runtime message in the CLI's words: `device='emu'` becomes `--device emu`, `num_sms` `--sms` ..."""
    for pattern, flag in _API_TO_FLAGS:
        message = pattern.sub(flag, message)
    return message


def print_error(e: PTXError) -> None:
    print(e.format(), file=sys.stderr)


def parse_version(text: str) -> tuple[int, int]:
    try:
        major, minor = text.split(".")
        return int(major), int(minor)
    except ValueError:
        raise UserError(f"--ptx-version {text!r}: expected MAJOR.MINOR such as 9.0") from None


def write_output(text: str, out: str | None) -> None:
    if out in (None, "-"):
        sys.stdout.write(text)
        return
    try:
        Path(out).write_text(text, encoding="utf-8", errors="surrogateescape")
    except OSError as e:
        raise UserError(f"cannot write {out}: {e.strerror}") from None
