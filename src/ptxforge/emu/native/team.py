"""The native tier's worker team: helper threads that share a launch's blocks with the caller's thread, claiming
chunks inside machine code, and that stay awake a short while after a launch so the next one finds them ready.

Three small machine-code functions (llvmlite, compiled once per process) do the work with the GIL released:
`claim` takes chunks of blocks from the launch's counter (an atomic add) and runs the kernel's `run_blocks` on
each until no block is left or the status word says stop (a fault, a time limit, the watchdog); `lead`, called by
the launching thread, publishes the launch (a new generation), claims like the others, closes the launch to
late helpers and waits for the helpers that joined; `serve`, a helper's loop, watches the generation and joins
each new launch, and returns to Python (which then sleeps on a condition until the next launch) once SPIN_S has
passed without one. So chunks cost an atomic add, not a GIL hand-over, and back-to-back launches skip the
helpers' wake-up; an idle process spins at most SPIN_S per helper after its last launch, one helper fewer than
the cores it may use ($PTXFORGE_NATIVE_SPIN_S=0 turns spinning off).

A helper joins a launch only while it is open (the generation and an open flag in one word, taken by
compare-and-swap), so the launcher waits for exactly the helpers that touch its arrays; a helper woken late
finds the launch closed and leaves it alone.
"""

from __future__ import annotations

import ctypes
import os
import threading
import time
from typing import Any

import llvmlite.binding as llvm
import llvmlite.ir as L
import numpy as np

from ptxforge import environment
from ptxforge.emu.native import codegen as G

GUIDED = 2  # a chunk takes at least 1/(GUIDED * workers) of the blocks left
SPIN_S = 0.0005  # a helper watches for the next launch this long (seconds) before it sleeps; 0: never spins
# ($PTXFORGE_NATIVE_SPIN_S, read when the team is made, says otherwise)

# the team record's int64 slots (the counter and the state word on cache lines of their own)
# A launch in which a helper that was awake found no core to join, or one that kept the caller waiting over LATE_S
# for a helper's last chunk (it lost its core mid-chunk: on a busy machine, for a time slice of milliseconds), starts
# a quiet spell in which launches free to run alone (threads=None) do: MIN_QUIET_S, doubling up to MAX_QUIET_S
LATE_S = 0.0002
MIN_QUIET_S = 0.001
MAX_QUIET_S = 0.5

T_GEN, T_FN, T_CTXS, T_NWANT, T_LAST, T_CHUNK, T_CLOCK, T_YIELD = range(8)
T_NEXT = 8  # the next block to claim
T_STATE, T_JOINS = 16, 17  # generation << 32 | OPEN | helpers at work; helpers that joined this launch
T_NAP, T_DIV = 24, 25  # (libc's usleep); a chunk takes at least 1/T_DIV of the blocks left
T_LEN = 32
OPEN = 1 << 31
AT_WORK = OPEN - 1
_CLOCK_MONOTONIC = 1  # (Linux)
_YIELD_AFTER = 1 << 8  # the launcher spins this many times on helpers at work before it yields its core
_NAP_AFTER_NS = 50_000  # and naps (usleep) _NAP_US at a time once it has waited this long
_NAP_US = 50

I64 = L.IntType(64)
I32 = L.IntType(32)
P64 = I64.as_pointer()


def _const(v: int) -> L.Constant:
    return L.Constant(I64, v)


def _slot(b: L.IRBuilder, p: L.Value, i: int | L.Value) -> L.Value:
    return b.gep(p, [i if isinstance(i, L.Value) else _const(i)])


