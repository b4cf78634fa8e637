"""Device printf: formats rendered as CUDA's printf renders them, into a bounded per-launch buffer.

A GPU's printf writes records into a FIFO of `cudaLimitPrintfFifoSize` bytes (1 MiB by default); what does
not fit is lost. The emulator keeps the same bound on the text one launch prints: once `PrintfBuffer.size`
bytes are out, further output is dropped and counted (`LaunchResult.printf_truncated`, and a
`PrintfTruncated` warning). A GPU keeps the newest records; the emulator streams each line as it is printed,
so it keeps the oldest. Widths and precisions, `*` ones included (they take the next int argument, a
negative width meaning left-justified and a negative precision none), never make a string longer than the
room left in the buffer, so `%999999999d` costs what it prints.
"""

from __future__ import annotations

import math
import re
import struct
import warnings
from collections.abc import Callable
from typing import Any

from ptxforge.errors import Error

PRINTF_FIFO_SIZE = 1 << 20  # CUDA's default cudaLimitPrintfFifoSize
SLACK = 64  # characters rendered past the room left, so that a cut never falls inside what was rendered
EXACT_DIGITS = 1100  # a double's exact decimal expansion has fewer digits: more precision only adds zeros

# flags, width, precision, length modifier, conversion (C's printf, as CUDA's device printf takes it)
FORMAT = re.compile(r"%([-+ #0]*)(\d+|\*)?(?:\.(\d*|\*))?(hh|h|ll|l|z|j|t|L)?([diouxXeEfFgGaAcsp%])")

# read_arg(size) -> the next argument's raw bits (aligned to its size, as nvcc packs them)
ArgReader = Callable[[int], int]


class PrintfTruncated(Error, UserWarning):
    """A launch printed more than its printf buffer holds; the rest of its output was dropped. A warning (a
    ptxforge Error too, should warnings be turned into errors)."""


class PrintfBuffer:
    """One launch's printf output: at most `size` bytes reach `sink`; calls cut short are counted."""

    def __init__(self, size: int, sink: Callable[[str], Any]):
        self.size = size
        self.sink = sink
        self.used = 0
        self.truncated = 0  # printf calls whose output was cut or dropped

    @property
    def room(self) -> int:
        return self.size - self.used

    def write(self, text: str) -> None:
        data = text.encode("utf-8", "replace")
        if len(data) > self.room:
            self.truncated += 1
            data = data[: self.room]
            text = data.decode("utf-8", "ignore")
        self.used += len(data)
        if text:
            self.sink(text)

    def warn(self, kernel: str) -> None:
        """Warn that `kernel`'s output was cut (when it was)."""
        if self.truncated:
            warnings.warn(f"{kernel}: printf output past the launch's {self.size:,}-byte printf buffer was "
                          f"dropped ({self.truncated:,} printf call(s) cut short or lost); raise "
                          f"printf_fifo_size on the device (CUDA's cudaLimitPrintfFifoSize)",
                          PrintfTruncated, stacklevel=3)


def format_printf(fmt: str, read_arg: ArgReader, read_string: Callable[[int], str], room: int) -> str:
    """`fmt` rendered with the arguments `read_arg` gives, at most about `room` + SLACK characters long
    (the caller cuts it to the room left). `read_string(address)` reads a %s argument."""
    out: list[str] = []
    length = pos = 0
    for m in FORMAT.finditer(fmt):
        lit = fmt[pos: m.start()]
        out.append(lit)
        length += len(lit)
        pos = m.end()
        if length > room:
            return "".join(out)
        flags, width, prec, mod, conv = m.groups()
        if conv == "%":
            out.append("%")
            length += 1
            continue
        w = _star(read_arg) if width == "*" else int(width) if width else None
        if w is not None and w < 0:  # a negative * width: left-justified
            flags, w = flags + "-", -w
        p = _star(read_arg) if prec == "*" else int(prec or 0) if prec is not None else None
        if p is not None and p < 0:  # a negative * precision: as if none were given
            p = None
        text = _convert(conv, mod, flags, w, p, read_arg, read_string, room - length)
        out.append(text)
        length += len(text)
    out.append(fmt[pos:])
    return "".join(out)


def _star(read_arg: ArgReader) -> int:
    raw = read_arg(4)
    return raw - (1 << 32) if raw >> 31 else raw


