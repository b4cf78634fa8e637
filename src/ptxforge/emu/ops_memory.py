"""ld / st / ldu / cvta / isspacep / prefetch / fences: every access goes through memory.load/store."""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np

from ptxforge.emu import index_runs as IR
from ptxforge.emu import memory as M
from ptxforge.emu import ramps as R
from ptxforge.emu.mbarrier import with_complete_tx
from ptxforge.emu.op import NORMAL, Op
from ptxforge.emu.operands import bits_of_type, convert_width, is_signed
from ptxforge.emu.rmw import locked
from ptxforge.ptx import ir
from ptxforge.ptx.isa import modifier_slot

if TYPE_CHECKING:
    from collections.abc import Callable

    import numpy.typing as npt

    from ptxforge.emu.machine import LaneState
    from ptxforge.emu.operands import Ctx, Reader, Value

_U = {8: np.uint8, 16: np.uint16, 32: np.uint32, 64: np.uint64}
# the state spaces, as the ISA table lists ld's, without their sub-spaces ('shared::cta' is 'shared')
SPACES = frozenset(s.split("::")[0] for s in modifier_slot("ld", "space"))


def _op(fn):
    return Op(NORMAL, fn=fn)


def space_of(ins: ir.Instruction) -> str:
    for s in ins.suffixes:
        base = s.split("::")[0]
        if base in SPACES:
            return base
        if s == "nc":
            return "global"
    return "generic"


# ld/st's vector sizes, keyed by the ISA table's (same for both): 'v2' -> 2 ...
VECTOR_COUNTS = {v: int(v[1:]) for v in modifier_slot("ld", "vec")}


def vector_count(ins: ir.Instruction) -> int:
    for s in ins.suffixes:
        if s in VECTOR_COUNTS:
            return VECTOR_COUNTS[s]
    return 1


def expand(st: LaneState, v: Value, lanes: npt.NDArray[np.intp] | None, dt: npt.DTypeLike) -> Value:
    """A compact per-active-lane array back to a full lane array (other lanes zero)."""
    if lanes is None or np.ndim(v) == 0:
        return v
    full = np.zeros(st.N, dt)
    full[lanes] = v
    return full


def _elem_type(ty: str) -> str:
    return ty


def ramp_reader(ctx: Ctx, op: ir.Operand, space: str, nbytes: int) -> Reader | None:
    """fn(st) -> the arena element index of a whole-wave access `[reg+off]` whose lanes address consecutive
    `nbytes` elements (the register holds a ramp of step `nbytes`, see ramps.py), or None; None instead of
    a function when the operand cannot be one (not a register base, or not a global/generic space, or
    compiled for reference mode)."""
    if ctx.reference or space not in ("global", "const", "generic") or not isinstance(op, ir.Address) or \
            not isinstance(op.base, ir.Register):
        return None
    hit = ctx.lookup(op.base.name)
    if not isinstance(hit, tuple):
        return None
    slot, off = hit[1], op.offset
    bits = bits_of_type(ctx.reg_type(slot))
    if bits != 64:
        return None

    def start(st):
        v = st.regs[slot]
        if np.ndim(v) != 1 or v.shape[0] != st.N:
            return None
        tag = R.affine(R.find(st, v, nbytes), 1, off, st.N, 64)
        return None if tag is None else tag[0]
    return start


