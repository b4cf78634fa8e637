"""The planner on a measured run: per-op costs read from its spans (`ptxforge.pipeline.trace`), the step
time and overlap they predict through the pipeline simulator, and the two side by side.

    spans, meta = load_trace("spans.json")
    mc = measured_costs(spans)                      # F, B, W, FB per chunk; dispatch, combine per call
    pred = predict(mc, "dualpipev", pp=2, num_chunks=8)
    print("\n".join(report(mc, pred, spans)))

Per-op costs are means over the chunk spans (outermost F/B/W/FB spans of a rank: means, because a step
is a sum of them) and the dispatch and combine spans (medians per call); `warmup_steps` drops the first
steps (spans with attrs["step"] below it). Between two chunks a rank idles for its p2p messages and the
executor's own work: the median such gap (bubbles are the long ones) is added to every op.
For each chunk kind: `comm` is the communication issued inside it (union of its comm spans, clipped to the
chunk), `exposed` the part of that not covered by computation inside it, and `compute` the
chunk's duration less `exposed`: what the chunk would take with its communication fully hidden.

Three predictions of the step, each the simulator's makespan for the schedule with
    F, B, W as measured, and FB =
      measured   the median FB chunk of the run (the simulator alone: per-op costs -> step)
      planner    max(compute_F + compute_B, comm_F + comm_B): the planner's overlapped chunk (plan/model.py),
                 one micro-batch's communication under the other's computation
      serial     F + B: no overlap at all
and the planner's overlap fraction: the FB chunks hide min(compute, comm) of their communication, the other
chunks what they hid in the run, over all communication of the step.

Communication waits (`replay`): on shared CPUs an op's time varies from step to step and from rank to rank,
mostly by how long it waits at its EP exchanges for the EP peer (a "wait" span: the rank's thread in an
exchange's issue or wait, computing nothing), and the pipeline ranks then wait for each other at their p2p
sends and receives (a "p2p wait" span: a commit of the executor's messages). Means per op kind lose that: the
slow ops of one step line up on one pipeline rank and the others wait for them. The replay simulates each step
of each EP slice (the pipeline ranks of one EP rank) with each op's own measured duration in that step (its EP
waits inside) plus the gap, takes the slowest slice, and reports the median over steps beside the measured
step; and the waits per rank and step: EP exchanges and p2p as measured, and the p2p waits the replay's
schedule implies (its step less the rank's busy time).
"""

from __future__ import annotations

import statistics
from collections import Counter
from collections.abc import Mapping
from dataclasses import dataclass, field

from ptxforge.pipeline.engine import Costs, SimResult, run
from ptxforge.pipeline.ops import FB, B, F, Op, W
from ptxforge.pipeline.schedules import dualpipe, dualpipev, one_f_one_b, zb1p
from ptxforge.pipeline.trace_spans import (
    CHUNK,
    COMM,
    COMPUTE,
    WAIT,
    Interval,
    TraceSpan,
    category,
    intersect,
    length,
    overlap_fraction,
    subtract,
    union,
)

CHUNKS = {"forward": F, "backward": B, "weight": W, "fb": FB}
BIN = "Bin"  # a backward chunk that deferred its weight gradient to a W (attrs zb=True): input gradient only
SCHEDULE_FUNCTIONS = {"dualpipe": dualpipe, "dualpipev": dualpipev, "1f1b": one_f_one_b, "zb1p": zb1p}
COMM_CATEGORIES = ("dispatch", "combine", "comm")


@dataclass(frozen=True)
class OpCost:
    """One chunk kind's measured cost (seconds, means over `count` chunks)."""

    op: str
    count: int
    duration: float
    compute: float
    comm: float
    exposed: float
    dispatch_calls: float  # per chunk (mean)
    combine_calls: float


