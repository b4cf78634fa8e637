"""Pointers, shared memory, loads/stores with cache hints and vectors, and atomics.

`p[i]` (or `p + i`) is the address of element i: a constant index folds into the address offset, a
register index costs one `mad.wide` (64-bit global pointers) or `mad.lo` (32-bit shared addresses).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, overload

from ptxforge.dsl import types as T
from ptxforge.dsl.arith import add, mad, mad_wide, mov, mul, operand, unify
from ptxforge.dsl.builder import current
from ptxforge.dsl.errors import DSLError, DSLTypeError
from ptxforge.dsl.types import DType
from ptxforge.dsl.values import Reg, RegArray, SReg, new_reg, value_of
from ptxforge.ptx import ir

if TYPE_CHECKING:
    from collections.abc import Sequence
    from typing import Literal

    from ptxforge.dsl.types import DTypeLike, Ptr
    from ptxforge.dsl.values import Index, Value

_SPACES = {"global": ".global", "shared": ".shared", "const": ".const", "local": ".local", "generic": None,
           "param": ".param"}


class Pointer:
    """The address of a `elem` value in a state space: a base (register or symbol) plus a byte offset.

    `shape` (shared arrays) enables `p[row, col]`. A pointer that `owns` its register can be moved
    in place with `p += n`, like a C pointer variable.
    """

    __slots__ = ("elem", "space", "base", "offset", "owns", "shape")

    def __init__(self, elem: DType, space: str, base: Reg | str, offset: int = 0, owns: bool = False,
                 shape: tuple[int, ...] | None = None):
        self.elem, self.space, self.base, self.offset, self.owns, self.shape = elem, space, base, offset, owns, shape

    def __repr__(self) -> str:
        base = self.base.name if isinstance(self.base, Reg) else self.base
        return f"Pointer({self.elem!r} {self.space} [{base}+{self.offset}])"

    @property
    def addr_type(self) -> DType:
        return T.u32 if self.space == "shared" else T.u64

    def address(self) -> ir.Address:
        """The `[base+offset]` operand."""
        base = self.base.operand if isinstance(self.base, Reg) else ir.Symbol(self.base)
        return ir.Address(base, self.offset, self.offset != 0)

    def cast(self, elem: DTypeLike) -> Pointer:
        """The same address, pointing to another element type."""
        return Pointer(T.dtype(elem), self.space, self.base, self.offset, False, None)

    def byte_offset(self, n: int) -> Pointer:
        """The address n bytes further on (no instruction)."""
        return Pointer(self.elem, self.space, self.base, self.offset + int(n), False, None)

    def _base_reg(self) -> Reg:
        if isinstance(self.base, Reg):
            return self.base
        b = current()
        key = ("symaddr", self.base)
        r = b.cache.get(key)
        if r is None:
            r = new_reg(self.addr_type)
            b.emit("mov", [self.addr_type.name], [r.operand, ir.Symbol(self.base)], prologue=True)
            b.cache[key] = r
        return r

    def value(self) -> Reg:
        """The address as an integer register (u64, or u32 for shared memory)."""
        base = self._base_reg()
        if self.offset == 0:
            return base

        return add(base, self.offset)

    def __add__(self, i: Index) -> Pointer:
        i = value_of(i)
        if isinstance(i, int):
            return Pointer(self.elem, self.space, self.base, self.offset + i * self.elem.nbytes, False, None)
        if not isinstance(i, Reg) or not i.type.is_int and i.type.kind != "b":
            raise DSLTypeError(f"pointer + index: the index must be an integer register or int, got {i!r}")
        return Pointer(self.elem, self.space, _scaled(self._base_reg(), i, self.elem.nbytes, self.addr_type),
                       self.offset, True, None)

    __radd__ = __add__

    def __getitem__(self, idx: Index | tuple[Index, ...]) -> Pointer:
        if not isinstance(idx, tuple):
            return self + idx
        if self.shape is None or len(self.shape) != len(idx):
            raise DSLError(f"{self!r}: index with {len(idx)} subscripts needs a {len(idx)}-d shared array")
        strides = [1] * len(idx)
        for k in range(len(idx) - 2, -1, -1):
            strides[k] = strides[k + 1] * self.shape[k + 1]
        const, terms = 0, []
        for i, s in zip(idx, strides, strict=True):
            i = value_of(i)
            if isinstance(i, int):
                const += i * s
            else:
                terms.append((i, s))
        p = Pointer(self.elem, self.space, self.base, self.offset + const * self.elem.nbytes, False, None)
        if not terms:
            return p

        (r, s), rest = terms[-1], terms[:-1]
        for r2, s2 in rest:  # fold the other register terms into one index in units of s
            if s2 % s:
                raise DSLError("shared array index: strides must divide each other")
            r = mad(r2, s2 // s, r)
        return Pointer(self.elem, self.space, _scaled(self._base_reg(), r, s * self.elem.nbytes, self.addr_type),
                       p.offset, True, None)

    def __iadd__(self, i: Index) -> Pointer:
        if not self.owns or not isinstance(self.base, Reg):
            raise DSLError(f"{self!r} shares its address register with another pointer; copy it first "
                           f"(q = p.copy()) before moving it with +=")
        i = value_of(i)
        if isinstance(i, int):
            add(self.base, i * self.elem.nbytes, out=self.base)
        else:
            _scaled(self.base, i, self.elem.nbytes, self.addr_type, out=self.base)
        return self

    def copy(self) -> Pointer:
        """A pointer with its own address register (so it can be moved with +=)."""
        return Pointer(self.elem, self.space, self.value().copy(), 0, True, None)


def _mad_index(acc: Index, n: int, i: Index) -> Index:
    """acc * n + i, folding Python ints."""
    acc, i = value_of(acc), value_of(i)
    if isinstance(acc, int) and isinstance(i, int):
        return acc * n + i

    if isinstance(acc, int):
        return i + acc * n if acc else i
    if isinstance(i, int) and i == 0:
        return mul(acc, n)
    return mad(acc, n, i)


def _scaled(base: Reg, i: Reg, size: int, addr_t: DType, out: Reg | None = None) -> Reg:
    """base + i*size in one instruction."""
    if addr_t.bits == 64 and i.type.bits == 32:
        it = T.s32 if i.type.is_signed else T.u32
        return mad_wide(i.view(it), size, base, out=out)
    if i.type.bits != addr_t.bits:
        raise DSLTypeError(f"pointer + index: a {i.type} index does not fit a {addr_t.bits}-bit address")
    iv = i.view(addr_t)
    if size == 1:
        return add(base, iv, out=out)
    return mad(iv, size, base, out=out)


def shared(elem: DTypeLike, shape: int | Sequence[int], align: int = 16, name: str = "smem") -> Pointer:
    """A static shared-memory array (`.shared .align A .T name[N]`); returns a pointer to it."""
    elem = T.dtype(elem)
    dims = (shape,) if isinstance(shape, int) else tuple(shape)
    n = 1
    for d in dims:
        if not isinstance(d, int) or d <= 0:
            raise DSLError(f"shared: the shape must be positive Python ints, got {shape!r}")
        n *= d
    b = current()
    sym = b.unique(name)
    b.variables.append(ir.Variable(".shared", _mem_type(elem), sym, (n,), align=align))
    return Pointer(elem, "shared", sym, 0, False, dims if len(dims) > 1 else None)


def dynamic_shared(elem: DTypeLike, align: int = 16) -> Pointer:
    """The dynamic shared memory (`.extern .shared .align A .b8 name[]`, sized by the launch)."""
    b = current()
    sym = "dynamic_smem"
    if not any(v.name == sym for v in b.variables):
        b.variables.append(ir.Variable(".shared", ".b8", sym, (None,), align=align, linkage=".extern"))
    return Pointer(T.dtype(elem), "shared", sym)


def _mem_type(t: DType) -> str:
    """The ld/st/variable type for values of type t (PTX loads f16/bf16/fp8 as bit-size data)."""
    if t.name in (".f32", ".f64") or t.is_int or t.kind == "b":
        return t.name
    return f".b{t.bits}"


def _ptr(p: object, op: str) -> Pointer:
    if not isinstance(p, Pointer):
        raise DSLTypeError(f"{op}: the address must be a pointer (p[i], smem[i]), got {p!r}")
    return p


def _cache_mods(space: str, nc: bool, cache: str | None, L1: str | None, L2: str | None, sem: str | None,
                scope: str | None, volatile: bool, op: str) -> tuple[list[str], list[str]]:
    """(modifiers before the state space, modifiers after it) in the manual's order."""
    pre, post = [], []
    if volatile:
        pre.append("volatile")
    if sem:
        pre.append(sem)
        if scope:
            pre.append(scope)
    if cache:
        post.append(cache)
    if nc:
        if space != "global":
            raise DSLError(f"{op}: .nc (read-only path) needs a global pointer, got {space}")
        post.append("nc")
    if L1:
        post.append(f"L1::{L1}")
    if L2:
        post.append(f"L2::{L2}")
    return pre, post


