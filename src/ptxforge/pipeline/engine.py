"""Run a schedule's op lists abstractly: the dependency/deadlock checker and the timing simulator in one engine.

Semantics (the executor's): the p2p ops queued since the last compute op form a batch that is posted and then
waited for before the next compute op. A batch completes only when every op in it is matched by its
counterpart on the peer, and the peer has posted that counterpart (rendezvous semantics, the strictest
reading of `batch_isend_irecv` + `wait`: a schedule that passes here cannot hang on NCCL or gloo).
Messages on one (sender, receiver) pair match in FIFO order and must carry the same logical tensor.

Timing: compute ops run back to back on their rank; a batch ends when all its received tensors have arrived
(sent at the sender's post time + p2p latency); sends never delay the sender. Because commits are modelled
as the executor (and deepseek-ai/DualPipe) performs them, a W queued right after a receive waits for that
message, so an idle slot can sit a few cells away from where DeepSeek's hand-drawn figure puts it; the totals
(makespan, bubble) agree with the figure and the table.
"""

from __future__ import annotations

import os
import tempfile
from collections import deque
from dataclasses import dataclass, field

from ptxforge.pipeline.ops import (
    FB,
    RECV_B,
    RECV_F,
    SEND_B,
    SEND_F,
    B,
    F,
    Op,
    Schedule,
    ScheduleError,
    W,
)
from ptxforge.pipeline.timeline import to_png, to_svg


@dataclass(frozen=True)
class Costs:
    """Per-op execution times. B is a *full* backward (inputs + weights), W the weight part alone (so a
    backward with deferred weights costs B - W), FB an overlapped forward & backward pair (default F + B,
    i.e. no overlap gain), p2p the latency of one message (0 = fully hidden)."""

    F: float = 1.0
    B: float = 2.0
    W: float = 1.0
    FB: float | None = None
    p2p: float = 0.0

    def __post_init__(self) -> None:
        for name in ("F", "B", "W", "p2p"):
            v = getattr(self, name)
            if not 0 <= v < float("inf"):
                raise ValueError(f"cost {name} must be a finite number >= 0, got {v}")
        if self.W > self.B:
            raise ValueError(f"W (weight-gradient part, {self.W}) cannot exceed the full backward B ({self.B})")
        if self.FB is not None and not 0 <= self.FB < float("inf"):
            raise ValueError(f"cost FB must be a finite number >= 0, got {self.FB}")

    @property
    def fb(self) -> float:
        return self.F + self.B if self.FB is None else self.FB

    def of(self, op: Op) -> float:
        if op.kind == F:
            return self.F
        if op.kind == B:
            return self.B - self.W if op.zb else self.B
        if op.kind == W:
            return self.W
        if op.kind == FB:
            return self.fb
        return 0.0

    def on(self, rank: int, op: Op) -> float:
        """`op`'s time on `rank` (the same on every rank here; a subclass may measure each op apart)."""
        return self.of(op)


@dataclass
class Span:
    """One compute op on the timeline."""

    rank: int
    start: float
    end: float
    op: Op
    stage: int
    bstage: int = -1


@dataclass
class SimResult:
    """What a simulated step costs. Memory is in units: activations of one stage for one micro-batch,
    parameters of one stage."""

    schedule: Schedule
    costs: Costs
    makespan: float
    busy: list[float]
    bubble: list[float]
    peak_activation: list[int]
    param_memory: list[int]
    spans: list[Span] = field(default_factory=list)

    @property
    def max_bubble(self) -> float:
        return max(self.bubble)

    def __repr__(self) -> str:
        return (f"<SimResult {type(self.schedule).__name__}: {self.schedule.num_ranks} ranks, makespan "
                f"{self.makespan:g}, bubble {self.bubble_ratio:.1%}, peak activations {max(self.peak_activation)}>")

    def _repr_html_(self) -> str:
        """The timeline as inline SVG (notebooks show it in place of the repr)."""
        return to_svg(self)

    def _repr_png_(self) -> bytes | None:
        """The timeline as PNG when matplotlib is installed (None otherwise: the notebook uses the SVG)."""
        try:
            with tempfile.TemporaryDirectory() as d:
                path = os.path.join(d, "timeline.png")
                to_png(self, path)
                with open(path, "rb") as f:
                    return f.read()
        except ImportError:
            return None

    @property
    def bubble_ratio(self) -> float:
        """Idle share of all rank-time: sum(bubble) / (ranks * makespan)."""
        total = self.makespan * len(self.busy)
        return sum(self.bubble) / total if total else 0.0


def _segments(ops: tuple[Op, ...]) -> list[tuple[list[Op], Op | None]]:
    segs: list[tuple[list[Op], Op | None]] = []
    pending: list[Op] = []
    for op in ops:
        if op.is_compute:
            segs.append((pending, op))
            pending = []
        else:
            pending.append(op)
    segs.append((pending, None))
    return segs


