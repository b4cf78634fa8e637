"""Checks on parsed PTX beyond syntax: declarations, labels, operand types, targets and ISA versions.

Every problem is collected; `check()` raises them together as one `PTXValidationError`.
"""

from __future__ import annotations

from collections import ChainMap

from ptxforge.ptx import ir, isa
from ptxforge.ptx.errors import Diagnostic, PTXValidationError
from ptxforge.ptx.isa.targets import target_min_ptx, version_problem
from ptxforge.ptx.lexer import SourceText
from ptxforge.ptx.limits import limit_problems

# Kernel directives that need a newer target (ptxas 13.0 agrees with the manual here).
DIRECTIVE_MIN_SM = {".explicitcluster": 90, ".reqnctapercluster": 90, ".maxclusterrank": 90}


def validate(module: ir.Module, target: str | None = None,
             version: tuple[int, int] | None = None) -> list[Diagnostic]:
    """Every problem in `module`, in source order. `target`/`version` override the module's own."""
    return _Validator(module, target, version).run()


def check(module: ir.Module, target: str | None = None, version: tuple[int, int] | None = None) -> None:
    """Raise `PTXValidationError` listing every problem, or return None when there is none."""
    problems = validate(module, target, version)
    if problems:
        raise PTXValidationError(problems)


_UNSET = object()


class _Registers(dict):
    """The registers visible at one point of a function, name -> type: one dict, so the several lookups per
    operand run at dict speed, and what a `{ }` block declares is undone when the block closes."""

    def __init__(self) -> None:
        super().__init__()
        self.undo: list[tuple[str, object]] = []  # (name, what it was before) per declaration, in order

    def declare(self, name: str, ty: str) -> None:
        self.undo.append((name, self.get(name, _UNSET)))
        self[name] = ty

    def close(self, opened: int) -> None:
        """Forget the declarations made since `len(self.undo)` was `opened`."""
        undo = self.undo
        while len(undo) > opened:
            name, before = undo.pop()
            if before is _UNSET:
                del self[name]
            else:
                self[name] = before