@overload
def ld(p: Pointer, *, v: None = None, type: DTypeLike | None = None, nc: bool = False, cache: str | None = None,
       L1: str | None = None, L2: str | None = None, sem: str | None = None, scope: str | None = None,
       volatile: bool = False, out: Reg | Sequence[Reg] | None = None) -> Reg: ...
@overload
def ld(p: Pointer, *, v: Literal[2, 4, 8], type: DTypeLike | None = None, nc: bool = False, cache: str | None = None,
       L1: str | None = None, L2: str | None = None, sem: str | None = None, scope: str | None = None,
       volatile: bool = False, out: Reg | Sequence[Reg] | None = None) -> RegArray: ...
@overload
def ld(p: Pointer, *, v: int | None = None, type: DTypeLike | None = None, nc: bool = False, cache: str | None = None,
       L1: str | None = None, L2: str | None = None, sem: str | None = None, scope: str | None = None,
       volatile: bool = False, out: Reg | Sequence[Reg] | None = None) -> Reg | RegArray: ...
def ld(p: Pointer, *, v: int | None = None, type: DTypeLike | None = None, nc: bool = False, cache: str | None = None,
       L1: str | None = None, L2: str | None = None, sem: str | None = None, scope: str | None = None,
       volatile: bool = False, out: Reg | Sequence[Reg] | None = None) -> Reg | RegArray:
    """`ld{.sem.scope}.space{.cache}{.nc}{.L1::x}{.L2::x}{.vN}.T`: load one value (or a vector of v);
    `out` names the destination register(s) instead of new ones (useful under `guard`)."""
    p = _ptr(p, "ld")
    t = T.dtype(type) if type is not None else p.elem
    pre, post = _cache_mods(p.space, nc, cache, L1, L2, sem, scope, volatile, "ld")
    space = _SPACES[p.space]
    mods = [*pre, *( [space] if space else []), *post]
    if v:
        if v not in (2, 4, 8):
            raise DSLError(f"ld: v must be 2, 4 or 8, got {v}")
        mods.append(f"v{v}")
    if out is not None:
        regs = RegArray(out if isinstance(out, tuple | list) else (out,))
        if len(regs) != (v or 1) or not all(isinstance(r, Reg) and r.type.bits == t.bits for r in regs):
            raise DSLTypeError(f"ld: out= must be {v or 1} register(s) of {t.bits} bits, got {out!r}")
    else:
        regs = RegArray(new_reg(t) for _ in range(v or 1))
    dst = ir.Vector(tuple(r.operand for r in regs)) if v else regs[0].operand
    current().emit("ld", [*mods, _mem_type(t)], [dst, p.address()])
    return regs if v else regs[0]


