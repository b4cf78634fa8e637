"""The parser's robustness property and the input mutators that probe it.

`check_input(text)` states what must hold for ANY text: it parses or raises `PTXSyntaxError` (nothing
else); a parsed module prints back to exactly its source, its canonical print reparses to an equal module
and prints identically again, and validating it returns diagnostics without raising. The hypothesis test in
tests/ptx and `scripts/fuzz_parser.py` (a longer mutation campaign) both call it.
"""

from __future__ import annotations

import random

from ptxforge.errors import Error
from ptxforge.ptx.errors import PTXSyntaxError
from ptxforge.ptx.parser import parse
from ptxforge.ptx.validator import validate


class PropertyViolation(Error, AssertionError):
    """The text broke the property; the message says how."""


def check_input(text: str) -> str:
    """'parsed' or 'syntax-error'; raises `PropertyViolation` (or whatever escaped) otherwise."""
    try:
        m = parse(text, filename="fuzz.ptx")
    except PTXSyntaxError as e:
        str(e)  # formatting the diagnostics must not raise either
        return "syntax-error"
    printed = m.to_ptx()
    if printed != text:
        raise PropertyViolation("to_ptx() of an unchanged module differs from its source")
    canon = m.to_ptx(canonical=True)
    try:
        again = parse(canon, filename="canonical.ptx")
    except PTXSyntaxError as e:
        raise PropertyViolation(f"the canonical print does not reparse: {e}") from None
    if again != m:
        raise PropertyViolation("the canonical print reparses to a different module")
    if again.to_ptx(canonical=True) != canon:
        raise PropertyViolation("the canonical print is not a fixed point")
    for d in validate(m):
        d.format()
    return "parsed"


# Pieces a mutation may splice in: the grammar's punctuation, runs that nest deeply, and PTX words.
TOKENS = (
    "{", "}", "(", ")", "[", "]", ";", ",", ":", "@", "!", "|", "-", "+", "<", ">", "=", '"', "//", "/*", "*/",
    "\n", " ", "\t", "\x00", "\ufeff", "\udcff", "%r1", "%rd1", "%p1", "%f1", "%tid.x", "_", "0", "-1", "0x",
    "0f3F800000", "0d", "1.5e", "4294967296", "18446744073709551616", ".reg", ".b32", ".u64", ".pred",
    ".global", ".shared", ".const", ".local", ".param", ".align", ".entry", ".func", ".visible", ".extern",
    ".version", ".target", ".address_size", ".loc", ".file", ".section", ".pragma", ".maxntid", ".reqntid",
    ".callprototype", ".branchtargets", "ret;", "bra L;", "L:", "mov.u32", "ld.global.u32", "st.shared.b32",
    "call", "setp.lt.s32", "bar.sync", "wgmma.mma_async", "<1048577>", "[1099511627776]", "0x10000000000000000",
    "WARP_SZ", "<<", "(-1)", ".version 99.99", ".target sm_999", ".target compute_80",
)


def long_literal(rng: random.Random) -> str:
    """An integer literal of 17 to 50,000 digits in some base, perhaps an operand's offset or a count."""
    digits = rng.choice((17, 21, 65, 4000)) if rng.random() < 0.95 else 20_000
    body = rng.choice(("0x" + "f" * digits, "9" * digits, "0" + "7" * digits, "0b" + "1" * digits))
    return rng.choice(("", "g+", "%r1+", "-", "%r<", "[%rd1+", "[")) + body


def deep_expression(rng: random.Random) -> str:
    """A constant expression nested near or past the limit: runs of unary operators and parentheses."""
    n = rng.choice((50, 99, 100, 101, 1500)) if rng.random() < 0.95 else 20_000
    kind = rng.randrange(3)
    if kind == 0:
        return "(" + rng.choice("-~!+") * n + "1)"
    if kind == 1:
        return "(" * n + "1" + ")" * n + "+1"
    return "(" + "".join(rng.choice("-~!(") for _ in range(n)) + "1" + ")" * rng.randint(0, n)


def mutate(text: str, rng: random.Random) -> str:
    """One to four random edits of `text`: deletions, duplications, splices, byte noise, deep runs, long
    literals and deep constant expressions, and now and then growth to 100-300 KB."""
    for _ in range(rng.randint(1, 4)):
        n = len(text)
        op = rng.randrange(12)
        i = rng.randint(0, n)
        j = min(n, i + rng.choice((1, 2, 8, 64, 512)))
        if op == 0:  # delete a span
            text = text[:i] + text[j:]
        elif op == 1:  # duplicate a span
            text = text[:j] + text[i:j] + text[j:]
        elif op == 2:  # insert a token
            text = text[:i] + rng.choice(TOKENS) + text[i:]
        elif op == 3:  # replace a character with a random one
            text = text[:i] + chr(rng.choice((rng.randrange(128), rng.randrange(0x110000)))) + text[i + 1:]
        elif op == 4:  # a long run of one nesting character
            text = text[:i] + rng.choice("{([!|-") * rng.choice((10, 200, 2000)) + text[i:]
        elif op == 5:  # move a span elsewhere
            piece, rest = text[i:j], text[:i] + text[j:]
            k = rng.randint(0, len(rest))
            text = rest[:k] + piece + rest[k:]
        elif op == 6:  # truncate
            text = text[:i]
        elif op == 7:  # join lines (long single-line inputs)
            text = text[:i] + text[i:j].replace("\n", " ") + text[j:]
        elif op in (9, 10):  # at a random place or as an instruction's operand (after a ", ")
            k = text.find(", ", i)
            at = k + 2 if k >= 0 and rng.random() < 0.5 else i
            text = text[:at] + (long_literal(rng) if op == 9 else deep_expression(rng)) + text[at:]
        elif op == 11 and rng.random() < 0.01 and 0 < n < 100_000:  # grow: the text repeated to 100-300 KB
            text = text * (rng.randint(100_000, 300_000) // n + 1)
        else:  # swap two lines
            lines = text.split("\n")
            if len(lines) > 1:
                a, b = rng.randrange(len(lines)), rng.randrange(len(lines))
                lines[a], lines[b] = lines[b], lines[a]
            text = "\n".join(lines)
    return text


def seed_texts(sources: list[str], max_chars: int = 6000) -> list[str]:
    """Small seeds from whole PTX files: each file's header with each of its functions, if small enough."""
    seeds = []
    for src in sources:
        cut = [k for k in (src.find(".visible"), src.find(".entry"), src.find(".func")) if k >= 0]
        head = src[:src.rfind("\n", 0, min(cut)) + 1] if cut else src
        pos = len(head)
        while pos < len(src):
            nxt = src.find("\n}\n", pos)
            end = len(src) if nxt < 0 else nxt + 3
            if end - pos <= max_chars:
                seeds.append(head + src[pos:end])
            pos = end
    return seeds