class _Code:
    """Builds the module of `claim`, `lead` and `serve` (see the module docstring)."""

    def __init__(self) -> None:
        self.m = L.Module("ptxforge_native_team")
        self.run_ty = L.FunctionType(L.VoidType(), [P64, I64, I64])
        self.pause = self._pause()
        self.claim = self._claim()
        self.now = self._now()
        self.lead = self._lead()
        self.serve = self._serve()

    def _pause(self) -> L.Function:
        """A spin-wait hint to the core (x86's `pause`; nothing elsewhere)."""
        f = L.Function(self.m, L.FunctionType(L.VoidType(), []), "team_pause")
        b = L.IRBuilder(f.append_basic_block())
        if llvm.get_process_triple().startswith(("x86_64", "i686", "i386")):
            b.call(L.Function(self.m, L.FunctionType(L.VoidType(), []), "llvm.x86.sse2.pause"), [])
        b.ret_void()
        return f

    def _now(self) -> L.Function:
        """Nanoseconds of CLOCK_MONOTONIC, by the clock_gettime whose address the team record holds."""
        f = L.Function(self.m, L.FunctionType(I64, [P64]), "team_now")
        b = L.IRBuilder(f.append_basic_block())
        ts = b.alloca(L.ArrayType(I64, 2))
        clock_ty = L.FunctionType(I32, [I32, P64])
        clock = b.inttoptr(b.load(_slot(b, f.args[0], T_CLOCK)), clock_ty.as_pointer())
        tsp = b.bitcast(ts, P64)
        b.call(clock, [L.Constant(I32, _CLOCK_MONOTONIC), tsp])
        sec, ns = b.load(_slot(b, tsp, 0)), b.load(_slot(b, tsp, 1))
        b.ret(b.add(b.mul(sec, _const(1_000_000_000)), ns))
        return f

    def _claim(self) -> L.Function:
        """claim(team, ctx): chunks of blocks until none is left or the status is not 0; then this worker's probe
        slot says it is done (the watchdog stops asking it). A chunk is the larger of T_CHUNK blocks and
        1/T_DIV of the blocks left (guided: big chunks first, small ones at the end, where they balance)."""
        f = L.Function(self.m, L.FunctionType(L.VoidType(), [P64, P64]), "team_claim")
        t, ctx = f.args
        names = ("entry", "loop", "take", "cas", "swap", "work", "done")
        entry, loop, take, cas, swap, work, done = (f.append_basic_block(n) for n in names)
        b = L.IRBuilder(entry)
        fn = b.inttoptr(b.load(_slot(b, t, T_FN)), self.run_ty.as_pointer())
        last, least, div = b.load(_slot(b, t, T_LAST)), b.load(_slot(b, t, T_CHUNK)), b.load(_slot(b, t, T_DIV))
        status = b.inttoptr(b.load(_slot(b, ctx, G.CTX_STATUS)), P64)
        nxt = _slot(b, t, T_NEXT)
        b.branch(loop)
        b.position_at_end(loop)
        b.cbranch(b.icmp_signed("!=", b.load_atomic(status, "monotonic", 8), _const(0)), done, take)
        b.position_at_end(take)
        cur0 = b.load_atomic(nxt, "monotonic", 8)
        b.branch(cas)
        b.position_at_end(cas)
        cur = b.phi(I64)
        cur.add_incoming(cur0, take)
        share = b.sdiv(b.sub(last, cur), div)
        end = b.add(cur, b.select(b.icmp_signed(">", share, least), share, least))
        end = b.select(b.icmp_signed("<", end, last), end, last)
        b.cbranch(b.icmp_signed(">=", cur, last), done, swap)
        b.position_at_end(swap)
        got = b.cmpxchg(nxt, cur, end, "monotonic", "monotonic")
        cur.add_incoming(b.extract_value(got, 0), swap)
        b.cbranch(b.extract_value(got, 1), work, cas)
        b.position_at_end(work)
        b.call(fn, [ctx, cur, end])
        b.branch(loop)
        b.position_at_end(done)
        probe = b.inttoptr(b.load(_slot(b, ctx, G.CTX_PROBE)), P64)
        b.store_atomic(_const(-1), _slot(b, probe, G.PROBE_REQ), "release", 8)
        b.ret_void()
        return f

    def _lead(self) -> L.Function:
        """lead(team, ctx, gen) -> nanoseconds waited: open launch `gen` (its fields already in the record), claim,
        close it, wait for the helpers that joined: spinning, then yielding the core between looks, then (past
        _NAP_AFTER_NS: a helper lost its core) napping, so that the helper may have this core."""
        f = L.Function(self.m, L.FunctionType(I64, [P64, P64, I64]), "team_lead")
        t, ctx, gen = f.args
        names = ("entry", "wait", "look", "slow", "yield", "nap", "out")
        entry, wait, look, slow, yld, nap, out = (f.append_basic_block(n) for n in names)
        b = L.IRBuilder(entry)
        state = _slot(b, t, T_STATE)
        b.store_atomic(_const(0), _slot(b, t, T_JOINS), "monotonic", 8)
        b.store_atomic(b.or_(b.shl(gen, _const(32)), _const(OPEN)), state, "monotonic", 8)
        b.store_atomic(gen, _slot(b, t, T_GEN), "release", 8)
        b.call(self.claim, [t, ctx])
        b.atomic_rmw("and", state, _const(~OPEN), "acq_rel")
        since = b.call(self.now, [t])
        b.branch(wait)
        b.position_at_end(wait)
        spins = b.phi(I64)
        spins.add_incoming(_const(0), entry)
        busy = b.and_(b.load_atomic(state, "acquire", 8), _const(AT_WORK))
        b.cbranch(b.icmp_signed("==", busy, _const(0)), out, look)
        b.position_at_end(look)
        b.call(self.pause, [])
        more = b.add(spins, _const(1))
        b.cbranch(b.icmp_signed(">=", more, _const(_YIELD_AFTER)), slow, wait)
        spins.add_incoming(more, look)
        b.position_at_end(slow)
        late = b.icmp_signed(">=", b.sub(b.call(self.now, [t]), since), _const(_NAP_AFTER_NS))
        b.cbranch(late, nap, yld)
        b.position_at_end(yld)
        b.call(b.inttoptr(b.load(_slot(b, t, T_YIELD)), L.FunctionType(I32, []).as_pointer()), [])
        b.branch(wait)
        spins.add_incoming(more, yld)
        b.position_at_end(nap)
        nap_fn = b.inttoptr(b.load(_slot(b, t, T_NAP)), L.FunctionType(I32, [I32]).as_pointer())
        b.call(nap_fn, [L.Constant(I32, _NAP_US)])
        b.branch(wait)
        spins.add_incoming(more, nap)
        b.position_at_end(out)
        b.ret(b.sub(b.call(self.now, [t]), since))
        return f

    def _serve(self) -> L.Function:
        """serve(team, me, seen, spin_ns) -> the last generation seen: helper `me` joins every launch after `seen`
        that wants it and is open, and returns once `spin_ns` passed without a new one."""
        f = L.Function(self.m, L.FunctionType(I64, [P64, I64, I64, I64]), "team_serve")
        t, me, seen0, spin_ns = f.args
        names = ("entry", "loop", "new", "try", "cas", "swap", "join", "rearm", "skip", "idle", "clock", "out")
        entry, loop, new, try_, cas, swap, join, rearm, skip, idle, clock, out = (f.append_basic_block(n)
                                                                                  for n in names)
        b = L.IRBuilder(entry)
        state = _slot(b, t, T_STATE)
        deadline0 = b.add(b.call(self.now, [t]), spin_ns)
        b.branch(loop)

        b.position_at_end(loop)
        seen, deadline, spins = b.phi(I64), b.phi(I64), b.phi(I64)
        gen = b.load_atomic(_slot(b, t, T_GEN), "acquire", 8)
        b.cbranch(b.icmp_signed("!=", gen, seen), new, idle)

        b.position_at_end(new)  # a launch after `seen`: join it if it wants this helper
        b.cbranch(b.icmp_signed("<", me, b.load(_slot(b, t, T_NWANT))), try_, skip)
        b.position_at_end(try_)
        s0 = b.load_atomic(state, "monotonic", 8)
        b.branch(cas)
        b.position_at_end(cas)  # (compare-and-swap while the launch is open)
        s = b.phi(I64)
        s.add_incoming(s0, try_)
        still = b.and_(b.icmp_signed("==", b.lshr(s, _const(32)), gen),
                       b.icmp_signed("!=", b.and_(s, _const(OPEN)), _const(0)))
        b.cbranch(still, swap, skip)
        b.position_at_end(swap)
        got = b.cmpxchg(state, s, b.add(s, _const(1)), "acq_rel", "monotonic")
        s.add_incoming(b.extract_value(got, 0), swap)
        b.cbranch(b.extract_value(got, 1), join, cas)
        b.position_at_end(join)
        b.atomic_rmw("add", _slot(b, t, T_JOINS), _const(1), "monotonic")
        ctxs = b.inttoptr(b.load(_slot(b, t, T_CTXS)), P64)
        b.call(self.claim, [t, _slot(b, ctxs, b.mul(me, _const(G.CTX_LEN)))])
        b.atomic_rmw("sub", state, _const(1), "release")
        b.branch(rearm)
        b.position_at_end(rearm)  # (after work: the spin starts over)
        fresh = b.add(b.call(self.now, [t]), spin_ns)
        b.branch(loop)
        b.position_at_end(skip)  # (a launch this helper missed or was not wanted for: the spin goes on)
        b.branch(loop)

        b.position_at_end(idle)  # nothing new: pause, offer the core to whoever waits for it, look at the clock
        b.call(self.pause, [])  # every 64 turns
        b.call(b.inttoptr(b.load(_slot(b, t, T_YIELD)), L.FunctionType(I32, []).as_pointer()), [])
        spins1 = b.add(spins, _const(1))
        b.cbranch(b.icmp_signed("==", b.and_(spins1, _const(63)), _const(0)), clock, loop)
        b.position_at_end(clock)
        b.cbranch(b.icmp_signed(">=", b.call(self.now, [t]), deadline), out, loop)
        b.position_at_end(out)
        b.ret(seen)

        seen.add_incoming(seen0, entry)
        seen.add_incoming(gen, rearm)
        seen.add_incoming(gen, skip)
        seen.add_incoming(seen, idle)
        seen.add_incoming(seen, clock)
        deadline.add_incoming(deadline0, entry)
        deadline.add_incoming(fresh, rearm)
        deadline.add_incoming(deadline, skip)
        deadline.add_incoming(deadline, idle)
        deadline.add_incoming(deadline, clock)
        spins.add_incoming(_const(0), entry)
        spins.add_incoming(_const(0), rearm)
        spins.add_incoming(spins, skip)
        spins.add_incoming(spins1, idle)
        spins.add_incoming(spins1, clock)
        return f