def _size(conv: str, mod: str | None) -> int:
    """Bytes the argument takes: doubles (floats are promoted), pointers and long ints 8, the rest 4."""
    return 8 if conv in "eEfFgGaAsp" or mod in ("l", "ll", "z", "j", "t") else 4


def _convert(conv: str, mod: str | None, flags: str, w: int | None, p: int | None, read_arg: ArgReader,
             read_string: Callable[[int], str], room: int) -> str:
    raw = read_arg(_size(conv, mod))
    room = max(room, 0) + SLACK
    if conv in "di":
        bits = 64 if _size(conv, mod) == 8 else {"hh": 8, "h": 16}.get(mod or "", 32)
        raw &= (1 << bits) - 1
        value: Any = raw - (1 << bits) if raw >> (bits - 1) else raw
        return _pad(_int_body(flags, p, room, "d", value), flags if p is None else flags.replace("0", ""), w, room)
    if conv in "ouxX":
        bits = 64 if _size(conv, mod) == 8 else {"hh": 8, "h": 16}.get(mod or "", 32)
        body = _int_body(flags.replace("+", "").replace(" ", ""), p, room, conv, raw & ((1 << bits) - 1))
        return _pad(body, flags if p is None else flags.replace("0", ""), w, room)
    if conv in "eEfFgG":
        q = None if p is None else min(p, max(room, EXACT_DIGITS))
        body = ("%" + flags.replace("-", "").replace("0", "") + ("" if q is None else f".{q}") + conv) % _double(raw)
        return _pad(body, flags, w, room)
    if conv in "aA":
        text = _hex_float(_double(raw))
        text = text.upper() if conv == "A" else text
        if not text.startswith("-") and ("+" in flags or " " in flags):
            text = ("+" if "+" in flags else " ") + text
        return _pad(text, flags, w, room)
    if conv == "c":
        return _pad(chr(raw & 0xFF), flags.replace("0", ""), w, room)
    if conv == "s":
        text = read_string(raw) if raw else "(null)"
        return _pad(text if p is None else text[:p], flags.replace("0", ""), w, room)
    return _pad(f"0x{raw:x}", flags.replace("0", ""), w, room)  # %p


def _hex_float(v: float) -> str:
    """%a as C writes it: 0x1.8p+0 (no trailing zero digits), 0x0p+0, inf, nan."""
    if v != v or v in (math.inf, -math.inf):
        return f"{v:f}"
    mant, _, exp = v.hex().partition("p")
    head, _, frac = mant.partition(".")
    frac = frac.rstrip("0")
    return head + ("." + frac if frac else "") + "p" + exp


def _double(raw: int) -> float:
    return float(struct.unpack("<d", raw.to_bytes(8, "little"))[0])


def _int_body(flags: str, p: int | None, room: int, conv: str, value: int) -> str:
    """An integer conversion without its width, as C renders it: the precision is the minimum number of
    digits (0 with the value 0: no digits), '0' is ignored beside a precision, '#' adds 0x (not to 0) or a
    leading 0 for octal."""
    alt = "#" in flags
    flags = flags.replace("#", "").replace("-", "")
    if p is not None:
        flags = flags.replace("0", "")
    if p == 0 and value == 0:
        body = "+" if "+" in flags and conv == "d" else " " if " " in flags and conv == "d" else ""
        return "0" if alt and conv == "o" else body
    q = None if p is None else min(p, room)
    base = ("%" + flags.replace("0", "") + ("" if q is None else f".{q}") + conv) % value
    if alt and conv == "o" and not base.lstrip("+ -").startswith("0"):
        base = "0" + base
    elif alt and conv in "xX" and value != 0:
        base = ("0x" if conv == "x" else "0X") + base
    return base


def _pad(body: str, flags: str, w: int | None, room: int) -> str:
    """`body` padded to width `w` (at most `room` characters of padding): spaces on the left, on the right
    with '-', or zeros after the sign and 0x prefix with '0'."""
    if w is None or len(body) >= w:
        return body
    n = min(w - len(body), room)
    if "-" in flags:
        return body + " " * n
    if "0" in flags and body.lstrip("+- ")[:1].isdigit():
        head = len(body) - len(body.lstrip("+- "))
        if body[head: head + 2] in ("0x", "0X"):
            head += 2
        return body[:head] + "0" * n + body[head:]
    return " " * n + body
