"""Warp-level operations over the active lanes of each warp: shfl, vote, match, redux, activemask, elect.

The machine guarantees that every non-exited lane named in the member mask is executing the same
instruction when these run (lanes that arrive early wait), so each op sees whole warps at once.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import numpy as np

from ptxforge.emu.op import NORMAL, WARPSYNC, Op
from ptxforge.ptx import ir
from ptxforge.ptx.isa import FAMILIES, modifier_slot

if TYPE_CHECKING:
    from collections.abc import Callable

    from ptxforge.emu.machine import LaneState
    from ptxforge.emu.op import Mask
    from ptxforge.emu.operands import Ctx, Value

_U = {8: np.uint8, 16: np.uint16, 32: np.uint32, 64: np.uint64}

# the modes and ops builders pick from, read from the ISA table (shfl's and vote's are their .sync forms')
SHFL_MODES = modifier_slot("shfl.sync", "mode")
VOTE_MODES = modifier_slot("vote.sync", "mode")
REDUX_OPS = modifier_slot("redux.sync", "op")
REDUX_TYPES = {m[1:]: types for m, types in FAMILIES["redux.sync"].mod_types}  # 'add' -> {'.u32', '.s32'}

# per mode, keyed by the table's values (tests/emu/test_emu_registry.py checks each has its entry):
# shfl: (lane, b, seg) -> source lane j, and whether j is in range given max_lane
_SHFL_SOURCE: dict[str, Callable[[Any, Any, Any], Any]] = {
    "up": lambda lane, b, seg: lane - b,
    "down": lambda lane, b, seg: lane + b,
    "bfly": lambda lane, b, seg: lane ^ b,
    "idx": lambda lane, b, seg: (lane & seg) | (b & ~seg),
}
# vote: (lanes voting yes, lanes voting no) as warp masks -> the result; ballot's is the yes mask itself
_VOTE_RESULT: dict[str, Callable[[np.ndarray, np.ndarray], np.ndarray] | None] = {
    "all": lambda yes, no: no == 0, "any": lambda yes, no: yes != 0, "uni": lambda yes, no: (yes == 0) | (no == 0),
    "ballot": None,
}
# redux on .u32/.s32/.b32: the bitwise ops as (ufunc, identity); add, min and max are worked out in build_redux
REDUX_BITWISE: dict[str, tuple[np.ufunc, np.uint32]] = {
    "and": (np.bitwise_and, np.uint32(0xFFFFFFFF)), "or": (np.bitwise_or, np.uint32(0)),
    "xor": (np.bitwise_xor, np.uint32(0)),
}
REDUX_ARITH = ("add", "min", "max")


def _op(fn, membermask=None, sync=True):
    return Op(WARPSYNC if sync else NORMAL, fn=fn, membermask=membermask)


def active(st: LaneState, m: Mask) -> np.ndarray:
    return st.live_mask() if m is None else m


def warp_bits(x: np.ndarray) -> np.ndarray:
    """Per-warp 32-bit masks of a bool lane array (lane i -> bit i)."""
    return np.packbits(x.reshape(-1, 32), axis=1, bitorder="little").view("<u4").reshape(-1)


def per_lane(warp_values: np.ndarray) -> np.ndarray:
    return np.repeat(warp_values, 32)


def member_bit(st: LaneState, mm: Value | None) -> np.ndarray:
    if mm is None:
        return np.ones(st.N, bool)
    return ((np.asarray(mm, np.uint32) >> st.laneid) & np.uint32(1)).astype(bool)  # type: ignore[operator]  # laneid: set


def _mm_reader(ctx, op):
    if isinstance(op, ir.Immediate) and (int(op.value) & 0xFFFFFFFF) == 0xFFFFFFFF:
        return None
    return ctx.read(op, ".b32")


def shfl_lanes(mode: str, lane: np.ndarray, bv: Any, cv: Any) -> tuple[np.ndarray, np.ndarray]:
    """(each lane's source lane, whether that is in range: where not, the lane itself) of a shfl.`mode` with
    lane operand `bv` and clamp/segment operand `cv` (`lane`: %laneid, int64)."""
    bval = np.asarray(bv).astype(np.int64) & 31
    cval = np.asarray(cv).astype(np.int64)
    seg = (cval >> 8) & 31
    clamp = cval & 31
    max_lane = (lane & seg) | (clamp & ~seg)
    j = _SHFL_SOURCE[mode](lane, bval, seg)
    ok = j >= max_lane if mode == "up" else j <= max_lane  # (up: the source counts down, in range from max_lane)
    return np.where(ok, j, lane), ok


def build_shfl(ctx: Ctx) -> Op:
    ins = ctx.ins
    mode = next(s for s in ins.suffixes if s in SHFL_MODES)
    ops = ins.operands
    if isinstance(ops[0], ir.PredPair):
        d = ctx.write(ops[0].first, ".b32")
        p = None if isinstance(ops[0].second, ir.Sink) else ctx.write(ops[0].second, ".pred")
    else:
        d, p = ctx.write(ops[0], ".b32"), None
    a, b, c = ctx.read(ops[1], ".b32"), ctx.read(ops[2], ".b32"), ctx.read(ops[3], ".b32")
    mm = _mm_reader(ctx, ops[4]) if len(ops) > 4 else None
    cache: dict[tuple[int, ...], tuple[Any, ...]] = {}

    def src_index(st, bv, cv):
        j, ok = shfl_lanes(mode, st.laneid.astype(np.int64), bv, cv)
        return st.warp_base + j, ok

    def f(st, m):
        bv = _uniform_on(b(st), m)
        cv = _uniform_on(c(st), m)
        if np.ndim(bv) == 0 and np.ndim(cv) == 0:
            # uniform lane offset and clamp (nvcc puts them in registers): the source lanes depend on them and
            # on the wave's %laneid / warp bases only, so they are worked out once per wave shape
            key = (id(st.laneid), id(st.warp_base), st.N, int(bv), int(cv))
            hit = cache.get(key)
            if hit is None:
                if len(cache) >= 4:
                    del cache[next(iter(cache))]
                src, ok = src_index(st, bv, cv)
                src.flags.writeable = ok.flags.writeable = False  # shared by the waves (a register may hold ok)
                # laneid, warp_base held: their ids stay unique
                hit = cache[key] = (src, ok, st.laneid, st.warp_base, _row_pattern(src))
            src, ok, pattern = hit[0], hit[1], hit[4]
        else:
            src, ok = src_index(st, bv, cv)
            pattern = None
        v = a(st)
        if np.ndim(v) == 0:
            x = v
        elif pattern is not None:
            x = _gather_rows(np.asarray(v), pattern)
        else:
            x = np.take(np.asarray(v), src)
        d(st, x, m)
        if p is not None:
            p(st, ok, m)
    return _op(f, mm)


def _row_pattern(src: np.ndarray) -> tuple[int, int, int] | None:
    """How `take(v, src)` moves lanes, when the source lanes `src` are whole warps in lane order with the same
    pattern in every warp: (shift, a, b) when lanes a..b-1 read lane + shift and the others their own lane
    (shfl.down/up with uniform operands), (0, -1 - j, 0) when every lane reads lane j (shfl.idx); else None."""
    n = src.shape[0]
    if n < 1024 or n % 32:
        return None
    rows = src.reshape(-1, 32) - np.arange(0, n, 32, dtype=src.dtype)[:, None]
    j = rows[0]
    if not (rows == j).all():
        return None
    lane = np.arange(32)
    if (j == j[0]).all():
        return 0, -1 - int(j[0]), 0
    moved = np.flatnonzero(j != lane)
    if moved.size == 0:
        return 0, 0, 32
    a, b = int(moved[0]), int(moved[-1]) + 1
    shift = int(j[a]) - a
    if not (j[a:b] == lane[a:b] + shift).all():
        return None
    return shift, a, b


def _gather_rows(v: np.ndarray, pattern: tuple[int, int, int]) -> np.ndarray:
    """`v` gathered by a `_row_pattern`: one shifted copy of the whole array, then the lanes that keep their
    own value row by row (about half a `take`'s cost: no index array to read)."""
    shift, a, b = pattern
    if a < 0:  # every lane of a warp reads one lane
        j = -1 - a
        return np.repeat(v[j::32], 32)
    n = v.shape[0]
    out = np.empty_like(v)
    if shift > 0:
        out[:n - shift] = v[shift:]
    else:
        out[-shift:] = v[:n + shift]
    o2, v2 = out.reshape(-1, 32), v.reshape(-1, 32)
    if a > 0:
        o2[:, :a] = v2[:, :a]
    if b < 32:
        o2[:, b:] = v2[:, b:]
    return out


def _uniform_on(x, m):
    """x as one scalar when it holds the same value on every lane of `m` (all lanes when None), else x.

    A constant moved into a register under divergence is an array (other lanes keep their old value) though
    every lane that reads it sees one value."""
    if np.ndim(x) == 0:
        return x
    x = np.asarray(x)
    seen = x if m is None else x[m]
    if seen.size == 0:
        return x
    lo = seen.min()
    return x.dtype.type(lo) if lo == seen.max() else x


def build_vote(ctx: Ctx) -> Op:
    ins = ctx.ins
    mode = next(s for s in ins.suffixes if s in VOTE_MODES)
    result = _VOTE_RESULT[mode]
    ops = ins.operands
    ty = ".b32" if mode == "ballot" else ".pred"
    d = ctx.write(ops[0], ty)
    a = ctx.read(ops[1], ".pred")
    mm = _mm_reader(ctx, ops[2]) if len(ops) > 2 else None

    def f(st, m):
        act = active(st, m) & member_bit(st, None if mm is None else mm(st))
        pa = np.broadcast_to(np.asarray(a(st), bool), (st.N,))
        yes = warp_bits(act & pa)
        if result is None:  # ballot
            d(st, per_lane(yes).astype(np.uint32), m)
            return
        d(st, per_lane(result(yes, warp_bits(act & ~pa))), m)
    return _op(f, mm)


def build_match(ctx: Ctx) -> Op:
    ins = ctx.ins
    mode = "all" if ins.has("all") else "any"
    ty = ins.types[-1] if ins.types else ".b32"
    ops = ins.operands
    if isinstance(ops[0], ir.PredPair):
        d = ctx.write(ops[0].first, ".b32")
        p = None if isinstance(ops[0].second, ir.Sink) else ctx.write(ops[0].second, ".pred")
    else:
        d, p = ctx.write(ops[0], ".b32"), None
    a = ctx.read(ops[1], ty)
    mm = _mm_reader(ctx, ops[2]) if len(ops) > 2 else None

    def f(st, m):
        act = active(st, m) & member_bit(st, None if mm is None else mm(st))
        v = np.broadcast_to(np.asarray(a(st)), (st.N,)).reshape(-1, 32)
        actw = act.reshape(-1, 32)
        eq = (v[:, :, None] == v[:, None, :]) & actw[:, None, :]
        masks = np.packbits(eq, axis=2, bitorder="little").view("<u4").reshape(-1)
        if mode == "any":
            d(st, masks.astype(np.uint32), m)
            return
        allw = per_lane(warp_bits(act))
        same = masks == allw
        d(st, np.where(same, allw, np.uint32(0)).astype(np.uint32), m)
        if p is not None:
            p(st, same, m)
    return _op(f, mm)


def build_redux(ctx: Ctx) -> Op:
    ins = ctx.ins
    opname = next(s for s in ins.suffixes if s in REDUX_OPS)
    if opname not in REDUX_BITWISE and opname not in REDUX_ARITH:
        raise ctx.error(f"redux.sync.{opname} is not implemented")
    ty = ins.types[-1] if ins.types else ".u32"
    if opname in REDUX_TYPES and ty not in REDUX_TYPES[opname]:  # ptxas refuses these (add.f32 ran as max)
        raise ctx.error(f"redux.sync.{opname} does not take {ty} (only {', '.join(sorted(REDUX_TYPES[opname]))})")
    ops = ins.operands
    d = ctx.write(ops[0], ty)
    a = ctx.read(ops[1], ty)
    mm = _mm_reader(ctx, ops[2]) if len(ops) > 2 else None
    signed = ty == ".s32"
    is_float = ty == ".f32"
    absolute, nan = ins.has("abs"), ins.has("NaN")

    def f(st, m):
        act = (active(st, m) & member_bit(st, None if mm is None else mm(st))).reshape(-1, 32)
        v = np.broadcast_to(np.asarray(a(st), np.uint32), (st.N,)).reshape(-1, 32)
        if is_float:
            r = redux_f32(v, act, opname == "min", absolute, nan)
        elif opname == "add":
            r = (np.where(act, v, 0).astype(np.uint64).sum(1) & 0xFFFFFFFF).astype(np.uint32)
        elif opname in ("min", "max"):
            x = v.view(np.int32) if signed else v
            info = np.iinfo(x.dtype)
            if opname == "min":
                r = np.where(act, x, info.max).min(1)
            else:
                r = np.where(act, x, info.min).max(1)
            r = r.astype(x.dtype).view(np.uint32)
        else:
            uf, ident = REDUX_BITWISE[opname]
            r = uf.reduce(np.where(act, v, ident), axis=1).astype(np.uint32)
        d(st, per_lane(r), m)
    return _op(f, mm)


def redux_f32(v: np.ndarray, act: np.ndarray, is_min: bool, absolute: bool, nan: bool) -> np.ndarray:
    """redux.sync.{min,max}{.abs}{.NaN}.f32 of each warp (rows of raw bits, `act` the lanes taking part): .abs
    reduces |x|; -0.0 < +0.0; NaN inputs are skipped (the result is the canonical NaN when all are NaN), or with
    .NaN make the result the canonical NaN."""
    bits = v & np.uint32(0x7FFFFFFF) if absolute else v
    x = bits.view(np.float32)
    isnan = np.isnan(x) & act
    take = act & ~isnan
    # order on an integer key where -0.0 < +0.0: non-negative floats keep their bits, negative ones are flipped
    key = np.where(bits >> 31, ~bits & np.uint32(0x7FFFFFFF), bits | np.uint32(0x80000000)).astype(np.uint32)
    key = np.where(take, key, np.uint32(0xFFFFFFFF) if is_min else np.uint32(0))
    pick = key.argmin(1) if is_min else key.argmax(1)
    r = bits[np.arange(bits.shape[0]), pick]
    none = ~take.any(1) | (isnan.any(1) if nan else False)
    return np.where(none, np.uint32(0x7FFFFFFF), r).astype(np.uint32)


def build_activemask(ctx: Ctx) -> Op:
    d = ctx.write(ctx.ins.operands[0], ".b32")
    return _op(lambda st, m: d(st, per_lane(warp_bits(active(st, m))).astype(np.uint32), m), sync=False)


def build_elect(ctx: Ctx) -> Op:
    ops = ctx.ins.operands
    if isinstance(ops[0], ir.PredPair):
        d = None if isinstance(ops[0].first, ir.Sink) else ctx.write(ops[0].first, ".b32")
        p = ctx.write(ops[0].second, ".pred")
    else:
        d, p = None, ctx.write(ops[0], ".pred")
    mm = _mm_reader(ctx, ops[1]) if len(ops) > 1 else None

    def f(st, m):
        act = (active(st, m) & member_bit(st, None if mm is None else mm(st))).reshape(-1, 32)
        leader = np.argmax(act, axis=1).astype(np.uint32)
        lane_leader = per_lane(leader)
        if d is not None:
            d(st, lane_leader, m)
        p(st, (st.laneid == lane_leader) & act.reshape(-1), m)
    return _op(f, mm)


def build_bar_warp(ctx: Ctx) -> Op:
    mm = _mm_reader(ctx, ctx.ins.operands[0]) if ctx.ins.operands else None
    return _op(lambda st, m: None, mm)


BUILDERS = {
    "shfl": build_shfl, "vote": build_vote, "match": build_match, "redux": build_redux,
    "activemask": build_activemask, "elect": build_elect,
}
