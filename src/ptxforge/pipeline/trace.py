"""Record measured spans of a real run (compute and communication, per rank), gather them on rank 0, and
measure how much communication hid behind computation.

    rec = Recorder(rank)                                  # one per rank; clock=time.perf_counter
    with rec.span("F", "compute", mb=3, chunk=0): ...     # synchronous work
    h = rec.begin("dispatch", "comm", mb=3)               # asynchronous work: begin at issue ...
    rec.end(h)                                            # ... end at completion
    spans = gather_spans(rec)                             # rank 0: every rank's spans on one clock; else None
    overlap_fraction(spans); to_svg(spans, "timeline.svg"); save_json(spans, "spans.json", meta={...})

Kinds and names (what the overlap and the planner read, trace_spans.py says more): "compute" spans around
real computation only, "comm" from issue to completion, "wait" where the rank is blocked (subtracted from
computation), "chunk" for an envelope around a whole F/B/W/FB op. Name chunks "F", "B", "W", "FB" and
communication "dispatch", "combine", "send"/"recv"; `ptxforge plan --measured spans.json` predicts the
step from them. `executor_spans(executor.trace, rank)` turns a pipeline executor's op timings into chunks.

Recording is thread-safe (a completion may be noted on a helper thread). Spans record raw clock values;
`gather_spans` aligns the ranks' clocks on a barrier and starts the result at 0.
"""

from __future__ import annotations

import itertools
import threading
import time
from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

from ptxforge import _optional
from ptxforge.pipeline.ops import FB
from ptxforge.pipeline.trace_spans import (
    CHUNK,
    COMM,
    COMPUTE,
    WAIT,
    TraceFileError,
    TraceSpan,
    category,
    comm_overlap,
    load_json,
    load_trace,
    overlap_fraction,
    save_json,
)
from ptxforge.pipeline.trace_timeline import to_png, to_svg

__all__ = ["CHUNK", "COMM", "COMPUTE", "WAIT", "Recorder", "SpanHandle", "TraceFileError", "TraceSpan", "category",
           "comm_overlap", "executor_spans", "gather_spans", "load_json", "load_trace", "normalized",
           "overlap_fraction", "save_json", "to_png", "to_svg"]


@dataclass(frozen=True)
class SpanHandle:
    """What `Recorder.begin` returns: pass it to `Recorder.end`."""

    id: int
    name: str


