"""The PTX intermediate representation: immutable dataclasses shared by every layer.

The parser produces it, the DSL builds it, the printer and the emulator consume it.
Source positions (`Span`) never take part in equality, so two modules that differ only in
layout compare equal.
"""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any, Union

# --------------------------------------------------------------------------- positions


class Span:
    """Where a construct starts in its source: file, 1-based line and column.

    The parser makes spans from a character offset and works out line and column only when asked,
    which keeps parsing fast; code that builds IR by hand passes line and column directly.
    """

    __slots__ = ("file", "_line", "_col", "_text", "_offset")

    def __init__(self, file: str, line: int = 0, col: int = 0):
        self.file, self._line, self._col, self._text, self._offset = file, line, col, None, 0

    @classmethod
    def at(cls, file: str, text: Any, offset: int) -> Span:
        """A span for `offset` in `text` (a `SourceText`), resolved lazily."""
        s = _new_span(cls)
        s.file, s._text, s._offset = file, text, offset
        return s

    def _resolve(self) -> None:
        if self._text is not None:
            self._line, self._col = self._text.line_col(self._offset)
            self._text = None

    @property
    def line(self) -> int:
        if self._text is not None:
            self._resolve()
        return self._line

    @property
    def col(self) -> int:
        if self._text is not None:
            self._resolve()
        return self._col

    def __repr__(self) -> str:
        return f"Span({self.file!r}, {self.line}, {self.col})"

    def __str__(self) -> str:
        return f"{self.file}:{self.line}:{self.col}"


_new_span = object.__new__
NO_SPAN = Span("<ir>", 0, 0)


def _span() -> Span:
    return field(default=NO_SPAN, compare=False, repr=False)


# --------------------------------------------------------------------------- types

INT_TYPES = frozenset(
    ".u8 .u16 .u32 .u64 .s8 .s16 .s32 .s64 .b8 .b16 .b32 .b64 .b128 .u16x2 .s16x2".split()
)
FLOAT_TYPES = frozenset(
    ".f16 .f16x2 .bf16 .bf16x2 .tf32 .f32 .f32x2 .f64 .e4m3 .e5m2 .e4m3x2 .e5m2x2 .e2m3 .e3m2 .e2m1 "
    ".e2m3x2 .e3m2x2 .e2m1x2 .ue8m0 .ue8m0x2 .e4m3x4 .e5m2x4 .e2m1x4 .e2m3x4 .e3m2x4".split()
)
OTHER_TYPES = frozenset(".pred .texref .samplerref .surfref .s2f6x2 .u4 .s4 .u2 .s2 .b4 .b1".split())
ALL_TYPES = INT_TYPES | FLOAT_TYPES | OTHER_TYPES

STATE_SPACES = frozenset(".reg .sreg .const .global .local .param .shared .tex".split())


def type_bits(t: str) -> int:
    """Width in bits of a PTX fundamental type name such as '.u32' or '.f16x2'."""
    return _TYPE_BITS[t]


