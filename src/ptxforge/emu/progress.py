"""The single-device watchdog: it tells a hang from slow work by whether the machine's state repeats.

Every CHECK_S seconds of wall time (sooner for a small `watchdog_s`) the machine takes a fingerprint of
its state: the converged pc or every lane's pc, a CRC of each register (on the lanes that can still read
it: liveness.py), .param variable and frame base, the barrier arrivals, tensor memory, and the count of
memory writes. It then looks at every step until
the warps stand at the same pcs again, every runnable lane having run since, and compares. The same
fingerprint with no memory written in between is a cycle the launch cannot leave (during a launch
nothing but its own threads writes a lone device's memory): no progress. A different one is progress.
A launch whose state keeps repeating for `watchdog_s` seconds is stopped, naming where each warp waits
and the lines it loops over. (All warps waiting at barriers nothing can release is a deadlock the
machine reports at once, without waiting.) A loop that writes memory on every turn counts as progress.

On an IPC device (ptxforge.emu.ipc) other processes write the memory too: a spin on a flag that another
rank's process will set repeats its state while that process works. There the check also reads the other
processes' progress counters (ipc/memory.py) and restarts the stall clock whenever they moved; the watchdog
fires after `watchdog_s` with no progress anywhere the launch can see, or after BOUND x `watchdog_s` of
repeating state whatever the others did. Every tick (TICK_MASK + 1 steps) publishes this process's own
progress for the others.

`time_limit_s` is a separate, plain wall-clock limit on the whole launch, checked at every tick and between
waves. The API's default is None (no limit: a launch that keeps making progress runs to its end; the watchdog
still stops one whose state repeats); `ptxforge run` sets CLI_TIME_LIMIT_S unless --time-limit says otherwise.
The tick runs every TICK_MASK + 1 steps (one clock read); only while a fingerprint is being compared
does it run every step.
"""

from __future__ import annotations

import math
import time
import zlib
from typing import TYPE_CHECKING, Any

import numpy as np

from ptxforge.emu.errors import LaunchError, TimeLimitExceeded, WatchdogTimeout
from ptxforge.emu.liveness import liveness_for
from ptxforge.emu.op import BRA, WAIT_BAR

if TYPE_CHECKING:
    from ptxforge.emu.machine import Machine

CHECK_S = 0.5  # seconds between progress checks (at most)
TICK_MASK = 0xFF  # steps between clock reads
MAX_OVERHEAD = 0.05  # fingerprints may take at most this share of the run (large waves check less often)
PROBE_STEPS = 1 << 14  # steps a probe waits for the warps to come back to where they were
CLI_TIME_LIMIT_S = 600.0  # `ptxforge run`'s default time limit (--time-limit inf: none)
BOUND = 10  # an IPC launch whose state repeats this many watchdog_s is stuck, whatever other processes do


def check_time_options(watchdog_s: Any, time_limit_s: Any) -> tuple[float, float | None]:
    """Validate the launch's `watchdog_s` (> 0; inf turns it off) and `time_limit_s` (None or > 0)."""
    if type(watchdog_s) is float and watchdog_s > 0 and time_limit_s is None:  # (NaN fails `> 0`)
        return watchdog_s, None  # the common case, checked at every launch: already what the loop below makes
    out: list[float | None] = []
    for name, v in (("watchdog_s", watchdog_s), ("time_limit_s", time_limit_s)):
        if v is None and name == "time_limit_s":
            out.append(None)
            continue
        try:
            f = float(v)
        except (TypeError, ValueError):
            raise LaunchError(f"{name} must be a number of seconds, got {v!r}") from None
        if math.isnan(f) or f <= 0:
            raise LaunchError(f"{name} must be a positive number of seconds (inf: no limit), got {v!r}")
        out.append(f)
    return out[0], out[1]  # type: ignore[return-value]  # out[0], watchdog_s's, is never None


def _crc(a) -> int:
    return zlib.crc32(np.ascontiguousarray(a))  # type: ignore[arg-type]  # an ndarray is a buffer


def _arrays(m, pc):
    """The parts of machine `m`'s state a fingerprint covers, besides the pcs and the write count (`pc`: the
    converged pc, or None when the wave's pcs are per lane)."""
    st = m.st
    yield from _registers(m, pc)
    yield from st.pvars
    yield st.fb
    if m.pcs is not None:
        yield m.arrivals
        yield m.lane_bar
        yield m.depth
    tmem = getattr(st, "tmem", None)
    if tmem is not None:
        yield from tmem.cells.values()


_NOTHING = np.zeros(0, np.uint8)


def _registers(m, pc):
    """Each register as far as its value can still matter (liveness.py): a value no lane reads again is no
    part of the state, so a loop that only rewrites such a value repeats, and a value a compacted session
    did not write back (compact.py) reads the same as one it did. Uniform registers read as full arrays."""
    st = m.st
    masks = liveness_for(m).masks(m.pcs if pc is None else pc)
    for r, mk in zip(st.regs, masks, strict=True):
        if mk is False:
            yield _NOTHING
        elif mk is True:
            yield np.broadcast_to(r, (st.N,))
        else:
            yield np.where(mk, r, np.zeros((), np.asarray(r).dtype))


class _Probe:
    def __init__(self, m, pc, steps, now):
        self.t = now
        self.steps = steps
        self.pc = pc
        self.pcs = None if pc is not None else m.pcs.copy()
        self.icount = None if pc is not None else m.icount.copy()
        self.lane = 0 if pc is not None else int(np.argmin(self.pcs))  # a running lane: a cheap first test
        self.writes = m.st.mem.writes
        self.crcs = [_crc(a) for a in _arrays(m, pc)]
        self.lo = self.hi = pc  # the lines the converged warps pass through before the state repeats


