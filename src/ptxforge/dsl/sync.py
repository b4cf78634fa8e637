"""Barriers, fences, mbarriers and asynchronous copies (cp.async, cp.async.bulk)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from ptxforge.dsl import types as T
from ptxforge.dsl.arith import operand
from ptxforge.dsl.builder import current
from ptxforge.dsl.errors import DSLError, DSLTypeError
from ptxforge.dsl.memory import Pointer, shared
from ptxforge.dsl.values import Pred, Reg, new_reg, value_of
from ptxforge.ptx import ir

if TYPE_CHECKING:
    from ptxforge.dsl.types import DType
    from ptxforge.dsl.values import Index, Value


def _imm_or_reg(v: Value, t: DType = T.u32) -> ir.Operand:
    return operand(v, t)


# --------------------------------------------------------------------------- barriers and fences


def bar_sync(barrier: int = 0, threads: Index | None = None) -> None:
    """`bar.sync id{, threads}`: wait until all (or `threads`) threads of the CTA arrive (__syncthreads)."""
    ops = [_imm_or_reg(barrier)] + ([_imm_or_reg(threads)] if threads is not None else [])
    current().emit("bar", ["sync"], ops)


def bar_arrive(barrier: int, threads: Index) -> None:
    """`bar.arrive id, threads`: arrive at a named barrier without waiting."""
    current().emit("bar", ["arrive"], [_imm_or_reg(barrier), _imm_or_reg(threads)])


syncthreads = bar_sync


def fence(sem: str = "acq_rel", scope: str = "gpu") -> None:
    """`fence.sem.scope` (sem: sc, acq_rel; scope: cta, cluster, gpu, sys)."""
    current().emit("fence", [sem, scope], [])


def fence_proxy_async(space: str | None = "shared::cta") -> None:
    """`fence.proxy.async{.space}`: order generic-proxy writes before async-proxy (TMA/wgmma) reads."""
    current().emit("fence", ["proxy", "async"] + ([space] if space else []), [])


def fence_mbarrier_init() -> None:
    """`fence.mbarrier_init.release.cluster`: make mbarrier.init visible to the async proxy."""
    current().emit("fence", ["mbarrier_init", "release", "cluster"], [])


def membar(level: str = "gl") -> None:
    """`membar.level` (cta, gl, sys)."""
    current().emit("membar", [level], [])


# --------------------------------------------------------------------------- mbarrier


def mbarriers(n: int = 1, name: str = "mbar") -> Pointer:
    """`n` mbarrier objects in shared memory (.b64, 8-byte aligned); index them with bars[i]."""
    return shared(T.b64, n, align=8, name=name)


def _bar(p: object, op: str) -> Pointer:
    if not isinstance(p, Pointer) or p.space != "shared" or p.elem.bits != 64:
        raise DSLTypeError(f"{op}: expected an mbarrier in shared memory (from mbarriers()), got {p!r}")
    return p


def _shared_mod() -> str:
    return "shared::cta" if current().sm >= 90 else "shared"


def mbarrier_init(bar: Pointer, count: Index) -> None:
    """`mbarrier.init.shared.b64 [bar], count`."""
    current().emit("mbarrier", ["init", _shared_mod(), "b64"], [_bar(bar, "mbarrier.init").address(),
                                                               _imm_or_reg(count)])


def mbarrier_arrive(bar: Pointer, count: Index | None = None) -> Reg:
    """`mbarrier.arrive.shared.b64 state, [bar]{, count}`; returns the arrival state."""
    d = new_reg(T.b64)
    # mypy joins the two lists' item types to object
    ops: list[ir.Operand] = [d.operand, _bar(bar, "mbarrier.arrive").address()] + (  # type: ignore[assignment]
        [_imm_or_reg(count)] if count is not None else [])
    current().emit("mbarrier", ["arrive", _shared_mod(), "b64"], ops)
    return d


def mbarrier_arrive_expect_tx(bar: Pointer, nbytes: Index) -> Reg:
    """`mbarrier.arrive.expect_tx.shared::cta.b64 state, [bar], nbytes` (sm_90): arrive and expect
    `nbytes` of asynchronous (TMA) transfers before the phase completes."""
    d = new_reg(T.b64)
    current().emit("mbarrier", ["arrive", "expect_tx", "shared::cta", "b64"],
                   [d.operand, _bar(bar, "mbarrier.arrive.expect_tx").address(), _imm_or_reg(nbytes)])
    return d


def mbarrier_test_wait(bar: Pointer, parity: Index) -> Pred:
    """`mbarrier.test_wait.parity.shared.b64 p, [bar], parity`: has the phase with this parity completed?"""
    d = new_reg(T.pred)
    current().emit("mbarrier", ["test_wait", "parity", _shared_mod(), "b64"],
                   [d.operand, _bar(bar, "mbarrier.test_wait").address(), _imm_or_reg(parity)])
    return d  # type: ignore[return-value]  # new_reg(T.pred) makes a Pred


def mbarrier_try_wait(bar: Pointer, parity: Index) -> Pred:
    """`mbarrier.try_wait.parity.shared::cta.b64 p, [bar], parity` (sm_90): wait a while for the phase."""
    d = new_reg(T.pred)
    current().emit("mbarrier", ["try_wait", "parity", "shared::cta", "b64"],
                   [d.operand, _bar(bar, "mbarrier.try_wait").address(), _imm_or_reg(parity)])
    return d  # type: ignore[return-value]  # new_reg(T.pred) makes a Pred


def mbarrier_wait(bar: Pointer, parity: Index) -> None:
    """Spin until the mbarrier phase with `parity` completes (try_wait on sm_90+, test_wait before)."""
    b = current()
    top = b.new_label("wait")
    b.label(top)
    p = mbarrier_try_wait(bar, parity) if b.sm >= 90 else mbarrier_test_wait(bar, parity)
    b.emit("bra", [], [ir.Symbol(top)], guard=ir.Guard(p.name, True))


# --------------------------------------------------------------------------- cp.async (sm_80)


def cp_async(dst: Pointer, src: Pointer, nbytes: int = 16, *, cache: str | None = None,
             src_size: Index | None = None) -> None:
    """`cp.async.ca|cg.shared.global [dst], [src], nbytes{, src_size}`: copy 4, 8 or 16 bytes without
    waiting; `src_size` < nbytes zero-fills the rest (0 for an out-of-bounds element)."""
    if not (isinstance(dst, Pointer) and dst.space == "shared"):
        raise DSLTypeError(f"cp.async: the destination must be a shared-memory pointer, got {dst!r}")
    if not (isinstance(src, Pointer) and src.space in ("global", "generic")):
        raise DSLTypeError(f"cp.async: the source must be a global pointer, got {src!r}")
    if nbytes not in (4, 8, 16):
        raise DSLError(f"cp.async: nbytes must be 4, 8 or 16, got {nbytes}")
    cache = cache or ("cg" if nbytes == 16 else "ca")
    ops: list[ir.Operand] = [dst.address(), src.address(), ir.Immediate(nbytes, str(nbytes))]
    if src_size is not None:
        ops.append(_imm_or_reg(src_size))
    current().emit("cp", ["async", cache, "shared", "global"], ops)


def cp_async_commit() -> None:
    """`cp.async.commit_group`."""
    current().emit("cp", ["async", "commit_group"], [])


def cp_async_wait(n: int = 0) -> None:
    """`cp.async.wait_group n`: wait until at most n committed groups are pending."""
    current().emit("cp", ["async", "wait_group"], [ir.Immediate(n, str(n))])


def cp_async_wait_all() -> None:
    """`cp.async.wait_all`."""
    current().emit("cp", ["async", "wait_all"], [])


def cp_async_mbarrier_arrive(bar: Pointer, noinc: bool = True) -> None:
    """`cp.async.mbarrier.arrive{.noinc}.shared.b64 [bar]`: arrive on bar when this thread's earlier
    cp.async operations complete."""
    current().emit("cp", ["async", "mbarrier", "arrive"] + (["noinc"] if noinc else []) + ["shared", "b64"],
                   [_bar(bar, "cp.async.mbarrier.arrive").address()])


# --------------------------------------------------------------------------- bulk copies (sm_90)


def cp_async_bulk(dst: Pointer, src: Pointer, nbytes: Index, bar: Pointer) -> None:
    """`cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes [dst], [src], nbytes, [bar]`:
    a TMA bulk copy (16-byte multiples) whose completion is counted on `bar`."""
    if not (isinstance(dst, Pointer) and dst.space == "shared"):
        raise DSLTypeError(f"cp.async.bulk: the destination must be shared memory, got {dst!r}")
    if not isinstance(src, Pointer):
        raise DSLTypeError(f"cp.async.bulk: the source must be a global pointer, got {src!r}")
    current().emit("cp", ["async", "bulk", "shared::cluster", "global", "mbarrier::complete_tx::bytes"],
                   [dst.address(), src.address(), _imm_or_reg(nbytes), _bar(bar, "cp.async.bulk").address()])


def elect_sync(mask: int = 0xFFFFFFFF) -> Pred:
    """`elect.sync _|p, mask` (sm_90): true in exactly one active lane of the warp."""
    p = new_reg(T.pred)
    current().emit("elect", ["sync"], [ir.PredPair(ir.Sink(), p.operand), ir.Immediate(mask, hex(mask))])
    return p  # type: ignore[return-value]  # new_reg(T.pred) makes a Pred


__all__ = ["value_of"]
