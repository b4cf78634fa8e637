"""PTX literals and token text: integers in every base, hex floats, and canonical joins of tokens."""

from __future__ import annotations

import struct

from ptxforge.errors import Error
from ptxforge.ptx import ir

_Immediate = ir.builder(ir.Immediate)


def join_tokens(parts: list[str]) -> str:
    """Tokens back to canonical text: a space after commas and between words, none around punctuation."""
    out: list[str] = []
    prev = ""
    for p in parts:
        if out and (prev == "," or (_wordish(prev) and _wordish(p))):
            out.append(" ")
        out.append(p)
        prev = p
    return "".join(out)


def _wordish(s: str) -> bool:
    return bool(s) and (s[0].isalnum() or s[0] in "._$%\"") and s not in ("(", ")")


def unquote(s: str) -> str:
    """The text of a quoted string literal, with C escapes decoded; a malformed escape (a stray "\\x")
    is kept as written rather than failing."""
    raw = s[1:-1].encode("latin-1", "backslashreplace")
    try:
        return raw.decode("unicode_escape")
    except UnicodeDecodeError:
        return s[1:-1]


# An integer literal is a 64-bit value (ptxas: "Constant overflow" beyond). Counting digits before converting
# keeps a 4,000-digit literal from reaching int() and str(), which Python limits to 4,300 decimal digits.
INT_LITERAL_MAX = (1 << 64) - 1
_BASES = (("0x", 16, 16), ("0X", 16, 16), ("0b", 2, 64), ("0B", 2, 64))


class LiteralOverflow(Error, ValueError):
    """An integer literal that does not fit in 64 bits."""


def int_value(text: str) -> int | None:
    """The value of an integer literal (hex, binary, octal, decimal, an optional U suffix), None when `text`
    is not one; raises LiteralOverflow when it is one that does not fit in 64 bits."""
    t = text[:-1] if text.endswith("U") else text
    base, digits, max_digits = 10, t, 20
    for prefix, b, n in _BASES:
        if t.startswith(prefix):
            base, digits, max_digits = b, t[2:], n
            break
    else:
        if len(t) > 1 and t[0] == "0":
            base, digits, max_digits = 8, t[1:], 22
    if not digits or not digits.isascii() or not digits.isalnum():
        return None
    if len(digits.lstrip("0")) > max_digits:
        if _is_int(digits, base):
            raise LiteralOverflow(_overflow_message(text))
        return None
    try:
        v = int(digits, base)
    except ValueError:
        return None
    if v > INT_LITERAL_MAX:
        raise LiteralOverflow(_overflow_message(text))
    return v


_DIGITS = {2: frozenset("01"), 8: frozenset("01234567"), 10: frozenset("0123456789"),
           16: frozenset("0123456789abcdefABCDEF")}


def _is_int(digits: str, base: int) -> bool:
    return set(digits) <= _DIGITS[base]


def _overflow_message(text: str) -> str:
    shown = text if len(text) <= 24 else f"{text[:20]}... ({len(text):,} characters)"
    return f"constant overflow: the integer {shown} does not fit in 64 bits"


def immediate(text: str, span: ir.Span) -> ir.Immediate | None:
    c = text[:2]
    if c in ("0f", "0F") and len(text) == 10:
        return ir.Immediate(struct.unpack(">f", bytes.fromhex(text[2:]))[0], text, span)
    if c in ("0d", "0D") and len(text) == 18:
        return ir.Immediate(struct.unpack(">d", bytes.fromhex(text[2:]))[0], text, span)
    v = int_value(text)
    if v is not None:
        return _Immediate(v, text, span)
    try:
        return ir.Immediate(float(text), text, span)
    except ValueError:
        return None
