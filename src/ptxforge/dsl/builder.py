"""The function being built: its registers, statements, labels, shared variables and checks.

Every DSL call ends in `Builder.emit`, which makes one `ir.Instruction` located at the user's Python
line, checks it against the ISA table (operand types, then the kernel's target) and appends it.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from ptxforge.dsl.errors import DSLArchError, DSLError, DSLTypeError, error_at, user_span
from ptxforge.dsl.types import DType
from ptxforge.ptx import ir, isa

if TYPE_CHECKING:
    from collections.abc import Iterable

    from ptxforge.dsl.kernel import DeviceFunction
    from ptxforge.dsl.values import Reg

# register prefix and declared type for each storage type (nvcc's naming)
_PREFIX = {".pred": ("%p", ".pred"), ".b16": ("%rs", ".b16"), ".u16": ("%rs", ".b16"), ".s16": ("%rs", ".b16"),
           ".b32": ("%r", ".b32"), ".u32": ("%r", ".b32"), ".s32": ("%r", ".b32"), ".b64": ("%rd", ".b64"),
           ".u64": ("%rd", ".b64"), ".s64": ("%rd", ".b64"), ".f32": ("%f", ".f32"), ".f64": ("%fd", ".f64"),
           ".b128": ("%rq", ".b128")}

_STACK: list[Builder] = []


def current() -> Builder:
    """The builder of the kernel or device function being traced; DSLError outside one."""
    if not _STACK:
        raise DSLError("DSL instructions can only be used inside a @kernel or @func being built")
    return _STACK[-1]


class Builder:
    """Collects one function's body. `arch` is the target the kernel is built for."""

    def __init__(self, name: str, arch: str, kind: str = "entry"):
        self.name, self.arch, self.kind = name, arch, kind
        self.sm, self.arch_suffix = isa.parse_target(arch)
        self.prologue: list[ir.Statement] = []
        self.body: list[ir.Statement] = []
        self.counts: dict[str, int] = {}
        self.reg_types: dict[str, str] = {}
        self.cache: dict[tuple[str, str], Reg] = {}  # ("sreg", "%tid.x") / ("symaddr", sym) -> its register
        self.guard: ir.Guard | None = None
        self.labels = 0
        self.variables: list[ir.Variable] = []  # module-level (shared memory)
        self.funcs: dict[str, DeviceFunction] = {}  # device functions called: name -> DeviceFunction
        self.min_ptx: tuple[int, int] = (1, 0)
        self.depth = 0  # structured control-flow nesting
        self.open_if: tuple[str, int] | None = None  # (else label, index of it in body) of the if_ just closed
        self.params: list[ir.Param] = []
        self.returns: list[ir.Param] = []

    def __enter__(self) -> Builder:
        _STACK.append(self)
        return self

    def __exit__(self, *exc: object) -> None:
        _STACK.pop()

    # ------------------------------------------------------------------ registers and labels

    def new_reg_name(self, storage: str) -> str:
        prefix, decl = _PREFIX[storage]
        n = self.counts.get(prefix, 0) + 1
        self.counts[prefix] = n
        name = f"{prefix}{n}"
        self.reg_types[name] = decl
        return name

    def new_label(self, hint: str = "L") -> str:
        self.labels += 1
        return f"$L__{hint}{self.labels}"

    def unique(self, base: str) -> str:
        """A module-level symbol name derived from `base` and this function's name."""
        taken = {v.name for v in self.variables}
        name = f"{self.name}_{base}"
        i = 1
        while name in taken:
            i += 1
            name = f"{self.name}_{base}{i}"
        return name

    # ------------------------------------------------------------------ statements

    def place(self, stmt: ir.Statement) -> None:
        self.body.append(stmt)
        self.open_if = None

    def label(self, name: str) -> None:
        self.place(ir.Label(name))

    def emit(self, opcode: str, suffixes: Iterable[str | None], operands: Iterable[ir.Operand], *,
             prologue: bool = False, guard: ir.Guard | None = None, into: list[ir.Statement] | None = None,
             check: bool = True) -> ir.Instruction:
        """Append one instruction (checked against the ISA table and the target) and return it; empty or
        None suffixes are left out."""
        span = user_span()
        if guard is None and not prologue:
            guard = self.guard
        ins = ir.Instruction(opcode, tuple(s.lstrip(".") for s in suffixes if s), tuple(operands), guard, span)
        if check:
            self.check(ins)
        if into is not None:
            into.append(ins)
        elif prologue:
            self.prologue.append(ins)
        else:
            self.place(ins)
        return ins

    def check(self, ins: ir.Instruction) -> None:
        """Raise at the user's line if the ISA table rejects `ins` or the target lacks it."""
        problems = isa.check_instruction(ins, self.reg_types, version=None, target=None)
        if problems:
            raise error_at(ins.span, problems[0][1], DSLTypeError)
        spec = isa.lookup(ins)
        for req in isa.requirements(ins):
            if req.min_sm and not req.target_ok(self.arch):
                # check_instruction above rejects unknown instructions, so spec is set
                subject = spec.family if req.what == spec.family else f"{spec.family}: {req.what}"  # type: ignore[union-attr]
                need = f"sm_{req.min_sm}{req.arch_suffix}"
                also = f" (also available on {', '.join(req.also)})" if req.also else ""
                raise error_at(ins.span, f"{subject} needs {need}; this kernel targets {self.arch}{also}",
                               DSLArchError)
            self.min_ptx = max(self.min_ptx, req.ptx_needed(self.arch))

    # ------------------------------------------------------------------ result

    def declarations(self) -> list[ir.Statement]:
        by_prefix = {prefix: decl for prefix, decl in _PREFIX.values()}
        order = ["%p", "%rs", "%r", "%rd", "%rq", "%f", "%fd"]
        return [ir.RegisterDecl(by_prefix[p], (p,), self.counts[p] + 1) for p in order if p in self.counts]

    def function(self, directives: Iterable[tuple[str, tuple[int, ...]]] = ()) -> ir.Function:
        if self.open_blocks():
            raise DSLError(f"{self.name}: an if_/range_ block is still open at the end of the function")
        body = [*self.declarations(), *self.prologue, *self.body]
        last = self.body[-1] if self.body else None
        if not (isinstance(last, ir.Instruction) and last.opcode in ("ret", "exit", "bra", "trap")
                and last.guard is None):
            body.append(ir.Instruction("ret", (), ()))
        linkage = ".visible"
        return ir.Function(self.kind, self.name, tuple(self.params), tuple(self.returns), linkage,
                           tuple(directives), tuple(body))

    def open_blocks(self) -> bool:
        return self.depth != 0


def type_error(message: str) -> DSLTypeError:
    return DSLTypeError(message)


def storage_of(t: DType) -> str:
    return t.storage