def st(p: Pointer, value: Value | Sequence[Value], *, type: DTypeLike | None = None, cache: str | None = None,
       L1: str | None = None, L2: str | None = None, sem: str | None = None, scope: str | None = None,
       volatile: bool = False) -> None:
    """`st{.sem.scope}.space{.cache}{.L1::x}{.vN}.T [p], value`; a tuple value stores a vector."""
    p = _ptr(p, "st")
    t = T.dtype(type) if type is not None else p.elem
    vals = list(value) if isinstance(value, tuple | list) else [value]
    regs = []
    for x in vals:
        x = value_of(x)
        if isinstance(x, int | float):
            x = mov(x, type=t)
        if not isinstance(x, Reg):
            raise DSLTypeError(f"st: cannot store {x!r}")
        if x.type != t and not (x.type.bits == t.bits and "b" in (x.type.kind, t.kind)):
            raise DSLTypeError(f"st: storing {x.name} ({x.type}) through a pointer to {t}; convert it with "
                               f"cvt or view it with .view()")
        regs.append(x)
    pre, post = _cache_mods(p.space, False, cache, L1, L2, sem, scope, volatile, "st")
    space = _SPACES[p.space]
    mods = [*pre, *([space] if space else []), *post]
    if len(regs) > 1:
        mods.append(f"v{len(regs)}")
    src = ir.Vector(tuple(r.operand for r in regs)) if len(regs) > 1 else regs[0].operand
    current().emit("st", [*mods, _mem_type(t)], [p.address(), src])


