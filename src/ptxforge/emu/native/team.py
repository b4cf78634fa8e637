"""The native tier's worker team: helper threads that share a launch's blocks with the caller's thread, claiming
chunks inside machine code, and that stay awake a short while after a launch so the next one finds them ready.

Three small machine-code functions (team_code.py) do the work with the GIL released: `claim` takes chunks of
blocks from the launch's counter (a compare-and-swap) and runs the kernel's `run_blocks` on each until no block
is left or the status word says stop (a fault, a time limit, the watchdog); `lead`, called by the launching
thread, publishes the launch (a new generation), claims like the others, closes the launch to late helpers and
waits for the helpers that joined; `serve`, a helper's loop, watches the generation and joins each new launch,
and returns to Python (which then sleeps on a condition until the next launch) once SPIN_S has passed without
work. So chunks cost a compare-and-swap, not a GIL hand-over, and back-to-back launches skip the
helpers' wake-up; an idle process spins at most SPIN_S per helper after its last launch, one helper fewer than
the cores it may use ($PTXFORGE_NATIVE_SPIN_S=0 turns spinning off).

A helper joins a launch only while it is open (the generation and an open flag in one word, taken by
compare-and-swap), so the launcher waits for exactly the helpers that touch its arrays; a helper woken late
finds the launch closed and leaves it alone.
"""

from __future__ import annotations

import os
import threading
import time

import numpy as np

from ptxforge import environment
from ptxforge.emu.native import codegen as G
from ptxforge.emu.native import team_code as TC

GUIDED = 2  # a chunk takes at least 1/(GUIDED * workers) of the blocks left
SPIN_S = 0.0005  # a helper watches for the next launch this long (seconds) before it sleeps; 0: never spins
# ($PTXFORGE_NATIVE_SPIN_S, read when the team is made, says otherwise)

# A launch in which a helper that was awake found no core to join, or one that kept the caller waiting over LATE_S
# for a helper's last chunk (it lost its core mid-chunk: on a busy machine, for a time slice of milliseconds), starts
# a quiet spell in which launches free to run alone (threads=None) do: MIN_QUIET_S, doubling up to MAX_QUIET_S
LATE_S = 0.0002
MIN_QUIET_S = 0.001
MAX_QUIET_S = 0.05


