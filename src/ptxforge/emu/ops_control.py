"""Control flow as data for the machine: bra, call, ret, exit, trap, barriers; no-op hints; builtins.

Builtin device functions (extern declarations such as vprintf, malloc, free, __assertfail) run as
ordinary ops that read their arguments from the caller's .param variables.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np

from ptxforge.emu import builtins
from ptxforge.emu import op as c  # the op kinds and Op: c.BRA, c.Op(...)
from ptxforge.emu.errors import EmulatorError
from ptxforge.emu.ops_warp import build_bar_warp
from ptxforge.emu.program import Symbol
from ptxforge.ptx import ir
from ptxforge.ptx.isa import modifier_slot
from ptxforge.ptx.printer import operand_text

if TYPE_CHECKING:
    from ptxforge.emu.operands import Ctx, Reader, Writer
    from ptxforge.emu.program import FunctionLayout


BAR_RED_OPS = modifier_slot("bar", "redop")  # 'popc', 'and', 'or' (barrier's are the same); machine.py reduces


@dataclass
class CallInfo:
    callee: FunctionLayout | None  # None: an indirect call
    arg_pvars: list  # caller-side pvar indices, in order
    ret_pvars: list  # caller-side pvar indices receiving the results
    caller: FunctionLayout
    indirect: Reader | None = None  # reader of a function address for indirect calls
    # for a callee's `.reg` params / return values: per position a reader of the argument (or None) and a
    # writer of the caller's destination register (or None); a tuple of them, element by element, for a
    # vector `.reg` parameter
    arg_readers: list[Reader | tuple[Reader, ...] | None] | None = None
    ret_writers: list[Writer | tuple[Writer, ...] | None] | None = None


@dataclass
class BarrierInfo:
    mode: str  # 'sync' | 'arrive' | 'red' | 'carrive' | 'cwait' (barrier.cluster.arrive / .wait)
    bar_id: object  # reader
    count: object  # reader or None
    red_op: str | None = None  # popc | and | or
    red_dst: object = None  # writer
    red_src: object = None  # reader of the predicate
    aligned: bool = True
    fixed_id: int | None = None  # the barrier id when it is an immediate (checked 0..15 at compile time)


def build_bra(ctx: Ctx) -> c.Op:
    target = ctx.ins.operands[0]
    sym = ctx.lookup(target.name) if isinstance(target, ir.Symbol | ir.Register) else None
    if not isinstance(sym, Symbol) or sym.kind != "label":
        raise ctx.error(f"branch target {getattr(target, 'name', target)} is not a label")
    return c.Op(c.BRA, target=sym.value)


def build_brx(ctx: Ctx) -> c.Op:
    """brx.idx index, targets: jump to targets[index] (a .branchtargets list)."""
    idx_op, tl = ctx.ins.operands[:2]
    names = ctx.placed.func.target_lists.get(getattr(tl, "name", ""))
    if names is None:
        raise ctx.error(f"brx.idx target list {getattr(tl, 'name', tl)} is not a .branchtargets list")
    pcs = []
    for n in names:
        sym = ctx.lookup(n)
        if not isinstance(sym, Symbol) or sym.kind != "label":
            raise ctx.error(f"branch target {n} is not a label")
        pcs.append(sym.value)
    return c.Op(c.BRX, extra=(ctx.read(idx_op, ".u32"), np.asarray(pcs, np.int32)))


def build_ret(ctx: Ctx) -> c.Op:
    if ctx.placed.func.func.is_kernel:
        return c.Op(c.EXIT)
    return c.Op(c.RET, extra=ctx.placed.func)


def build_exit(ctx: Ctx) -> c.Op:
    return c.Op(c.EXIT)


def build_trap(ctx: Ctx) -> c.Op:
    return c.Op(c.TRAP)


def build_call(ctx: Ctx) -> c.Op:
    ops = list(ctx.ins.operands)
    rets: list = []
    args: list = []
    target = None
    for o in ops:
        if isinstance(o, ir.ParenList):
            if target is None:
                rets = list(o.items)
            else:
                args = list(o.items)
        elif target is None:
            target = o
    if target is None:
        raise ctx.error("call without a target")

    def pv(o):
        sym = ctx.lookup(o.name) if isinstance(o, ir.Symbol | ir.Register) else None
        if not isinstance(sym, Symbol) or sym.kind != "pvar":
            raise ctx.error(f"call argument {getattr(o, 'name', o)} is not a .param variable")
        return sym.value
    layout = ctx.layout
    name = getattr(target, "name", None)
    hit = ctx.lookup(name) if name else None
    if isinstance(hit, tuple):  # indirect call through a register
        return c.Op(c.CALL, extra=CallInfo(None, [pv(o) for o in args], [pv(o) for o in rets], ctx.placed.func,
                                          indirect=ctx.read(target, ".u64")))
    callee = layout.functions.get(name)  # type: ignore[arg-type]  # None: no function, an error below
    if callee is None and name in layout.other_kernels:
        raise ctx.error(f"call to {name}, a kernel (.entry): only a .func can be called")
    if callee is None:
        raise ctx.error(f"call to unknown function {name}")
    if callee.func.body is None:
        fn = builtins.lookup(name)  # type: ignore[arg-type]  # a function was found: name is a str
        if fn is None:
            raise ctx.error(f"call to external function {name}, which the emulator does not provide")
        return c.Op(c.NORMAL, fn=builtins.bind(fn, ctx, [pv(o) for o in args], [pv(o) for o in rets]))
    formals, results = callee.func.params, callee.func.returns
    if len(args) != len(formals) or len(rets) != len(results):
        raise ctx.error(f"call to {name} passes {len(args)} argument(s) and {len(rets)} result(s); "
                        f"it takes {len(formals)} and returns {len(results)}")
    # a .reg formal takes any value (register, immediate, .param variable); a .param one a .param variable;
    # a vector .reg formal a vector register (or braced vector) of its width, element by element, or any
    # register as wide (its bits split into the elements, as ptxas passes them)
    arg_readers = [_reg_argument(ctx, name, o, p) if p.space == ".reg" else None
                   for o, p in zip(args, formals, strict=True)]
    arg_pvars = [None if p.space == ".reg" else pv(o) for o, p in zip(args, formals, strict=True)]
    ret_writers = [_reg_result(ctx, name, o, p) if p.space == ".reg" and not _is_pvar(ctx, o) else None
                   for o, p in zip(rets, results, strict=True)]
    ret_pvars = [pv(o) if w is None else None for o, w in zip(rets, ret_writers, strict=True)]
    return c.Op(c.CALL, extra=CallInfo(callee, arg_pvars, ret_pvars, ctx.placed.func,
                                      arg_readers=arg_readers, ret_writers=ret_writers))


def _reg_argument(ctx: Ctx, callee: Any, o, p: ir.Param) -> Reader | tuple[Reader, ...]:
    """The reader of an argument for `.reg` formal `p` (a tuple of them, one an element, for a vector)."""
    parts = _reshaped(ctx, callee, o, p)
    if parts is None:
        return tuple(ctx.read(e, p.type) for e in _elements(ctx, callee, o, p)) if p.vector else ctx.read(o, p.type)
    readers = [ctx.read(e, f".b{w}") for e, w in parts]
    widths = [w for _, w in parts]
    fws = [ir.type_bits(p.type)] * (p.vector or 1)

    def element(i: int) -> Reader:
        return lambda st: _split(st, _pack(st, [r(st) for r in readers], widths), fws)[i]
    return tuple(element(i) for i in range(p.vector)) if p.vector else element(0)


def _reg_result(ctx: Ctx, callee: Any, o, p: ir.Param) -> Writer | tuple[Writer, ...]:
    """The writer of a `.reg` result `p` into the caller's `o` (a tuple, one an element, for a vector)."""
    parts = _reshaped(ctx, callee, o, p)
    if parts is None:
        return tuple(ctx.write(e, p.type) for e in _elements(ctx, callee, o, p)) if p.vector else ctx.write(o, p.type)
    writers = [ctx.write(e, f".b{w}") for e, w in parts]
    widths = [w for _, w in parts]
    fws = [ir.type_bits(p.type)] * (p.vector or 1)

    def write(st, res, mask) -> None:
        values = _split(st, _pack(st, list(res) if isinstance(res, tuple) else [res], fws), widths)
        for w, v in zip(writers, values, strict=True):
            w(st, v, mask)
    return write


