"""atom / red on global, shared and generic memory, serialised per address in lane order.

Lanes hitting distinct addresses update in one vector step. Lanes sharing an address are applied in
lane order: by rank rounds (k-th lane of every address group at once) for small groups, and by a
sequential `ufunc.accumulate` per group for large groups of associative ops (so a grid-wide counter
costs one pass, and f32 sums round exactly as a sequential chain would).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import numpy as np

from ptxforge.emu import memory as M
from ptxforge.emu.mbarrier import with_complete_tx
from ptxforge.emu.op import NORMAL, Op
from ptxforge.emu.operands import bits_of_type
from ptxforge.emu.ops_memory import space_of
from ptxforge.emu.rmw import SMALL_GROUP, atomic_apply, locked  # noqa: F401 (SMALL_GROUP: imported from here)
from ptxforge.emu.semantics import half
from ptxforge.ptx import ir
from ptxforge.ptx.isa import modifier_slot

if TYPE_CHECKING:
    from ptxforge.emu.operands import Ctx

_U: dict[int, type[np.unsignedinteger[Any]]] = {8: np.uint8, 16: np.uint16, 32: np.uint32, 64: np.uint64}
_S = {8: np.int8, 16: np.int16, 32: np.int32, 64: np.int64}
_F = {32: np.float32, 64: np.float64}
OPS = modifier_slot("atom", "op")  # 'and' ... 'cas', as the ISA table lists them (red's are the same)
# the ops as numpy ufuncs, keyed by the table's values; exch, cas, inc and dec are steps of their own in _combine
# (tests/emu/test_emu_registry.py checks that every op of the table, on every type it allows, has its combine)
_BITWISE: dict[str, np.ufunc] = {"and": np.bitwise_and, "or": np.bitwise_or, "xor": np.bitwise_xor}
_FLOAT_ORDER: dict[str, np.ufunc] = {"min": np.fmin, "max": np.fmax}
_INT_ORDER: dict[str, np.ufunc] = {"min": np.minimum, "max": np.maximum}


def _op(fn):
    return Op(NORMAL, fn=fn)


def _combine(opname: str, ty: str):
    """(step(old, v, c) -> new on raw bits, ufunc working on the value view or None, value view dtype)."""
    bits = bits_of_type(ty)
    u = _U[bits]
    if opname in _BITWISE:
        uf = _BITWISE[opname]
        return (lambda o, v, c: uf(o, v)), uf, u
    if opname == "exch":
        return (lambda o, v, c: v), None, u
    if opname == "cas":
        # (numpy's stubs give where(c, x, y) with values of type Any the overload of where(c))
        return (lambda o, v, c: np.where(o == v, c, o).astype(u)), None, u  # type: ignore[attr-defined]
    if opname == "inc":
        return (lambda o, v, c: np.where(o >= v, u(0), o + u(1)).astype(u)), None, u
    if opname == "dec":
        return (lambda o, v, c: np.where((o == 0) | (o > v), v, o - u(1)).astype(u)), None, u
    if ty in (".f32", ".f64"):
        f = _F[bits]
        if opname == "add":
            return (lambda o, v, c: (o.view(f) + v.view(f)).view(u)), np.add, f
        uf = _FLOAT_ORDER[opname]
        return (lambda o, v, c: uf(o.view(f), v.view(f)).view(u)), uf, f
    if ty in (".f16", ".bf16", ".f16x2", ".bf16x2"):
        fn = getattr(half, opname)
        t = ty[1:]
        return (lambda o, v, c: np.asarray(fn(o, v, t)).astype(u)), None, u
    if opname == "add":
        return (lambda o, v, c: o + v), np.add, u
    signed = ty.startswith(".s")
    vd = _S[bits] if signed else u
    uf = _INT_ORDER[opname]
    return (lambda o, v, c: uf(o.view(vd), v.view(vd)).view(u)), uf, vd


def _parse(ctx):
    ins = ctx.ins
    ty = ins.types[-1]
    opname = next(s for s in ins.suffixes if s in OPS)
    return ty, opname, space_of(ins)


def _build(ctx, has_dest: bool):
    ty, opname, space0 = _parse(ctx)
    ins = ctx.ins
    ops = ins.operands
    bits = bits_of_type(ty)
    u = _U[bits]
    k = 1 if has_dest else 0
    space, addr = ctx.address_or_param_var(ops[k], space0)
    if isinstance(space, tuple):
        raise ctx.error("atomics on .param variables are not supported")
    def elems(op):
        return list(op.elements) if isinstance(op, ir.Vector) else [op]
    readers = [ctx.read(e, ty) for e in elems(ops[k + 1])]  # vector atomics (sm_90): one per element
    writers = [ctx.write(e, ty) for e in elems(ops[0])] if has_dest else [None] * len(readers)
    c = ctx.read(ops[k + 2], ty) if opname == "cas" else None
    step, ufunc, vdtype = _combine(opname, ty)
    nb = bits // 8
    shift = nb.bit_length() - 1
    count = len(readers)

    def rmw(st, m):
        a = addr(st)
        lanes = None if m is None else np.flatnonzero(m)
        n = st.N if lanes is None else lanes.size
        if np.ndim(a) and lanes is not None:
            a = a[lanes]
        a = np.broadcast_to(a, (n,)) if np.ndim(a) == 0 else a
        if count > 1:
            st.mem.resolve(space, a, nb * count, lanes, write=True)  # whole-vector bounds and alignment
        cv = None
        if c is not None:
            cv = np.broadcast_to(np.asarray(c(st), u), (st.N,))
            cv = cv[lanes] if lanes is not None else cv.copy()
        for i, (b, d) in enumerate(zip(readers, writers, strict=True)):
            v = b(st)
            v = np.broadcast_to(np.asarray(v, u), (st.N,))[lanes] if lanes is not None else \
                np.broadcast_to(np.asarray(v, u), (n,)).copy()
            ai = a if i == 0 else np.asarray(a) + np.asarray(i * nb).astype(np.asarray(a).dtype)
            r = st.mem.resolve(space, ai, nb, lanes, write=True)
            groups = r if isinstance(r, list) else [(None, r[0], r[1])]
            old = np.zeros(n, u)
            for sel, buf, idx in groups:
                view = buf.view(u)
                if sel is None:
                    old[:] = atomic_apply(view, np.asarray(idx) >> shift, v, cv, step, ufunc, vdtype)
                else:
                    old[sel] = atomic_apply(view, np.asarray(idx) >> shift, v[sel],
                                            None if cv is None else cv[sel], step, ufunc, vdtype)
            if d is not None:
                if lanes is None:
                    d(st, old, None)
                else:
                    full = np.zeros(st.N, u)
                    full[lanes] = old
                    d(st, full, m)
    f = locked(rmw, addr)  # atomic against other processes on memory they share (ipc/memory.py)
    if not has_dest:  # red.async ...mbarrier::complete_tx::bytes
        return with_complete_tx(ctx, _op(f), nb * count)
    return _op(f)


def build_atom(ctx: Ctx) -> Op:
    return _build(ctx, True)


def build_red(ctx: Ctx) -> Op:
    return _build(ctx, False)


BUILDERS = {"atom": build_atom, "red": build_red}

__all__ = ["build_atom", "build_red", "atomic_apply", "M"]
