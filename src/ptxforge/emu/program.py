"""Lay out a module for execution: flatten function bodies, give every register a slot, every label a pc.

The result (`Layout`) is pure bookkeeping; `compiler.py` turns its instructions into executable ops.
Nested `{ }` blocks get their own register/param/label scopes (nvcc reuses names like `param0` per call site,
and inline asm such as an mbarrier wait loop expands the same label in every use): a name resolves to the
innermost enclosing block that declares it, as ptxas resolves it.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np

from ptxforge.emu.errors import EmulatorError
from ptxforge.ptx import ir

_UDT = {1: np.bool_, 8: np.uint8, 16: np.uint16, 32: np.uint32, 64: np.uint64}


def storage_dtype(ty: str) -> np.dtype[Any]:
    """The numpy dtype that holds a register of PTX type `ty` as raw bits."""
    if ty == ".pred":
        return np.dtype(np.bool_)
    bits = ir.type_bits(ty)
    if bits == 128:
        raise EmulatorError(f"{ty} registers are not supported")
    return np.dtype(_UDT[max(8, bits)])


def _vector_width(scope: dict, name: str) -> int | None:
    hit = scope.get(name)
    return hit.value if isinstance(hit, Symbol) and hit.kind == "vreg" else None


@dataclass
class Symbol:
    """What a name means inside a function: kind in kparam/pvar/shared/global/local/func/label."""

    kind: str
    value: int = 0  # offset, address, pc or pvar index
    size: int = 0
    name: str = ""


@dataclass
class FunctionLayout:
    name: str
    func: ir.Function
    entry: int = 0
    end: int = 0
    reg_slots: list[int] = field(default_factory=list)
    pvars: list[int] = field(default_factory=list)  # per-lane param storage owned by this function
    param_pvars: list[int] = field(default_factory=list)  # formal params, in order
    return_pvars: list[int] = field(default_factory=list)
    # per formal param / return value: its register slot when it is a `.reg` one, else None (a .param)
    param_regs: list = field(default_factory=list)
    return_regs: list = field(default_factory=list)
    frame_size: int = 0  # bytes of .local variables
    target_lists: dict = field(default_factory=dict)  # .branchtargets name -> label names
    recursive: bool = False


@dataclass
class Placed:
    """One instruction in program order with the scope it resolves names in."""

    ins: ir.Instruction
    func: FunctionLayout
    scope: dict  # name -> ('reg', slot) | Symbol


class Layout:
    """Every function of a module laid out in one pc space, plus shared/local/param storage maps."""

    def __init__(self, module: ir.Module, kernel: ir.Function, globals_: dict[str, int]):
        self.module = module
        self.kernel_func = kernel
        self.reg_types: list[str] = []
        self.pvar_sizes: list[int] = []
        self.placed: list[Placed] = []
        self.functions: dict[str, FunctionLayout] = {}
        self.globals = globals_  # .global/.const variable name -> address
        self.shared: dict[str, int] = {}
        self.dynamic_shared_offset = 0
        self.static_shared = 0
        self.kparams: dict[str, tuple[int, int]] = {}  # name -> (offset, size)
        self.kparam_size = 0
        self._layout_kparams()
        self._layout_module_shared()
        # every .func with a body (tables of function pointers can reach any of them) + declarations; the
        # module's other kernels cannot be called, so only their names resolve (to their addresses)
        self.other_kernels = frozenset(g.name for g in module.functions if g.is_kernel and g is not kernel)
        others = [g for g in module.functions if g is not kernel and g.body is not None and not g.is_kernel]
        decls = [g for g in module.functions if g.body is None and not any(h.name == g.name for h in others)]
        for f in [kernel] + others + decls:
            if f.name not in self.functions:
                self._layout_function(f)
        self._finish_shared()
        self._mark_recursion()
        # per-wave state is sized to what the kernel can run: registers start as these scalars (a register
        # becomes a lane array when first written), local frames are reserved for the reachable functions,
        # and a function's .param storage is allocated when a wave first calls it (`Machine._enter`)
        self.reg_zeros = tuple(storage_dtype(t).type(0) for t in self.reg_types)
        self.reachable = self._reachable_names()

    # ------------------------------------------------------------------ params and shared memory
    def _layout_kparams(self) -> None:
        off = 0
        for p in self.kernel_func.params:
            size = max(p.size, 1)
            align = p.align or min(8, max(1, ir.type_bits(p.type) // 8))
            off = (off + align - 1) // align * align
            self.kparams[p.name] = (off, size)
            off += size
        self.kparam_size = off

    def _layout_module_shared(self) -> None:
        self._extern_shared: list[str] = []
        self._dyn_align = 16
        for v in self.module.variables:
            if v.space == ".shared":
                self._add_shared(v)

    def _add_shared(self, v: ir.Variable) -> None:
        if v.linkage == ".extern" or (v.array and v.array[-1] is None):
            self._extern_shared.append(v.name)
            self._dyn_align = max(self._dyn_align, v.align or 1)
            return
        if v.name in self.shared:
            return
        align = v.align or max(1, ir.type_bits(v.type) // 8)
        self.static_shared = (self.static_shared + align - 1) // align * align
        self.shared[v.name] = self.static_shared
        self.static_shared += v.size

    def _finish_shared(self) -> None:
        a = self._dyn_align
        self.dynamic_shared_offset = (self.static_shared + a - 1) // a * a
        for name in self._extern_shared:
            self.shared[name] = self.dynamic_shared_offset

    # ------------------------------------------------------------------ functions
    def _reachable(self, kernel: ir.Function) -> list[ir.Function]:
        seen: dict[str, ir.Function] = {kernel.name: kernel}
        todo = [kernel]
        while todo:
            f = todo.pop()
            for ins in f.instructions():
                if ins.opcode in ("call", "mov"):
                    for op in ins.operands:
                        if isinstance(op, ir.Symbol) and op.name not in seen:
                            try:
                                g = self.module.function(op.name)
                            except KeyError:
                                continue
                            seen[g.name] = g
                            if g.body is not None:
                                todo.append(g)
        return list(seen.values())

    def _reachable_names(self) -> frozenset[str]:
        """Functions the kernel can run: those it names (calls, function pointers), transitively, and those
        named by .global/.const initializers (tables of function pointers)."""
        named: dict[str, set[str]] = {n: set() for n in self.functions}
        for p in self.placed:
            for op in p.ins.operands:
                base = op.base if isinstance(op, ir.Address) else op
                if isinstance(base, ir.Symbol) and base.name in self.functions:
                    named[p.func.name].add(base.name)
                elif isinstance(base, ir.Expr):  # `generic(f)`, `f+0`: any function it mentions
                    named[p.func.name].update(n for n in self.functions if n in base.text)
        seen = {self.kernel_func.name}
        variables = list(self.module.variables) + [s for f in self.module.functions for s in f.body or ()
                                                   if isinstance(s, ir.Variable)]
        for v in variables:
            if v.init is not None:
                text = v.init.text if isinstance(v.init, ir.Expr) else " ".join(map(str, v.init))
                seen.update(n for n in self.functions if n in text)
        todo = list(seen)
        while todo:
            for g in named.get(todo.pop(), ()):
                if g not in seen:
                    seen.add(g)
                    todo.append(g)
        return frozenset(seen)

    def _new_reg(self, ty: str) -> int:
        self.reg_types.append(ty)
        return len(self.reg_types) - 1

    def _new_pvar(self, size: int) -> int:
        self.pvar_sizes.append(max(size, 1))
        return len(self.pvar_sizes) - 1

    def _layout_function(self, f: ir.Function) -> None:
        fl = FunctionLayout(f.name, f)
        self.functions[f.name] = fl
        if f.body is None:  # an extern declaration (vprintf, malloc ...): handled as a builtin
            return
        scope: dict = {}
        for name, (off, size) in self.kparams.items() if f is self.kernel_func else ():
            scope[name] = Symbol("kparam", off, size, name)
        if f is not self.kernel_func:
            for p in f.params:
                i = self._new_pvar(p.size)
                fl.pvars.append(i)
                fl.param_pvars.append(i)
                fl.param_regs.append(self._formal_reg(p, fl, scope))
                if p.space != ".reg":
                    scope[p.name] = Symbol("pvar", i, p.size, p.name)
            for p in f.returns:
                i = self._new_pvar(p.size)
                fl.return_pvars.append(i)
                fl.return_regs.append(self._formal_reg(p, fl, scope))
                if p.space != ".reg":
                    scope[p.name] = Symbol("pvar", i, p.size, p.name)
        fl.entry = len(self.placed)
        self._walk(f.body, fl, scope)
        fl.end = len(self.placed)
        if fl.end == fl.entry or self.placed[-1].ins.opcode not in ("ret", "exit", "bra", "trap"):
            # falling off the end of a body returns
            self.placed.append(Placed(ir.Instruction("ret", (), ()), fl, scope))
            fl.end = len(self.placed)

    def _formal_reg(self, p: ir.Param, fl: FunctionLayout, scope: dict):
        """A `.reg` parameter or return value is a register of the function (a vector one: the tuple of its
        element registers); None for a .param one."""
        if p.space != ".reg":
            return None
        if p.vector:
            scope[p.name] = Symbol("vreg", p.vector, 0, p.name)
            slots = []
            for e, alias in zip(ir.vector_elements(p.name, p.vector), ir.VECTOR_COMPONENT_ALIASES, strict=False):
                slots.append(self._new_reg(p.type))
                scope[e] = scope[p.name + "." + alias] = ("reg", slots[-1])
            fl.reg_slots.extend(slots)
            return tuple(slots)
        slot = self._new_reg(p.type)
        fl.reg_slots.append(slot)
        scope[p.name] = ("reg", slot)
        return slot

    def _walk(self, body, fl: FunctionLayout, outer: dict) -> None:
        scope = dict(outer)
        # a block's labels are visible in the whole block (forward branches) and in blocks inside it;
        # their pcs are filled in as the walk reaches them
        for s in body:
            if isinstance(s, ir.Label):
                scope[s.name] = Symbol("label", -1, 0, s.name)
        for s in body:
            if isinstance(s, ir.RegisterDecl):
                for name in s.declared():
                    if s.vector:  # a vector register is its element registers
                        scope[name] = Symbol("vreg", s.vector, 0, name)
                        for e, alias in zip(ir.vector_elements(name, s.vector), ir.VECTOR_COMPONENT_ALIASES,
                                            strict=False):
                            slot = self._new_reg(s.type)
                            fl.reg_slots.append(slot)
                            scope[e] = scope[name + "." + alias] = ("reg", slot)
                        continue
                    slot = self._new_reg(s.type)
                    fl.reg_slots.append(slot)
                    scope[name] = ("reg", slot)
            elif isinstance(s, ir.Variable):
                self._declare(s, fl, scope)
            elif isinstance(s, ir.Label):
                scope[s.name].value = len(self.placed)
            elif isinstance(s, ir.Instruction):
                self.placed.append(Placed(ir.expand_vector_registers(s, lambda n: _vector_width(scope, n)), fl,
                                          scope))
            elif isinstance(s, ir.Block):
                self._walk(s.body, fl, scope)
            elif type(s).__name__ == "TargetList":  # `ts: .branchtargets L1, L2;` for brx.idx
                fl.target_lists[s.name] = tuple(s.targets)
            # Loc, Pragma, CallPrototype: no effect on execution

    def _declare(self, v: ir.Variable, fl: FunctionLayout, scope: dict) -> None:
        if v.space == ".param":
            i = self._new_pvar(v.size)
            fl.pvars.append(i)
            scope[v.name] = Symbol("pvar", i, v.size, v.name)
        elif v.space == ".shared":
            self._add_shared(v)
            scope[v.name] = Symbol("shared", -1, v.size, v.name)  # resolved after layout
        elif v.space == ".local":
            align = v.align or max(1, ir.type_bits(v.type) // 8)
            fl.frame_size = (fl.frame_size + align - 1) // align * align
            scope[v.name] = Symbol("local", fl.frame_size, v.size, v.name)
            fl.frame_size += v.size
        elif v.space in (".global", ".const"):
            if v.name not in self.globals:
                raise EmulatorError(f"{fl.name}: function-scope {v.space} variable {v.name} was not allocated")
        else:
            raise EmulatorError(f"{fl.name}: {v.space} variables are not supported")

    def _mark_recursion(self) -> None:
        graph: dict[str, set[str]] = {n: set() for n in self.functions}
        for p in self.placed:
            if p.ins.opcode == "call":
                for op in p.ins.operands:
                    if isinstance(op, ir.Symbol) and op.name in self.functions:
                        graph[p.func.name].add(op.name)
        for name in graph:  # a function is recursive if it can reach itself
            seen, todo = set(), list(graph[name])
            while todo:
                g = todo.pop()
                if g == name:
                    self.functions[name].recursive = True
                    break
                if g not in seen:
                    seen.add(g)
                    todo.extend(graph[g])
        self.has_calls = any(p.ins.opcode == "call" for p in self.placed)

    # ------------------------------------------------------------------ lookups
    def operand_slots(self, placed: Placed, o: Any) -> list[int] | None:
        """The register slots operand `o` of an instruction names (a video operand's %r1.b0 names %r1); None
        for an operand whose registers cannot be told (an unknown name, a whole vector register)."""
        if isinstance(o, ir.Immediate | ir.Sink | ir.SpecialRegister | ir.Expr):
            return []
        if isinstance(o, ir.Negated | ir.Minus):
            return self.operand_slots(placed, o.operand)
        if isinstance(o, ir.RegisterOffset):
            return self.operand_slots(placed, o.register)
        if isinstance(o, ir.Address):
            return [] if o.base is None else self.operand_slots(placed, o.base)
        if isinstance(o, ir.Vector | ir.AddressList | ir.ParenList | ir.PredPair):
            parts = o.elements if isinstance(o, ir.Vector) else (o.first, o.second) if isinstance(o, ir.PredPair) \
                else o.items
            out: list[int] = []
            for e in parts:
                got = self.operand_slots(placed, e)
                if got is None:
                    return None
                out += got
            return out
        if isinstance(o, ir.Register | ir.Symbol):
            hit = self.lookup(placed, o.name)
            if hit is None and isinstance(o, ir.Register):
                hit = self.lookup(placed, ir.split_selector(o.name)[0])
            if isinstance(hit, tuple):
                return [hit[1]]
            if hit is None or hit.kind == "vreg":
                return None
            return []  # an address, a label, a parameter: not a register
        return None

    def lookup(self, placed: Placed, name: str) -> tuple[str, int] | Symbol | None:
        """What `name` means at an instruction: ('reg', slot) or a Symbol."""
        hit = placed.scope.get(name)
        if isinstance(hit, Symbol) and hit.kind == "shared":
            return Symbol("shared", self.shared[name], hit.size, name)
        if hit is not None:
            return hit
        if name in self.shared:
            return Symbol("shared", self.shared[name], 0, name)
        if name in self.globals:
            return Symbol("global", self.globals[name], 0, name)
        if name in self.functions or name in self.other_kernels:
            return Symbol("func", 0, 0, name)
        return None

    @property
    def shared_bytes(self) -> int:
        return self.dynamic_shared_offset