@dataclass
class MeasuredCosts:
    """What a run's spans say each op costs (seconds)."""

    ops: dict[str, OpCost]
    dispatch: float | None  # median per call
    combine: float | None
    dispatch_count: int = 0
    combine_count: int = 0
    step: float | None = None  # the measured step (median over steps)
    steps: int = 0
    gap: float = 0.0  # median idle time between consecutive chunks of a rank (p2p commit, executor overhead)
    ranks: int = 0
    notes: list[str] = field(default_factory=list)

    def full_backward(self, attr: str = "duration") -> float:
        """`attr` (duration, compute, comm) of a full backward: measured B chunks, else backward-for-input + W."""
        if B in self.ops:
            return getattr(self.ops[B], attr)
        parts = [self.ops[k] for k in (BIN, W) if k in self.ops]
        return sum(getattr(c, attr) for c in parts) if BIN in self.ops else 0.0

    @property
    def backward_full(self) -> float:
        """A full backward's duration (input + weight gradients)."""
        return self.full_backward("duration")

    def costs(self, fb: float | None = None) -> Costs:
        """The simulator's Costs: F, full B, W as measured plus the gap each op waits before it starts, FB as
        given (default: the measured FB)."""
        f, w = self.ops.get(F), self.ops.get(W)
        g = self.gap
        wd = w.duration + g if w is not None else 0.0
        fb_measured = self.ops[FB].duration if FB in self.ops else None
        fb = fb if fb is not None else fb_measured
        bf = max(self.backward_full + g, wd)  # noise must not make W exceed the full backward
        return Costs(F=(f.duration if f else 0.0) + g, B=bf, W=wd, FB=None if fb is None else fb + g)


def _median(xs: list[float]) -> float:
    return statistics.median(xs) if xs else 0.0


def chunk_op(s: TraceSpan, by_name_only: bool = False) -> str | None:
    """The schedule op (F, B, W, FB) a chunk span stands for, else None. A span of kind "chunk" is read by
    its name (or attrs["phase"]); with `by_name_only` (a run that recorded no chunk envelopes) a compute span
    whose name itself says F/B/W/FB: a piece of a chunk (e.g. "attention" with phase "forward") is not one."""
    if s.kind == CHUNK and not by_name_only:
        return CHUNKS.get(category(s))
    if by_name_only and s.kind == COMPUTE:
        return CHUNKS.get(category(TraceSpan(s.rank, s.name, s.kind, s.start, s.end, s.mb)))
    return None


def _outermost(spans: list[TraceSpan]) -> list[TraceSpan]:
    """Chunk spans not inside another chunk span of the same rank."""
    by_name = not any(s.kind == CHUNK for s in spans)
    chunks = sorted((s for s in spans if chunk_op(s, by_name) is not None), key=lambda s: (s.rank, s.start, -s.end))
    out: list[TraceSpan] = []
    for s in chunks:
        if out and out[-1].rank == s.rank and s.end <= out[-1].end:
            continue
        out.append(s)
    return out


def _chunk_parts(chunk: TraceSpan, rank_spans: list[TraceSpan]) -> tuple[float, float, int, int]:
    """(comm time inside the chunk, the exposed part of it, dispatch calls, combine calls)."""
    inside = [s for s in rank_spans if chunk.start <= s.start < chunk.end and s is not chunk]
    comm = [s for s in inside if s.kind == COMM and category(s) in COMM_CATEGORIES]
    box: list[Interval] = [(chunk.start, chunk.end)]
    comm_iv = intersect(union((s.start, s.end) for s in comm), box)
    computing = subtract(union((s.start, s.end) for s in inside if s.kind == COMPUTE),
                         union((s.start, s.end) for s in inside if s.kind == WAIT))
    exposed = subtract(comm_iv, computing)
    cats = Counter(category(s) for s in comm)
    return length(comm_iv), length(exposed), cats["dispatch"], cats["combine"]