class Recorder:
    """Collects one rank's spans. `enabled=False` makes every call a no-op (spans stays empty)."""

    def __init__(self, rank: int, clock: Callable[[], float] = time.perf_counter, *, enabled: bool = True) -> None:
        if not isinstance(rank, int) or rank < 0:
            raise ValueError(f"Recorder: rank must be an integer >= 0, got {rank!r}")
        self.rank = rank
        self.clock = clock
        self.enabled = enabled
        self._lock = threading.Lock()
        self._ids = itertools.count()
        self._open: dict[int, tuple[str, str, float, int | None, dict[str, Any]]] = {}
        self._done: list[TraceSpan] = []

    @contextmanager
    def span(self, name: str, kind: str, mb: int | None = None, **attrs: Any) -> Iterator[None]:
        """Record the `with` body as one span; a body that raises is still recorded, with attrs["error"]."""
        if not self.enabled:
            yield
            return
        h = self.begin(name, kind, mb, **attrs)
        try:
            yield
        except BaseException as e:
            self.end(h, error=type(e).__name__)
            raise
        self.end(h)

    def begin(self, name: str, kind: str, mb: int | None = None, **attrs: Any) -> SpanHandle:
        """Open a span now (e.g. when an asynchronous call is issued); close it with `end`."""
        if not isinstance(name, str) or not isinstance(kind, str):
            raise TypeError(f"Recorder.begin: name and kind must be strings, got {name!r}, {kind!r}")
        h = SpanHandle(next(self._ids), name)
        if self.enabled:
            t = self.clock()
            with self._lock:
                self._open[h.id] = (name, kind, t, mb, attrs)
        return h

    def end(self, handle: SpanHandle, **attrs: Any) -> TraceSpan | None:
        """Close a span opened by `begin` now (extra attrs are added); returns the recorded span."""
        if not self.enabled:
            return None
        t = self.clock()
        with self._lock:
            opened = self._open.pop(handle.id, None)
            if opened is None:
                raise ValueError(f"Recorder.end: span {handle.name!r} (id {handle.id}) was already ended or "
                                 f"was not begun on this recorder (rank {self.rank})")
            name, kind, start, mb, a = opened
            s = TraceSpan(self.rank, name, kind, start, t, mb, {**a, **attrs})
            self._done.append(s)
        return s

    def add(self, spans: Iterable[TraceSpan]) -> None:
        """Add spans timed elsewhere (e.g. `executor_spans(executor.trace, rank)`) on this recorder's clock."""
        if not self.enabled:
            return
        spans = list(spans)
        bad = [s for s in spans if not isinstance(s, TraceSpan)]
        if bad:
            raise TypeError(f"Recorder.add takes TraceSpan objects, got {type(bad[0]).__name__}")
        with self._lock:
            self._done.extend(spans)

    @property
    def spans(self) -> list[TraceSpan]:
        """The finished spans, in order of start."""
        with self._lock:
            return sorted(self._done, key=lambda s: (s.start, s.end))

    @property
    def open_spans(self) -> list[str]:
        """Names of the spans begun and not yet ended."""
        with self._lock:
            return [o[0] for o in self._open.values()]

    def clear(self) -> None:
        """Forget the finished spans (e.g. after a warm-up step)."""
        with self._lock:
            self._done.clear()


def normalized(spans: list[TraceSpan]) -> list[TraceSpan]:
    """The spans moved so that the earliest starts at 0."""
    if not spans:
        return []
    t0 = min(s.start for s in spans)
    return [s.shifted(-t0) for s in spans]


def gather_spans(rec: Recorder, group: Any = None) -> list[TraceSpan] | None:
    """Collective over `group` (default: the world): every rank's finished spans on the group's rank 0, on
    one time base (each rank's clock read right after a common barrier counts as the same instant; gloo's
    barrier releases ranks within about 0.1 ms), the earliest span at 0. Other ranks get None."""
    dist = _optional.torch().distributed
    dist.barrier(group=group)
    mark = rec.clock()
    me = dist.get_rank(group)
    payload = (mark, rec.spans)
    out: list[Any] | None = [None] * dist.get_world_size(group) if me == 0 else None
    dst = 0 if group is None else dist.get_global_rank(group, 0)
    dist.gather_object(payload, out, dst=dst, group=group)
    if out is None:
        return None
    spans = [s.shifted(-m) for m, ss in out for s in ss]
    return sorted(normalized(spans), key=lambda s: (s.rank, s.start, s.end))


def executor_spans(trace: list[Any], rank: int, kind: str = CHUNK, offset: float = 0.0,
                   **attrs: Any) -> list[TraceSpan]:
    """Spans of the compute ops an executor timed (`executor.trace = []` before its steps: a list of
    (op, start, end, cpu seconds)), one per F, B, W or FB op, named by the op's kind, with its micro-batch
    and attrs module (and bmodule, bmb for FB), zb, cpu, plus `attrs` (e.g. step=k). Kind "chunk" by
    default: an op's span may contain communication it waited for; kind="compute" when stages compute only."""
    out = []
    for op, t0, t1, cpu in trace:
        a: dict[str, Any] = {"module": op.module, "zb": bool(op.zb), "cpu": cpu, **attrs}
        if op.kind == FB:
            a.update(bmodule=op.bmodule, bmb=op.bmb)
        out.append(TraceSpan(rank, op.kind, kind, t0 + offset, t1 + offset, op.mb, a))
    return out
