"""Values kernels compute with: typed registers (`Reg`), predicates, special registers and pointers.

Registers are mutable variables, as in CUDA C: `x += y` emits `add x, x, y` into the same register
(so loop-carried values work), while `z = x + y` makes a new one. Operator sugar exists only where
the instruction it picks is unambiguous; everything else is a function in `ptxforge.dsl`.
"""

from __future__ import annotations

import struct
from typing import TYPE_CHECKING, overload

from ptxforge.dsl import types as T
from ptxforge.dsl.builder import current
from ptxforge.dsl.errors import DSLError, DSLTypeError
from ptxforge.dsl.types import DType
from ptxforge.ptx import ir
from ptxforge.ptx.isa.data_sreg import special_register
from ptxforge.ptx.isa.typerules import strict_ok

if TYPE_CHECKING:
    from types import ModuleType
    from typing import Any, NoReturn, TypeAlias, TypeVar

    from ptxforge.dsl.types import DTypeLike

    # what an instruction takes as a source operand: a register, a special register or a Python number
    Value: TypeAlias = "Reg | SReg | int | float"
    Index: TypeAlias = "Reg | SReg | int"  # an element index or offset: an integer register or a Python int
    _V = TypeVar("_V")


# The operator sugar (r + 1, r < n, ...) calls the arithmetic functions of ptxforge.dsl.arith, which builds on
# Reg; arith binds itself here at its import (`bind_operators`) so that neither module imports the other twice.
_OPERATORS: list[ModuleType] = []


def bind_operators(module: ModuleType) -> None:
    """Make `module` (ptxforge.dsl.arith) the one Reg's operators call."""
    _OPERATORS[:] = [module]


def _ops() -> ModuleType:
    if not _OPERATORS:
        raise DSLError("register operators need ptxforge.dsl.arith; import ptxforge.dsl first")
    return _OPERATORS[0]