_VOID_P = ctypes.c_void_p
_LEAD = ctypes.CFUNCTYPE(ctypes.c_int64, _VOID_P, _VOID_P, ctypes.c_int64)
_SERVE = ctypes.CFUNCTYPE(ctypes.c_int64, _VOID_P, ctypes.c_int64, ctypes.c_int64, ctypes.c_int64)


def _compile() -> tuple[Any, Any, Any]:
    """(the engine, `lead`, `serve`) of the team's machine code (compiled here: a few milliseconds, once)."""
    llvm.initialize_native_target()
    llvm.initialize_native_asmprinter()
    code = _Code()
    target = llvm.Target.from_default_triple()
    tm = target.create_target_machine(cpu=llvm.get_host_cpu_name(), features=llvm.get_host_cpu_features().flatten(),
                                      opt=2, codemodel="jitdefault")
    mod = llvm.parse_assembly(str(code.m))
    mod.verify()
    engine = llvm.create_mcjit_compiler(mod, tm)
    engine.finalize_object()
    return (engine, _LEAD(engine.get_function_address("team_lead")),
            _SERVE(engine.get_function_address("team_serve")))


def _libc_address(name: str) -> int:
    return ctypes.cast(getattr(ctypes.CDLL(None), name), _VOID_P).value or 0