class _Validator:
    def __init__(self, module: ir.Module, target, version):
        self.m = module
        self.target = target or module.target.arch
        self.version = version or module.version
        self.src = SourceText(module.source) if module.source is not None else None
        self.out: list[Diagnostic] = []
        self.globals = {v.name for v in module.variables} | {f.name for f in module.functions}
        self.functions = {f.name: f for f in module.functions}

    def report(self, span: ir.Span | None, message: str) -> None:
        if span is None or span.line == 0:
            self.out.append(Diagnostic(self.m.filename, 0, 0, message))
            return
        line_text = self.src.line_text(span.line) if self.src is not None and span.file == self.m.filename else ""
        self.out.append(Diagnostic(span.file, span.line, span.col, message, source_line=line_text))

    def run(self) -> list[Diagnostic]:
        self.isa = isa
        self.check_target()
        seen: dict[str, ir.Span] = {}
        for item in self.m.items:
            if isinstance(item, ir.Variable):
                self.duplicate(seen, item.name, item.span, "variable")
                self.variable_shape(item)
        for f in self.m.functions:
            self.signature(f)
            if f.body is not None:
                self.function(f)
        for span, message in limit_problems(self.m):
            self.report(span, message)
        return sorted(self.out, key=lambda d: (d.line, d.col))

    def check_target(self) -> None:
        """The target and the PTX ISA version as ptxas 13.0 takes them: both known, and the version new
        enough for the target (and for .address_size)."""
        version_span = self.header_span("version")
        problem = version_problem(self.version)
        if problem is not None:
            self.report(version_span, problem)
        own = self.m.target.arch
        for arch in dict.fromkeys((self.target, own)):  # an override (check --arch) and the module's own
            try:
                need = target_min_ptx(arch)
            except ValueError as e:
                self.report(self.m.target.span, str(e))
                continue
            if arch == own and problem is None and tuple(self.version) < need:
                self.report(self.m.target.span, f".target {arch} needs PTX ISA {need[0]}.{need[1]} or later; this "
                                                f"module is .version {self.version[0]}.{self.version[1]}")
        if self.m.address_size is not None and problem is None and tuple(self.version) < (2, 3):
            self.report(self.header_span("address_size"), ".address_size needs PTX ISA 2.3 or later; this module "
                                                          f"is .version {self.version[0]}.{self.version[1]}")

    def header_span(self, key: str) -> ir.Span | None:
        """Where the module's `.version` or `.address_size` directive is, when it was parsed from text."""
        at = (self.m.layout or {}).get(key)
        if at is None or self.src is None:
            return None
        return ir.Span.at(self.m.filename, self.src, at[1])

    def duplicate(self, seen: dict, name: str, span, what: str) -> None:
        if name in seen:
            first = seen[name]
            self.report(span, f"{what} '{name}' is already declared at line {first.line}")
        else:
            seen[name] = span

    def variable_shape(self, v: ir.Variable) -> None:
        """ptxas's rules for unsized arrays: only `.extern` or initialized variables, first dimension only."""
        if None in v.array[1:]:
            self.report(v.span, f"variable '{v.name}': only the first array dimension can be unsized")
        elif v.array and v.array[0] is None and v.linkage != ".extern" and v.init is None:
            self.report(v.span, f"variable '{v.name}' has an incomplete type (an unsized array); declare it "
                                f".extern or give it an initializer")

    def signature(self, f: ir.Function) -> None:
        """Parameters and directives of a kernel or function that ptxas rejects."""
        for p in f.params + f.returns:
            if p.vector and p.space == ".param":
                self.report(p.span, f"{f.name}: parameter '{p.name}' cannot be a vector (.v{p.vector}) in .param "
                                    f"space; use an array or .align with a wider type")
            if f.is_kernel and None in p.array:
                self.report(p.span, f"{f.name}: kernel parameter '{p.name}' cannot be an unsized array")
        if f.is_kernel and any(name == ".noreturn" for name, _ in f.directives):
            self.report(f.span, f"{f.name}: .noreturn applies only to a .func, not to an .entry")

    # ------------------------------------------------------------------ functions

    def directives(self, f: ir.Function) -> None:
        sm, _ = self.isa.parse_target(self.target)
        for name, _nums in f.directives:
            need = DIRECTIVE_MIN_SM.get(name)
            if need is not None and sm < need:
                self.report(f.span, f"{f.name}: {name} needs sm_{need}; this module targets {self.target}")

    def function(self, f: ir.Function) -> None:
        try:
            self.directives(f)
        except ValueError:
            pass  # a bad target is reported once, by check_target
        self.prototypes = {s.name for s in _walk(f.body) if isinstance(s, ir.CallPrototype | ir.TargetList)}
        regs = _Registers()
        symbols: set[str] = set()  # the function's own names; module-level ones stay in self.globals
        self.param_symbols = {p.name for p in f.params + f.returns if p.space == ".param"} | {
            s.name for s in _walk(f.body) if isinstance(s, ir.Variable) and s.space == ".param"}
        self.vectors: dict[str, int] = {}  # vector registers (.reg .v4 .u32 %v) -> element count
        for p in f.params + f.returns:
            if p.space == ".reg":
                regs.declare(p.name, p.type)
                if p.vector:
                    self.declare_vector(regs, p.name, p.vector, p.type)
            else:
                symbols.add(p.name)
        self.labels: ChainMap[str, ir.Span] = ChainMap()
        self.block(f.body, regs, symbols)

    def block(self, body, regs: _Registers, symbols: set) -> None:
        """Check one `{ }` scope: its registers, variables and labels are visible in it and in the blocks
        inside it (a label too: ptxas resolves a branch to the innermost enclosing block's label)."""
        opened = len(regs.undo)
        local: dict[str, ir.Span] = {}
        labels: dict[str, ir.Span] = {}
        self.labels = self.labels.new_child(labels)
        symbols = set(symbols)
        for s in body:
            t = type(s)
            if t is ir.Label:
                self.duplicate(labels, s.name, s.span, "label")
            elif t is ir.RegisterDecl:
                for name in s.declared():
                    self.duplicate(local, name, s.span, "register")
                    regs.declare(name, s.type)
                    if s.vector:
                        self.declare_vector(regs, name, s.vector, s.type)
            elif t is ir.Variable:
                self.duplicate(local, s.name, s.span, "variable")
                self.variable_shape(s)
                if s.space == ".reg":
                    regs.declare(s.name, s.type)
                else:
                    symbols.add(s.name)
        for s in body:
            t = type(s)
            if t is ir.Instruction:
                self.instruction(s, regs, symbols)
            elif t is ir.Block:
                self.block(s.body, regs, symbols)
            elif t is ir.TargetList and s.directive == ".branchtargets":
                for name in s.targets:
                    if name not in self.labels:
                        self.report(s.span, f".branchtargets: '{name}' is not declared")
            elif t is ir.TargetList:
                for name in s.targets:
                    if name not in self.globals:
                        self.report(s.span, f"{s.directive}: '{name}' is not declared")
        self.labels = self.labels.parents
        regs.close(opened)

    def declare_vector(self, regs: _Registers, name: str, n: int, ty: str) -> None:
        """A vector register and its elements (`name.x`, or `name.r`, ...)."""
        self.vectors[name] = n
        for e, alias in zip(ir.vector_elements(name, n), ir.VECTOR_COMPONENT_ALIASES, strict=False):
            regs.declare(e, ty)
            regs.declare(name + "." + alias, ty)

    def instruction(self, ins: ir.Instruction, regs: _Registers, symbols: set) -> None:
        if self.vectors:
            ins = ir.expand_vector_registers(ins, self.vectors.get)
        if ins.guard is not None:
            ty = regs.get(ins.guard.predicate)
            if ty is None:
                self.report(ins.span, f"{ins.mnemonic}: guard predicate '{ins.guard.predicate}' is not declared")
            elif ty != ".pred":
                self.report(ins.span, f"{ins.mnemonic}: guard '{ins.guard.predicate}' is {ty}, expected .pred")
        ok = True
        for op in _leaves(ins.operands):
            t = type(op)
            if t is ir.Register and op.name not in regs and not (
                    ins.opcode in ir.VIDEO_OPCODES and ir.split_selector(op.name)[0] in regs):
                self.report(op.span, f"{ins.mnemonic}: register '{op.name}' is not declared")
                ok = False
            elif t is ir.Symbol and not self.known_symbol(op.name, symbols):
                if ins.opcode == "bra":
                    self.report(op.span, f"{ins.mnemonic}: branch to missing label '{op.name}'")
                else:
                    self.report(op.span, f"{ins.mnemonic}: '{op.name}' is not declared")
                ok = False
        if ok and ins.opcode in ("ld", "st") and not any(x.split("::")[0] in _SPACES for x in ins.suffixes):
            for op in ins.operands:
                if isinstance(op, ir.Address) and isinstance(op.base, ir.Symbol) and op.base.name in self.param_symbols:
                    self.report(op.span or ins.span, f"{ins.mnemonic}: [{op.base.name}] is a .param variable, "
                                                     f"which a generic {ins.opcode} cannot reach; use "
                                                     f"{ins.opcode}.param")
                    ok = False
        if ok and ins.opcode == "call":
            self.call_arguments(ins, regs)
        if ok:
            for span, message in self.isa.check_instruction(ins, regs, version=self.version, target=self.target):
                self.report(span, message)

    def call_arguments(self, ins: ir.Instruction, regs: _Registers) -> None:
        """Registers passed to (or receiving) a direct call's `.reg` parameters take as many bytes as the
        parameter, a vector counted whole, and a scalar for a scalar is of a kind that converts: a float type
        takes a float or `.b` register, an integer one an integer register, as ptxas checks ("Type of
        argument does not match formal parameter")."""
        ops = ins.operands
        at = next((i for i, o in enumerate(ops) if type(o) in (ir.Symbol, ir.Register)), None)
        callee = self.functions.get(ops[at].name) if at is not None else None  # type: ignore[union-attr]
        if callee is None:
            return
        rets = ops[at - 1].items if at and type(ops[at - 1]) is ir.ParenList else ()  # type: ignore[union-attr]
        args = ops[at + 1].items if at + 1 < len(ops) and type(ops[at + 1]) is ir.ParenList else ()  # type: ignore
        for actual, formal in (*zip(args, callee.params, strict=False), *zip(rets, callee.returns, strict=False)):
            if formal.space != ".reg" or type(actual) is not ir.Register or actual.name not in regs:
                continue
            ty, n = regs[actual.name], self.vectors.get(actual.name)
            have, want = ir.storage_size(ty, n, ()), ir.storage_size(formal.type, formal.vector, ())
            vec = f".v{formal.vector} " if formal.vector else ""
            if have != want:
                self.report(actual.span or ins.span,
                            f"call to {callee.name}: {actual.name} ({f'.v{n} ' if n else ''}{ty}, {have} bytes) does "
                            f"not match parameter .reg {vec}{formal.type} {formal.name} ({want} bytes)")
            elif not n and not formal.vector and _float_or_int(ty) * _float_or_int(formal.type) < 0:
                self.report(actual.span or ins.span,
                            f"call to {callee.name}: {actual.name} ({ty}) does not match parameter .reg "
                            f"{formal.type} {formal.name}: a float and an integer type (a .b{8 * have} register "
                            f"fits either)")

    def known_symbol(self, name: str, symbols: set) -> bool:
        return name in symbols or name in self.globals or name in self.labels or name in self.prototypes


_SPACES = frozenset({"global", "shared", "local", "const", "param"})


def _float_or_int(ty: str) -> int:
    """1 for a float type, -1 for a signed or unsigned integer one, 0 for `.b` bits (which pass as either)."""
    if ty in ir.FLOAT_TYPES:
        return 1
    return 0 if ty.startswith(".b") else -1


def _walk(body):
    for s in body:
        yield s
        if isinstance(s, ir.Block):
            yield from _walk(s.body)


def _leaves(operands):
    """Register and Symbol operands, looking inside vectors, addresses and lists."""
    for op in operands:
        t = type(op)
        if t is ir.Register or t is ir.Symbol:
            yield op
        elif t is ir.Address:
            if op.base is not None:
                yield op.base
        elif t is ir.Vector:
            yield from _leaves(op.elements)
        elif t is ir.AddressList or t is ir.ParenList:
            yield from _leaves(op.items)
        elif t is ir.Negated or t is ir.Minus:
            yield from _leaves((op.operand,))
        elif t is ir.RegisterOffset:
            yield op.register
        elif t is ir.PredPair:
            yield from _leaves((op.first, op.second))