def measured_step(spans: list[TraceSpan], steps: int | None = None) -> tuple[float | None, int, str]:
    """(median step time, number of steps, how it was measured): from spans named "step" (grouped by
    attrs["step"] across ranks, else one per span); else from the spans' attrs["step"] groups; else the extent
    of all spans divided by `steps` (a run's meta says how many steps its spans cover; default 1)."""
    marked = [s for s in spans if s.name == "step"]
    if not marked and any("step" in s.attrs for s in spans):
        marked = [s for s in spans if "step" in s.attrs]
        how = "each step from its spans' first start to last end"
    else:
        how = "the step spans"
    if marked:
        groups: dict[object, list[TraceSpan]] = {}
        for n, s in enumerate(marked):
            groups.setdefault(s.attrs.get("step", ("span", n)), []).append(s)
        times = [max(s.end for s in g) - min(s.start for s in g) for g in groups.values()]
        return _median(times), len(times), how
    if not spans:
        return None, 0, "no spans"
    k = steps or 1
    extent = max(s.end for s in spans) - min(s.start for s in spans)
    how = "the extent of all spans" + (f" / {k} steps (work between steps included)" if k > 1 else "")
    return extent / k, k, how


def measured_costs(spans: list[TraceSpan], warmup_steps: int = 0, steps: int | None = None) -> MeasuredCosts:
    """Per-op costs of a run from its spans (see the module docstring); `steps`: how many steps spans without
    step marks cover (for the measured step)."""
    spans = [s for s in spans if not (isinstance(s.attrs.get("step"), int) and s.attrs["step"] < warmup_steps)]
    by_rank: dict[int, list[TraceSpan]] = {}
    for s in spans:
        by_rank.setdefault(s.rank, []).append(s)
    rows: dict[str, list[tuple[TraceSpan, float, float, int, int]]] = {}
    chunks = _outermost(spans)
    by_name = not any(s.kind == CHUNK for s in spans)
    for c in chunks:
        comm, exposed, nd, nc = _chunk_parts(c, by_rank[c.rank])
        op = chunk_op(c, by_name) or F  # _outermost kept chunk spans only
        rows.setdefault(BIN if op == B and c.attrs.get("zb") else op, []).append((c, comm, exposed, nd, nc))
    ops = {}
    for op, rs in rows.items():
        ops[op] = OpCost(op, len(rs), statistics.fmean(c.duration for c, *_ in rs),
                         statistics.fmean(c.duration - e for c, _, e, _, _ in rs),
                         statistics.fmean(m for _, m, *_ in rs),
                         statistics.fmean(e for _, _, e, _, _ in rs), statistics.fmean(d for *_, d, _ in rs),
                         statistics.fmean(n for *_, n in rs))
    notes = []
    if not chunks:
        notes.append("no chunk spans: record each pipeline op as a span of kind \"chunk\" named F, B, W or FB "
                     "(executor.trace = [] before step(), then rec.add(executor_spans(executor.trace, rank)))")
    if BIN in ops and W not in ops:
        notes.append("B chunks deferred their weight gradients but no W chunk was recorded: W counts as 0")
    per_call = {k: [s.duration for s in spans if s.kind == COMM and category(s) == k] for k in ("dispatch", "combine")}
    step, n_steps, how = measured_step(spans, steps)
    if how != "the step spans":
        notes.append(f"measured step: {how} (no spans named \"step\")")
    return MeasuredCosts(ops, _median(per_call["dispatch"]) if per_call["dispatch"] else None,
                         _median(per_call["combine"]) if per_call["combine"] else None, len(per_call["dispatch"]),
                         len(per_call["combine"]), step, n_steps, _median(_gaps(chunks)), len(by_rank), notes)


def _gaps(chunks: list[TraceSpan]) -> list[float]:
    """Idle times between consecutive chunks of one rank within one step (chunks sorted by rank, start)."""
    return [b.start - a.end for a, b in zip(chunks, chunks[1:], strict=False)
            if a.rank == b.rank and a.attrs.get("step") == b.attrs.get("step") and b.start >= a.end]


