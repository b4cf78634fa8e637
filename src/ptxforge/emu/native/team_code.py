"""The machine code of the native tier's worker team (team.py): `claim`, `lead` and `serve`, built with llvmlite
and compiled once per process, and the layout of the team record they share (int64 slots T_*).

`claim(team, ctx)` takes chunks of blocks from the record's counter (compare-and-swap; guided: the larger of
T_CHUNK blocks and 1/T_DIV of the blocks left) and runs the kernel's `run_blocks` on each until no block is left
or the status word says stop. `lead(team, ctx, gen)` opens launch `gen`, claims, closes the launch and waits for
the helpers that joined, returning the nanoseconds it waited. `serve(team, me, seen, spin_ns)` is a helper's
loop: it joins each launch after generation `seen` that wants it and is still open, and returns the last
generation seen once `spin_ns` passed without work (T_SPINNING counts the helpers in it). The record also holds
the addresses of libc's clock_gettime, sched_yield and usleep, which the code calls.
"""

from __future__ import annotations

import ctypes
import time
from typing import Any

import llvmlite.binding as llvm
import llvmlite.ir as L

from ptxforge.emu.native import codegen as G

# the team record's int64 slots (the counter, the state word and the rest on cache lines of their own)
T_GEN, T_FN, T_CTXS, T_NWANT, T_LAST, T_CHUNK, T_CLOCK, T_YIELD = range(8)
T_NEXT = 8  # the next block to claim
T_STATE, T_JOINS = 16, 17  # generation << 32 | OPEN | helpers at work; helpers that joined this launch
T_NAP, T_DIV = 24, 25  # (libc's usleep); a chunk takes at least 1/T_DIV of the blocks left
T_SPINNING = 26  # helpers in `serve` now (watching for launches)
T_LEN = 32
OPEN = 1 << 31
AT_WORK = OPEN - 1
_CLOCK_MONOTONIC = getattr(time, "CLOCK_MONOTONIC", 1)
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
        that wants it and is open, and returns once `spin_ns` passed without work or at a launch it missed."""
        f = L.Function(self.m, L.FunctionType(I64, [P64, I64, I64, I64]), "team_serve")
        t, me, seen0, spin_ns = f.args
        names = ("entry", "loop", "new", "try", "cas", "swap", "join", "rearm", "skip", "missed", "idle", "clock",
                 "out")
        entry, loop, new, try_, cas, swap, join, rearm, skip, missed, idle, clock, out = (f.append_basic_block(n)
                                                                                          for n in names)
        b = L.IRBuilder(entry)
        state = _slot(b, t, T_STATE)
        spinning = _slot(b, t, T_SPINNING)
        b.atomic_rmw("add", spinning, _const(1), "monotonic")
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
        b.cbranch(still, swap, missed)
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
        b.position_at_end(skip)  # (a launch that does not want this helper: the spin goes on)
        b.branch(loop)
        b.position_at_end(missed)  # (a launch it wanted closed before this helper saw it: the helper has no core of
        b.branch(out)  # its own, spinning only takes the launcher's; asleep, the next wake-up places it anew)

        b.position_at_end(idle)  # nothing new: pause, offer the core to whoever waits for it, look at the clock
        b.call(self.pause, [])  # every 64 turns
        b.call(b.inttoptr(b.load(_slot(b, t, T_YIELD)), L.FunctionType(I32, []).as_pointer()), [])
        spins1 = b.add(spins, _const(1))
        b.cbranch(b.icmp_signed("==", b.and_(spins1, _const(63)), _const(0)), clock, loop)
        b.position_at_end(clock)
        b.cbranch(b.icmp_signed(">=", b.call(self.now, [t]), deadline), out, loop)
        b.position_at_end(out)
        last_seen = b.phi(I64)
        last_seen.add_incoming(seen, clock)
        last_seen.add_incoming(gen, missed)
        b.atomic_rmw("sub", spinning, _const(1), "monotonic")
        b.ret(last_seen)

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


def compile_team() -> tuple[Any, Any, Any]:
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


def libc_address(name: str) -> int:
    return ctypes.cast(getattr(ctypes.CDLL(None), name), _VOID_P).value or 0