class Watch:
    """The watchdog and time limit of one launch (all its waves)."""

    def __init__(self, watchdog_s: float, time_limit_s: float | None):
        now = time.monotonic()
        self.watchdog_s = watchdog_s
        self.time_limit_s = time_limit_s
        self.limit_at = now + time_limit_s if time_limit_s is not None else math.inf
        self.interval = max(0.01, min(CHECK_S, watchdog_s / 2))
        self.next = now + self.interval
        self.probe: _Probe | None = None
        self.stalled_since: float | None = None
        self.loop = ""
        # first of an unbroken run of repeats (other processes' progress or not)
        self.repeating_since: float | None = None
        self.others: int | None = None  # the other processes' progress count when the stall began (an IPC device)
        self.watching = False

    def new_wave(self) -> None:
        """A wave starts (steps count from 0 again, fresh memory counters): a wave ending is progress."""
        self.probe = None
        self.stalled_since = None

    def between_waves(self, m: Machine, next_block: int) -> None:
        """Between two waves: a grid of many short waves (each ending before its first tick) is held to the
        time limit too."""
        if time.monotonic() >= self.limit_at:
            raise TimeLimitExceeded(f"kernel ran past its time limit of {self.time_limit_s:g} s (time_limit_s) "
                                    f"between waves: {next_block:,} of its {m.nblocks:,} "
                                    f"blocks had run")

    def tick(self, m: Machine, pc: int | None, steps: int) -> bool:
        """Called every few steps with the converged pc (None when diverged); True while probing."""
        if self.probe is not None:
            return self._probe_step(m, pc, steps)
        board = m.device.progress_board  # set on memory other processes share: ipc/memory.py
        if board is not None:  # every tick, not every interval: a peer's watchdog_s may be shorter than ours
            board.publish(m.st.mem)
        now = time.monotonic()
        if now < self.next:
            return False
        self.next = now + self.interval
        if now >= self.limit_at:
            raise TimeLimitExceeded(f"kernel ran past its time limit of {self.time_limit_s:g} s (time_limit_s) "
                                    f"after {m.clock_now()} steps; {m.where()}")
        if self.watchdog_s == math.inf:
            return False
        self.probe = _Probe(m, pc, steps, now)
        self._cost = time.monotonic() - now
        return True

    def _probe_step(self, m, pc, steps) -> bool:
        p: _Probe = self.probe  # type: ignore[assignment]  # tick() probes: not None
        if pc is not None and p.pc is not None:
            p.lo, p.hi = min(p.lo, pc), max(p.hi, pc)
        if steps > p.steps and self._same_place(m, pc, p):
            t = time.monotonic()
            same = m.st.mem.writes == p.writes and all(
                _crc(a) == c for a, c in zip(_arrays(m, pc), p.crcs, strict=True))
            now = time.monotonic()
            self._end(now, (now - t) + self._cost)
            if not same:
                self.stalled_since = self.repeating_since = None
                return False
            board = m.device.progress_board
            others = None if board is None else board.others()
            if self.stalled_since is None or others != self.others:  # another process wrote: not stuck yet
                if board is not None and not self.watching:
                    self.watching = True
                    m.watch_loads()  # name the flag it polls, should it be stuck
                self.stalled_since, self.others = p.t, others
                self.repeating_since = self.repeating_since or p.t
            if p.pc is not None:
                self.loop = _span(m, p.lo, p.hi)
            if now - self.stalled_since >= self.watchdog_s:
                raise WatchdogTimeout(
                    f"kernel made no progress for {self.watchdog_s:g} s (watchdog_s): its state repeats (every live "
                    f"warp back at the same instruction with the same registers, no memory written){self.loop}"
                    f"{'' if board is None else board.note()}; {m.where()}")
            if now - self.repeating_since >= BOUND * self.watchdog_s:  # type: ignore[operator]  # set with stalled_since
                raise WatchdogTimeout(
                    f"kernel made no progress for {BOUND * self.watchdog_s:g} s ({BOUND} x watchdog_s): its state "
                    f"repeats{self.loop}, and what other processes wrote meanwhile was not what it waits for; "
                    f"{m.where()}")
            return False
        if steps - p.steps > PROBE_STEPS or (steps & TICK_MASK == 0 and time.monotonic() >= self.next):
            self._end(time.monotonic(), self._cost)  # the warps did not come back to where they were: no verdict
        return self.probe is not None

    def _same_place(self, m, pc, p) -> bool:
        if p.pc is not None:
            return pc == p.pc
        if pc is not None or m.pcs[p.lane] != p.pcs[p.lane] or not np.array_equal(m.pcs, p.pcs):
            return False
        runnable = p.pcs < WAIT_BAR
        return bool((m.icount[runnable] > p.icount[runnable]).all())  # every runnable lane ran since

    def _end(self, now, cost) -> None:
        self.probe = None
        self.next = now + max(self.interval, cost / MAX_OVERHEAD)


def _span(m, lo, hi) -> str:
    back = m.ops[hi]
    if back.kind == BRA and back.target < lo:  # the loop's head: a branch target is never ticked at
        lo = back.target
    a, b = m.ops[lo], m.ops[hi]
    return f", looping over {a.where}" if lo == hi else f", looping over {a.where} .. {b.where}"