@dataclass(frozen=True)
class Prediction:
    """The simulator's step (seconds) for a schedule from measured costs, three ways, and the planner's overlap."""

    schedule: str
    pp: int
    num_chunks: int
    step_measured_fb: float | None  # FB as measured (None when the run has no FB chunk)
    step_planner: float
    step_serial: float
    fb_planner: float
    overlap_planner: float
    result: SimResult = field(compare=False, repr=False)

    @property
    def step(self) -> float:
        """The headline prediction: with the measured FB if there is one, else the planner's."""
        return self.step_measured_fb if self.step_measured_fb is not None else self.step_planner


def _schedule_function(name: str):
    key = name.lower().replace("-", "").replace("_", "")
    key = "zb1p" if key == "zbh1" else key
    if key not in SCHEDULE_FUNCTIONS:
        raise ValueError(f"unknown schedule {name!r}; choose one of {', '.join(SCHEDULE_FUNCTIONS)}")
    return SCHEDULE_FUNCTIONS[key]


def predict(mc: MeasuredCosts, schedule: str, pp: int, num_chunks: int) -> Prediction:
    """Simulate `schedule` on `pp` pipeline ranks (processes along the pipeline; DualPipeV runs 2 stages on
    each) with `num_chunks` micro-batches and the measured costs. ValueError/ScheduleError name a bad size."""
    if F not in mc.ops:
        raise ValueError("the spans hold no forward chunk (a span of kind \"chunk\" named F), nothing to predict "
                         "from; record each pipeline op as one: executor.trace = [] before step(), then "
                         "rec.add(executor_spans(executor.trace, rank))")
    sched = _schedule_function(schedule)(pp, num_chunks)
    fb_planner = planner_fb(mc)
    serial = mc.costs(fb=mc.ops[F].duration + mc.backward_full)
    res_planner = run(sched, mc.costs(fb=fb_planner))
    res_measured = run(sched, mc.costs()) if FB in mc.ops else None
    counts = Counter(BIN if sp.op.kind == B and sp.op.zb else sp.op.kind for sp in res_planner.spans)
    return Prediction(sched.name, pp, num_chunks, res_measured.makespan if res_measured else None,
                      res_planner.makespan, run(sched, serial).makespan, fb_planner,
                      planner_overlap(mc, counts), res_measured or res_planner)


def planner_fb(mc: MeasuredCosts) -> float:
    """The planner's overlapped chunk from the stand-alone F and B: max(compute_F + compute_B, comm_F + comm_B)."""
    f = mc.ops[F]
    return max(f.compute + mc.full_backward("compute"), f.comm + mc.full_backward("comm"))


def planner_overlap(mc: MeasuredCosts, counts: Mapping[str, int]) -> float:
    """The share of communication the planner expects hidden when `counts[op]` chunks of each kind run (F, B,
    Bin, W, FB): an FB chunk hides min(compute, comm) of F's and B's communication, the others what they hid
    in the run."""
    f = mc.ops[F]
    comm_fb = f.comm + mc.full_backward("comm")
    hidden = total = 0.0
    for op, n in counts.items():
        if op == FB:
            total += n * comm_fb
            hidden += n * min(f.compute + mc.full_backward("compute"), comm_fb)
            continue
        measured = mc.ops.get(op) or (mc.ops.get(BIN) if op == B else mc.ops.get(B) if op == BIN else None)
        if measured is not None:
            total += n * measured.comm
            hidden += n * (measured.comm - measured.exposed)
    return hidden / total if total > 0 else 0.0


@dataclass(frozen=True)
class _StepCosts(Costs):
    """Each op's measured time on each pipeline rank in one step (`table`); the mean costs for any op missing."""

    table: Mapping[tuple, float] = field(default_factory=dict)

    def on(self, rank: int, op: Op) -> float:
        return self.table.get(_op_key(rank, op.kind, op.module, op.mb, op.bmodule, op.bmb), self.of(op))


