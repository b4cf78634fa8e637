"""DSL errors, raised at the user's call with `FILE.py:LINE:COL: error: message` and the source line.

The location is the innermost stack frame outside the `ptxforge.dsl` package: the line of kernel
code whose call emitted the faulty instruction.
"""

from __future__ import annotations

import linecache
import os
import sys
from typing import TYPE_CHECKING

from ptxforge.ptx import ir
from ptxforge.ptx.errors import Diagnostic, PTXError

if TYPE_CHECKING:
    from types import FrameType

_DSL_DIR = os.path.dirname(os.path.abspath(__file__))


class DSLError(PTXError):
    """A mistake in DSL kernel code, found while the kernel is being built."""

    def __init__(self, message: str, where: tuple[str, int, int, str] | None = None):
        file, line, col, text = where or user_location()
        super().__init__([Diagnostic(file, line, col, message, source_line=text)])


class DSLTypeError(DSLError, TypeError):
    """Operands whose types do not fit the instruction."""


class DSLArchError(DSLError):
    """An instruction or modifier the kernel's target does not have."""


def _is_internal(filename: str) -> bool:
    return os.path.dirname(os.path.abspath(filename)) == _DSL_DIR


def user_frame() -> FrameType | None:
    """The innermost frame outside this package (None if there is none)."""
    f: FrameType | None = sys._getframe(1)
    while f is not None and _is_internal(f.f_code.co_filename):
        f = f.f_back
    return f


def user_location() -> tuple[str, int, int, str]:
    """(file, line, col, source line) of the user's call that is being handled."""
    f = user_frame()
    if f is None:
        return ("<dsl>", 0, 0, "")
    line, col = f.f_lineno, 1
    try:
        pos = list(f.f_code.co_positions())[f.f_lasti // 2]
        if pos[0] == line and pos[2] is not None:
            col = pos[2] + 1
    except (IndexError, AttributeError):
        pass
    text = linecache.getline(f.f_code.co_filename, line).rstrip("\n")
    return (f.f_code.co_filename, line, col, text)


def user_span() -> ir.Span:
    """A Span at the user's current line (cheap: no column, no source text)."""
    f = user_frame()
    if f is None:
        return ir.NO_SPAN
    return ir.Span(f.f_code.co_filename, f.f_lineno, 1)


def error_at(span: ir.Span, message: str, cls: type[DSLError] = DSLError) -> DSLError:
    """An error located at `span` (an instruction's Python line)."""
    text = linecache.getline(span.file, span.line).rstrip("\n") if span.line else ""
    col = len(text) - len(text.lstrip()) + 1 if text else span.col
    return cls(message, (span.file, span.line, col, text))
