"""Structured control flow that becomes PTX branches: `if_`/`else_`, `range_`, `while_`, `guard`,
plus labels and branches, `ret`/`exit_`, and the raw-PTX escape hatch.

    with if_(i < n):            # setp.lt.u32 p, i, n;  @!p bra $L__if1;  ...  $L__if1:
        ...
    with else_():               # bra.uni $L__endif2; (before $L__if1:)  ...  $L__endif2:
        ...
    for k in range_(0, n, 4):   # mov k, 0; setp.ge guard; loop: ...; add k, k, 4; setp.lt; @p bra loop
        ...
    with guard(lane == 0):      # every instruction inside is predicated: @p st.global ...
        st(out[row], acc)
"""

from __future__ import annotations

import dataclasses
from contextlib import contextmanager
from typing import TYPE_CHECKING

from ptxforge.dsl import types as T
from ptxforge.dsl.arith import add, mov, setp, unify
from ptxforge.dsl.builder import current
from ptxforge.dsl.errors import DSLError, DSLTypeError, error_at, user_span
from ptxforge.dsl.values import Pred, Reg, value_of
from ptxforge.ptx import ir
from ptxforge.ptx.errors import PTXError
from ptxforge.ptx.parser import parse

if TYPE_CHECKING:
    from collections.abc import Callable, Iterator

    from ptxforge.dsl.types import DTypeLike
    from ptxforge.dsl.values import Index, SReg


def _cond(c: object, op: str) -> Pred:
    c = value_of(c)
    if isinstance(c, Pred):
        return c
    raise DSLTypeError(f"{op}: the condition must be a predicate (e.g. i < n), got {c!r}")


def _no_guard(op: str) -> None:
    if current().guard is not None:
        raise DSLError(f"{op} inside `with guard(...)`: branches cannot be predicated by the guard; "
                       f"close the guard first")


@contextmanager
def if_(cond: Pred) -> Iterator[None]:
    """Run the block only where `cond` holds (a branch around it)."""
    b = current()
    _no_guard("if_")
    p = _cond(cond, "if_")
    end = b.new_label("if")
    b.emit("bra", [], [ir.Symbol(end)], guard=ir.Guard(p.name, not p.negated))
    b.depth += 1
    yield
    b.depth -= 1
    b.label(end)
    b.open_if = (end, len(b.body) - 1)


@contextmanager
def else_() -> Iterator[None]:
    """The alternative of the `with if_(...)` block just closed."""
    b = current()
    if b.open_if is None:
        raise DSLError("else_ must directly follow a `with if_(...)` block")
    _, idx = b.open_if
    b.open_if = None
    end = b.new_label("endif")
    jump = ir.Instruction("bra", ("uni",), (ir.Symbol(end),), None, user_span())
    b.check(jump)
    b.body.insert(idx, jump)
    b.depth += 1
    yield
    b.depth -= 1
    b.label(end)


def range_(start: Index, stop: Index | None = None, step: int = 1, *, type: DTypeLike | None = None) -> Iterator[Reg]:
    """A PTX loop: `for i in range_(n)` / `range_(start, stop, step)` yields the counter register once
    and traces the body once. The counter has the type of the register bounds (or `type`; u32 for
    non-negative constants). Constant bounds that cannot be empty skip the entry test. Use Python's
    `range` to unroll instead."""
    if stop is None:
        start, stop = 0, start
    if not isinstance(step, int) or step == 0:
        raise DSLError(f"range_: step must be a non-zero Python int, got {step!r}")
    start, stop = value_of(start), value_of(stop)
    regs = [v for v in (start, stop) if isinstance(v, Reg)]
    if type is not None:
        t = T.dtype(type)
    elif regs:
        t = regs[0].type
    else:  # constant bounds: unsigned unless they go negative
        t = T.u32 if min(start, stop) >= 0 else T.s32
    unify("range_", [start, stop], t)
    b = current()
    _no_guard("range_")
    i = mov(start, type=t)
    top, end = b.new_label("loop"), b.new_label("done")
    const = isinstance(start, int) and isinstance(stop, int)
    if const and not (start < stop if step > 0 else start > stop):
        return
    if not const:
        p = setp("ge" if step > 0 else "le", i, stop)
        b.emit("bra", [], [ir.Symbol(end)], guard=p.guard)
    b.label(top)
    depth = b.depth
    b.depth += 1
    yield i
    b.depth = depth

    add(i, step, out=i)
    p = setp("lt" if step > 0 else "gt", i, stop)
    b.emit("bra", [], [ir.Symbol(top)], guard=p.guard)
    if not const:
        b.label(end)


