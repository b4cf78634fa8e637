"""The parser's token cursor: the tokens of one PTX text, looking ahead, consuming, and recording syntax
errors (each raises `_Recover`, and the parser resumes at the next statement). Part of `parser.Parser`."""

from __future__ import annotations

from operator import itemgetter
from typing import Any, NoReturn

from ptxforge.ptx import ir
from ptxforge.ptx.errors import Diagnostic
from ptxforge.ptx.lexer import SourceText, tokenize
from ptxforge.ptx.literals import LiteralOverflow, immediate, int_value

# How deep `{` blocks and bracketed or prefixed operands (`{..}`, `(..)`, `[..]`, `!`, `-`, `|`) may nest.
# Real PTX nests a few levels; the bound keeps the recursive descent (and every IR walker after it)
# far from Python's recursion limit on hostile input.
MAX_NESTING = 100

_span_at = ir.Span.at
Token = tuple[str, str, int]  # (kind, text, offset), as `lexer.tokenize` gives them


class _Recover(Exception):
    """Raised after recording a syntax error, to resume at the next statement."""


class TokenCursor:
    """The tokens of one PTX text and a position in them (the base of `Parser`)."""

    def __init__(self, text: str, filename: str):
        self.src = SourceText(text)
        self.text = text
        self.file = filename
        self.errors: list[Diagnostic] = []
        self.toks = self._tokenize_outside_sections()
        self.toks += [("eof", "", len(text))] * 8  # sentinels: peek() never runs off the end
        self.i = 0
        self.depth = 0  # current nesting of blocks and operands, bounded by MAX_NESTING
        self.regs: set[str] = set()  # register names declared in the function being parsed
        self.paren_verdicts: dict[int, bool] = {}  # token index after a '(' -> parenthesized_constant()
        self.unary_verdicts: dict[int, bool] = {}  # token index in a run of unary operators -> a constant?
        self.layout: dict = {}  # id(node) -> (node, start, end[, head_end, close_start])
        self._texts: list[str] | None = None

    # ------------------------------------------------------------------ tokens

    def _tokenize_outside_sections(self):
        """Tokens of the text, except DWARF `.section` bodies, which become one ('section', body) token."""
        text, out, pos = self.text, [], 0
        while True:
            k = text.find(".section", pos)
            if k < 0:
                out += tokenize(text, pos)
                return out
            out += tokenize(text, pos, k)
            ob = text.find("{", k)
            cb = text.find("}", ob + 1) if ob >= 0 else -1
            head = text[k + 8:ob] if ob >= 0 else ""
            if ob < 0 or cb < 0 or len(head.split()) != 1 or any(c in head for c in ";}{"):
                out.append(("word", ".section", k))  # malformed: let the parser report it
                pos = k + 8
                continue
            out.append(("section", head.strip(), k))
            out.append(("sectionbody", text[ob + 1:cb], ob + 1))
            out.append(("punct", "}", cb))
            pos = cb + 1

    def texts(self) -> list[str]:
        """The text of every token (built on first use), for searches that need no Python step per token."""
        if self._texts is None:
            self._texts = list(map(itemgetter(1), self.toks))
        return self._texts

    def end_offset(self) -> int:
        """Offset just past the last consumed token."""
        t = self.toks[self.i - 1]
        return t[2] + len(t[1])

    def mark(self, node: Any, start: int, *extra: int) -> None:
        self.layout[id(node)] = (node, start, self.end_offset(), *extra)

    def peek(self, ahead: int = 0) -> Token:
        return self.toks[self.i + ahead]

    def next(self) -> Token:
        t = self.toks[self.i]
        if t[0] != "eof":
            self.i += 1
        return t

    def at(self, value: str) -> bool:
        return self.toks[self.i][1] == value

    def accept(self, value: str) -> bool:
        if self.toks[self.i][1] == value:
            self.i += 1
            return True
        return False

    def expect(self, value: str, what: str = "") -> Token:
        t = self.peek()
        if t[1] != value:
            self.fail(t, f"expected '{value}'{what}, found {self.describe(t)}")
        self.i += 1
        return t

    def span(self, tok: Token) -> ir.Span:
        return _span_at(self.file, self.src, tok[2])

    @staticmethod
    def describe(tok: Token) -> str:
        kind, val, _ = tok
        if kind == "eof":
            return "end of file"
        return f"'{val}'" if len(val) <= 40 else f"'{val[:37]}...'"

    def fail(self, tok: Token, message: str) -> NoReturn:
        line, col = self.src.line_col(tok[2])
        self.errors.append(Diagnostic(self.file, line, col, message, source_line=self.src.line_text(line)))
        raise _Recover

    def recover(self, stop_at_brace: bool = True) -> None:
        """Skip to just after the next ';' (or stop before a '}' that closes the current scope)."""
        depth = 0
        while True:
            kind, val, _ = self.peek()
            if kind == "eof":
                return
            if val == "{":
                depth += 1
            elif val == "}":
                if depth == 0:
                    if stop_at_brace:
                        return
                else:
                    depth -= 1
            elif val == ";" and depth == 0:
                self.i += 1
                return
            self.i += 1

    def word(self, what: str) -> Token:
        t = self.peek()
        if t[0] != "word":
            self.fail(t, f"expected {what}, found {self.describe(t)}")
        self.i += 1
        return t

    def integer(self, what: str = "an integer") -> int:
        neg = self.accept("-")
        t = self.peek()
        if t[0] != "num":
            self.fail(t, f"expected {what}, found {self.describe(t)}")
        v = self.int_literal(t)
        if v is None:
            self.fail(t, f"expected {what}, found {self.describe(t)}")
        self.i += 1
        return -v if neg else v

    def int_literal(self, tok: Token) -> int | None:
        """The value of an integer literal token, None for another number; an error past 64 bits."""
        try:
            return int_value(tok[1])
        except LiteralOverflow as e:
            self.fail(tok, str(e))

    def literal(self, tok: Token, span_tok: Token) -> ir.Immediate | None:
        """The Immediate of a number token (spanning from `span_tok`), None when malformed."""
        try:
            return immediate(tok[1], self.span(span_tok))
        except LiteralOverflow as e:
            self.fail(tok, str(e))

    def nest(self, tok: Token) -> None:
        """Enter one nesting level at `tok`; the caller leaves it with `self.depth -= 1`."""
        self.depth += 1
        if self.depth > MAX_NESTING:
            if self.toks[self.i - 1] is tok:
                self.i -= 1  # leave the bracket to recover(), which skips the group it opens
            self.fail(tok, self.too_deep())

    @staticmethod
    def too_deep() -> str:
        return f"nesting deeper than {MAX_NESTING} levels (blocks, braces, brackets, '!', '-', '|')"
