"""Pipeline schedules as explicit per-rank op lists: 1F1B, ZB1P (zero-bubble H1), DualPipe and DualPipeV.

`build_schedule(name, pp, num_chunks)` takes the number of pipeline *stages* `pp` as in the DeepSeek table
(DualPipeV runs those stages on pp/2 ranks); the per-schedule builders take the number of ranks.
`check(schedule)` (from `ptxforge.pipeline.engine`) proves every dependency is met and no rank deadlocks.

The DualPipe/DualPipeV step structure (warm-up, the nF0B1F1B0 main loop, the zero-bubble tail) follows the
published description and deepseek-ai/DualPipe, so that `ptxforge.pipeline.DualPipe` runs the same order of
work and messages as the original.
"""

from __future__ import annotations

from collections import deque

from ptxforge.pipeline.engine import check
from ptxforge.pipeline.ops import (
    FB,
    RECV_B,
    RECV_F,
    SEND_B,
    SEND_F,
    B,
    F,
    Loc,
    Op,
    Placement,
    Schedule,
    ScheduleError,
    W,
)

SCHEDULES = ("1f1b", "zb1p", "dualpipe", "dualpipev")
__all__ = ["SCHEDULES", "build_schedule", "one_f_one_b", "zb1p", "dualpipe", "dualpipev", "check",
           "linear_placement", "dualpipe_placement", "dualpipev_placement"]


# ---------------------------------------------------------------------------------------------- placements
def linear_placement(num_ranks: int, num_chunks: int) -> Placement:
    """One stage per rank, data flows rank 0 -> rank P-1 (1F1B, ZB1P)."""
    locs = [(r, 0) for r in range(num_ranks)]
    return _chain_placement(num_ranks, 1, [locs], [num_chunks])


