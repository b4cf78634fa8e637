"""Collective guards of a pipeline step: arguments agreed across ranks first, and a failure on one rank
turned into an error on every rank within seconds.

`agree()` is one small collective at the start of `step()`: every rank shares what it was given (num_chunks,
training or inference, the p2p shapes and dtype, the shapes and dtypes of its inputs and labels, whether it
has a criterion) and any problem it found locally; then every rank raises the same `StepArgumentError`
naming the rank and the field, or none does. Without it one rank's bad input fails that rank only and the
others wait for messages that never come, until the process group's timeout (30 minutes by default).

`Abort` is the side channel for failures during the step (a stage raising, a shape the peer does not
expect): the failing rank writes its error to the process group's store, and every rank waiting for a
message polls that key and raises `PeerFailed` naming the rank and its error. Its waits take the executor's
`timeout_s` (`StepTimeout` past it); a lost connection is `PeerLost`, which the first rank to see it writes
to the key for the others. (Before all this, arrival.py has every rank arrive at the step.)
"""

from __future__ import annotations

import math
import threading
import time
from typing import Any

import torch
import torch.distributed as dist

from ptxforge.errors import Error


class StepArgumentError(Error, ValueError):
    """The ranks of a pipeline were given arguments that do not fit together; raised on every rank."""


class PeerFailed(Error, RuntimeError):
    """Another rank of the pipeline failed during the step; raised on the ranks that were waiting for it."""


class PeerLost(PeerFailed, ConnectionError):
    """Another rank's process is gone (its connection closed, or its pid no longer runs); names it where known."""


class StepTimeout(Error, TimeoutError):
    """A wait of a pipeline step passed the executor's timeout_s; names the ranks it waited for."""


def describe(x: Any) -> tuple | None:
    """(shape, dtype) of a tensor, None for None; anything else by type name."""
    if x is None:
        return None
    if isinstance(x, torch.Tensor):
        return tuple(x.shape), str(x.dtype).removeprefix("torch.")
    return ("not a tensor", type(x).__name__)


def agree(group: Any, rank: int, mine: dict, problems: list[str], same_error: Exception | None = None) -> None:
    """Share `mine` (field -> value) and `problems` with every rank of `group`; raise StepArgumentError on every
    rank when any rank reported a problem or the ranks holding a field disagree on its value.

    `same_error`: this rank's exception behind its only problem; when every rank reports just that problem,
    it is raised as it is (e.g. a ScheduleError every rank found alike)."""
    gathered: list = [None] * group.size()
    dist.all_gather_object(gathered, (rank, mine, problems), group=group)
    errors = []
    for p in dict.fromkeys(p for _, _, probs in gathered for p in probs):  # one line per distinct problem
        ranks = [r for r, _, probs in gathered if p in probs]
        who = "every rank" if len(ranks) == len(gathered) > 1 else ", ".join(f"rank {r}" for r in ranks)
        errors.append(f"{who}: {p}")
    fields = sorted({k for _, d, _ in gathered for k in d})
    for k in fields:
        holders = [(r, d[k]) for r, d, _ in gathered if k in d]
        values = {repr(v) for _, v in holders}
        if len(values) > 1:
            by_rank = ", ".join(f"rank {r}: {v!r}" for r, v in holders)
            errors.append(f"the ranks disagree on {k} ({by_rank})")
    if same_error is not None and len(errors) == 1 and all(probs == [str(same_error)] for _, _, probs in gathered):
        raise same_error
    if errors:
        raise StepArgumentError("pipeline step refused on every rank: " + "; ".join(errors))


class Abort:
    """One executor's keys in the process group's store: its abort message, and a counter of finished steps.

    Without a store (torch gave none) the checks do nothing and waits block as before."""

    def __init__(self, tag: str) -> None:
        self.store = _store()
        self.key = f"ptxforge/pipeline/{tag}/abort"
        self.done = f"ptxforge/pipeline/{tag}/done"

    def signal(self, rank: int, error: BaseException) -> None:
        if self.store is not None:
            try:
                if isinstance(error, PeerLost) and self.store.check([self.key]):
                    return  # the first rank to see a loss (or a failure) names it
                self.store.set(self.key, f"rank {rank} failed: {type(error).__name__}: {error}"[:2000])
            except Exception:  # noqa: BLE001 - the rank's own error is the one to raise
                pass

    def check(self) -> None:
        if self.store is not None and self.store.check([self.key]):
            raise PeerFailed(f"pipeline step stopped: {self.store.get(self.key).decode(errors='replace')}")

    def wait_all(self, reqs: Any, cuda: bool = False, timeout_s: float = math.inf, waiting: str = "") -> None:
        """Wait for every request, checking the abort key while any is pending.

        NCCL requests (`cuda`) report completion through is_completed(), and wait() must run on this thread
        (it orders this thread's current CUDA stream). A gloo request completes only inside wait(), so there
        the blocking waits run on a helper thread; if a peer failed, that thread stays blocked on messages
        that will not come and this one raises."""
        if self.store is None:
            for r in reqs:
                r.wait()
            return
        if cuda:
            self._poll(lambda: all(r.is_completed() for r in reqs), timeout_s, waiting)
            for r in reqs:
                r.wait()
            return
        box: list = []

        def wait() -> None:
            try:
                for r in reqs:
                    r.wait()
                box.append(None)
            except BaseException as e:  # noqa: BLE001 - handed to the caller
                box.append(e)

        t = threading.Thread(target=wait, name="ptxforge-pipeline-wait", daemon=True)
        t.start()
        t.join(0.002)
        self._poll(lambda: not t.is_alive(), timeout_s, waiting)
        if box and box[0] is not None:
            try:
                self.check()  # a peer that failed and left closes its connections: name the failure
            except PeerFailed as e:
                raise e from box[0]
            raise box[0]

    def finish(self, step: int, ranks: int, timeout_s: float = math.inf) -> None:
        """Count this rank's step as done and wait until every rank's is, or one failed."""
        if self.store is None:
            return
        self.store.add(self.done, 1)
        self._poll(lambda: self.store.add(self.done, 0) >= step * ranks, timeout_s,
                   f"every rank to finish step {step}")

    def _poll(self, ready, timeout_s: float = math.inf, waiting: str = "") -> None:
        """Wait until ready(), checking the abort key; StepTimeout ("waited ... for `waiting`") past timeout_s."""
        pause, last, start = 0.0002, 0.0, time.monotonic()
        while not ready():
            if time.monotonic() - last > 0.05:
                self.check()
                last = time.monotonic()
                if last - start > timeout_s:
                    raise StepTimeout(f"pipeline step: waited {timeout_s:g} s for {waiting} (the executor's "
                                      f"timeout_s)")
            time.sleep(pause)
            pause = min(pause * 2, 0.01)


def _store():
    get = getattr(dist.distributed_c10d, "_get_default_store", None)
    try:
        return get() if get is not None else None
    except Exception:  # noqa: BLE001 - e.g. a group created without a store: no side channel
        return None