def _reshaped(ctx: Ctx, callee: Any, o, p: ir.Param) -> list[tuple[ir.Register, int]] | None:
    """When register `o` is shaped unlike `.reg` formal `p` (a scalar for a vector, a vector of another
    element count, a vector for a scalar), its element registers and their widths in bits; None when the
    shapes agree. The bits must add up to the formal's."""
    sym = ctx.lookup(o.name) if isinstance(o, ir.Register) else None
    n = sym.value if isinstance(sym, Symbol) and sym.kind == "vreg" else None
    if not isinstance(o, ir.Register) or n == p.vector or (n is None and not p.vector) or \
            not (n or isinstance(sym, tuple)):
        return None
    names = ir.vector_elements(o.name, n) if n else (o.name,)
    parts = [(ir.Register(e, o.span), ir.type_bits(ctx.reg_type(ctx.reg_slot(ir.Register(e, o.span)))))
             for e in names]
    have, want = sum(w for _, w in parts), ir.type_bits(p.type) * (p.vector or 1)
    if have != want:
        raise ctx.error(f"call to {callee}: {o.name} ({have} bits) is passed for .reg "
                        f"{f'.v{p.vector} ' if p.vector else ''}{p.type} {p.name} ({want} bits)")
    return parts


def _pack(st, values: list, widths: list[int]) -> np.ndarray:
    """The bits of `values` (each `widths[i]` bits, on every lane), the first in the lowest bytes: (N, bytes)."""
    cols = [np.ascontiguousarray(np.broadcast_to(np.asarray(v).astype(f"<u{w // 8}"), (st.N,))).view(np.uint8)
            .reshape(st.N, w // 8) for v, w in zip(values, widths, strict=True)]
    return np.concatenate(cols, axis=1)


def _split(st, raw: np.ndarray, widths: list[int]) -> list[np.ndarray]:
    """`raw` (N, bytes) cut into values of `widths` bits, the first from the lowest bytes."""
    out, at = [], 0
    for w in widths:
        out.append(np.ascontiguousarray(raw[:, at: at + w // 8]).view(f"<u{w // 8}").reshape(st.N)
                   .astype(f"=u{w // 8}"))
        at += w // 8
    return out


def _elements(ctx, callee: Any, o, p: ir.Param) -> tuple:
    """The element operands a vector `.reg` formal `p` is passed: a vector register of its width, or a braced
    vector of as many elements."""
    if isinstance(o, ir.Vector) and len(o.elements) == p.vector:
        return o.elements
    sym = ctx.lookup(o.name) if isinstance(o, ir.Symbol | ir.Register) else None
    if isinstance(sym, Symbol) and sym.kind == "vreg" and sym.value == p.vector:
        return tuple(ir.Register(e, o.span) for e in ir.vector_elements(o.name, p.vector))
    raise ctx.error(f"call to {callee}: {operand_text(o)} is passed for .reg .v{p.vector} {p.type} {p.name}, "
                    f"which takes a .v{p.vector} vector register")


def _is_pvar(ctx, o) -> bool:
    sym = ctx.lookup(o.name) if isinstance(o, ir.Symbol | ir.Register) else None
    return isinstance(sym, Symbol) and sym.kind == "pvar"


def build_bar(ctx: Ctx) -> c.Op:
    ins = ctx.ins
    if ins.has("warp"):
        return build_bar_warp(ctx)
    if ins.opcode == "barrier" and ins.has("cluster"):
        # every thread of every CTA of the cluster; the machine makes it a no-op for one-CTA clusters
        mode = "cwait" if ins.has("wait") else "carrive"
        if not ins.has("wait") and not ins.has("arrive"):
            raise ctx.error("barrier.cluster needs .arrive or .wait")
        return c.Op(c.BAR, extra=BarrierInfo(mode, None, None, aligned=ins.has("aligned")))
    ops = ins.operands
    mode = "arrive" if ins.has("arrive") else "red" if ins.has("red") else "sync"
    aligned = ins.opcode == "bar" or ins.has("aligned")
    id_op = (ops[1] if mode == "red" else ops[0]) if ops else ir.Immediate(0, "0")
    fixed_id = id_op.value if isinstance(id_op, ir.Immediate) and isinstance(id_op.value, int) else None
    if fixed_id is not None and not 0 <= fixed_id < 16:  # ptxas refuses it too (`ptxforge check` says so)
        raise EmulatorError(f"{ins.span.file}:{ins.span.line}: {ins.mnemonic}: barrier id {fixed_id} is out of "
                            f"range 0..15")
    if mode == "red":
        red_op = next(s for s in ins.suffixes if s in BAR_RED_OPS)
        ty = ".u32" if red_op == "popc" else ".pred"
        dst = ctx.write(ops[0], ty)
        bar_id = ctx.read(ops[1], ".u32")
        count = ctx.read(ops[2], ".u32") if len(ops) > 3 else None
        src = ctx.read(ops[-1], ".pred")
        info = BarrierInfo(mode, bar_id, count, red_op, dst, src, aligned, fixed_id)
    else:
        bar_id = ctx.read(ops[0], ".u32") if ops else (lambda st: np.uint32(0))
        count = ctx.read(ops[1], ".u32") if len(ops) > 1 else None
        info = BarrierInfo(mode, bar_id, count, aligned=aligned, fixed_id=fixed_id)
    return c.Op(c.BAR, extra=info)


def _nop(ctx: Ctx) -> c.Op:
    return c.Op(c.NORMAL, fn=lambda st, m: None)


BUILDERS = {
    "bra": build_bra, "brx": build_brx, "ret": build_ret, "exit": build_exit, "trap": build_trap, "call": build_call,
    "bar": build_bar, "barrier": build_bar, "nanosleep": _nop, "pmevent": _nop, "brkpt": _nop,
    "griddepcontrol": _nop, "setmaxnreg": _nop,
}
