"""TMA tensor copies: cp.async.bulk.tensor.{1..5}d (tile mode) and cp.async.bulk.prefetch(.tensor).

`[tmap, {c0, c1, ...}]` names a box of the tensor described by a 128-byte tensor map (see
`ptxforge.emu.tensormap`) whose first element sits at the signed element coordinates c0 (innermost
dimension) ... . Along dimension i the box holds ceil(box[i] / elementStride[i]) elements at
c_i, c_i + elementStride[i], ...; in shared memory it is dense, dimension 0 innermost, then swizzled.
Global->shared fills elements outside the tensor with zero and completes the box's full byte count on
the mbarrier; shared->global (bulk_group) skips them. Copies complete at issue, as in ops_async.
"""

from __future__ import annotations

import numpy as np

from ptxforge.emu import memory as M
from ptxforge.emu import tensormap as TM
from ptxforge.ptx import ir


def _op(fn):
    from ptxforge.emu.compiler import NORMAL, Op

    return Op(NORMAL, fn=fn)


def _lanes(st, m):
    return np.arange(st.N) if m is None else np.flatnonzero(m)


def _at(v, st, lanes):
    return np.broadcast_to(np.asarray(v), (st.N,))[lanes]


def _tensor_operand(ctx, op, rank):
    """(space, address reader, [coordinate readers]) of `[tmap, {c0, ...}]`."""
    if not isinstance(op, ir.AddressList) or len(op.items) != 2 or not isinstance(op.items[1], ir.Vector):
        raise ctx.error("expected a tensor operand [tensorMap, {coordinates}]")
    base, vec = op.items
    if isinstance(base, ir.Address):
        addr_op = base
    elif isinstance(base, ir.Register | ir.Symbol):
        addr_op = ir.Address(base=base)
    else:
        raise ctx.error("the tensor map must be a register or a parameter name")
    if len(vec.elements) != rank:
        raise ctx.error(f"a {rank}d tensor copy needs {rank} coordinates, got {len(vec.elements)}")
    space, addr = ctx.address(addr_op, "generic")
    return space, addr, [ctx.read(e, ".b32") for e in vec.elements]


def _fault(msg: str, lane: int) -> M.MemoryFault:
    e = M.MemoryFault(msg)
    e._lane = lane  # the machine names the thread
    return e


def read_map(st, space, addr: int, lane: int) -> TM.TensorMap:
    """Decode the tensor map at `addr` as lane `lane` sees it; a bad map is a MemoryFault."""
    if addr % 64:
        raise _fault(f"tensor map address {addr:#x} is not 64-byte aligned", lane)
    offs = np.arange(0, TM.SIZE, 4)
    a = (np.uint64(addr) + offs.astype(np.uint64)) if space != "param" else np.int64(addr) + offs
    words = M.load(st.mem, space, a, np.uint32, 1, np.full(offs.size, lane))[0]
    try:
        return TM.decode(np.asarray(words, np.uint32).view(np.uint8))
    except ValueError as e:
        raise _fault(f"tensor map at {addr:#x}: {e}", lane) from None


def box_elements(tm: TM.TensorMap, coords):
    """(global byte addresses, in-bounds mask, shared byte offsets before swizzle) of the box's elements,
    in shared-memory order (dimension 0 fastest)."""
    counts = tm.box_counts
    grids = np.meshgrid(*[np.arange(n, dtype=np.int64) for n in reversed(counts)], indexing="ij")
    gaddr = np.full(grids[0].shape, tm.address, np.int64)
    inb = np.ones(grids[0].shape, bool)
    for i in range(tm.rank):
        g = coords[i] + grids[tm.rank - 1 - i] * tm.estrides[i]
        inb &= (g >= 0) & (g < tm.dims[i])
        gaddr = gaddr + g * tm.strides[i]
    soff = np.arange(inb.size, dtype=np.int64) * tm.esize
    return gaddr.reshape(-1), inb.reshape(-1), soff


def build_tensor(ctx):
    ins = ctx.ins
    if ins.has("reduce"):
        raise ctx.error(f"{ins.mnemonic}: tensor reductions are not supported yet")
    mode = next((s for s in ins.suffixes if s.startswith("im2col") or s.startswith("tile::")), None)
    if mode is not None:
        raise ctx.error(f"{ins.mnemonic}: .{mode} mode is not supported (plain .tile only)")
    if any(s.startswith("multicast") for s in ins.suffixes):
        raise ctx.error(f"{ins.mnemonic}: multicast needs clusters, which the emulator does not model")
    dims = [s for s in ins.suffixes if len(s) == 2 and s[1] == "d" and s[0] in "12345"]
    if len(dims) != 1:
        raise ctx.error("expected one of .1d ... .5d")
    rank = int(dims[0][0])
    spaces = [s.split("::")[0] for s in ins.suffixes if s.split("::")[0] in ("global", "shared")]
    to_global = spaces[:1] == ["global"]
    ops = ins.operands
    if to_global:
        tspace, taddr, coords = _tensor_operand(ctx, ops[0], rank)
        sspace, saddr = ctx.address(ops[1], "shared")
        mbar = None
    else:
        sspace, saddr = ctx.address(ops[0], "shared")
        tspace, taddr, coords = _tensor_operand(ctx, ops[1], rank)
        if len(ops) < 3:
            raise ctx.error("a tensor copy into shared memory needs an mbarrier operand")
        mbar = ctx.address(ops[2], "shared")
    if sspace == "generic":
        sspace = "shared"

    def f(st, m):
        from ptxforge.emu.ops_async import _mbar_update

        lanes = _lanes(st, m)
        if lanes.size == 0:
            return
        ta = _at(taddr(st), st, lanes)
        sa = _at(saddr(st), st, lanes)
        cs = [_at(c(st), st, lanes).astype(np.uint32).view(np.int32) for c in coords]
        tx = np.zeros(lanes.size, np.int64)
        for i, lane in enumerate(lanes.tolist()):
            tm = read_map(st, tspace, int(ta[i]), lane)
            s0 = int(sa[i])
            if s0 % 128:
                raise _fault(f"tensor copy shared address {s0:#x} is not 128-byte aligned", lane)
            gaddr, inb, soff = box_elements(tm, [int(c[i]) for c in cs])
            saddrs = TM.swizzle_offsets(s0 + soff, tm.swizzle)
            dt = np.dtype(f"u{tm.esize}")
            gsel = gaddr[inb].astype(np.uint64)
            if to_global:
                v = M.load(st.mem, sspace, saddrs[inb], dt, 1, np.full(gsel.size, lane))[0]
                if gsel.size:
                    M.store(st.mem, "global", gsel, dt, [v], np.full(gsel.size, lane))
                continue
            vals = np.zeros(inb.size, dt)
            if gsel.size:
                vals[inb] = M.load(st.mem, "global", gsel, dt, 1, np.full(gsel.size, lane))[0]
            M.store(st.mem, sspace, saddrs, dt, [vals], np.full(inb.size, lane))
            tx[i] = tm.box_bytes
        if mbar is not None:
            mm = np.zeros(st.N, bool)
            mm[lanes] = True
            _mbar_update(st, mm, mbar[0], mbar[1], count=0, tx=-tx, tx_lanes=True)
    return _op(f)


def build_prefetch(ctx):
    """cp.async.bulk.prefetch(.tensor).L2: a hint; the emulator has no L2, so nothing happens."""
    return _op(lambda st, m: None)
