"""The native tier's watchdog: one thread that stops launches past their wall-clock limit (`time_limit_s`)
or without progress for `watchdog_s` seconds, as the interpreter's (progress.py) tells a hang from slow work.

Every CHECK_S seconds (sooner for a small `watchdog_s`) it asks each worker of a launch for a probe
(codegen.emit_probe: at its next sweep over the block's warps the code answers with a hash of the block's
pcs and registers, the block, and its memory writes so far). An answer not seen before is progress; a
repeat means the block came back to a state it had been in with nothing written in between: a cycle it
cannot leave (a spin on a flag nobody sets; the native tier runs a block's warps in turn and a worker's
blocks one after another, so a block waiting for a later block's write waits forever). A launch with no
new answer for `watchdog_s` is stopped (status ST_NO_PROGRESS, the repeating worker in status[7]); a loop
whose registers keep changing, or that writes memory, runs on (only `time_limit_s` stops it).
"""

from __future__ import annotations

import math
import threading
import time
from dataclasses import dataclass

import numpy as np

from ptxforge.emu.native import codegen as G

CHECK_S = 0.5  # seconds between probes (at most)
STALLED_WORKER = 7  # status[7]: the worker whose block repeats


@dataclass(slots=True)
class _Launch:
    status: np.ndarray
    probes: np.ndarray  # (workers, PROBE_LEN) int64
    deadline: float  # time_limit_s's (inf: none)
    watchdog_s: float
    every: float
    last_new: float
    next_check: float
    seen: list[set] | None = None  # each worker's answers so far (made at the first check: most launches end before)


class Watchdog:
    """See the module docstring; `watch` a launch while it runs, `forget` it after."""

    def __init__(self) -> None:
        self.lock = threading.Lock()  # (`watch` and `forget` take it directly: the condition's own `with` costs more)
        self.cond = threading.Condition(self.lock)
        self.live: dict[int, _Launch] = {}
        self.next_token = 0
        self.thread: threading.Thread | None = None
        self.wake: float | None = None  # when the thread wakes next (None: when notified)

    def watch(self, status: np.ndarray, probes: np.ndarray, time_limit_s: float | None,
              watchdog_s: float) -> int | None:
        if time_limit_s is None and watchdog_s == math.inf:
            return None
        now = time.monotonic()
        deadline = math.inf if time_limit_s is None else now + time_limit_s
        every = min(CHECK_S, watchdog_s / 4)
        launch = _Launch(status, probes, deadline, watchdog_s, every, now, now + every)
        with self.lock:
            self.next_token += 1
            self.live[self.next_token] = launch
            if self.thread is None:
                self.thread = threading.Thread(target=self._run, daemon=True, name="ptxforge-native-watchdog")
                self.thread.start()
            first = min(deadline, launch.next_check)
            if self.wake is None or first < self.wake:  # (waking the thread costs a GIL hand-over)
                self.cond.notify()
            return self.next_token

    def forget(self, token: int | None) -> None:
        if token is not None:
            with self.lock:
                self.live.pop(token, None)

    def _run(self) -> None:
        with self.cond:
            while True:
                now = time.monotonic()
                for launch in self.live.values():
                    if launch.status[0] != 0:
                        continue
                    if launch.deadline <= now:
                        launch.status[0] = G.ST_STOP
                    elif launch.next_check <= now:
                        self._check(launch, now)
                # sleep until the earliest deadline or check (a launch that ended early leaves it: a spare wake-up)
                times = [t for la in self.live.values() for t in (la.deadline, la.next_check) if t > now]
                self.wake = min(times, default=None)
                self.cond.wait(None if self.wake is None else self.wake - now)

    @staticmethod
    def _check(launch: _Launch, now: float) -> None:
        launch.next_check = now + launch.every
        probes = launch.probes
        seen = launch.seen
        if seen is None:
            seen = launch.seen = [set() for _ in range(probes.shape[0])]
        repeat = -1
        for wk in range(probes.shape[0]):
            req = probes[wk, G.PROBE_REQ]
            if req == 0 and probes[wk, G.PROBE_BLOCK] >= 0:  # answered since the last check
                key = (int(probes[wk, G.PROBE_HASH]), int(probes[wk, G.PROBE_BLOCK]),
                       int(probes[wk, G.PROBE_WRITES]))
                if key in seen[wk]:
                    repeat = wk
                else:
                    seen[wk].add(key)
                    launch.last_new = now
            if req != -1:  # (-1: the worker is done)
                probes[wk, G.PROBE_REQ] = 1
        if repeat >= 0 and now - launch.last_new >= launch.watchdog_s:
            launch.status[STALLED_WORKER] = repeat
            launch.status[0] = G.ST_NO_PROGRESS


WATCHDOG = Watchdog()