def shared_index_reader(ctx: Ctx, op: ir.Operand, space: str, nbytes: int) -> Callable[..., Value] | None:
    """fn(st, write=False) -> (k, e): the whole-wave shared access `[reg+off]` (32-bit register) touches
    elements `mem.shared.view(<nbytes-wide type>)[k:][e]`; or None (see memory.shared_elements); None instead
    of a function when the operand is not of that form.

    A tiled kernel reads shared memory at the same register plus constant offsets on every turn of its loop:
    the indices are kept for the last register array seen (registers are never changed in place, so the
    same array means the same offsets) and the wave's shared layout. Accesses at several offsets from one
    register share one index array (offset k elements), so the loop's working set holds one per register."""
    if ctx.reference or space != "shared" or not isinstance(op, ir.Address) or \
            not isinstance(op.base, ir.Register):  # (reference mode: no index runs, every access resolves)
        return None
    hit = ctx.lookup(op.base.name)
    if not isinstance(hit, tuple) or bits_of_type(ctx.reg_type(hit[1])) != 32:
        return None
    slot, c = hit[1], np.uint32(op.offset & 0xFFFFFFFF)
    memo = [None]  # (register array, shared layout, (k, indices))
    k = int(c) // nbytes if c < 1 << 20 and c % nbytes == 0 else None  # None: no sharing for this offset

    def elements(st, write=False):
        v = st.regs[slot]
        if not isinstance(v, np.ndarray) or v.ndim != 1:
            return None
        mem = st.mem
        key = (mem.nlanes, mem.lanes_per_slot, mem.shared_stride, mem.shared_size)
        last = memo[0]
        if last is not None and last[0] is v and last[1] == key and M.plain(mem):
            if write:
                mem.writes += 1
            return last[2]
        hit = _SHARED_BASES.get(id(v)) if k is not None else None
        if hit is not None and hit[0] is v and hit[1] == (key, nbytes) and hit[3] + int(c) <= \
                mem.shared_size - nbytes and M.plain(mem):
            # another offset from v was found in range and aligned: so is this one (v + c does not wrap)
            if write:
                mem.writes += 1
            memo[0] = (v, key, (k, hit[2]))
            return memo[0][2]
        e = M.shared_elements(mem, v + c if c else v, nbytes, write)
        if e is None:
            return None
        e.flags.writeable = False
        ke = (0, e)
        vmax = int(v.max()) if k is not None else None
        if k is not None and vmax <= mem.shared_size:  # v + c does not wrap: e == base indices + k
            b = e - k if k else e
            b.flags.writeable = False
            if len(_SHARED_BASES) >= 8:
                del _SHARED_BASES[next(iter(_SHARED_BASES))]
            _SHARED_BASES[id(v)] = (v, (key, nbytes), b, vmax)
            ke = (k, b)
        memo[0] = (v, key, ke)
        return ke
    return elements


# id(register array) -> (that array, (shared layout, nbytes), its element indices at offset 0, its maximum):
# a few entries
_SHARED_BASES: dict = {}