def dualpipe_placement(num_ranks: int, num_chunks: int) -> Placement:
    """Rank r holds stage r (module 0, direction 0: rank 0 -> P-1) and stage P-1-r (module 1, direction 1:
    rank P-1 -> 0). Each direction carries half of the micro-batches."""
    d0 = [(r, 0) for r in range(num_ranks)]
    d1 = [(r, 1) for r in reversed(range(num_ranks))]
    return _chain_placement(num_ranks, 2, [d0, d1], [num_chunks // 2, num_chunks // 2])


def dualpipev_placement(num_ranks: int, num_chunks: int) -> Placement:
    """Rank r holds stages r (module 0) and 2R-1-r (module 1); data goes down the ranks and back up (a V),
    input and loss on rank 0. The last rank hands module 0's output to its module 1 locally."""
    chain = [(r, 0) for r in range(num_ranks)] + [(r, 1) for r in reversed(range(num_ranks))]
    return _chain_placement(num_ranks, 2, [chain], [num_chunks])


def _chain_placement(num_ranks: int, per_rank: int, chains: list[list[Loc]], counts: list[int]) -> Placement:
    stage: dict[Loc, int] = {}
    prev: dict[Loc, Loc | None] = {}
    nxt: dict[Loc, Loc | None] = {}
    streams: dict[Loc, int] = {}
    for chain, count in zip(chains, counts, strict=True):
        for i, loc in enumerate(chain):
            stage[loc] = i
            prev[loc] = chain[i - 1] if i > 0 else None
            nxt[loc] = chain[i + 1] if i + 1 < len(chain) else None
            streams[loc] = count
    return Placement(num_ranks, per_rank, stage, prev, nxt, streams)


# ---------------------------------------------------------------------------------------------- emitter
class _Emitter:
    """Appends ops for one rank, numbering micro-batches per module and skipping local/absent neighbours."""

    def __init__(self, placement: Placement, rank: int) -> None:
        self.p = placement
        self.rank = rank
        self.ops: list[Op] = []
        n = placement.modules_per_rank
        self.f = [0] * n
        self.b = [0] * n
        self.sf = [0] * n
        self.sb = [0] * n
        self.rf = [0] * n
        self.rb = [0] * n
        self.deferred: deque[tuple[int, int]] = deque()

    def _remote(self, loc: Loc | None) -> int | None:
        return loc[0] if loc is not None and loc[0] != self.rank else None

    def recv_f(self, m: int) -> None:
        peer = self._remote(self.p.prev[(self.rank, m)])
        if peer is not None:
            self.ops.append(Op(RECV_F, m, self.rf[m], peer=peer))
            self.rf[m] += 1

    def send_f(self, m: int) -> None:
        peer = self._remote(self.p.next[(self.rank, m)])
        if peer is not None:
            self.ops.append(Op(SEND_F, m, self.sf[m], peer=peer))
            self.sf[m] += 1

    def recv_b(self, m: int) -> None:
        peer = self._remote(self.p.next[(self.rank, m)])
        if peer is not None:
            self.ops.append(Op(RECV_B, m, self.rb[m], peer=peer))
            self.rb[m] += 1

    def send_b(self, m: int) -> None:
        peer = self._remote(self.p.prev[(self.rank, m)])
        if peer is not None:
            self.ops.append(Op(SEND_B, m, self.sb[m], peer=peer))
            self.sb[m] += 1

    def fwd(self, m: int) -> None:
        self.ops.append(Op(F, m, self.f[m]))
        self.f[m] += 1

    def bwd(self, m: int, zb: bool = False) -> None:
        self.ops.append(Op(B, m, self.b[m], zb=zb))
        if zb:
            self.deferred.append((m, self.b[m]))
        self.b[m] += 1

    def weight(self) -> None:
        m, i = self.deferred.popleft()
        self.ops.append(Op(W, m, i))

    def fwd_bwd(self, mf: int, mb: int) -> None:
        self.ops.append(Op(FB, mf, self.f[mf], bmodule=mb, bmb=self.b[mb]))
        self.f[mf] += 1
        self.b[mb] += 1

    # composite steps (receive, compute, send)
    def forward_chunk(self, m: int, recv: bool = True, send: bool = True) -> None:
        if recv:
            self.recv_f(m)
        self.fwd(m)
        if send:
            self.send_f(m)

    def backward_chunk(self, m: int, zb: bool = False, recv: bool = True, send: bool = True) -> None:
        if recv:
            self.recv_b(m)
        self.bwd(m, zb)
        if send:
            self.send_b(m)

    def forward_backward_chunk(self, mf: int, mb: int, recv_f: bool = True) -> None:
        if recv_f:
            self.recv_f(mf)
        self.recv_b(mb)
        self.fwd_bwd(mf, mb)
        self.send_f(mf)
        self.send_b(mb)


def _make(name: str, placement: Placement, num_chunks: int, per_rank, num_stages: int) -> Schedule:
    ops = []
    for r in range(placement.num_ranks):
        e = _Emitter(placement, r)
        per_rank(e, r)
        ops.append(tuple(e.ops))
    return Schedule(name, placement.num_ranks, num_chunks, placement, tuple(ops), num_stages)


def _require(cond: bool, rule: str, detail: str) -> None:
    if not cond:
        raise ScheduleError(rule, detail)


def _positive_ints(num_ranks: int, num_chunks: int) -> None:
    _require(isinstance(num_ranks, int) and num_ranks >= 1, "ranks>=1",
             f"the number of pipeline ranks must be a positive integer, got {num_ranks!r}")
    _require(isinstance(num_chunks, int) and num_chunks >= 1, "micro-batches>=1",
             f"the number of micro-batches must be a positive integer, got {num_chunks!r}")


# ---------------------------------------------------------------------------------------------- 1F1B / ZB1P
def one_f_one_b(num_ranks: int, num_chunks: int) -> Schedule:
    """Classic 1F1B (PipeDream-flush): P-1-r warm-up forwards, then one forward / one full backward."""
    _positive_ints(num_ranks, num_chunks)
    placement = linear_placement(num_ranks, num_chunks)

    def emit(e: _Emitter, r: int) -> None:
        warm = min(num_ranks - 1 - r, num_chunks)
        for _ in range(warm):
            e.forward_chunk(0)
        for _ in range(num_chunks - warm):
            e.forward_chunk(0)
            e.backward_chunk(0)
        for _ in range(warm):
            e.backward_chunk(0)

    return _make("1F1B", placement, num_chunks, emit, num_ranks)


def zb1p(num_ranks: int, num_chunks: int) -> Schedule:
    """Zero-bubble H1 (Qi et al. 2023): 1F1B order with the weight gradient split off (B -> B + W) and W
    delayed so that it fills the cool-down; rank r keeps at most r W's outstanding, so the peak number of
    live activations stays at 1F1B's P."""
    _positive_ints(num_ranks, num_chunks)
    placement = linear_placement(num_ranks, num_chunks)

    def emit(e: _Emitter, r: int) -> None:
        warm = min(num_ranks - 1 - r, num_chunks)
        hold = r  # W's this rank may keep outstanding
        for _ in range(warm):
            e.forward_chunk(0)
        for _ in range(num_chunks - warm):
            e.forward_chunk(0)
            e.backward_chunk(0, zb=True)
            if len(e.deferred) > hold:
                e.weight()
        for _ in range(warm):
            e.backward_chunk(0, zb=True)
            if len(e.deferred) > hold:
                e.weight()
        while e.deferred:
            e.weight()

    return _make("ZB1P", placement, num_chunks, emit, num_ranks)


# ---------------------------------------------------------------------------------------------- DualPipe
def dualpipe(num_ranks: int, num_chunks: int) -> Schedule:
    """DualPipe: micro-batches fed from both ends, forward of one overlapped with backward of another."""
    _positive_ints(num_ranks, num_chunks)
    _require(num_ranks % 2 == 0, "dualpipe:even-ranks",
             f"DualPipe needs an even number of pipeline ranks (PP), got {num_ranks}")
    _require(num_chunks % 2 == 0, "dualpipe:even-micro-batches",
             f"DualPipe needs an even number of micro-batches (half enter at each end), got {num_chunks}")
    _require(num_chunks >= 2 * num_ranks, "dualpipe:micro-batches>=2*PP",
             f"DualPipe needs at least 2*PP = {2 * num_ranks} micro-batches, got {num_chunks}")
    placement = dualpipe_placement(num_ranks, num_chunks)
    half = num_ranks // 2
    half_chunks = num_chunks // 2

    def emit(e: _Emitter, r: int) -> None:
        second = int(r >= half)
        m0, m1 = 0 ^ second, 1 ^ second  # schedule phase -> local module (second half is mirrored)
        middle = r in (half - 1, half)
        hr = min(r, num_ranks - 1 - r)
        _dual_core(e, m0, m1, num_far=half - hr - 1, hr=hr, turn=middle,
                   main_steps=half_chunks - num_ranks + hr + 1, send_f0_early=middle)

    return _make("DualPipe", placement, num_chunks, emit, num_ranks)


def dualpipev(num_ranks: int, num_chunks: int) -> Schedule:
    """DualPipeV ("cut-in-half" DualPipe): 2R stages on R ranks in a V, inputs and loss on rank 0."""
    _positive_ints(num_ranks, num_chunks)
    _require(num_chunks >= 2 * num_ranks, "dualpipev:micro-batches>=2*ranks",
             f"DualPipeV needs at least 2*ranks = {2 * num_ranks} micro-batches, got {num_chunks}")
    placement = dualpipev_placement(num_ranks, num_chunks)

    def emit(e: _Emitter, r: int) -> None:
        last = r == num_ranks - 1
        _dual_core(e, 0, 1, num_far=num_ranks - r - 1, hr=r, turn=last,
                   main_steps=num_chunks - 2 * num_ranks + r + 1, send_f0_early=False)

    return _make("DualPipeV", placement, num_chunks, emit, 2 * num_ranks)


def _dual_core(e: _Emitter, m0: int, m1: int, *, num_far: int, hr: int, turn: bool, main_steps: int,
               send_f0_early: bool) -> None:
    """The eight phases shared by DualPipe and DualPipeV. `num_far` counts the ranks between this one and the
    turning point, `hr` its distance from the end, `turn` marks the rank(s) where the two flows meet."""
    # 1: forwards of the near flow only
    for _ in range(2 * num_far):
        e.forward_chunk(m0)
    # 2: alternate forwards of both flows
    e.recv_f(m0)
    for i in range(hr + 1):
        e.forward_chunk(m0, recv=False, send=send_f0_early)
        e.recv_f(m0)
        e.forward_chunk(m1, send=(not turn) or i < hr)
        if not send_f0_early:
            e.send_f(m0)
    # 3: backward (weights deferred), W, forward
    for _ in range(num_far):
        e.backward_chunk(m1, zb=True)
        e.recv_f(m1)
        e.weight()
        e.forward_chunk(m1, recv=False)
    # 4: main loop, overlapped F0&B1, F1&B0
    for i in range(main_steps):
        if i == 0:
            if turn:  # not overlapped here: keeps the turning rank's bubble small
                e.forward_chunk(m0, recv=False, send=False)
                e.send_f(m1)
                e.backward_chunk(m1, send=False)
                e.send_f(m0)
                e.send_b(m1)
            else:
                e.forward_backward_chunk(m0, m1, recv_f=False)
        else:
            e.forward_backward_chunk(m0, m1)
        e.forward_backward_chunk(m1, m0)
    # 5: B1, F1&B0
    for _ in range(num_far):
        e.backward_chunk(m1)
        e.forward_backward_chunk(m1, m0)
    # 6: B1 B0, the second half with deferred weights
    zb = False
    steps = hr + 1
    for i in range(steps):
        if i == steps // 2 and hr % 2 == 1:
            zb = True
        e.backward_chunk(m1, zb=zb)
        if i == steps // 2 and hr % 2 == 0:
            zb = True
        e.backward_chunk(m0, zb=zb)
    # 7: W, B0 (deferred)
    for _ in range(num_far):
        e.weight()
        e.backward_chunk(m0, zb=True)
    # 8: remaining W
    for _ in range(hr + 1):
        e.weight()
    if e.deferred:
        raise ScheduleError("internal:deferred-W", f"rank {e.rank} ends with {len(e.deferred)} pending W")


# ---------------------------------------------------------------------------------------------- by name
def build_schedule(name: str, pp: int, num_chunks: int) -> Schedule:
    """Build a schedule by name for `pp` pipeline stages (DeepSeek's table convention: DualPipeV puts the
    pp stages on pp/2 ranks, the others use pp ranks)."""
    key = name.lower().replace("-", "").replace("_", "")
    if key == "1f1b":
        return one_f_one_b(pp, num_chunks)
    if key in ("zb1p", "zbh1"):
        return zb1p(pp, num_chunks)
    if key == "dualpipe":
        return dualpipe(pp, num_chunks)
    if key == "dualpipev":
        _require(isinstance(pp, int) and pp >= 2 and pp % 2 == 0, "dualpipev:even-stages",
                 f"DualPipeV places 2 stages per rank, so PP (stages) must be even and >= 2, got {pp}")
        return dualpipev(pp // 2, num_chunks)
    raise ScheduleError("unknown-schedule", f"unknown schedule {name!r}; choose one of {', '.join(SCHEDULES)}")