class Team:
    """The helper threads of this process's native launches (`run`), started as launches first want them."""

    def __init__(self) -> None:
        self.engine, self.lead, self.serve = _compile()
        raw = np.zeros(T_LEN + 8, np.int64)  # (the record at a 64-byte boundary)
        skip = (-raw.ctypes.data % 64) // 8
        self.rec = raw[skip:skip + T_LEN]
        self.rec_words, self.address = self.rec.data, self.rec.ctypes.data
        self.rec[T_CLOCK] = _libc_address("clock_gettime")
        self.rec[T_YIELD] = _libc_address("sched_yield")
        self.rec[T_NAP] = _libc_address("usleep")
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
        r[T_FN], r[T_CTXS], r[T_NWANT] = fn_address, self.ctxs_address, nworkers
        r[T_NEXT], r[T_LAST], r[T_CHUNK], r[T_DIV] = first, last, chunk, GUIDED * nworkers
        self.gen += 1
        self.launches += 1
        awake = not self.sleeping
        if not awake:
            with self.cond:
                self.cond.notify_all()
        waited = self.lead(self.address, ctx_address, self.gen) * 1e-9
        joins = int(r[T_JOINS])
        self.joined += joins
        if (awake and not joins) or waited > LATE_S:  # no core for a helper, or one lost its core mid-chunk
            self.quiet_until = time.perf_counter() + self.backoff
            self.backoff = min(2 * self.backoff, MAX_QUIET_S)
        elif joins:
            self.backoff = MIN_QUIET_S
        return joins

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
