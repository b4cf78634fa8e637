"""Tokens of PTX: one compiled regular expression, offsets kept so spans resolve lazily."""

from __future__ import annotations

import bisect
import re
from collections.abc import Callable
from itertools import accumulate, repeat
from operator import add, itemgetter

# Kinds (strings, so a token is a cheap tuple): word, num, str, punct, bad
# Whitespace and comments are matched as the prefix of each token, so every match is a token. The alternatives
# start with distinct characters, and each begins with a literal or a character class, which the regex engine
# tests before entering it: one look at a token's first character picks its alternative.
_TOKEN_RE = re.compile(
    r"""
    [ \t\r\n\f\v]*(?:(?://[^\n]*|/\*.*?\*/)[ \t\r\n\f\v]*)*
    (?:
    (?P<nums>[0-9]++(?:,\ [0-9]++){15,}(?![\w.]))
  | (?P<num>[0-9](?:(?<=0)[fF][0-9a-fA-F]{8}(?![\w$])|(?<=0)[dD][0-9a-fA-F]{16}(?![\w$])
        |[0-9]*\.[0-9]*(?:[eE][+-]?[0-9]+)?|[0-9]*[eE][+-]?[0-9]+
        |(?<=0)[xX][0-9a-fA-F]+U?|(?<=0)[bB][01]+U?|[0-9]*U?))
  | (?P<word>\.[A-Za-z_$][\w$]*(?:::[\w$]+)*|[A-Za-z_$%][\w$]*(?:(?:\.|::)[\w$]+)*)
  | (?P<str>"(?:[^"\\\n]|\\.)*")
  | (?P<punct>[{}\[\]();,:<>@!|+\-*/=~&^?])
  | (?P<bad>/\*|.)
  | (?P<end>$)
    )
    """,
    re.VERBOSE | re.DOTALL,
)
_KINDS = ("", *sorted(_TOKEN_RE.groupindex, key=_TOKEN_RE.groupindex.__getitem__))  # group number -> kind
# A run of 16 or more decimal numbers written "1, 2, 3" (the tables compilers emit: curand's are 400,000
# numbers) is matched whole as `nums` and split into its num and ',' tokens by C-level operations; the numbers
# end where a number token would (not before a letter, digit, '_' or '.'), so the tokens are the same.
# Its digits are possessive: a long digit run (a 20,000-digit literal) is not backtracked through digit by digit.


class SourceText:
    """The text being parsed, with line starts for offset -> (line, col) lookups."""

    __slots__ = ("text", "_starts")

    def __init__(self, text: str):
        self.text = text
        self._starts: list[int] | None = None

    def line_col(self, offset: int) -> tuple[int, int]:
        if self._starts is None:
            self._starts = [0] + [m.end() for m in re.finditer("\n", self.text)]
        i = bisect.bisect_right(self._starts, offset) - 1
        return i + 1, offset - self._starts[i] + 1

    def line_text(self, line: int) -> str:
        if self._starts is None:
            self.line_col(0)
        starts = self._starts
        assert starts is not None  # line_col made them
        if not 1 <= line <= len(starts):
            return ""
        end = starts[line] - 1 if line < len(starts) else len(self.text)
        return self.text[starts[line - 1]:end].rstrip("\r")


def tokenize(text: str, start: int = 0, end: int | None = None) -> list[tuple[str, str, int]]:
    """(kind, text, offset) for every token in text[start:end], whitespace and comments dropped."""
    if end is None:
        end = len(text)
    kinds = _KINDS
    seen: dict[str, str] = {}  # one string per distinct token text: names repeat, and the IR keeps them
    share = seen.setdefault
    out = [(kinds[g], share(t, t), m.start(g))  # every alternative is a named group: lastindex is never None
           for m in _TOKEN_RE.finditer(text, start, end) for g in (m.lastindex or 0,) for t in (m[g],)]
    while out and out[-1][0] == "end":  # the match at the end (after trailing whitespace, then an empty one)
        out.pop()
    if "nums" in map(itemgetter(0), out):  # a run of numbers to split (a C-level scan of the kinds)
        out = _split_number_runs(out, share)
    return out


def _split_number_runs(tokens: list[tuple[str, str, int]], share: Callable[[str, str], str]) \
        -> list[tuple[str, str, int]]:
    """`tokens` with each `nums` token replaced by its numbers and commas, offsets and all."""
    kinds = list(map(itemgetter(0), tokens))
    out: list[tuple[str, str, int]] = []
    done = 0
    while True:
        try:
            i = kinds.index("nums", done)
        except ValueError:
            out += tokens[done:]
            return out
        out += tokens[done:i]
        _, run, offset = tokens[i]
        numbers = run.split(", ")
        numbers = list(map(share, numbers, numbers))
        starts = list(accumulate(map(add, map(len, numbers), repeat(2)), initial=offset))  # one past the end
        split: list = [None] * (2 * len(numbers) - 1)
        split[0::2] = zip(repeat("num"), numbers, starts)
        split[1::2] = zip(repeat("punct"), repeat(share(",", ",")), map(add, starts, map(len, numbers[:-1])))
        out += split
        done = i + 1
