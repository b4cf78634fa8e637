"""Warp-wide matrix instructions: mma.sync, ldmatrix, stmatrix.

Registers of every warp with an active lane are gathered into fragments [warps, 32, nregs] and handed
to `semantics.mma`, which owns the fragment layouts and the numerics.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np

from ptxforge.emu import memory as M
from ptxforge.emu.op import WARPSYNC, Op
from ptxforge.emu.ops_memory import space_of
from ptxforge.emu.semantics import mma, wmma
from ptxforge.ptx import ir
from ptxforge.ptx.isa import modifier_slot

if TYPE_CHECKING:
    from ptxforge.emu.operands import Ctx


def _op(fn):
    return Op(WARPSYNC, fn=fn)


def _mma_sem():
    return mma


def _elems(op) -> list:
    return list(op.elements) if isinstance(op, ir.Vector) else [op]


def _warps(st, m):
    """Indices of warps with at least one executing lane."""
    if m is None:
        return np.arange(st.N // 32)
    return np.flatnonzero(m.reshape(-1, 32).any(1))


def _gather(st, readers, warps, dtype):
    """[len(warps), 32, len(readers)] register values of the given warps."""
    out = np.empty((warps.size, 32, len(readers)), dtype)
    lanes = (warps[:, None] * 32 + np.arange(32)).reshape(-1)
    for j, r in enumerate(readers):
        v = r(st)
        out[:, :, j] = (np.broadcast_to(np.asarray(v, dtype), (st.N,))[lanes]).reshape(-1, 32)
    return out


def _scatter(st, writers, warps, values, m, dtype):
    lanes = (warps[:, None] * 32 + np.arange(32)).reshape(-1)
    for j, w in enumerate(writers):
        full = np.zeros(st.N, dtype)
        full[lanes] = values[:, :, j].reshape(-1)
        w(st, full, m)


def build_mma(ctx: Ctx) -> Op:
    ins = ctx.ins
    shape = next((s for s in ins.suffixes if s.startswith("m") and "n" in s and "k" in s), None)
    if shape is None or not ins.has("sync"):
        raise ctx.error("only mma.sync.aligned shapes are supported")
    ts = [t for t in ins.types]
    if len(ts) == 4:
        dt, at, bt, ct = ts
    elif len(ts) == 2:  # mma.sync.aligned.m16n8k16.row.col.f16.f16 style: d/c type then a/b type
        dt, at = ts
        bt, ct = at, dt
    else:
        raise ctx.error(f"cannot read the types of {ins.mnemonic}")
    satfinite = ins.has("satfinite")
    d_op, a_op, b_op, c_op = ins.operands[:4]
    wide = {".f64": (".b64", np.uint64)}

    def regty(t):
        return wide.get(t, (".b32", np.uint32))
    dty, ddt = regty(dt)
    aty, adt = regty(at)
    bty, bdt = regty(bt)
    cty, cdt = regty(ct)
    dw = [ctx.write(e, dty) for e in _elems(d_op)]
    ar = [ctx.read(e, aty) for e in _elems(a_op)]
    br = [ctx.read(e, bty) for e in _elems(b_op)]
    cr = [ctx.read(e, cty) for e in _elems(c_op)]

    def f(st, m):
        warps = _warps(st, m)
        if warps.size == 0:
            return
        A, B, C = _gather(st, ar, warps, adt), _gather(st, br, warps, bdt), _gather(st, cr, warps, cdt)
        D = _mma_sem().mma_sync(shape, A, B, C, at, bt, ct, dt, satfinite=satfinite)
        _scatter(st, dw, warps, np.asarray(D).astype(ddt), m, ddt)
    return _op(f)


# ldmatrix/stmatrix's matrix counts, keyed by the ISA table's (same for both): 'x1' -> 1 ...
MATRIX_COUNTS = {x: int(x[1:]) for x in modifier_slot("ldmatrix", "num")}
# the fragment wmma.load / wmma.store name: 'a', 'b', 'c' / 'd'
WMMA_MATRICES = modifier_slot("wmma.load", "matrix") | modifier_slot("wmma.store", "matrix")


def _num(ins) -> int:
    for s in ins.suffixes:
        if s in MATRIX_COUNTS:
            return MATRIX_COUNTS[s]
    return 1


def build_ldmatrix(ctx: Ctx) -> Op:
    ins = ctx.ins
    if not ins.has("m8n8") or not ins.has("b16"):
        raise ctx.error("only ldmatrix .m8n8 .b16 is supported")
    num = _num(ins)
    trans = ins.has("trans")
    dst, src = ins.operands[:2]
    writers = [ctx.write(e, ".b32") for e in _elems(dst)]
    space, addr = ctx.address(src, space_of(ins) if space_of(ins) != "generic" else "generic")

    def f(st, m):
        warps = _warps(st, m)
        if warps.size == 0:
            return
        lanes = (warps[:, None] * 32 + np.arange(num * 8)).reshape(-1)
        a = np.broadcast_to(np.asarray(addr(st)), (st.N,))[lanes]
        rows = M.load(st.mem, space, a, np.uint16, 8, lanes)
        rows = np.stack([np.broadcast_to(r, (lanes.size,)) for r in rows], -1).reshape(warps.size, num, 8, 8)
        regs = _mma_sem().ldmatrix(rows, trans)  # [warps, 32, num]
        _scatter(st, writers, warps, regs.astype(np.uint32), m, np.uint32)
    return _op(f)


def build_stmatrix(ctx: Ctx) -> Op:
    ins = ctx.ins
    num = _num(ins)
    trans = ins.has("trans")
    dst, src = ins.operands[:2]
    readers = [ctx.read(e, ".b32") for e in _elems(src)]
    space, addr = ctx.address(dst, space_of(ins))

    def f(st, m):
        warps = _warps(st, m)
        if warps.size == 0:
            return
        regs = _gather(st, readers, warps, np.uint32)
        rows = np.asarray(_mma_sem().stmatrix(regs, trans), np.uint16)  # [warps, num, 8, 8]
        lanes = (warps[:, None] * 32 + np.arange(num * 8)).reshape(-1)
        a = np.broadcast_to(np.asarray(addr(st)), (st.N,))[lanes]
        flat = rows.reshape(-1, 8)
        M.store(st.mem, space, a, np.uint16, [flat[:, i] for i in range(8)], lanes)
    return _op(f)


def _wmma_sem():
    return wmma


_ESIZE = {".f16": 2, ".bf16": 2, ".tf32": 4, ".f32": 4, ".f64": 8, ".s8": 1, ".u8": 1, ".s32": 4}


def _first_lanes(warps, m):
    """The first executing lane of each warp (wmma addresses and strides are warp-uniform)."""
    if m is None:
        return warps * 32
    return warps * 32 + np.argmax(m.reshape(-1, 32)[warps], axis=1)


def build_wmma(ctx: Ctx) -> Op:
    """wmma.load.{a,b,c} / wmma.store.d / wmma.mma (fragment layout: semantics.wmma)."""
    ins = ctx.ins
    shape = next((s for s in ins.suffixes if s.startswith("m") and "n" in s and "k" in s), None)
    if shape is None:
        raise ctx.error("wmma without a shape")
    if ins.has("mma"):
        ts = list(ins.types)
        if len(ts) == 2:
            dt, ct = ts
            at = bt = ".f16"
        else:
            dt, at, bt, ct = ts
        satfinite = ins.has("satfinite")
        d_op, a_op, b_op, c_op = ins.operands[:4]

        def rt(t):
            return (".b64", np.uint64) if t == ".f64" else (".b32", np.uint32)
        dw = [ctx.write(e, rt(dt)[0]) for e in _elems(d_op)]
        ar = [ctx.read(e, rt(at)[0]) for e in _elems(a_op)]
        br = [ctx.read(e, rt(bt)[0]) for e in _elems(b_op)]
        cr = [ctx.read(e, rt(ct)[0]) for e in _elems(c_op)]

        def mma(st, m):
            warps = _warps(st, m)
            if warps.size == 0:
                return
            A, B = _gather(st, ar, warps, rt(at)[1]), _gather(st, br, warps, rt(bt)[1])
            C = _gather(st, cr, warps, rt(ct)[1])
            D = _wmma_sem().mma(shape, A, B, C, at[1:], ct[1:], dt[1:], satfinite=satfinite, btype=bt[1:])
            _scatter(st, dw, warps, np.asarray(D).astype(rt(dt)[1]), m, rt(dt)[1])
        return _op(mma)
    load = ins.has("load")
    operand = next((s for s in ins.suffixes if s in WMMA_MATRICES), "d")
    layout = "col" if ins.has("col") else "row"
    ty = ins.types[-1]
    esize = _ESIZE[ty]
    m_, n_, k_ = (int(x) for x in shape[1:].replace("n", " ").replace("k", " ").split())
    rows, cols = {"a": (m_, k_), "b": (k_, n_), "c": (m_, n_), "d": (m_, n_)}[operand]
    regty, regdt = (".b64", np.uint64) if ty == ".f64" else (".b32", np.uint32)
    mem_op = ins.operands[1] if load else ins.operands[0]
    frag_op = ins.operands[0] if load else ins.operands[1]
    space, addr = ctx.address(mem_op, space_of(ins))
    stride = ctx.read(ins.operands[2], ".u32") if len(ins.operands) > 2 else None
    edt = np.dtype(f"u{esize}")
    wsem = _wmma_sem()
    if load:
        writers = [ctx.write(e, regty) for e in _elems(frag_op)]
    else:
        readers = [ctx.read(e, regty) for e in _elems(frag_op)]

    def f(st, m):
        warps = _warps(st, m)
        if warps.size == 0:
            return
        lead = _first_lanes(warps, m)
        base = np.broadcast_to(np.asarray(addr(st)), (st.N,))[lead]
        ld = np.broadcast_to(np.asarray(stride(st), np.int64), (st.N,))[lead] if stride is not None else \
            np.full(lead.size, cols if layout == "row" else rows, np.int64)
        offs = np.stack([wsem.element_offsets(rows, cols, layout, int(x), esize) for x in ld])
        a = (base.astype(np.int64)[:, None, None] + offs).astype(np.asarray(base).dtype).reshape(-1)
        lanes = np.repeat(lead, rows * cols)
        if load:
            codes = M.load(st.mem, space, a, edt, 1, lanes)[0].reshape(warps.size, rows, cols)
            regs = wsem.load(shape, operand, ty[1:], codes)
            _scatter(st, writers, warps, np.asarray(regs).astype(regdt), m, regdt)
        else:
            regs = _gather(st, readers, warps, regdt)
            codes = np.asarray(wsem.store(shape, ty[1:], regs)).astype(edt)
            M.store(st.mem, space, a, edt, [codes.reshape(-1)], lanes)
    return _op(f)


def build_movmatrix(ctx: Ctx) -> Op:
    """movmatrix.sync.aligned.m8n8.trans.b16 d, a: transpose the warp's 8x8 b16 matrix in registers.

    Fragment layout (both operands): lane l holds row l >> 2, columns 2 * (l % 4) and + 1 (low half first).
    """
    ins = ctx.ins
    if not (ins.has("m8n8") and ins.has("trans") and ins.has("b16")):
        raise ctx.error("only movmatrix.sync.aligned.m8n8.trans.b16 exists")
    d, a = ctx.write(ins.operands[0], ".b32"), ctx.read(ins.operands[1], ".b32")
    lane = np.arange(32)
    row, col = lane >> 2, 2 * (lane % 4)

    def f(st, m):
        warps = _warps(st, m)
        if warps.size == 0:
            return
        regs = _gather(st, [a], warps, np.uint32)[:, :, 0]  # [warps, 32]
        halves = np.stack([regs & 0xFFFF, regs >> 16], -1)  # [warps, 32, 2]
        A = np.zeros((warps.size, 8, 8), np.uint32)
        A[:, row, col], A[:, row, col + 1] = halves[:, :, 0], halves[:, :, 1]
        T = A.transpose(0, 2, 1)
        out = T[:, row, col] | (T[:, row, col + 1] << np.uint32(16))
        _scatter(st, [d], warps, out[:, :, None], m, np.uint32)
    return _op(f)


BUILDERS = {"mma": build_mma, "ldmatrix": build_ldmatrix, "stmatrix": build_stmatrix, "wmma": build_wmma,
            "movmatrix": build_movmatrix}
