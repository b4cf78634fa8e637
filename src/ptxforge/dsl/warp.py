"""Warp-level instructions: shuffles, votes, reductions, matches, activemask."""

from __future__ import annotations

from typing import TYPE_CHECKING

from ptxforge.dsl import types as T
from ptxforge.dsl.arith import operand, unify
from ptxforge.dsl.builder import current
from ptxforge.dsl.errors import DSLTypeError
from ptxforge.dsl.values import Pred, Reg, new_reg, value_of
from ptxforge.ptx import ir

if TYPE_CHECKING:
    from typing import TypedDict, Unpack

    from ptxforge.dsl.values import Index, Value

    class ShflOptions(TypedDict, total=False):
        """The keywords shfl_down/up/xor/idx pass on to shfl."""

        c: Index | None
        mask: Index
        out: Reg | None

FULL = 0xFFFFFFFF


def _mask(m: Index) -> ir.Operand:
    m = value_of(m)
    if isinstance(m, int):
        m &= 0xFFFFFFFF
        return ir.Immediate(-1, "-1") if m == FULL else ir.Immediate(m, str(m))
    return operand(m, T.u32, "mask")


def shfl(mode: str, v: Value, b: Index, c: Index | None = None, *, mask: Index = FULL, out: Reg | None = None) -> Reg:
    """`shfl.sync.mode.b32 d, v, b, c, mask` (mode: up, down, bfly, idx) on a 32-bit value."""
    if mode not in ("up", "down", "bfly", "idx"):
        raise DSLTypeError(f"shfl: mode must be up, down, bfly or idx, got {mode!r}")
    t = unify(f"shfl.{mode}", [v])
    if t.bits != 32:
        raise DSLTypeError(f"shfl: shuffles 32-bit values, got {t}; split wider values with unpack()")
    if c is None:
        c = 0 if mode == "up" else 31
    d = out if out is not None else new_reg(t)
    current().emit("shfl", ["sync", mode, "b32"],
                   [d.operand, operand(v, t), operand(b, T.u32), operand(c, T.u32), _mask(mask)])
    return d


def shfl_down(v: Value, delta: Index, **kw: Unpack[ShflOptions]) -> Reg:
    """`shfl.sync.down.b32`: the value of lane + delta."""
    return shfl("down", v, delta, **kw)


def shfl_up(v: Value, delta: Index, **kw: Unpack[ShflOptions]) -> Reg:
    """`shfl.sync.up.b32`: the value of lane - delta."""
    return shfl("up", v, delta, **kw)


def shfl_xor(v: Value, lanemask: Index, **kw: Unpack[ShflOptions]) -> Reg:
    """`shfl.sync.bfly.b32`: the value of lane ^ lanemask."""
    return shfl("bfly", v, lanemask, **kw)


def shfl_idx(v: Value, lane: Index, **kw: Unpack[ShflOptions]) -> Reg:
    """`shfl.sync.idx.b32`: the value of `lane`."""
    return shfl("idx", v, lane, **kw)


def _pred_src(p: object, op: str) -> ir.Operand:
    p = value_of(p)
    if not isinstance(p, Pred):
        raise DSLTypeError(f"{op}: needs a predicate, got {p!r}")
    r = ir.Register(p.name)
    return ir.Negated(r) if p.negated else r


def vote_all(p: Pred, *, mask: Index = FULL) -> Pred:
    """`vote.sync.all.pred d, p, mask`: p true in every lane."""
    d = new_reg(T.pred)
    current().emit("vote", ["sync", "all", "pred"], [d.operand, _pred_src(p, "vote.all"), _mask(mask)])
    return d  # type: ignore[return-value]  # new_reg(T.pred) makes a Pred


def vote_any(p: Pred, *, mask: Index = FULL) -> Pred:
    """`vote.sync.any.pred d, p, mask`: p true in some lane."""
    d = new_reg(T.pred)
    current().emit("vote", ["sync", "any", "pred"], [d.operand, _pred_src(p, "vote.any"), _mask(mask)])
    return d  # type: ignore[return-value]  # new_reg(T.pred) makes a Pred


def ballot(p: Pred, *, mask: Index = FULL) -> Reg:
    """`vote.sync.ballot.b32 d, p, mask`: bit i set when p is true in lane i."""
    d = new_reg(T.u32)
    current().emit("vote", ["sync", "ballot", "b32"], [d.operand, _pred_src(p, "vote.ballot"), _mask(mask)])
    return d


def redux(op: str, v: Value, *, mask: Index = FULL) -> Reg:
    """`redux.sync.op.T d, v, mask` (sm_80): add/min/max on u32/s32, and/or/xor on b32 across the warp."""
    t = unify(f"redux.{op}", [v])
    st = f".b{t.bits}" if op in ("and", "or", "xor") else t.name
    d = new_reg(t)
    current().emit("redux", ["sync", op, st], [d.operand, operand(v, t), _mask(mask)])
    return d


def match_any(v: Value, *, mask: Index = FULL) -> Reg:
    """`match.any.sync.bN d, v, mask` (sm_70): the lanes holding the same value."""
    t = unify("match.any", [v])
    d = new_reg(T.u32)
    current().emit("match", ["any", "sync", f"b{t.bits}"], [d.operand, operand(v, t), _mask(mask)])
    return d


def match_all(v: Value, *, mask: Index = FULL) -> tuple[Reg, Pred]:
    """`match.all.sync.bN d|p, v, mask`: (mask of lanes if all agree else 0, all agree)."""
    t = unify("match.all", [v])
    d, p = new_reg(T.u32), new_reg(T.pred)
    current().emit("match", ["all", "sync", f"b{t.bits}"],
                   [ir.PredPair(d.operand, p.operand), operand(v, t), _mask(mask)])
    return d, p  # type: ignore[return-value]  # new_reg(T.pred) makes a Pred


def activemask() -> Reg:
    """`activemask.b32 d`: the lanes executing this instruction."""
    d = new_reg(T.u32)
    current().emit("activemask", ["b32"], [d.operand])
    return d
