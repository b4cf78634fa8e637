"""`DeviceWorker`: the thread that runs backend="kernels" calls on one emulated GPU, one call after another in
the order they were made, so that a call with `async_finish=True` returns while its kernels run.

One worker per device (not per Buffer): every Buffer of a process shares its emulated IPC GPU, and one thread
launching on it keeps the calls of several Buffers in program order, as one CUDA stream would. The caller's
thread keeps everything that talks to the process group in order with the other ranks (the agreement, the
growth of the communication buffer); the worker only launches kernels, reads their results and answers the
peer watches (point-to-point, tagged per call). A CUDA GPU runs its calls on the caller's thread
(`InlineWorker`): its launches are not yet ordered by CUDA events.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor
from typing import Any, Protocol

from ptxforge.ep.config import Completion


class Worker(Protocol):
    def submit(self, fn: Callable[[], Any]) -> Future: ...

    def drain(self) -> None: ...


class DeviceWorker:
    """A thread running submitted calls in order (see the module docstring)."""

    def __init__(self, name: str) -> None:
        self._pool = ThreadPoolExecutor(max_workers=1, thread_name_prefix=name)

    def submit(self, fn: Callable[[], Any]) -> Future:
        return self._pool.submit(fn)

    def drain(self) -> None:
        """Return once every call submitted so far has ended (well or not)."""
        self._pool.submit(_nothing).result()


class InlineWorker:
    """Runs each call at once on the caller's thread (a device without a worker)."""

    def submit(self, fn: Callable[[], Any]) -> Future:
        f: Future = Future()
        try:
            f.set_result(fn())
        except BaseException as e:  # noqa: BLE001 - kept for the call's wait, as a worker thread's would be
            f.set_exception(e)
        return f

    def drain(self) -> None:
        """Nothing runs behind the caller's back."""


def _nothing() -> None:
    """A call that only marks a point in a worker's queue."""


_WORKERS: dict[int, tuple[Any, DeviceWorker]] = {}


def worker_for(device: Any) -> Worker:
    """The worker of `device`: a thread of its own for an emulated GPU, the caller's thread for others."""
    if device.kind != "emu":
        return InlineWorker()
    held = _WORKERS.get(id(device))
    if held is None or held[0] is not device:
        held = (device, DeviceWorker("ptxforge-ep-kernels"))
        _WORKERS[id(device)] = held
    return held[1]


os.register_at_fork(after_in_child=_WORKERS.clear)  # a forked child has none of its parent's threads


class QueuedWork(Completion):
    """The pending work of an `async_finish` call on a worker: `wait()` waits for the worker to end it (its
    error, if any, raised here and at every later wait) and then `fill`s the tensors the call returned with
    its results, on the caller's thread."""

    def __init__(self, call: str, worker: Worker, future: Future, fill: Callable[[Any], None]) -> None:
        super().__init__(call, self._receive)
        self.worker, self.future, self._fill = worker, future, fill

    def _receive(self) -> None:
        self._fill(self.future.result())
        ended: Future = Future()
        ended.set_result(None)
        self.future = ended  # the worker's copy of the results is no longer needed

    def failure(self) -> BaseException | None:
        """The work's error once it has ended with one (None while it runs, or when it succeeded)."""
        return self.future.exception() if self.future.done() else None
