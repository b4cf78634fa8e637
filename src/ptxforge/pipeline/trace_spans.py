"""Measured spans of a run as data: the `TraceSpan` record, interval arithmetic over spans (the overlap of
communication with computation), and the JSON file format. No torch, no drawing.

A span's `kind` says what the rank did: "compute" (real computation: attention, an MLP, a backward),
"comm" (a dispatch, combine or p2p transfer, from issue to completion), "wait" (the rank blocked); any other
string is allowed: "chunk" for an envelope around a whole pipeline chunk (an F, B, W or FB op of the
schedule, which may contain communication it waited for), so that it does not count as computation.
A span's `name` says which op it is; `category()` reads it (see NAMES), so the planner can take per-op
costs from the spans: "F", "B", "W", "FB" for the chunks (or forward/backward/weight/...; attrs["phase"]
overrides the name), "dispatch", "combine", "send"/"recv" for communication. Times are seconds.
"""

from __future__ import annotations

import json
import math
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ptxforge.errors import Error

COMPUTE, COMM, WAIT, CHUNK = "compute", "comm", "wait", "chunk"
FORMAT = "ptxforge-trace"
VERSION = 1


class TraceFileError(Error, ValueError):
    """A spans file could not be read: the message names the file and what is wrong in it."""


@dataclass(frozen=True)
class TraceSpan:
    """One measured interval on one rank: `name` (e.g. "F", "dispatch"), `kind` (lane), `start`/`end` in
    seconds, `mb` the micro-batch it belongs to (None if none), `attrs` anything else (JSON-able values)."""

    rank: int
    name: str
    kind: str
    start: float
    end: float
    mb: int | None = None
    attrs: Mapping[str, Any] = field(default_factory=dict, hash=False)

    @property
    def duration(self) -> float:
        return self.end - self.start

    def shifted(self, offset: float) -> TraceSpan:
        """The same span moved by `offset` seconds."""
        return TraceSpan(self.rank, self.name, self.kind, self.start + offset, self.end + offset, self.mb,
                         self.attrs)


Interval = tuple[float, float]

# category -> the words (first word of the name, lower case) that mean it
NAMES = {
    "forward": {"f", "fwd", "forward"},
    "backward": {"b", "bwd", "backward", "bin", "dgrad", "input_grad"},
    "weight": {"w", "wgrad", "weight", "weight_grad"},
    "fb": {"fb", "f&b", "overlapped"},
}


def category(s: TraceSpan) -> str:
    """What a span is: forward | backward | weight | fb | compute (other computation) | dispatch | combine |
    p2p | comm (other communication) | wait; from attrs["phase"] if given, else its kind and name."""
    if s.kind == WAIT:
        return "wait"
    text = str(s.attrs.get("phase", s.name)).lower().replace("-", "_")
    word = text.split()[0] if text.split() else ""
    if s.kind == COMM:
        for key in ("dispatch", "combine"):
            if key in word:
                return key
        return "p2p" if any(k in word for k in ("send", "recv", "p2p")) else "comm"
    parts = word.split(".")
    for part in (parts[0], parts[-1]):  # "forward.attention" or "attention.backward"
        for key, words in NAMES.items():
            if part in words:
                return key
    return "compute"


def union(intervals: Iterable[Interval]) -> list[Interval]:
    """Sorted, disjoint intervals covering exactly the given ones (empty ones dropped)."""
    out: list[Interval] = []
    for a, b in sorted(i for i in intervals if i[1] > i[0]):
        if out and a <= out[-1][1]:
            out[-1] = (out[-1][0], max(out[-1][1], b))
        else:
            out.append((a, b))
    return out


def subtract(xs: list[Interval], ys: list[Interval]) -> list[Interval]:
    """The parts of sorted disjoint `xs` outside sorted disjoint `ys`."""
    out: list[Interval] = []
    j = 0
    for a, b in xs:
        while j < len(ys) and ys[j][1] <= a:
            j += 1
        k = j
        while a < b and k < len(ys) and ys[k][0] < b:
            if ys[k][0] > a:
                out.append((a, ys[k][0]))
            a = max(a, ys[k][1])
            k += 1
        if a < b:
            out.append((a, b))
    return out


def intersect(xs: list[Interval], ys: list[Interval]) -> list[Interval]:
    """Intersection of two sorted disjoint interval lists."""
    out: list[Interval] = []
    i = j = 0
    while i < len(xs) and j < len(ys):
        a, b = max(xs[i][0], ys[j][0]), min(xs[i][1], ys[j][1])
        if b > a:
            out.append((a, b))
        if xs[i][1] < ys[j][1]:
            i += 1
        else:
            j += 1
    return out


def length(intervals: Iterable[Interval]) -> float:
    return sum(b - a for a, b in intervals)


def ranks_of(spans: Iterable[TraceSpan]) -> list[int]:
    return sorted({s.rank for s in spans})


def _lane(spans: Iterable[TraceSpan], rank: int, kind: str) -> list[Interval]:
    return union((s.start, s.end) for s in spans if s.rank == rank and s.kind == kind)