def _match_messages(s: Schedule, segs) -> dict[tuple[int, int, int], tuple[int, int]]:
    """For every p2p op (rank, segment, index in batch) the peer's (rank, segment) holding its counterpart."""
    p = s.placement
    sends: dict[tuple[int, int], list] = {}
    recvs: dict[tuple[int, int], list] = {}
    for r, rsegs in enumerate(segs):
        for k, (comm, _) in enumerate(rsegs):
            for j, op in enumerate(comm):
                if not 0 <= op.peer < s.num_ranks or op.peer == r:
                    raise ScheduleError("p2p:peer", f"rank {r}: {op} names an invalid peer")
                loc = (r, op.module)
                if loc not in p.stage:
                    raise ScheduleError("p2p:module", f"rank {r}: {op} uses a module this rank does not hold")
                if op.kind == SEND_F:
                    tgt, what = p.next[loc], "activation"
                elif op.kind == SEND_B:
                    tgt, what = p.prev[loc], "gradient"
                elif op.kind == RECV_F:
                    tgt, what = p.prev[loc], "activation"
                else:
                    tgt, what = p.next[loc], "gradient"
                if tgt is None or tgt[0] != op.peer:
                    raise ScheduleError("p2p:neighbour", f"rank {r}: {op} but the {what} of module {op.module} "
                                        f"goes to/comes from {tgt}, not rank {op.peer}")
                if op.kind in (SEND_F, SEND_B):
                    ident = (what, tgt, op.mb)
                    sends.setdefault((r, op.peer), []).append((ident, r, k, j, op))
                else:
                    ident = (what, loc, op.mb)
                    recvs.setdefault((op.peer, r), []).append((ident, r, k, j, op))
    match: dict[tuple[int, int, int], tuple[int, int]] = {}
    for chan in set(sends) | set(recvs):
        ss, rr = sends.get(chan, []), recvs.get(chan, [])
        if len(ss) != len(rr):
            raise ScheduleError("p2p:count", f"rank {chan[0]} sends {len(ss)} messages to rank {chan[1]}, "
                                f"which receives {len(rr)} from it")
        for n, (a, b) in enumerate(zip(ss, rr, strict=True)):
            if a[0] != b[0]:
                raise ScheduleError("p2p:order", f"message #{n} from rank {chan[0]} to rank {chan[1]}: the "
                                    f"sender sends {a[4]} but the receiver expects {b[4]} (FIFO order differs)")
            match[(a[1], a[2], a[3])] = (b[1], b[2])
            match[(b[1], b[2], b[3])] = (a[1], a[2])
    return match


class _RankState:
    def __init__(self) -> None:
        self.inputs: set[tuple[int, int]] = set()
        self.grads: set[tuple[int, int]] = set()
        self.fwd: set[tuple[int, int]] = set()
        self.bwd: set[tuple[int, int]] = set()
        self.fcount: dict[int, int] = {}
        self.deferred: deque[tuple[int, int]] = deque()
        self.live = 0
        self.peak = 0