def storage_size(ty: str, vector: int | None, array: tuple) -> int:
    """Bytes taken by a variable or parameter of type `ty`, `.vN` vector and array dimensions
    (0 when a dimension is unsized, as in `.extern .shared .b8 dyn[]`)."""
    n = max(1, type_bits(ty) // 8) * (vector or 1)
    for d in array:
        n *= d or 0
    return n


_TYPE_BITS = {
    ".pred": 1, ".b1": 1, ".u2": 2, ".s2": 2, ".u4": 4, ".s4": 4, ".b4": 4,
    ".u8": 8, ".s8": 8, ".b8": 8, ".e4m3": 8, ".e5m2": 8, ".e2m3": 8, ".e3m2": 8, ".e2m1": 4,
    ".ue8m0": 8, ".u16": 16, ".s16": 16, ".b16": 16, ".f16": 16, ".bf16": 16, ".e4m3x2": 16,
    ".e5m2x2": 16, ".e2m3x2": 16, ".e3m2x2": 16, ".e2m1x2": 8, ".ue8m0x2": 16, ".s2f6x2": 16,
    ".u32": 32, ".s32": 32, ".b32": 32, ".f32": 32, ".f16x2": 32, ".bf16x2": 32, ".tf32": 32,
    ".e4m3x4": 32, ".e5m2x4": 32, ".e2m1x4": 16, ".e2m3x4": 32, ".e3m2x4": 32,
    ".u16x2": 32, ".s16x2": 32, ".u64": 64, ".s64": 64, ".b64": 64, ".f64": 64, ".f32x2": 64, ".b128": 128,
    ".texref": 64, ".samplerref": 64, ".surfref": 64,
}


# --------------------------------------------------------------------------- operands


@dataclass(frozen=True, slots=True)
class Register:
    """A virtual register such as %r1, or a parameter/variable name used as a register operand."""

    name: str
    span: Span = _span()


@dataclass(frozen=True, slots=True)
class SpecialRegister:
    """A special register: %tid.x, %laneid, %clock64, %lanemask_lt, %envreg3 ..."""

    name: str
    span: Span = _span()


@dataclass(frozen=True, slots=True)
class Immediate:
    """A numeric constant. `text` is the spelling in the source, so 0f3F800000 stays a hex float.

    Equality goes by the spelling (a NaN must equal itself); `value` is derived from it.
    """

    value: int | float = field(compare=False)
    text: str
    span: Span = _span()

    @property
    def is_float(self) -> bool:
        return isinstance(self.value, float)


@dataclass(frozen=True, slots=True)
class Symbol:
    """A name: a variable, a function, a label or a kernel parameter."""

    name: str
    span: Span = _span()


@dataclass(frozen=True, slots=True)
class Sink:
    """The `_` operand that discards a result."""

    span: Span = _span()


@dataclass(frozen=True, slots=True)
class Negated:
    """A negated predicate operand `!%p1`."""

    operand: Operand
    span: Span = _span()


@dataclass(frozen=True, slots=True)
class Minus:
    """An arithmetically negated source `-%r1` (the operands of the video instruction vmad)."""

    operand: Operand
    span: Span = _span()


@dataclass(frozen=True, slots=True)
class RegisterOffset:
    """A register plus a constant as a source operand, `%rd1+2` (ptxas adds it in the operand's integer
    type, wrapping; written `+N`, `+-N` or `+N+M`, never `-N`)."""

    register: Register
    offset: int
    span: Span = _span()


@dataclass(frozen=True, slots=True)
class PredPair:
    """A destination pair `%r1|%p2` (a value and a predicate, as shfl and setp write)."""

    first: Operand
    second: Operand
    span: Span = _span()


@dataclass(frozen=True, slots=True)
class Vector:
    """A braced vector operand `{%f1, %f2, _, %f4}`."""

    elements: tuple[Operand, ...]
    span: Span = _span()


@dataclass(frozen=True, slots=True)
class Address:
    """A memory operand `[base+offset]`; base is a Register, a Symbol or None (absolute address).

    `written` records an offset spelled out even when it is zero (`[p+0]`): ptxas -G treats
    `[p+0]` and `[p]` differently, so the distinction survives a round trip.
    """

    base: Register | Symbol | None
    offset: int = 0
    written: bool = False
    span: Span = _span()


@dataclass(frozen=True, slots=True)
class AddressList:
    """A bracketed list such as a texture/TMA operand `[tmap, {%r1, %r2}]`."""

    items: tuple[Operand, ...]
    span: Span = _span()


@dataclass(frozen=True, slots=True)
class ParenList:
    """A parenthesised operand list, as in `call (retval0), f, (param0, param1);`."""

    items: tuple[Operand, ...]
    span: Span = _span()


@dataclass(frozen=True, slots=True)
class Expr:
    """A constant expression the front end keeps as written, e.g. `sym+8`, `generic(sym)`, `(N-1)`."""

    text: str
    span: Span = _span()


# Video instructions name a byte or half-word of a register operand with a selector suffix: %r1.b0, %r2.h1,
# and the SIMD forms a group of them: %r1.b3210, %r2.h10 (the parser keeps the suffix in the name).
VIDEO_OPCODES = frozenset({
    "vadd", "vsub", "vabsdiff", "vmin", "vmax", "vshl", "vshr", "vmad", "vset", "vadd2", "vsub2", "vavrg2",
    "vabsdiff2", "vmin2", "vmax2", "vset2", "vadd4", "vsub4", "vavrg4", "vabsdiff4", "vmin4", "vmax4", "vset4",
})
_SELECTOR = re.compile(r"^(%.+?)\.(b[0-7]{1,4}|h[0-3]{1,2})$")


def split_selector(name: str) -> tuple[str, str | None]:
    """('%r1', 'b0') for a video operand '%r1.b0'; (name, None) when it has no selector."""
    m = _SELECTOR.match(name)
    return (m.group(1), m.group(2)) if m else (name, None)


Operand = Union[
    Register, SpecialRegister, Immediate, Symbol, Sink, Negated, Minus, PredPair, Vector, Address,
    AddressList, ParenList, Expr, RegisterOffset,
]


# A vector register `.reg .v4 .u32 %v` is its elements %v.x %v.y %v.z %v.w (also spelled .r .g .b .a).
VECTOR_COMPONENTS = ("x", "y", "z", "w")
VECTOR_COMPONENT_ALIASES = ("r", "g", "b", "a")


def vector_elements(name: str, n: int) -> tuple[str, ...]:
    """The element register names of an n-element vector register."""
    return tuple(f"{name}.{c}" for c in VECTOR_COMPONENTS[:n])


def expand_vector_registers(ins: Instruction, width: Any) -> Instruction:
    """`ins` with every whole vector register operand written out as a braced vector of its elements,
    so `ld.global.v4.u32 %v, [p]` reads as `ld.global.v4.u32 {%v.x, %v.y, %v.z, %v.w}, [p]`.
    `width(name)` gives a vector register's element count, or None for any other name."""
    changed = False
    ops = []
    for op in ins.operands:
        if type(op) is Register:
            n = width(op.name)
            if n:
                op = Vector(tuple(Register(e, op.span) for e in vector_elements(op.name, n)), op.span)
                changed = True
        ops.append(op)
    return dataclasses.replace(ins, operands=tuple(ops)) if changed else ins


# --------------------------------------------------------------------------- statements in bodies


@dataclass(frozen=True, slots=True)
class Guard:
    """An instruction guard `@%p` or `@!%p`."""

    predicate: str
    negated: bool = False


@dataclass(frozen=True, slots=True)
class Instruction:
    """One PTX instruction.

    `opcode` is the first word of the mnemonic ('ld', 'mma', 'cp', 'tcgen05'); `suffixes` are the dotted
    parts after it in source order without the dot ('global', 'nc', 'L2::256B', 'v4', 'f32'). The ISA
    table, not the parser, decides which suffixes form the instruction family (see `ptx.isa`).
    """

    opcode: str
    suffixes: tuple[str, ...]
    operands: tuple[Operand, ...]
    guard: Guard | None = None
    span: Span = _span()

    @property
    def mnemonic(self) -> str:
        return ".".join((self.opcode, *self.suffixes))

    @property
    def types(self) -> tuple[str, ...]:
        """The type suffixes in order, with their dots ('.f32', '.bf16x2')."""
        return tuple("." + s for s in self.suffixes if "." + s in ALL_TYPES)

    @property
    def modifiers(self) -> tuple[str, ...]:
        """The non-type suffixes in order, with their dots ('.global', '.rn', '.L2::256B')."""
        return tuple("." + s for s in self.suffixes if "." + s not in ALL_TYPES)

    def has(self, *suffixes: str) -> bool:
        """True when every given suffix (without dot) appears on the instruction."""
        return all(s in self.suffixes for s in suffixes)


@dataclass(frozen=True, slots=True)
class Label:
    """A label definition `$L__BB0_2:`."""

    name: str
    span: Span = _span()


@dataclass(frozen=True, slots=True)
class RegisterDecl:
    """`.reg .b32 %r<100>;` (count=100, names %r0..%r99) or `.reg .f32 %f1, %f2;` (count=None)."""

    type: str
    names: tuple[str, ...]
    count: int | None = None
    vector: int | None = None
    align: int | None = None
    span: Span = _span()

    def declared(self) -> tuple[str, ...]:
        """Every register name this declaration introduces."""
        if self.count is None:
            return self.names
        return tuple(f"{self.names[0]}{i}" for i in range(self.count))


@dataclass(frozen=True, slots=True)
class Variable:
    """A variable in any state space, at module or function scope.

    `array` holds the dimensions; a dimension of None is an unsized `[]` (as in `.extern .shared`).
    `init` is the initializer as written (`Expr` text) or a tuple of numbers.
    """

    space: str
    type: str
    name: str
    array: tuple[int | None, ...] = ()
    align: int | None = None
    vector: int | None = None
    linkage: str | None = None  # .extern .visible .weak .common
    init: Expr | None = None
    attributes: tuple[str, ...] = ()  # e.g. ('.attribute(.managed)',), '.ptr' parts for params
    span: Span = _span()

    @property
    def size(self) -> int:
        """Size in bytes (0 for unsized arrays)."""
        return storage_size(self.type, self.vector, self.array)


@dataclass(frozen=True, slots=True)
class Param:
    """A function or kernel parameter: `.param .u64 .ptr .global .align 16 k_param_0`."""

    space: str  # '.param' or '.reg'
    type: str
    name: str
    array: tuple[int | None, ...] = ()
    align: int | None = None
    ptr_space: str | None = None
    ptr_align: int | None = None
    vector: int | None = None
    span: Span = _span()

    @property
    def size(self) -> int:
        """Size in bytes (0 for unsized arrays)."""
        return storage_size(self.type, self.vector, self.array)


@dataclass(frozen=True, slots=True)
class Loc:
    """`.loc file line col [, function_name ..., inlined_at ...]`; `extra` keeps the trailing text."""

    file: int
    line: int
    col: int
    extra: str = ""
    span: Span = _span()


@dataclass(frozen=True, slots=True)
class Pragma:
    """`.pragma "nounroll";`"""

    text: str
    span: Span = _span()


@dataclass(frozen=True, slots=True)
class CallPrototype:
    """`prototype_0 : .callprototype (.param .b32 _) _ (.param .b64 _);` kept as written after the colon."""

    name: str
    text: str
    span: Span = _span()


@dataclass(frozen=True, slots=True)
class TargetList:
    """`ts: .branchtargets L1, L2;` or `ct: .calltargets f, g;` (the targets of brx.idx / indirect calls)."""

    name: str
    directive: str  # '.branchtargets' or '.calltargets'
    targets: tuple[str, ...]
    span: Span = _span()


@dataclass(frozen=True, slots=True)
class Block:
    """A nested `{ ... }` scope inside a body."""

    body: tuple[Statement, ...]
    span: Span = _span()


Statement = Union[Instruction, Label, RegisterDecl, Variable, Loc, Pragma, CallPrototype, TargetList, Block]


# --------------------------------------------------------------------------- module level


@dataclass(frozen=True, slots=True)
class Function:
    """An `.entry` (kernel) or `.func` (device function); `body` is None for a declaration."""

    kind: str  # 'entry' or 'func'
    name: str
    params: tuple[Param, ...] = ()
    returns: tuple[Param, ...] = ()
    linkage: str | None = None  # .visible .extern .weak
    directives: tuple[tuple[str, tuple[int, ...]], ...] = ()  # ('.maxntid', (256, 1, 1)), ('.noreturn', ())
    body: tuple[Statement, ...] | None = None
    span: Span = _span()

    @property
    def is_kernel(self) -> bool:
        return self.kind == "entry"

    def __repr__(self) -> str:
        size = "declaration" if self.body is None else f"{sum(1 for _ in self.instructions())} instructions"
        return f"<Function .{self.kind} {self.name}({len(self.params)} params), {size}>"

    def instructions(self) -> Iterator[Instruction]:
        """Every instruction in the body, nested blocks included, in order."""
        yield from _walk_instructions(self.body or ())


def _walk_instructions(stmts):
    for s in stmts:
        if isinstance(s, Instruction):
            yield s
        elif isinstance(s, Block):
            yield from _walk_instructions(s.body)


@dataclass(frozen=True, slots=True)
class FileDirective:
    """`.file 1 "path" [, timestamp, size]`"""

    index: int
    path: str
    extra: str = ""
    span: Span = _span()


@dataclass(frozen=True, slots=True)
class Section:
    """A DWARF `.section .debug_xxx { ... }`; the body lines are kept verbatim (stripped)."""

    name: str
    lines: tuple[str, ...]
    span: Span = _span()


@dataclass(frozen=True, slots=True)
class Target:
    """`.target sm_90a[, texmode_independent, debug]`"""

    targets: tuple[str, ...]
    span: Span = _span()

    @property
    def arch(self) -> str:
        return next((t for t in self.targets if t.startswith(("sm_", "compute_"))), self.targets[0])


TopLevel = Union[Function, Variable, FileDirective, Section, Pragma]


@dataclass(frozen=True, slots=True)
class Module:
    """A PTX module: header directives plus functions, variables and debug directives in source order."""

    version: tuple[int, int]
    target: Target
    address_size: int | None
    items: tuple[TopLevel, ...]
    filename: str = field(default="<string>", compare=False)
    # Set by the parser: the original text and where each parsed node came from, so that
    # printing keeps the layout (and comments) of everything that was not changed.
    source: str | None = field(default=None, compare=False, repr=False)
    layout: dict | None = field(default=None, compare=False, repr=False)

    def __repr__(self) -> str:
        kernels = [f.name for f in self.kernels]
        shown = ", ".join(kernels[:4]) + (", ..." if len(kernels) > 4 else "")
        funcs = sum(1 for f in self.functions if not f.is_kernel)
        n = sum(1 for f in self.functions for _ in f.instructions())
        return (f"<Module {self.filename}: .version {self.version[0]}.{self.version[1]}, .target "
                f"{','.join(self.target.targets)}, {len(kernels)} kernel{'s' * (len(kernels) != 1)}"
                f"{f' ({shown})' if kernels else ''}, {funcs} .func, {len(self.variables)} variables, "
                f"{n} instructions>")

    @property
    def functions(self) -> tuple[Function, ...]:
        return tuple(i for i in self.items if isinstance(i, Function))

    @property
    def kernels(self) -> tuple[Function, ...]:
        return tuple(f for f in self.functions if f.is_kernel and f.body is not None)

    @property
    def variables(self) -> tuple[Variable, ...]:
        return tuple(i for i in self.items if isinstance(i, Variable))

    def function(self, name: str) -> Function:
        for f in self.functions:
            if f.name == name and f.body is not None:
                return f
        for f in self.functions:
            if f.name == name:
                return f
        raise KeyError(f"no function {name!r} in {self.filename}; it has: "
                       + (", ".join(f.name for f in self.functions) or "none"))

    def kernel(self, name: str) -> Any:
        """The kernel `name`, ready to launch (a `ptxforge.runtime.Kernel`, made by the factory the runtime
        binds with `bind_execution`); KeyError lists the kernels it has."""
        for f in self.kernels:
            if f.name == name:
                return _bound("kernel")(self, f)
        raise KeyError(f"no kernel {name!r} in {self.filename}; it has: "
                       + (", ".join(k.name for k in self.kernels) or "no kernels"))

    def set_constant(self, name: str, values: Any, *, device: Any = None, offset: int = 0) -> None:
        """Fill the .const (or .global) variable `name` with `values` on `device` before a launch, as
        cudaMemcpyToSymbol does (see ptxforge.runtime.constants)."""
        _bound("set_constant")(self, name, values, device=device, offset=offset)

    def to_ptx(self, canonical: bool = False) -> str:
        """PTX text; parse(m.to_ptx()) == m and ptxas builds the same cubin.

        By default every node that came unchanged from the parser keeps its original text, so an
        unedited module prints back byte for byte; `canonical=True` lays everything out afresh.
        """
        return _bound("printer")(self, canonical=canonical)


# What the IR hands on to the layers that build on it (it imports none of them): the printer (ptx.printer,
# bound by ptxforge.ptx at import) and the runtime's kernel factory and constant setter (bound by ptxforge at
# import, loading the runtime on first use). See docs/architecture.md.
_BOUND: dict[str, Callable[..., Any]] = {}


def bind_execution(*, printer: Callable[..., str] | None = None, kernel: Callable[..., Any] | None = None,
                   set_constant: Callable[..., None] | None = None) -> None:
    """Bind what `Module.to_ptx`, `Module.kernel` and `Module.set_constant` call (None leaves one as it is)."""
    for name, fn in (("printer", printer), ("kernel", kernel), ("set_constant", set_constant)):
        if fn is not None:
            _BOUND[name] = fn


def _bound(name: str) -> Callable[..., Any]:
    fn = _BOUND.get(name)
    if fn is None:
        raise RuntimeError(f"nothing is bound for Module.{'to_ptx' if name == 'printer' else name}: import ptxforge "
                           f"(which binds the printer and the runtime) before using it")
    return fn


def builder(cls: Any) -> Any:
    """A constructor for `cls` that takes every field positionally and skips the frozen-dataclass
    `__init__` (three times faster); for hot paths such as the parser, which passes valid values."""
    names = [f.name for f in dataclasses.fields(cls)]
    env = {"new": object.__new__, "cls": cls}
    for i, n in enumerate(names):
        env[f"set{i}"] = getattr(cls, n).__set__
    args = ", ".join(f"a{i}" for i in range(len(names)))
    body = "".join(f"    set{i}(o, a{i})\n" for i in range(len(names)))
    exec(f"def make({args}):\n    o = new(cls)\n{body}    return o\n", env)
    make = env["make"]
    make.__doc__ = f"{cls.__name__}({', '.join(names)}), built without __init__ checks."
    return make