@contextmanager
def while_(cond_fn: Callable[[], Pred]) -> Iterator[None]:
    """`with while_(lambda: x < n):` repeats the block while the condition (re-evaluated each time) holds."""
    b = current()
    _no_guard("while_")
    top, end = b.new_label("while"), b.new_label("wend")
    b.label(top)
    p = _cond(cond_fn(), "while_")
    b.emit("bra", [], [ir.Symbol(end)], guard=ir.Guard(p.name, not p.negated))
    b.depth += 1
    yield
    b.depth -= 1
    b.emit("bra", ["uni"], [ir.Symbol(top)])
    b.label(end)


@contextmanager
def guard(cond: Pred) -> Iterator[None]:
    """Predicate every instruction in the block with `cond` (`@p` / `@!p`), without branching."""
    b = current()
    _no_guard("guard")
    p = _cond(cond, "guard")
    b.guard = p.guard
    try:
        yield
    finally:
        b.guard = None


def new_label(hint: str = "L") -> str:
    """A fresh label name, to be placed later with `place_label`."""
    return current().new_label(hint)


def place_label(name: str) -> None:
    """Put label `name` here."""
    current().label(name)


def bra(label: str, when: Pred | None = None, *, uni: bool = False) -> None:
    """`{@p} bra{.uni} label`."""
    g = None
    if when is not None:
        g = _cond(when, "bra").guard
    current().emit("bra", ["uni"] if uni else [], [ir.Symbol(label)], guard=g)


def ret() -> None:
    """`ret`: leave the function (the kernel ends for this thread)."""
    current().emit("ret", [], [])


def exit_() -> None:
    """`exit`: end this thread."""
    current().emit("exit", [], [])


def trap() -> None:
    """`trap`: abort the kernel with an error."""
    current().emit("trap", [], [])


# --------------------------------------------------------------------------- raw PTX


def raw(text: str, **values: Reg | SReg | int | str) -> None:
    """Emit PTX written by hand. `{name}` placeholders take the registers passed as keywords. The text
    is parsed by the front end and every instruction is checked like the DSL's own."""
    b = current()
    names = {}
    for k, v in values.items():
        v = value_of(v)
        if isinstance(v, Reg):
            names[k] = v.name
        elif isinstance(v, int | str):
            names[k] = str(v)
        else:
            raise DSLTypeError(f"raw: {k}= must be a register, an int or a name, got {v!r}")
    try:
        body = text.format(**names)
    except (KeyError, IndexError) as e:
        raise DSLError(f"raw: placeholder {e} has no value; pass it as a keyword argument") from None
    decls = "\n".join(f".reg {decl} {name};" for name, decl in b.reg_types.items())
    wrapper = (f".version 9.0\n.target {b.arch}\n.address_size 64\n.visible .entry __raw()\n{{\n{decls}\n"
               f"{body}\n}}\n")
    span = user_span()
    try:
        m = parse(wrapper, filename="<raw>")
    except PTXError as e:
        raise error_at(span, f"raw: {e.diagnostics[0].message}", DSLError) from None
    n_decls = len(b.reg_types)
    for st in m.kernels[0].body[n_decls:]:  # type: ignore[index]  # the wrapper .entry has a body
        if isinstance(st, ir.Instruction):
            st = dataclasses.replace(st, span=span, guard=st.guard or b.guard)
            b.check(st)
        elif isinstance(st, ir.RegisterDecl):
            for name in st.declared():
                b.reg_types[name] = st.type
        b.place(st)