class Team:
    """The helper threads of this process's native launches (`run`), started as launches first want them."""

    def __init__(self) -> None:
        self.engine, self.lead, self.serve = TC.compile_team()
        raw = np.zeros(TC.T_LEN + 8, np.int64)  # (the record at a 64-byte boundary)
        skip = (-raw.ctypes.data % 64) // 8
        self.rec = raw[skip:skip + TC.T_LEN]
        self.rec_words, self.address = self.rec.data, self.rec.ctypes.data
        self.rec[TC.T_CLOCK] = TC.libc_address("clock_gettime")
        self.rec[TC.T_YIELD] = TC.libc_address("sched_yield")
        self.rec[TC.T_NAP] = TC.libc_address("usleep")
        self.lock = threading.Lock()  # one launch at a time (another finds it busy and runs alone)
        self.cond = threading.Condition()  # sleeping helpers wait on it for the next generation
        self.gen = 0
        self.sleeping = 0
        self.helpers: list[threading.Thread] = []
        self.ctxs = np.zeros((1, G.CTX_LEN), np.int64)  # row k: helper k's context (row 0 unused: the caller's)
        self.ctx_words, self.ctxs_address = self.ctxs.reshape(-1).data, self.ctxs.ctypes.data
        self.shared: list[tuple[np.ndarray, int]] = [(np.zeros(0, np.uint8), 0)]  # helper k's shared memory, address
        self.ready = (1, 0)  # (workers, shared bytes each) the rows, buffers and threads are ready for
        self.spinners = _cores() - 1  # helpers 1..spinners spin after a launch (more would take the caller's core)
        spin_s = environment.native_spin_s()
        self.spin_ns = int((SPIN_S if spin_s is None else spin_s) * 1e9)
        self.launches = 0  # launches shared with helpers so far
        self.joined = 0  # helpers that joined them (a helper that woke too late for a launch did not)
        self.quiet_until = 0.0  # (perf_counter) launches that may run alone do so until then (`quiet`)
        self.backoff = MIN_QUIET_S  # the next quiet spell's length

    def run(self, fn_address: int, ctx0: memoryview, ctx_address: int, probes_address: int, nworkers: int,
            first: int, last: int, chunk: int, shared_size: int) -> int:
        """Blocks [first, last) of a launch whose caller's context is `ctx0` (CTX_LEN int64s, at `ctx_address`),
        in chunks of `chunk`, by the caller and up to `nworkers - 1` helpers (worker k's probe row k of the rows
        at `probes_address`); the helpers that joined (one still asleep may miss it). The caller holds `lock`."""
        if nworkers > self.ready[0] or shared_size > self.ready[1]:
            self._grow(nworkers, shared_size)
        words, n = self.ctx_words, G.CTX_LEN
        for k in range(1, nworkers):
            words[k * n:(k + 1) * n] = ctx0
            words[k * n + G.CTX_PROBE] = probes_address + 8 * G.PROBE_LEN * k
            words[k * n + G.CTX_SHARED] = self.shared[k][1]
        r = self.rec_words
        r[TC.T_FN], r[TC.T_CTXS], r[TC.T_NWANT] = fn_address, self.ctxs_address, nworkers
        r[TC.T_NEXT], r[TC.T_LAST], r[TC.T_CHUNK], r[TC.T_DIV] = first, last, chunk, GUIDED * nworkers
        self.gen += 1
        self.launches += 1
        awake = r[TC.T_SPINNING] > 0  # (a helper watching now; one on its way to sleep is not)
        if self.sleeping:
            with self.cond:
                self.cond.notify_all()
        waited = self.lead(self.address, ctx_address, self.gen) * 1e-9
        joins = int(r[TC.T_JOINS])
        self.joined += joins
        self.note(awake, joins, waited)
        return joins

    def note(self, awake: bool, joins: int, waited: float) -> None:
        """Account a shared launch: whether a helper was awake at its start, the helpers that joined, the seconds
        the caller waited for them at the end (a quiet spell after no core for a helper, or one that lost its
        core mid-chunk; helpers that joined in time shrink the next spell back to MIN_QUIET_S)."""
        if (awake and not joins) or waited > LATE_S:
            self.quiet_until = time.perf_counter() + self.backoff
            self.backoff = min(2 * self.backoff, MAX_QUIET_S)
        elif joins:
            self.backoff = MIN_QUIET_S

    def quiet(self) -> bool:
        """Whether a launch free to run alone should (a helper lately found no core; the spell doubles each
        time, from MIN_QUIET_S to MAX_QUIET_S, and shrinks back once helpers join again)."""
        return time.perf_counter() < self.quiet_until

    def _grow(self, nworkers: int, shared_size: int) -> None:
        """Helpers 1..nworkers-1 started, each with a context row and a shared buffer of `shared_size` bytes."""
        if self.ctxs.shape[0] < nworkers:
            self.ctxs = np.zeros((nworkers, G.CTX_LEN), np.int64)
            self.ctx_words, self.ctxs_address = self.ctxs.reshape(-1).data, self.ctxs.ctypes.data
        while len(self.shared) < nworkers:
            self.shared.append((np.zeros(0, np.uint8), 0))
        for k in range(1, nworkers):
            if self.shared[k][0].size < max(shared_size, 1):
                arr = np.zeros(max(shared_size, 4096), np.uint8)
                self.shared[k] = (arr, arr.ctypes.data)
        while len(self.helpers) < nworkers - 1:
            me = len(self.helpers) + 1
            th = threading.Thread(target=self._serve_loop, args=(me,), daemon=True, name=f"ptxforge-native-{me}")
            with self.cond:
                self.sleeping += 1  # (until it serves: a launch before that is not one it missed)
            th.start()
            self.helpers.append(th)
        self.ready = (max(nworkers, self.ready[0]), min(b[0].size for b in self.shared[1:]))

    def _serve_loop(self, me: int) -> None:
        """Helper `me`: serve launches in machine code; when SPIN_S passes without one, sleep until the next."""
        seen = 0
        rec, serve = self.rec, self.serve  # (kept alive here while the helper runs)
        with self.cond:
            self.sleeping -= 1
        while True:
            spin_ns = self.spin_ns if me <= self.spinners else 0
            seen = serve(rec.ctypes.data, me, seen, spin_ns)
            with self.cond:
                self.sleeping += 1
                while self.gen == seen:
                    self.cond.wait()
                self.sleeping -= 1


def _cores() -> int:
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except AttributeError:  # (not Linux)
        return max(1, os.cpu_count() or 1)


_TEAM: list[Team | None] = []
_TEAM_LOCK = threading.Lock()


def _forget_after_fork() -> None:
    _TEAM.clear()  # (a forked child has none of the helper threads: its first sharing launch makes a team)


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_forget_after_fork)


def team() -> Team | None:
    """This process's team (made at the first launch that shares its blocks); None where it cannot be made (no
    clock_gettime, sched_yield or usleep in the C library: launches run on the caller's thread)."""
    if not _TEAM:
        with _TEAM_LOCK:
            if not _TEAM:
                try:
                    _TEAM.append(Team())
                except (OSError, AttributeError):
                    _TEAM.append(None)
    return _TEAM[0]