def overlapped_intervals(spans: list[TraceSpan], rank: int) -> list[Interval]:
    """Where, on `rank`, communication ran while computation ran (a "wait" span inside a compute span
    means the rank was blocked then, not computing)."""
    computing = subtract(_lane(spans, rank, COMPUTE), _lane(spans, rank, WAIT))
    return intersect(_lane(spans, rank, COMM), computing)


def comm_overlap(spans: list[TraceSpan], rank: int | None = None) -> tuple[float, float]:
    """(communication time, the part of it covered by computation) on `rank`, or summed over all ranks.
    Overlapping spans of one kind on one rank count once (their union)."""
    spans = list(spans)
    ranks = ranks_of(spans) if rank is None else [rank]
    total = covered = 0.0
    for r in ranks:
        total += length(_lane(spans, r, COMM))
        covered += length(overlapped_intervals(spans, r))
    return total, covered


def overlap_fraction(spans: Iterable[TraceSpan], rank: int | None = None) -> float:
    """The share of "comm" time covered by "compute" spans on the same rank (all ranks' times summed when
    `rank` is None); 0.0 when there is no communication."""
    total, covered = comm_overlap(list(spans), rank)
    return covered / total if total > 0 else 0.0


def _jsonable(value: Any) -> Any:
    if isinstance(value, (str, int, float, bool)) or value is None:
        return value
    if isinstance(value, (list, tuple)):
        return [_jsonable(v) for v in value]
    if isinstance(value, Mapping):
        return {str(k): _jsonable(v) for k, v in value.items()}
    return str(value)  # a dtype, a shape object ...: kept readable rather than refused


def span_to_dict(s: TraceSpan) -> dict[str, Any]:
    return {"rank": s.rank, "name": s.name, "kind": s.kind, "start": s.start, "end": s.end, "mb": s.mb,
            "attrs": _jsonable(dict(s.attrs))}


def save_json(spans: Iterable[TraceSpan], path: str | Path, meta: Mapping[str, Any] | None = None) -> None:
    """Write spans to `path` as JSON ({"format", "version", "meta", "spans": [...]}); `meta` describes the
    run (e.g. {"schedule": "dualpipev", "pp": 2, "ep": 2, "num_chunks": 8}; `ptxforge plan --measured`
    reads those keys)."""
    doc = {"format": FORMAT, "version": VERSION, "meta": _jsonable(dict(meta or {})),
           "spans": [span_to_dict(s) for s in spans]}
    Path(path).write_text(json.dumps(doc, indent=1) + "\n")


def _span_from(d: Any, where: str) -> TraceSpan:
    if not isinstance(d, dict):
        raise TraceFileError(f"{where}: expected an object, got {type(d).__name__}")
    missing = [k for k in ("rank", "name", "kind", "start", "end") if k not in d]
    if missing:
        raise TraceFileError(f"{where}: missing {', '.join(missing)}")
    rank, start, end, mb = d["rank"], d["start"], d["end"], d.get("mb")
    if not isinstance(rank, int) or isinstance(rank, bool) or rank < 0:
        raise TraceFileError(f"{where}: rank must be an integer >= 0, got {rank!r}")
    for key, v in (("start", start), ("end", end)):
        if not isinstance(v, (int, float)) or isinstance(v, bool) or not math.isfinite(v):
            raise TraceFileError(f"{where}: {key} must be a finite number of seconds, got {v!r}")
    if end < start:
        raise TraceFileError(f"{where}: end {end} is before start {start}")
    if mb is not None and (not isinstance(mb, int) or isinstance(mb, bool)):
        raise TraceFileError(f"{where}: mb must be an integer or null, got {mb!r}")
    if not isinstance(d["name"], str) or not isinstance(d["kind"], str):
        raise TraceFileError(f"{where}: name and kind must be strings")
    attrs = d.get("attrs") or {}
    if not isinstance(attrs, dict):
        raise TraceFileError(f"{where}: attrs must be an object")
    return TraceSpan(rank, d["name"], d["kind"], float(start), float(end), mb, attrs)


def load_json(path: str | Path) -> list[TraceSpan]:
    """Read spans written by `save_json`; a TraceFileError names the file and the bad entry."""
    return load_trace(path)[0]


def load_trace(path: str | Path) -> tuple[list[TraceSpan], dict[str, Any]]:
    """(spans, meta) of a file written by `save_json`."""
    path = Path(path)
    try:
        doc = json.loads(path.read_text())
    except OSError as e:
        raise TraceFileError(f"{path}: cannot read spans file: {e.strerror or e}") from None
    except json.JSONDecodeError as e:
        raise TraceFileError(f"{path}:{e.lineno}:{e.colno}: not JSON: {e.msg}") from None
    if not isinstance(doc, dict) or doc.get("format") != FORMAT or not isinstance(doc.get("spans"), list):
        raise TraceFileError(f"{path}: not a ptxforge spans file (expected an object with \"format\": "
                             f"\"{FORMAT}\" and a \"spans\" list, as save_json writes)")
    if doc.get("version") != VERSION:
        raise TraceFileError(f"{path}: spans file version {doc.get('version')!r}; this ptxforge reads {VERSION}")
    meta = doc.get("meta") or {}
    if not isinstance(meta, dict):
        raise TraceFileError(f"{path}: meta must be an object")
    return [_span_from(d, f"{path}: spans[{i}]") for i, d in enumerate(doc["spans"])], meta