def run(s: Schedule, costs: Costs | None = None, *, w_holds_activation: bool = False) -> SimResult:
    """Check `s` (raises ScheduleError naming the broken rule) and simulate it with `costs`.

    w_holds_activation: count a micro-batch's activation until its deferred W (True) or free it at B (False,
    DeepSeek's accounting: W keeps only the small per-layer inputs it needs)."""
    costs = costs or Costs()
    p = s.placement
    segs = [_segments(ops) for ops in s.ops]
    match = _match_messages(s, segs)
    has_backward = any(op.kind in (B, FB) for ops in s.ops for op in ops)
    R = s.num_ranks
    cur = [0] * R
    reach = [[0.0] for _ in range(R)]  # time each rank reached each segment
    st = [_RankState() for _ in range(R)]
    for (r, m), loc_n in p.streams.items():
        if p.is_first_stage((r, m)):
            st[r].inputs.update((m, i) for i in range(loc_n))
    busy = [0.0] * R
    spans: list[Span] = []

    def fail(rule: str, r: int, op: Op, why: str) -> None:
        raise ScheduleError(rule, f"rank {r}: {op}: {why}")

    def do_forward(r: int, op: Op, m: int, i: int) -> None:
        rs, loc = st[r], (r, m)
        if loc not in p.stage:
            fail("module", r, op, f"rank {r} holds no module {m}")
        if not 0 <= i < p.streams[loc]:
            fail("micro-batch-range", r, op, f"module {m} processes micro-batches 0..{p.streams[loc] - 1}")
        if (m, i) in rs.fwd:
            fail("F-once", r, op, "forward of this micro-batch already ran")
        if i != rs.fcount.get(m, 0):
            fail("F-order", r, op, f"forwards of a module run in micro-batch order; expected {rs.fcount.get(m, 0)}")
        if (m, i) not in rs.inputs:
            fail("F-needs-input", r, op, "its input was not received (or produced locally) before it")
        rs.fcount[m] = i + 1
        rs.fwd.add((m, i))
        if has_backward:
            rs.live += 1
            rs.peak = max(rs.peak, rs.live)
        nxt = p.next[loc]
        if nxt is None:
            rs.grads.add((m, i))  # the loss is computed right here
        elif nxt[0] == r:
            rs.inputs.add((nxt[1], i))  # local hand-off (DualPipeV turn)

    def do_backward(r: int, op: Op, m: int, i: int, zb: bool) -> None:
        rs, loc = st[r], (r, m)
        if (m, i) not in rs.fwd:
            fail("B-after-F", r, op, "backward before the forward of the same micro-batch")
        if (m, i) in rs.bwd:
            fail("B-once", r, op, "backward of this micro-batch already ran")
        if (m, i) not in rs.grads:
            fail("B-needs-grad", r, op, "its output gradient was not received (or produced locally) before it")
        rs.bwd.add((m, i))
        if zb:
            rs.deferred.append((m, i))
        if not (zb and w_holds_activation):
            rs.live -= 1
        prv = p.prev[loc]
        if prv is not None and prv[0] == r:
            rs.grads.add((prv[1], i))

    def do_weight(r: int, op: Op) -> None:
        rs = st[r]
        if not rs.deferred:
            fail("W-needs-deferred-B", r, op, "no backward with deferred weight gradient is pending")
        head = rs.deferred.popleft()
        if head != (op.module, op.mb):
            fail("W-FIFO", r, op, f"deferred weight gradients run in FIFO order; next is m{head[0]}:{head[1]}")
        if w_holds_activation:
            rs.live -= 1

    def check_comm(r: int, op: Op) -> None:
        key = (op.module, op.mb)
        if op.kind == SEND_F and key not in st[r].fwd:
            fail("send-after-F", r, op, "sends an activation its forward has not produced yet")
        if op.kind == SEND_B and key not in st[r].bwd:
            fail("send-after-B", r, op, "sends a gradient its backward has not produced yet")

    while True:
        progressed = False
        for r in range(R):
            while cur[r] < len(segs[r]):
                k = cur[r]
                comm, compute = segs[r][k]
                blocked = [(op, match[(r, k, j)]) for j, op in enumerate(comm) if cur[match[(r, k, j)][0]] <
                           match[(r, k, j)][1]]
                if blocked:
                    break
                t = reach[r][k]
                for j, op in enumerate(comm):
                    check_comm(r, op)
                    if op.kind in (RECV_F, RECV_B):
                        pr, pk = match[(r, k, j)]
                        t = max(t, reach[pr][pk] + costs.p2p)
                        (st[r].inputs if op.kind == RECV_F else st[r].grads).add((op.module, op.mb))
                if compute is not None:
                    op = compute
                    if op.kind == F:
                        do_forward(r, op, op.module, op.mb)
                    elif op.kind == B:
                        do_backward(r, op, op.module, op.mb, op.zb)
                    elif op.kind == W:
                        do_weight(r, op)
                    else:
                        do_forward(r, op, op.module, op.mb)
                        do_backward(r, op, op.bmodule, op.bmb, False)
                    dur = costs.on(r, op)
                    stage = p.stage[(r, op.module)] if (r, op.module) in p.stage else -1
                    bstage = p.stage.get((r, op.bmodule), -1) if op.kind == FB else -1
                    spans.append(Span(r, t, t + dur, op, stage, bstage))
                    busy[r] += dur
                    t += dur
                reach[r].append(t)
                cur[r] += 1
                progressed = True
        if all(cur[r] == len(segs[r]) for r in range(R)):
            break
        if not progressed:
            lines = []
            for r in range(R):
                if cur[r] < len(segs[r]):
                    comm, compute = segs[r][cur[r]]
                    k = cur[r]
                    waits = [f"{op} (peer has not posted its counterpart)" for j, op in enumerate(comm)
                             if cur[match[(r, k, j)][0]] < match[(r, k, j)][1]]
                    before = f"before {compute}" if compute else "at the final commit"
                    lines.append(f"rank {r} blocked {before} on " + ", ".join(waits))
            raise ScheduleError("deadlock", "no rank can make progress: " + "; ".join(lines))

    for r in range(R):
        rs = st[r]
        for (rr, m), n in p.streams.items():
            if rr != r:
                continue
            missing_f = [i for i in range(n) if (m, i) not in rs.fwd]
            if missing_f:
                raise ScheduleError("all-F", f"rank {r} module {m} never runs the forward of micro-batches "
                                    f"{missing_f[:5]}")
            if has_backward:
                missing_b = [i for i in range(n) if (m, i) not in rs.bwd]
                if missing_b:
                    raise ScheduleError("all-B", f"rank {r} module {m} never runs the backward of "
                                        f"micro-batches {missing_b[:5]}")
        if rs.deferred:
            raise ScheduleError("all-W", f"rank {r} ends with deferred weight gradients {list(rs.deferred)}")

    makespan = max((sp.end for sp in spans), default=0.0)
    bubble = [makespan - b for b in busy]
    return SimResult(s, costs, makespan, busy, bubble, [x.peak for x in st],
                     [p.modules_per_rank] * R, spans)


def check(s: Schedule) -> None:
    """Raise ScheduleError (naming the rule) unless every dependency is met and no rank deadlocks; checks the
    training step and the forward-only (inference) step."""
    run(s)
    if any(op.kind in (B, FB) for ops in s.ops for op in ops):
        run(s.forward_only())
