"""Errors of the PTX front end, each pointing at FILE:LINE:COL with the source line and a caret."""

from __future__ import annotations

from dataclasses import dataclass

from ptxforge.errors import Error


@dataclass(frozen=True)
class Diagnostic:
    """One problem at one place: `FILE:LINE:COL: error: message` plus the source line and a caret."""

    file: str
    line: int
    col: int
    message: str
    severity: str = "error"
    source_line: str = ""

    def format(self) -> str:
        where = f"{self.file}:{self.line}:{self.col}" if self.line else self.file
        head = f"{where}: {self.severity}: {self.message}"
        if not self.source_line:
            return head
        line, caret = _window(self.source_line.replace("\t", " "), max(0, self.col - 1))
        return f"{head}\n  {line}\n  {' ' * caret}^"

    def __str__(self) -> str:
        return self.format()


SHOWN_LINE_CHARS = 160  # a longer source line is shown as the part around the caret


def _window(line: str, caret: int) -> tuple[str, int]:
    """The part of a long source line around column `caret` (0-based), and the caret's place in it."""
    if len(line) <= SHOWN_LINE_CHARS:
        return line, caret
    start = max(0, min(caret - SHOWN_LINE_CHARS // 2, len(line) - SHOWN_LINE_CHARS))
    end = start + SHOWN_LINE_CHARS
    head, tail = ("..." if start else ""), ("..." if end < len(line) else "")
    return head + line[start:end] + tail, caret - start + len(head)


class PTXError(Error):
    """Base class of ptxforge's PTX errors; `.diagnostics` holds every problem found, in source order."""

    def __init__(self, diagnostics: list[Diagnostic]):
        self.diagnostics = sorted(diagnostics, key=lambda d: (d.file, d.line, d.col))
        first = self.diagnostics[0]
        self.file, self.line, self.col, self.msg = first.file, first.line, first.col, first.message
        super().__init__(self.format())

    def format(self) -> str:
        n = len(self.diagnostics)
        text = "\n".join(d.format() for d in self.diagnostics)
        if n > 1:
            text += f"\n{n} errors"
        return text


class PTXSyntaxError(PTXError):
    """The text is not well-formed PTX."""


class PTXValidationError(PTXError):
    """Well-formed PTX that breaks a rule: types, declarations, labels, target or ISA version."""