def _op_key(rank: int, kind: str, module: object, mb: object, bmodule: object, bmb: object) -> tuple:
    return (rank, kind, module, mb, bmodule if kind == FB else None, bmb if kind == FB else None)


@dataclass(frozen=True)
class Replay:
    """The simulator on each step's own measured op times (see the module docstring); seconds."""

    step: float               # median over steps of the slowest EP slice's simulated step
    steps: list[float]        # per step
    ep_wait: float            # per rank and step, measured: blocked in EP exchanges (issue + wait)
    p2p_wait: float           # per rank and step, measured: blocked committing p2p sends and receives
    p2p_wait_replayed: float  # per rank and step, the replay's: its step less the rank's busy time


def replay(spans: list[TraceSpan], mc: MeasuredCosts, schedule: str, pp: int, num_chunks: int, ep: int = 1,
           warmup_steps: int = 0) -> Replay | None:
    """Simulate each recorded step with its ops' measured durations (see the module docstring); global rank g is
    pipeline rank g // ep of EP slice g % ep. None when no chunk span carries a step number."""
    sched = _schedule_function(schedule)(pp, num_chunks)
    base = mc.costs()
    by_step: dict[int, list[TraceSpan]] = {}
    for s in spans:
        st = s.attrs.get("step")
        if isinstance(st, int) and st >= warmup_steps:
            by_step.setdefault(st, []).append(s)
    per_step, idle = [], []
    for st in sorted(by_step):
        chunks = [s for s in by_step[st] if s.kind == CHUNK and chunk_op(s) is not None]
        slices: dict[int, dict[tuple, float]] = {}
        for c in chunks:
            a = c.attrs
            key = _op_key(c.rank // ep, c.name, a.get("module"), c.mb, a.get("bmodule"), a.get("bmb"))
            slices.setdefault(c.rank % ep, {})[key] = c.duration + mc.gap
        if not slices:
            continue
        results = [run(sched, _StepCosts(base.F, base.B, base.W, base.FB, base.p2p, table))
                   for table in slices.values()]
        per_step.append(max(r.makespan for r in results))
        idle += [r.makespan - b for r in results for b in r.busy]
    if not per_step:
        return None
    windows = {(s.rank, st): (s.start, s.end) for st, ss in by_step.items() for s in ss if s.name == "step"}
    waits: dict[tuple[int, int], list[float]] = {}
    for s in spans:
        if s.kind != WAIT:
            continue
        st = s.attrs.get("step")  # a piece's wait spans carry none: the step span around them says
        st = st if isinstance(st, int) else next((k for (r, k), (t0, t1) in windows.items()
                                                  if r == s.rank and t0 <= s.start < t1), None)
        if st is not None and (s.rank, st) in windows:
            waits.setdefault((s.rank, st), [0.0, 0.0])[s.name == "p2p wait"] += s.duration
    rank_steps = max(1, len({(s.rank, st) for st, ss in by_step.items() for s in ss if s.kind == CHUNK}))
    return Replay(_median(per_step), per_step, sum(w[0] for w in waits.values()) / rank_steps,
                  sum(w[1] for w in waits.values()) / rank_steps, statistics.fmean(idle) if idle else 0.0)


def _ms(x: float | None) -> str:
    return "-" if x is None else f"{x * 1e3:.2f}"


def _err(pred: float | None, meas: float | None) -> str:
    if pred is None or not meas:
        return ""
    return f"{100 * (pred - meas) / meas:+.1f}%"


def report(mc: MeasuredCosts, pred: Prediction | None, spans: list[TraceSpan],
           rp: Replay | None = None) -> list[str]:
    """The text report: measured per-op costs, then predicted against measured (step time, overlap)."""
    out = [f"measured per-op costs ({mc.ranks} ranks, {mc.steps} step{'s' * (mc.steps != 1)}; ms, mean per chunk):",
           "  op   chunks  duration  compute  comm inside  exposed  dispatch/chunk  combine/chunk"]
    for op in (F, B, BIN, W, FB):
        c = mc.ops.get(op)
        if c is not None:
            out.append(f"  {op:<4} {c.count:>6}  {_ms(c.duration):>8}  {_ms(c.compute):>7}  {_ms(c.comm):>11}  "
                       f"{_ms(c.exposed):>7}  {c.dispatch_calls:>14.2f}  {c.combine_calls:>13.2f}")
    if BIN in mc.ops:
        out.append("  (Bin: a backward that deferred its weight gradient to a W: input gradient only)")
    out.append(f"  gap between consecutive chunks of a rank (p2p, overhead): {_ms(mc.gap)} ms, added to every op")
    out.append(f"  dispatch per call {_ms(mc.dispatch)} ms ({mc.dispatch_count} calls), combine per call "
               f"{_ms(mc.combine)} ms ({mc.combine_count} calls)")
    out += [f"  note: {n}" for n in mc.notes]
    if pred is None:
        return out
    meas_overlap = overlap_fraction(spans)
    out += ["", f"{pred.schedule}, {pred.pp} pipeline ranks, {pred.num_chunks} micro-batches: predicted vs measured",
            "                                         predicted   measured   error"]
    if pred.step_measured_fb is not None:
        out.append(f"  step (ms), FB as measured             {_ms(pred.step_measured_fb):>9}  {_ms(mc.step):>9}  "
                   f"{_err(pred.step_measured_fb, mc.step):>6}")
    out.append(f"  step (ms), planner's overlapped FB    {_ms(pred.step_planner):>9}  {_ms(mc.step):>9}  "
               f"{_err(pred.step_planner, mc.step):>6}")
    out.append(f"  step (ms), no overlap (FB = F + B)    {_ms(pred.step_serial):>9}  {_ms(mc.step):>9}  "
               f"{_err(pred.step_serial, mc.step):>6}")
    if rp is not None:
        out.append(f"  step (ms), replay of each step's ops  {_ms(rp.step):>9}  {_ms(mc.step):>9}  "
                   f"{_err(rp.step, mc.step):>6}")
        out.append(f"  p2p waits per rank and step (ms)      {_ms(rp.p2p_wait_replayed):>9}  {_ms(rp.p2p_wait):>9}  "
                   f"{_err(rp.p2p_wait_replayed, rp.p2p_wait):>6}")
        out.append(f"  EP exchange waits per rank and step (ms), measured, inside the ops: {_ms(rp.ep_wait)}")
    fb = mc.ops.get(FB)
    fb_meas = fb.duration if fb else None
    out.append(f"  FB chunk (ms), planner                {_ms(pred.fb_planner):>9}  {_ms(fb_meas):>9}  "
               f"{_err(pred.fb_planner, fb_meas):>6}")
    out.append(f"  overlap fraction                      {100 * pred.overlap_planner:>8.0f}%  "
               f"{100 * meas_overlap:>8.0f}%")
    return out


def caption(mc: MeasuredCosts, pred: Prediction, spans: list[TraceSpan]) -> list[str]:
    """Two lines for the timeline picture: the step and the overlap, predicted against measured."""
    return [f"{pred.schedule}, {pred.pp} pipeline ranks, {pred.num_chunks} micro-batches.  step: predicted "
            f"{_ms(pred.step)} ms (planner's overlap {_ms(pred.step_planner)}, none {_ms(pred.step_serial)}), "
            f"measured {_ms(mc.step)} ms",
            f"overlap of communication: planner predicts {100 * pred.overlap_planner:.0f}%, measured "
            f"{100 * overlap_fraction(spans):.0f}%"]
