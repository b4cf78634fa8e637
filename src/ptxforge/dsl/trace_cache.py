"""The on-disk cache of ptxforge's own traced library kernels (`ptxforge.kernels`): PTX text and spans.

Tracing a big library kernel costs seconds (DeepEP's internode dispatch: 1.6 s of CPU) and every process that
launches it pays again: each rank of an EP job, each test worker. Parsing the same PTX costs 60 ms. An entry
(kind "dsl" of `ptxforge.cache`) holds the printed module and the span of every node that has one, in the
printer's order, so the loaded module points at the same Python lines of ptxforge as a fresh trace (errors,
sanitizer reports). The key covers the package's whole source (any edit to ptxforge is a miss), the kernel's function,
its constants and the target, so an entry can only describe what a trace would build now. Users' kernels are
not cached: their source is not part of the key.
"""

from __future__ import annotations

import dataclasses
import hashlib
from functools import cache
from pathlib import Path
from typing import Any

from ptxforge import cache as disk
from ptxforge.ptx import ir
from ptxforge.ptx.parser import parse

KIND = "dsl"
_PACKAGE = Path(__file__).resolve().parent.parent  # src/ptxforge


@cache
def package_digest() -> str:
    """A digest of every Python source of the ptxforge package (names and contents)."""
    h = hashlib.sha256()
    for p in sorted(_PACKAGE.rglob("*.py")):
        h.update(str(p.relative_to(_PACKAGE)).encode())
        h.update(p.read_bytes())
    return h.hexdigest()


def entry_key(fn: Any, name: str, consts: dict[str, object], arch: str, directives: object) -> str | None:
    """The cache key of a library kernel's trace, or None for a kernel that is not ptxforge's own."""
    module = getattr(fn, "__module__", None) or ""
    described = repr((sorted(consts.items(), key=str), directives))
    if not module.startswith("ptxforge.") or " at 0x" in described:  # a constant without a stable repr
        return None
    return disk.key(KIND, package_digest(), module, fn.__qualname__, name, arch, described)


def load(k: str, filename: str) -> ir.Module | None:
    """The cached module for key `k` with its spans restored, or None (absent, damaged, or not matching)."""
    raw = disk.get_json(KIND, k)
    if not isinstance(raw, dict) or not isinstance(raw.get("ptx"), str) or not isinstance(raw.get("spans"), list):
        return None
    try:
        m = parse(raw["ptx"], filename=filename)
        spans = [ir.Span(str(f), int(line), int(col)) for f, line, col in raw["spans"]]
    except Exception:  # a damaged entry is a miss, whatever is wrong with it
        return None
    it = _Spans(spans)
    try:
        m = _with_spans(m, it)
    except _Short:
        return None
    if it.left():
        return None
    return dataclasses.replace(m, filename=filename, source=None, layout=None)


def store(k: str, m: ir.Module) -> None:
    """Cache the traced module `m` under `k` (silently skipped when the cache cannot be written)."""
    spans: list[ir.Span] = []
    _collect_spans(m, spans)
    disk.put_json(KIND, k, {"ptx": m.to_ptx(canonical=True),
                            "spans": [[s.file, s.line, s.col] if _in_package(s) else [NO.file, NO.line, NO.col]
                                      for s in spans]})


NO = ir.NO_SPAN


def _in_package(s: ir.Span) -> bool:
    """A span in ptxforge's own source; others name whichever caller first traced the kernel (the few
    instructions no kernel line emits) and are stored as no span."""
    return _file_in_package(s.file)


@cache
def _file_in_package(file: str) -> bool:
    try:
        return Path(file).resolve().is_relative_to(_PACKAGE)
    except (OSError, ValueError):
        return False


class _Short(Exception):
    """The entry holds fewer spans than the parsed module has nodes."""


class _Spans:
    def __init__(self, spans: list[ir.Span]) -> None:
        self.spans, self.i = spans, 0

    def take(self) -> ir.Span:
        if self.i >= len(self.spans):
            raise _Short
        self.i += 1
        return self.spans[self.i - 1]

    def left(self) -> bool:
        return self.i < len(self.spans)


def _nodes(value: Any) -> list[Any]:
    """The IR nodes directly inside a field value (a node, or a tuple of them and other values)."""
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return [value]
    if isinstance(value, tuple):
        return [v for v in value if dataclasses.is_dataclass(v) and not isinstance(v, type)]
    return []


def _collect_spans(node: Any, out: list[ir.Span]) -> None:
    for f in dataclasses.fields(node):
        if not f.init:
            continue
        if f.name == "span":
            out.append(node.span)
            continue
        for child in _nodes(getattr(node, f.name)):
            _collect_spans(child, out)


def _with_spans(node: Any, spans: _Spans) -> Any:
    """`node` with each span taken in turn from `spans` (the order `_collect_spans` walks)."""
    changes: dict[str, Any] = {}
    for f in dataclasses.fields(node):
        if not f.init:
            continue
        value = getattr(node, f.name)
        if f.name == "span":
            changes["span"] = spans.take()
        elif dataclasses.is_dataclass(value) and not isinstance(value, type):
            changes[f.name] = _with_spans(value, spans)
        elif isinstance(value, tuple) and any(dataclasses.is_dataclass(v) and not isinstance(v, type)
                                              for v in value):
            changes[f.name] = tuple(_with_spans(v, spans) if dataclasses.is_dataclass(v) and not isinstance(v, type)
                                    else v for v in value)
    return dataclasses.replace(node, **changes) if changes else node
