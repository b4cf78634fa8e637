"""A Buffer's communication thread: the whole of an asynchronous call (the input agreement, the count exchange,
packing, the all_to_all, unpacking) runs there, in call order, while the caller computes; `Job.wait()` (an
`EventOverlap`'s) waits for it and raises its error, naming the call.

Once a Buffer has started its thread, every later normal-mode call goes through it (a synchronous call is
submitted and waited for at once), so that each rank makes its collectives in one order on one thread.
"""

from __future__ import annotations

import queue
import threading
from collections.abc import Callable

from ptxforge.ep.errors import EPTimeoutError


class Job:
    """One call's work on the thread; `wait()` runs nothing, it waits (bounded) and re-raises the work's error."""

    def __init__(self, call: str, work: Callable[[], None], limit_s: float) -> None:
        self.call, self.work, self.limit_s = call, work, limit_s
        self._done = threading.Event()
        self._error: BaseException | None = None

    @property
    def done(self) -> bool:
        return self._done.is_set() and self._error is None

    def run(self) -> None:
        try:
            self.work()
        except BaseException as e:  # noqa: BLE001 - kept for the caller's wait
            self._error = e
        finally:
            self.work = None  # type: ignore[assignment]  # drops what the call held
            self._done.set()

    def wait(self) -> None:
        if not self._done.wait(self.limit_s):
            raise EPTimeoutError(f"ptxforge.ep {self.call}: the call's work on the communication thread did not end "
                                 f"within {self.limit_s:g} s (every collective it makes is bounded by the Buffer's "
                                 f"timeout_s; the calls queued before it had not ended either)")
        if self._error is not None:
            raise self._error


class CommThread:
    """A daemon thread running submitted jobs one after another (see the module docstring)."""

    def __init__(self, name: str, timeout_s: float) -> None:
        self.timeout_s = timeout_s
        self._jobs: queue.Queue[Job | None] = queue.Queue()
        self._last: Job | None = None
        self._thread = threading.Thread(target=self._loop, name=name, daemon=True)
        self._thread.start()

    def _loop(self) -> None:
        while True:
            job = self._jobs.get()
            if job is None:
                return
            job.run()

    def submit(self, call: str, work: Callable[[], None]) -> Job:
        """Queue `work`; its wait is bounded by 4 collectives' timeouts per call queued (at most) before it."""
        ahead = self._jobs.qsize() + 1
        job = Job(call, work, 4 * self.timeout_s * (ahead + 1))
        self._last = job
        self._jobs.put(job)
        return job

    def run(self, call: str, work: Callable[[], object]) -> object:
        """Run `work` on the thread after every queued job and return its result (raising its error)."""
        box: list = []
        self.submit(call, lambda: box.append(work())).wait()
        return box[0]

    def drain(self) -> None:
        """Wait until every job submitted so far has ended (their errors are raised at their own waits)."""
        last = self._last
        if last is not None:
            last._done.wait(last.limit_s)

    def close(self) -> None:
        """Stop after the queued jobs (does not wait: a job blocked on a dead peer ends at its timeout)."""
        self._jobs.put(None)