_ATOM_BIT_OPS = ("and", "or", "xor", "exch", "cas")


def _atom_type(op: str, t: DType) -> str:
    if op in _ATOM_BIT_OPS:
        return f".b{t.bits}"
    if op in ("add",) and t.name == ".s64":
        return ".u64"
    return t.name


def atom(op: str, p: Pointer, value: Value, *, sem: str | None = None, scope: str | None = None,
         out: Reg | None = None) -> Reg:
    """`atom{.sem}{.scope}.space.op.T d, [p], value`: returns the old value."""
    p = _ptr(p, "atom")
    t = unify(f"atom.{op}", [value], p.elem)
    mods: list[str | None] = [m for m in (sem, scope) if m] + ([_SPACES[p.space]] if _SPACES[p.space] else []) + [op]
    if op == "add" and t.name in (".f16", ".bf16", ".f16x2", ".bf16x2"):
        mods.append("noftz")
    d = out if out is not None else new_reg(t)
    current().emit("atom", [*mods, _atom_type(op, t)], [d.operand, p.address(), operand(value, t, "atom")])
    return d


def atom_cas(p: Pointer, compare: Value, value: Value, *, sem: str | None = None, scope: str | None = None) -> Reg:
    """`atom.space.cas.bN d, [p], compare, value`: returns the old value."""
    p = _ptr(p, "atom.cas")
    t = unify("atom.cas", [compare, value], p.elem)
    mods: list[str | None] = [m for m in (sem, scope) if m] + ([_SPACES[p.space]] if _SPACES[p.space] else []) + ["cas"]
    d = new_reg(t)
    current().emit("atom", [*mods, f".b{t.bits}"], [d.operand, p.address(), operand(compare, t), operand(value, t)])
    return d


def red(op: str, p: Pointer, value: Value, *, sem: str | None = None, scope: str | None = None) -> None:
    """`red{.sem}{.scope}.space.op.T [p], value`: an atomic update without a result."""
    p = _ptr(p, "red")
    t = unify(f"red.{op}", [value], p.elem)
    mods: list[str | None] = [m for m in (sem, scope) if m] + ([_SPACES[p.space]] if _SPACES[p.space] else []) + [op]
    if op == "add" and t.name in (".f16", ".bf16", ".f16x2", ".bf16x2"):
        mods.append("noftz")
    current().emit("red", [*mods, _atom_type(op, t)], [p.address(), operand(value, t, "red")])


def param_pointer(name: str, spec: Ptr) -> Pointer:
    """The pointer held in kernel parameter `name` (loaded once at the top of the kernel)."""
    b = current()
    r = new_reg(T.u64)
    b.emit("ld", [".param", ".u64"], [r.operand, ir.Address(ir.Symbol(name))], prologue=True)
    return Pointer(spec.elem, spec.space, r, 0, True)


def param_scalar(name: str, t: DType) -> Reg:
    """The value of scalar kernel parameter `name` (loaded once at the top of the kernel)."""
    b = current()
    r = new_reg(t)
    b.emit("ld", [".param", _mem_type(t)], [r.operand, ir.Address(ir.Symbol(name))], prologue=True)
    return r


__all__ = ["Pointer", "shared", "dynamic_shared", "ld", "st", "atom", "atom_cas", "red", "SReg"]
