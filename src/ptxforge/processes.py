"""Whether a peer process still runs: by its pid (the ranks of a job on one machine, a segment's owner), or by what
a collective's lost connection says (gloo)."""

from __future__ import annotations

import os
import time


def process_exists(pid: int) -> bool:
    """True while process `pid` runs. A zombie (exited, not yet reaped by its parent: a rank killed while the
    launcher still waits for its siblings) counts as gone; someone else's process as running."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            stat = f.read()
    except OSError:  # no /proc (not Linux), or it exited just now
        return os.path.exists(f"/proc/{pid}") or not os.path.isdir("/proc")
    return stat[stat.rfind(b")") + 2:stat.rfind(b")") + 3] not in (b"Z", b"X")


def exited(pids: list[int], wait_s: float = 2.0) -> list[int]:
    """The pids among `pids` that no longer run, polling up to `wait_s` until one has: a peer's connection
    can close a moment before its process is seen to end (the kernel closes its sockets while it exits)."""
    deadline = time.monotonic() + wait_s
    while True:
        gone = [p for p in pids if not process_exists(p)]
        if gone or time.monotonic() >= deadline:
            return gone
        time.sleep(0.01)


# what gloo's transport says when a peer's socket closed (its process died or destroyed the group)
LOST = ("connection closed by peer", "connection reset by peer", "broken pipe", "connection refused",
        "socket closed", "read error", "write error")


def connection_lost(error: BaseException) -> bool:
    """Whether `error` (a collective's) says a peer's connection closed, rather than that time ran out."""
    text = str(error).lower()
    return any(w in text for w in LOST)