class Reg:
    """A virtual register holding a value of `type` (declared with `type.storage`)."""

    __slots__ = ("name", "type", "__weakref__")

    def __init__(self, name: str, type: DType) -> None:
        self.name, self.type = name, type

    @property
    def operand(self) -> ir.Register:
        return ir.Register(self.name)

    def __repr__(self) -> str:
        return f"{self.name}:{self.type!r}"

    def __hash__(self) -> int:
        return id(self)

    def __bool__(self) -> bool:
        raise DSLError(f"{self.name} is a register, not a Python value; branch with `with if_(cond):` "
                       f"and loop with `for i in range_(...)`")

    def __index__(self) -> int:
        raise DSLError(f"{self.name} is a register; a Python int is needed here (use Python numbers for "
                       f"shapes and unrolled loops)")

    def view(self, t: DTypeLike) -> Reg:
        """The same register read as another type of equal width (no instruction): `r.view(u32)`."""
        t = T.dtype(t)
        declared = current().reg_types.get(self.name, self.type.storage)
        if t.bits != self.type.bits or not strict_ok(t.storage if t.storage != t.name else t.name, declared):
            raise DSLTypeError(f"view: {self.name} is declared {declared}; PTX cannot read it as {t}. Copy the "
                               f"bits with bitcast({self.name}, {t!r}) (mov.b{self.type.bits})")
        return Reg(self.name, t)

    def copy(self) -> Reg:
        """A new register holding this value (`mov`)."""
        return _ops().mov(self)

    def set(self, value: Value) -> Reg:
        """Assign `value` to this register (`mov`); returns self."""
        _ops().mov(value, out=self)
        return self

    # arithmetic sugar: the type of the registers picks the instruction
    def __add__(self, o: Value) -> Reg: return _ops().add(self, o)
    def __radd__(self, o: Value) -> Reg: return _ops().add(o, self)
    def __sub__(self, o: Value) -> Reg: return _ops().sub(self, o)
    def __rsub__(self, o: Value) -> Reg: return _ops().sub(o, self)
    def __mul__(self, o: Value) -> Reg: return _ops().mul(self, o)
    def __rmul__(self, o: Value) -> Reg: return _ops().mul(o, self)
    def __neg__(self) -> Reg: return _ops().neg(self)

    def __truediv__(self, o: Value) -> NoReturn:
        _no_true_division(self)

    def __rtruediv__(self, o: Value) -> NoReturn:
        _no_true_division(self)

    def __floordiv__(self, o: Value) -> Reg:
        _check_floor("//", self)
        return _ops().div(self, o)

    def __rfloordiv__(self, o: Value) -> Reg:
        _check_floor("//", self)
        return _ops().div(o, self)

    def __mod__(self, o: Value) -> Reg:
        _check_floor("%", self)
        return _ops().rem(self, o)

    def __rmod__(self, o: Value) -> Reg:
        _check_floor("%", self)
        return _ops().rem(o, self)

    def __lshift__(self, o: Value) -> Reg: return _ops().shl(self, o)
    def __rshift__(self, o: Value) -> Reg: return _ops().shr(self, o)
    def __and__(self, o: Value) -> Reg: return _ops().and_(self, o)
    def __rand__(self, o: Value) -> Reg: return _ops().and_(o, self)
    def __or__(self, o: Value) -> Reg: return _ops().or_(self, o)
    def __ror__(self, o: Value) -> Reg: return _ops().or_(o, self)
    def __xor__(self, o: Value) -> Reg: return _ops().xor(self, o)
    def __rxor__(self, o: Value) -> Reg: return _ops().xor(o, self)
    def __invert__(self) -> Reg: return _ops().not_(self)

    # in place: the same register, as a CUDA variable would be
    def __iadd__(self, o: Value) -> Reg: return _ops().add(self, o, out=self)
    def __isub__(self, o: Value) -> Reg: return _ops().sub(self, o, out=self)
    def __imul__(self, o: Value) -> Reg: return _ops().mul(self, o, out=self)
    def __iand__(self, o: Value) -> Reg: return _ops().and_(self, o, out=self)
    def __ior__(self, o: Value) -> Reg: return _ops().or_(self, o, out=self)
    def __ixor__(self, o: Value) -> Reg: return _ops().xor(self, o, out=self)
    def __ilshift__(self, o: Value) -> Reg: return _ops().shl(self, o, out=self)
    def __irshift__(self, o: Value) -> Reg: return _ops().shr(self, o, out=self)

    # comparisons make predicates (setp)
    def __lt__(self, o: Value) -> Pred: return _ops().setp("lt", self, o)
    def __le__(self, o: Value) -> Pred: return _ops().setp("le", self, o)
    def __gt__(self, o: Value) -> Pred: return _ops().setp("gt", self, o)
    def __ge__(self, o: Value) -> Pred: return _ops().setp("ge", self, o)
    def __eq__(self, o: Value) -> Pred: return _ops().setp("eq", self, o)  # type: ignore[override]
    def __ne__(self, o: Value) -> Pred: return _ops().setp("ne", self, o)  # type: ignore[override]


def _no_true_division(r: Reg) -> NoReturn:
    if r.type.is_float:
        raise DSLTypeError(f"'/' on {r.type} is ambiguous (IEEE or approximate); use div(a, b, rnd='rn'), "
                           f"div(a, b, approx=True) or rcp(b)")
    raise DSLTypeError(f"'/' on {r.type} would be true division in Python; use // (unsigned) or div(a, b)")


def _check_floor(op: str, r: Reg) -> None:
    """`//` and `%` match div/rem only on unsigned integers (Python floors, PTX truncates toward zero)."""
    if not r.type.is_int:
        raise DSLTypeError(f"'{op}' needs integer registers, got {r.type}")
    if r.type.is_signed:
        name = "div" if op == "//" else "rem"
        raise DSLTypeError(f"'{op}' on {r.type} is ambiguous: Python rounds toward -inf, {name}.{r.type.name[1:]} "
                           f"toward zero; use {name}(a, b) for the PTX (C) semantics")


class Pred(Reg):
    """A predicate register; `~p` is its negation (no instruction when used as a guard or branch)."""

    __slots__ = ("negated",)

    def __init__(self, name: str, negated: bool = False) -> None:
        super().__init__(name, T.pred)
        self.negated = negated

    def __repr__(self) -> str:
        return ("!" if self.negated else "") + self.name

    def __invert__(self) -> Pred:
        return Pred(self.name, not self.negated)

    def __and__(self, o: Value) -> Pred: return _ops().and_(self, o)
    def __or__(self, o: Value) -> Pred: return _ops().or_(self, o)
    def __xor__(self, o: Value) -> Pred: return _ops().xor(self, o)

    @property
    def operand(self) -> ir.Register:
        if self.negated:
            return _ops().not_(Pred(self.name)).operand
        return ir.Register(self.name)

    @property
    def guard(self) -> ir.Guard:
        return ir.Guard(self.name, self.negated)


