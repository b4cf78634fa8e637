"""Compile a laid-out kernel into a list of ops: one closure per instruction, names resolved once.

Ops of kind NORMAL run as `op.fn(st, mask)` (see op.py); control flow (branches, calls, returns, barriers, exits)
is carried as data the machine interprets, so divergence stays in one place (`machine.py`).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import numpy as np

from ptxforge.emu import (
    ops_alu,
    ops_async,
    ops_atomic,
    ops_control,
    ops_float,
    ops_matrix,
    ops_memory,
    ops_tcgen05,
    ops_video,
    ops_warp,
    ops_wgmma,
)
from ptxforge.emu.errors import UnsupportedInstruction
from ptxforge.emu.op import (  # noqa: F401 (the op kinds and Op, imported from here by callers)
    BAR,
    BRA,
    BRX,
    CALL,
    EXIT,
    NOP,
    NORMAL,
    RET,
    TRAP,
    WARPSYNC,
    Op,
)
from ptxforge.emu.operands import Ctx
from ptxforge.emu.program import Layout
from ptxforge.emu.registry import Registry
from ptxforge.ptx import ir
from ptxforge.ptx.printer import instruction_text

if TYPE_CHECKING:
    from ptxforge.emu.op import OpFn

# family of the ISA table -> builder(ctx) returning an Op (without text/line filled); each ops module lists its
# builders by family name (or a name covering several families: 'cp' for cp.async, cp.async.bulk, ...)
REGISTRY = Registry()
for _mod in (ops_alu, ops_float, ops_memory, ops_atomic, ops_warp, ops_control, ops_matrix, ops_async, ops_wgmma,
             ops_video, ops_tcgen05):
    REGISTRY.register_all(_mod.BUILDERS)


def compile_layout(layout: Layout, consts: dict[str, Any], reference: bool = False) -> list[Op]:
    """Ops for every placed instruction of a layout, in pc order; `reference`: the plain forms (each result
    from its semantics function, no inline numpy shortcut; the machine's reference mode)."""
    ops: list[Op] = []
    for pc, placed in enumerate(layout.placed):
        ins = placed.ins
        ctx = Ctx(layout, placed, pc, consts, reference)
        builder, refusal = REGISTRY.resolve(ins)
        if builder is None:
            op = Op(NORMAL, fn=_unsupported(ctx, refusal))
        else:
            try:
                op = builder(ctx)
            except UnsupportedInstruction as e:
                op = Op(NORMAL, fn=_unsupported(ctx, str(e)))
        op.text = instruction_text(ins, compact=True)
        op.line = ins.span.line
        op.file = ins.span.file
        if ins.guard is not None and op.guard is None and op.kind != NORMAL and op.kind != WARPSYNC:
            slot = ctx.reg_slot(ir.Register(ins.guard.predicate))
            op.guard = (slot, ins.guard.negated)
        elif ins.guard is not None and op.kind in (NORMAL, WARPSYNC) and op.fn is not None:
            op.fn = _guarded(op.fn, ctx.reg_slot(ir.Register(ins.guard.predicate)), ins.guard.negated)
        ops.append(op)
    return ops


def _guarded(fn: OpFn, slot: int, negated: bool) -> OpFn:
    def g(st, m):
        p = st.regs[slot]
        if negated:
            p = ~p
        if np.ndim(p) == 0:
            if p:
                fn(st, m)
            return
        mm = p if m is None else (m & p)
        if mm.any():
            fn(st, mm)
    return g


def _unsupported(ctx: Ctx, msg: str) -> OpFn:
    """Unsupported instructions fail when (and only when) a thread executes them."""
    err = msg if msg.startswith(ctx.ins.span.file) else \
        f"{ctx.ins.span.file}:{ctx.ins.span.line}: {ctx.ins.mnemonic}: {msg}"

    def fn(st, m):
        raise UnsupportedInstruction(err)
    return fn
