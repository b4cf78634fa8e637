"""Operations and the schedule container shared by the schedule builders, the checker/simulator and the executor.

A schedule is, for every rank, an explicit list of `Op`s. Compute ops (F, B, W, FB) run one after another;
the communication ops queued between two compute ops form one *batch* that is posted and waited for right
before the next compute op (and once more at the end of the list), exactly like
`torch.distributed.batch_isend_irecv` followed by `wait()` on every request.

Every rank holds one or two local *modules* (pipeline stages). A module processes a stream of micro-batches
numbered 0..n-1; the schedule's `Placement` says where each module's inputs come from and where its outputs go.
"""

from __future__ import annotations

from dataclasses import dataclass

from ptxforge.errors import Error

F, B, W, FB = "F", "B", "W", "FB"
SEND_F, RECV_F, SEND_B, RECV_B = "SEND_F", "RECV_F", "SEND_B", "RECV_B"
COMPUTE_KINDS = frozenset({F, B, W, FB})
COMM_KINDS = frozenset({SEND_F, RECV_F, SEND_B, RECV_B})

Loc = tuple[int, int]  # (rank, local module index)


class ScheduleError(Error, ValueError):
    """An invalid schedule or schedule parameter; the message names the rule that was broken."""

    def __init__(self, rule: str, detail: str) -> None:
        self.rule = rule
        self.detail = detail
        super().__init__(f"[{rule}] {detail}")


@dataclass(frozen=True, slots=True)
class Op:
    """One step of one rank.

    kind: F (forward), B (backward for inputs; also for weights unless `zb`), W (deferred weight gradient of
    the oldest `zb` backward), FB (a forward and a backward overlapped), or one of the four p2p kinds.
    module/mb: the local module and micro-batch (for FB: the forward half). bmodule/bmb: the backward half of FB.
    For W, module/mb name the deferred backward it completes. peer: the other rank of a p2p op.
    """

    kind: str
    module: int = 0
    mb: int = 0
    zb: bool = False
    peer: int = -1
    bmodule: int = 0
    bmb: int = 0

    @property
    def is_compute(self) -> bool:
        return self.kind in COMPUTE_KINDS

    def __str__(self) -> str:
        if self.kind == FB:
            return f"FB(m{self.module}:{self.mb} & m{self.bmodule}:{self.bmb})"
        if self.kind in COMM_KINDS:
            return f"{self.kind}(m{self.module}:{self.mb} peer={self.peer})"
        tag = "zb" if self.zb else ""
        return f"{self.kind}{tag}(m{self.module}:{self.mb})"


@dataclass(frozen=True)
class Placement:
    """Where every local module sits in the model and who its neighbours are.

    stage[(rank, module)] is the global stage index; prev/next give the neighbouring location of the data flow
    (None at the pipeline's ends: the input is user data / the output feeds the loss). A neighbour on the same
    rank is a local hand-off (no communication). streams[(rank, module)] is the number of micro-batches the
    module processes in one step.
    """

    num_ranks: int
    modules_per_rank: int
    stage: dict[Loc, int]
    prev: dict[Loc, Loc | None]
    next: dict[Loc, Loc | None]
    streams: dict[Loc, int]

    def is_first_stage(self, loc: Loc) -> bool:
        return self.prev[loc] is None

    def is_last_stage(self, loc: Loc) -> bool:
        return self.next[loc] is None


@dataclass(frozen=True)
class Schedule:
    """Per-rank op lists of one pipeline step, with the placement they assume."""

    name: str
    num_ranks: int
    num_chunks: int
    placement: Placement
    ops: tuple[tuple[Op, ...], ...]
    num_stages: int = 0

    def rank_ops(self, rank: int) -> tuple[Op, ...]:
        return self.ops[rank]

    def forward_only(self) -> Schedule:
        """The op lists an inference (no-grad) step runs: backward work and its messages dropped, FB -> F."""
        out = []
        for ops in self.ops:
            kept: list[Op] = []
            for op in ops:
                if op.kind in (B, W, SEND_B, RECV_B):
                    continue
                kept.append(Op(F, op.module, op.mb) if op.kind == FB else op)
            out.append(tuple(kept))
        return Schedule(self.name + "/forward-only", self.num_ranks, self.num_chunks, self.placement,
                        tuple(out), self.num_stages)

    def format(self) -> str:
        """A human-readable listing, one rank per paragraph."""
        lines = [f"{self.name}: {self.num_ranks} ranks, {self.num_chunks} micro-batches"]
        for r, ops in enumerate(self.ops):
            lines.append(f"rank {r}: " + " ".join(str(o) for o in ops if o.is_compute))
        return "\n".join(lines)