class ReadOnlyReg(Reg):
    """The register caching a special register's value: it cannot be changed in place (that would change
    every later read of the special register)."""

    __slots__ = ("source",)

    def __init__(self, name: str, type: DType, source: str) -> None:
        super().__init__(name, type)
        self.source = source

    def _refuse(self, *_: Any, **__: Any) -> NoReturn:
        raise DSLError(f"{self.source} is read-only; copy it first (x = {self.source}.copy()) to change it")

    set = _refuse
    __iadd__ = __isub__ = __imul__ = __iand__ = __ior__ = __ixor__ = __ilshift__ = __irshift__ = _refuse


_SREG_TYPES = {1: T.pred, 32: T.u32, 64: T.u64}  # a special register's width -> its DSL type


class SReg:
    """A special register (%tid.x, %laneid ...); read into a register once, at the top of the function."""

    __slots__ = ("name", "type")

    def __init__(self, name: str, type: DType | None = None) -> None:
        """`type` defaults to the register's width in the ISA table (ptx/isa/data_sreg.py): .u32, .u64, .pred."""
        spec = special_register(name)
        if spec is None:
            raise DSLError(f"{name} is not a special register of the PTX ISA (ptxforge.ptx.isa.data_sreg)")
        self.name, self.type = name, type or _SREG_TYPES[spec.bits]

    def __repr__(self) -> str:
        return self.name

    def copy(self) -> Reg:
        """A new, writable register holding the value."""
        return self.get().copy()

    def get(self) -> Reg:
        """The (read-only) register holding this special register's value (one `mov` per function)."""
        b = current()
        key = ("sreg", self.name)
        r = b.cache.get(key)
        if r is None:
            reg = new_reg(self.type)  # a Pred for %is_explicit_cluster, so selp/guards take it
            r = reg if isinstance(reg, Pred) else ReadOnlyReg(reg.name, self.type, self.name)
            b.emit("mov", [self.type.storage.replace(".b", ".u")], [r.operand, ir.SpecialRegister(self.name)],
                   prologue=True)
            b.cache[key] = r
        return r

    def __getattr__(self, item: str) -> Any:
        if item.startswith("__"):
            raise AttributeError(item)
        return getattr(self.get(), item)

    def __add__(self, o: Value) -> Reg: return self.get() + o
    def __radd__(self, o: Value) -> Reg: return o + self.get()
    def __sub__(self, o: Value) -> Reg: return self.get() - o
    def __rsub__(self, o: Value) -> Reg: return o - self.get()
    def __mul__(self, o: Value) -> Reg: return self.get() * o
    def __rmul__(self, o: Value) -> Reg: return o * self.get()
    def __and__(self, o: Value) -> Reg: return self.get() & o
    def __or__(self, o: Value) -> Reg: return self.get() | o
    def __xor__(self, o: Value) -> Reg: return self.get() ^ o
    def __lshift__(self, o: Value) -> Reg: return self.get() << o
    def __rshift__(self, o: Value) -> Reg: return self.get() >> o
    def __floordiv__(self, o: Value) -> Reg: return self.get() // o
    def __mod__(self, o: Value) -> Reg: return self.get() % o
    def __lt__(self, o: Value) -> Pred: return self.get() < o
    def __le__(self, o: Value) -> Pred: return self.get() <= o
    def __gt__(self, o: Value) -> Pred: return self.get() > o
    def __ge__(self, o: Value) -> Pred: return self.get() >= o
    def __eq__(self, o: Value) -> Pred: return self.get() == o  # type: ignore[override]
    def __ne__(self, o: Value) -> Pred: return self.get() != o  # type: ignore[override]

    def __hash__(self) -> int:
        return hash(self.name)


class _Dim3:
    def __init__(self, base: str) -> None:
        self.x, self.y, self.z = (SReg(f"{base}.{c}") for c in "xyz")

    def __repr__(self) -> str:
        return f"{self.x.name[:-2]}"