def build_ld(ctx: Ctx) -> Op:
    ins = ctx.ins
    ty = ins.types[-1] if ins.types else ".b32"
    if ty == ".b128":
        raise ctx.error("128-bit loads are not supported")
    n = vector_count(ins)
    ops = ins.operands
    dst, src = ops[0], ops[1]
    elems = list(dst.elements) if isinstance(dst, ir.Vector) else [dst]
    bits = bits_of_type(ty)
    dt = _U[bits]
    writers = [ctx.write(e, ty) for e in elems]
    space, addr = ctx.address_or_param_var(src, space_of(ins), keep_ramps=True)
    if isinstance(space, tuple):  # a function's .param variable: per-lane storage
        idx, off = space[1], addr
        nb = bits // 8

        def ldp(st, m):
            buf = st.pvars[idx]
            for i, w in enumerate(writers):
                o = off + i * nb
                v = buf[:, o: o + nb].copy().view(dt)[:, 0]  # a copy: registers never alias storage
                w(st, v, m)
        return _op(ldp)
    if n == 1:
        w = writers[0]
        ramp = ramp_reader(ctx, src, space, bits // 8)
        shared = space == "shared"
        sidx = shared_index_reader(ctx, src, space, bits // 8)

        def ld1(st, m):
            if m is None and sidx is not None:
                ke = sidx(st)
                if ke is not None:
                    view, runs = st.mem.shared.view(dt)[ke[0]:], IR.of(ke[1])
                    w(st, view.take(ke[1]) if runs is None else runs.take(view), None)
                    return
            if m is None and ramp is not None:
                base = ramp(st)
                i = None if base is None else M.run_start(st.mem, space, base, st.N, bits // 8)
                if i is not None:  # consecutive addresses: one slice (a copy: registers never alias memory)
                    w(st, st.mem.device.arena.view(dt)[i: i + st.N].copy(), None)
                    return
            a = addr(st)
            if m is None and shared:
                e = M.shared_elements(st.mem, a, bits // 8)
                if e is not None:
                    w(st, st.mem.shared.view(dt).take(e), None)
                    return
            if m is None:
                w(st, M.load(st.mem, space, a, dt, 1, None)[0], None)
                return
            lanes = m.nonzero()[0]  # (np.flatnonzero without its wrappers: m is 1-d)
            if np.ndim(a):
                a = a[lanes]
            v = M.load(st.mem, space, a, dt, 1, lanes)[0]
            w(st, expand(st, v, lanes, dt), m)
        return _op(ld1)

    def ldv(st, m):
        a = addr(st)
        lanes = None
        if m is not None:
            lanes = m.nonzero()[0]  # (np.flatnonzero without its wrappers: m is 1-d)
            if np.ndim(a):
                a = a[lanes]
        vals = M.load(st.mem, space, a, dt, n, lanes)
        for w, v in zip(writers, vals, strict=False):
            w(st, expand(st, v, lanes, dt), m)
    return _op(ldv)


def build_st(ctx: Ctx) -> Op:
    ins = ctx.ins
    ty = ins.types[-1] if ins.types else ".b32"
    n = vector_count(ins)
    ops = ins.operands
    dst, src = ops[0], ops[1]
    elems = list(src.elements) if isinstance(src, ir.Vector) else [src]
    bits = bits_of_type(ty)
    dt = _U[bits]
    readers = [None if isinstance(e, ir.Sink) else ctx.read(e, ty) for e in elems]
    space, addr = ctx.address_or_param_var(dst, space_of(ins), keep_ramps=True)
    strong = space in ("global", "generic") and any(s in STRONG for s in ins.suffixes)
    if isinstance(space, tuple):
        idx, off = space[1], addr
        nb = bits // 8

        def stp(st, m):
            buf = st.pvars[idx]
            for i, r in enumerate(readers):
                if r is None:
                    continue
                v = np.broadcast_to(np.asarray(r(st)).astype(dt), (st.N,))
                o = off + i * nb
                raw = np.ascontiguousarray(v).view(np.uint8).reshape(st.N, nb)
                if m is None:
                    buf[:, o: o + nb] = raw
                else:
                    buf[m, o: o + nb] = raw[m]
        return _op(stp)
    if n == 1:
        r0 = readers[0]
        ramp = ramp_reader(ctx, dst, space, bits // 8)
        shared = space == "shared"
        sidx = shared_index_reader(ctx, dst, space, bits // 8)

        def st1(st, m):
            if m is None and sidx is not None:
                ke = sidx(st, write=True)
                if ke is not None:
                    view, runs = st.mem.shared.view(dt)[ke[0]:], IR.of(ke[1])
                    if runs is not None and runs.distinct:
                        runs.put(view, r0(st))
                    else:  # as `scatter`: of lanes storing to one address, the last wins
                        view[ke[1]] = r0(st)
                    return
            if m is None and ramp is not None:
                base = ramp(st)
                i = None if base is None else M.run_start(st.mem, space, base, st.N, bits // 8, write=True)
                if i is not None:  # consecutive addresses: one slice
                    st.mem.device.arena.view(dt)[i: i + st.N] = r0(st)
                    return
            a = addr(st)
            v = r0(st)
            if m is None and shared:
                e = M.shared_elements(st.mem, a, bits // 8, write=True)
                if e is not None:
                    st.mem.shared.view(dt)[e] = v  # as `scatter`: of lanes storing to one address, the last wins
                    return
            if m is None:
                M.store(st.mem, space, a, dt, [v], None)
                return
            lanes = m.nonzero()[0]  # (np.flatnonzero without its wrappers: m is 1-d)
            if np.ndim(a):
                a = a[lanes]
            if np.ndim(v):
                v = v[lanes]
            M.store(st.mem, space, a, dt, [v], lanes)
        return _async_tx(ctx, _op(locked(st1, addr) if strong and callable(addr) else st1), bits // 8)

    def stv(st, m):
        a = addr(st)
        vals = [None if r is None else r(st) for r in readers]
        lanes = None
        if m is not None:
            lanes = m.nonzero()[0]  # (np.flatnonzero without its wrappers: m is 1-d)
            if np.ndim(a):
                a = a[lanes]
            vals = [v[lanes] if v is not None and np.ndim(v) else v for v in vals]
        if any(v is None for v in vals):  # `_` elements: read-modify-write of the others only
            full = M.load(st.mem, space, a, dt, n, lanes)
            vals = [f if v is None else v for f, v in zip(full, vals, strict=False)]
        M.store(st.mem, space, a, dt, vals, lanes)
    return _async_tx(ctx, _op(locked(stv, addr) if strong and callable(addr) else stv), bits // 8 * n)


# st forms that may race with atomics by design: on memory other processes share they hold the atomics' lock
# (rmw.locked), so they never land between the read and the write of another process's atomic. Every memory
# order of the table's but .weak
STRONG = modifier_slot("st", "sem") - {"weak"}


def _async_tx(ctx, op, nbytes):
    return with_complete_tx(ctx, op, nbytes)


def build_cvta(ctx: Ctx) -> Op:
    ins = ctx.ins
    ty = ins.types[-1] if ins.types else ".u64"
    to = ins.has("to")
    space = next((s.split("::")[0] for s in ins.suffixes if s.split("::")[0] in SPACES), "global")
    window = {"shared": M.SHARED_WINDOW, "local": M.LOCAL_WINDOW, "param": M.PARAM_WINDOW}.get(space, 0)
    ops = ins.operands
    bits = bits_of_type(ty)
    d = ctx.write(ops[0], ty)
    a = ctx.read(ops[1], ty)
    if window == 0:
        return _op(lambda st, m: d(st, a(st), m))
    dt = _U[bits]
    w = np.uint64(window)
    mask = np.uint64((1 << bits) - 1)
    if to:
        return _op(lambda st, m: d(st, ((np.asarray(a(st)).astype(np.uint64) - w) & mask).astype(dt), m))
    return _op(lambda st, m: d(st, ((np.asarray(a(st)).astype(np.uint64) + w) & mask).astype(dt), m))


def build_isspacep(ctx: Ctx) -> Op:
    ins = ctx.ins
    space = next((s.split("::")[0] for s in ins.suffixes if s.split("::")[0] in SPACES), "global")
    d, a = ctx.write(ins.operands[0], ".pred"), ctx.read(ins.operands[1], ".u64")
    window = {"shared": M.SHARED_WINDOW, "local": M.LOCAL_WINDOW, "param": M.PARAM_WINDOW,
              "global": M.GLOBAL_BASE, "const": M.GLOBAL_BASE}[space]
    k = np.uint64(window >> M.WINDOW_BITS)
    return _op(lambda st, m: d(st, (np.asarray(a(st)) >> np.uint64(M.WINDOW_BITS)) == k, m))


def _nop(ctx: Ctx) -> Op:
    return _op(lambda st, m: None)


def build_ld_param_pvar_value(st: LaneState, idx: int, off: int, nb: int, dt: npt.DTypeLike) -> Value:
    buf = st.pvars[idx]
    return np.ascontiguousarray(buf[:, off: off + nb]).view(dt)[:, 0]


__all__ = ["build_ld", "build_st", "convert_width", "is_signed"]

# createpolicy's result is an opaque cache-eviction policy that only .L2::cache_hint loads and stores read; the
# emulator has no cache, so any fixed value per form serves. These are the values CUTLASS uses as TMA cache
# hints for evict_normal/first/last (cute/arch/copy_sm90_desc.hpp), so code comparing against them works.
_POLICY = {"L2::evict_normal": 0x1000000000000000, "L2::evict_first": 0x12F0000000000000,
           "L2::evict_last": 0x14F0000000000000, "L2::evict_unchanged": 0x1000000000000000}


def build_createpolicy(ctx: Ctx) -> Op:
    """createpolicy.{fractional,range,cvt}...b64 policy, ...: a fixed 64-bit policy value per eviction priority."""
    prio = next((s for s in ctx.ins.suffixes if s in _POLICY), "L2::evict_normal")
    d = ctx.write(ctx.ins.operands[0], ".b64")
    value = np.uint64(_POLICY[prio])
    return _op(lambda st, m: d(st, np.full(st.N, value, np.uint64), m))


BUILDERS = {
    "ld": build_ld, "ldu": build_ld, "st": build_st, "cvta": build_cvta, "isspacep": build_isspacep,
    "prefetch": _nop, "prefetchu": _nop, "membar": _nop, "fence": _nop, "discard": _nop,
    "applypriority": _nop, "createpolicy": build_createpolicy,
}
BUILDERS = {k: v for k, v in BUILDERS.items() if v is not None}
