"""Every pipeline step begins with every rank arriving, within the executor's own timeout.

Each rank writes a record in the process group's store (`<group>/rank/<r>`: how many steps it began on that
group, its process, and which step of which executor) and counts itself in `<group>/arrived/<n>`; it then
polls until every rank has. Past `timeout_s` it raises `StepTimeout` naming the ranks that never came and the
last step each began; a rank whose process is gone is named at once (`PeerLost`). Only then does the step's
first collective (the argument agreement) start, so no rank waits for the process group's own timeout
(30 minutes by default), and that collective never sees a rank that is not there.
"""

from __future__ import annotations

import math
import os
import socket
import time
import zlib
from typing import Any

from ptxforge import environment
from ptxforge.pipeline.step_check import Abort, PeerLost, StepTimeout
from ptxforge.processes import exited, process_exists

DEFAULT_TIMEOUT_S = 300.0
TIMEOUT_ENV = "PTXFORGE_PIPELINE_TIMEOUT_S"


def resolve_timeout(timeout_s: float | None) -> float:
    """The executor's bound on each wait: `timeout_s`, else $PTXFORGE_PIPELINE_TIMEOUT_S, else 300 s."""
    source = "timeout_s"
    if timeout_s is None:
        raw = environment.pipeline_timeout_s()
        if raw is None:
            return DEFAULT_TIMEOUT_S
        source, timeout_s = f"${TIMEOUT_ENV}", raw  # type: ignore[assignment]  # parsed below
    try:
        t = float(timeout_s)  # type: ignore[arg-type]  # str from the environment, or a number
    except (TypeError, ValueError):
        raise ValueError(f"{source} must be a number of seconds, got {timeout_s!r}") from None
    if math.isnan(t) or t <= 0:
        raise ValueError(f"{source} must be a positive number of seconds (inf: no bound), got {timeout_s!r}")
    return t


def _host() -> int:
    return zlib.crc32(socket.gethostname().encode())


class Arrivals:
    """The arrival records of one process group (`group_tag`: its ranks), shared by its executors."""

    _begun: dict[str, int] = {}  # steps this process began per group

    def __init__(self, store: Any, group_tag: str, rank: int, size: int) -> None:
        self.store, self.rank, self.size = store, rank, size
        self.prefix = f"ptxforge/pipeline/{group_tag}"
        self.group_tag = group_tag

    def arrive(self, what: str, timeout_s: float, abort: Abort) -> None:
        """Count this rank in and wait until every rank is (`what`: this step, for the messages)."""
        if self.store is None:
            return
        n = Arrivals._begun.get(self.group_tag, 0) + 1
        Arrivals._begun[self.group_tag] = n
        self.store.set(f"{self.prefix}/rank/{self.rank}", f"{n} {os.getpid()} {_host()} {what}")
        key = f"{self.prefix}/arrived/{n}"
        self.store.add(key, 1)
        if n > 2:
            self._forget(n - 2)
        start = time.monotonic()
        pause, looked = 0.0005, start
        while self.store.add(key, 0) < self.size:
            now = time.monotonic()
            if now - looked > 0.2:
                abort.check()
                self._gone(n, what)
                looked = now
            if now - start > timeout_s:
                raise StepTimeout(f"pipeline step: rank {self.rank} waited {timeout_s:g} s for every rank to call "
                                  f"step() ({what}): {self._behind(n)} (the executor's timeout_s)")
            time.sleep(pause)
            pause = min(pause * 2, 0.01)

    def _records(self) -> dict[int, tuple[int, int, int, str]]:
        out = {}
        for r in range(self.size):
            k = f"{self.prefix}/rank/{r}"
            if self.store.check([k]):
                n, pid, host, what = self.store.get(k).decode().split(" ", 3)
                out[r] = (int(n), int(pid), int(host), what)
        return out

    def _behind(self, n: int) -> str:
        recs = self._records()
        late = [f"rank {r} never came ({'its last was ' + recs[r][3] if r in recs else 'it never called step()'})"
                for r in range(self.size) if r not in recs or recs[r][0] < n]
        return "; ".join(late) or "every rank came meanwhile"

    def _gone(self, n: int, what: str) -> None:
        """Raise PeerLost when a rank that has not come has a process on this machine that no longer runs."""
        host = _host()
        for r, (m, pid, h, last) in self._records().items():
            if m < n and h == host and not process_exists(pid):
                raise PeerLost(f"pipeline step: rank {r} (pid {pid}) has exited; rank {self.rank} was waiting for "
                               f"it to call step() ({what}); its last was {last}")

    def _forget(self, n: int) -> None:
        try:
            self.store.delete_key(f"{self.prefix}/arrived/{n}")
        except Exception:  # noqa: BLE001 - a store without delete_key keeps the key: harmless
            pass

    def gone_ranks(self) -> str:
        """Which ranks' processes on this machine have exited ('' if none is known), for lost connections."""
        host = _host()
        try:
            recs = self._records()
        except Exception:  # noqa: BLE001 - the store may have died with the rank that hosted it
            return ""
        local = {pid: r for r, (_, pid, h, _) in recs.items() if r != self.rank and h == host}
        gone = [f"rank {local[pid]} (pid {pid})" for pid in sorted(exited(list(local)), key=local.__getitem__)]
        return f"{', '.join(gone)} {'has' if len(gone) == 1 else 'have'} exited" if gone else ""