tid, ntid, ctaid, nctaid = _Dim3("%tid"), _Dim3("%ntid"), _Dim3("%ctaid"), _Dim3("%nctaid")
laneid, warpid, nwarpid, smid = SReg("%laneid"), SReg("%warpid"), SReg("%nwarpid"), SReg("%smid")
clock64 = SReg("%clock64")
lanemask_lt, lanemask_le, lanemask_eq = SReg("%lanemask_lt"), SReg("%lanemask_le"), SReg("%lanemask_eq")
dynamic_smem_size = SReg("%dynamic_smem_size")


def new_reg(t: DTypeLike) -> Reg:
    """A fresh, uninitialised register of type t in the current function."""
    t = T.dtype(t)
    b = current()
    name = b.new_reg_name(t.storage)
    return Pred(name) if t.kind == "pred" else Reg(name, t)


if TYPE_CHECKING:
    _RegTuple = tuple[Reg, ...]
else:
    _RegTuple = tuple


class RegArray(_RegTuple):
    """A fixed number of registers of one type (`reg.f32[4]`), usable as a tuple."""

    def fill(self, value: Value) -> RegArray:
        for r in self:
            r.set(value)
        return self


class _RegOfType:
    def __init__(self, t: DType) -> None:
        self.t = t

    def __call__(self, value: Value | None = None) -> Reg:
        r = new_reg(self.t)
        if value is not None:
            r.set(value)
        return r

    def __getitem__(self, n: int) -> RegArray:
        if not isinstance(n, int) or n <= 0:
            raise DSLError(f"reg.{self.t!r}[n]: n must be a positive Python int, got {n!r}")
        return RegArray(new_reg(self.t) for _ in range(n))


class _RegFactory:
    """`reg.u32()` a new register, `reg.f32(0.0)` one set to 0.0, `reg.f32[4]` four of them."""

    def __getattr__(self, name: str) -> _RegOfType:
        try:
            return _RegOfType(T.dtype(name))
        except TypeError:
            raise AttributeError(f"reg.{name}: unknown PTX type") from None

    def __call__(self, t: DTypeLike, value: Value | None = None) -> Reg:
        return _RegOfType(T.dtype(t))(value)


reg = _RegFactory()


# --------------------------------------------------------------------------- immediates


def f32_bits(v: float) -> int:
    return struct.unpack("<I", struct.pack("<f", float(v)))[0]


def immediate(value: int | float, t: DType) -> ir.Immediate | None:
    """`value` as an immediate operand of type t; None for types PTX has no literal for (f16, bf16)."""
    if isinstance(value, bool):
        value = int(value)
    if t.kind == "pred":
        return ir.Immediate(int(bool(value)), str(int(bool(value))))
    if t.is_float and t.name in (".f32", ".tf32"):
        if not isinstance(value, int | float):
            raise DSLTypeError(f"expected a number for {t}, got {type(value).__name__}")
        bits = f32_bits(value)
        return ir.Immediate(struct.unpack("<f", struct.pack("<I", bits))[0], f"0f{bits:08X}")
    if t.name == ".f64":
        bits = struct.unpack("<Q", struct.pack("<d", float(value)))[0]
        return ir.Immediate(float(value), f"0d{bits:016X}")
    if t.is_float:
        return None
    if isinstance(value, float):
        if not value.is_integer():
            raise DSLTypeError(f"{value!r} is not an integer; a {t} operand needs one")
        value = int(value)
    if not isinstance(value, int):
        raise DSLTypeError(f"expected a Python number or a register for a {t} operand, got {type(value).__name__}")
    lo, hi = -(1 << (t.bits - 1)), (1 << t.bits) - 1
    if not lo <= value <= hi:
        raise DSLTypeError(f"{value} does not fit a {t} operand")
    return ir.Immediate(value, str(value))


def is_number(v: object) -> bool:
    return isinstance(v, int | float) and not isinstance(v, bool) or isinstance(v, bool)


@overload
def value_of(v: SReg) -> Reg: ...
@overload
def value_of(v: _V) -> _V: ...
def value_of(v: object) -> object:
    """Unwrap special registers to the register holding them; leave other values alone."""
    if isinstance(v, SReg):
        return v.get()
    return v
