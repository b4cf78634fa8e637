"""PTX literals and token text: integers in every base, hex floats, and canonical joins of tokens."""

from __future__ import annotations

import struct

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


def int_value(text: str) -> int | None:
    t = text[:-1] if text.endswith("U") else text
    try:
        if t[:2] in ("0x", "0X"):
            return int(t, 16)
        if t[:2] in ("0b", "0B"):
            return int(t[2:], 2)
        if len(t) > 1 and t[0] == "0" and t.isdigit():
            return int(t, 8)
        if t.isdigit():
            return int(t)
    except ValueError:
        return None
    return None


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
