"""`@kernel` and `@func`: trace a Python function into a PTX `.entry` / `.func`, build the module,
check it, print it, launch it.

    @pf.kernel(arch="sm_80")
    def vadd(a: ptr(f32), b: ptr(f32), c: ptr(f32), n: u32):
        i = ctaid.x * ntid.x + tid.x
        with if_(i < n):
            st(c[i], ld(a[i]) + ld(b[i]))

    vadd.ptx()                       # PTX text for the kernel's arch; vadd.ptx(arch="sm_90a") for another
    vadd.launch(grid=(g,), block=(256,), args=[a, b, c, np.uint32(n)], device="emu")

Parameters annotated with a PTX type (`u32`, `f32`) or `ptr(...)` become kernel parameters; other
parameters must have defaults and are compile-time constants (`vadd.specialize(BLOCK=128)`).
With an explicit `arch` the kernel is traced when it is defined, so errors show at import.
"""

from __future__ import annotations

import inspect
import sys
from typing import TYPE_CHECKING, Any, overload

from ptxforge.dsl import trace_cache
from ptxforge.dsl import types as T
from ptxforge.dsl.arith import operand
from ptxforge.dsl.builder import Builder, current
from ptxforge.dsl.errors import DSLError, DSLTypeError
from ptxforge.dsl.memory import Pointer, _mem_type, param_pointer, param_scalar
from ptxforge.dsl.types import DType, Ptr
from ptxforge.dsl.values import Reg, new_reg, value_of
from ptxforge.ptx import ir
from ptxforge.ptx.isa import parse_target
from ptxforge.ptx.retarget import target_min_ptx
from ptxforge.ptx.validator import validate
from ptxforge.runtime import gpu
from ptxforge.runtime.kernel import Kernel as RuntimeKernel
from ptxforge.runtime.params import PointeeType

if TYPE_CHECKING:
    from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
    from typing import NoReturn

    from ptxforge.dsl.values import Value
    from ptxforge.runtime.kernel import Kernel as RuntimeKernel
    from ptxforge.runtime.params import PointeeType

DEFAULT_ARCH = "sm_90a"


def resolve_arch(arch: str | None) -> str:
    """'auto' (or None): the current GPU's target when one is usable, else sm_90a."""
    if arch in (None, "auto"):
        return gpu.gpu_arch() or DEFAULT_ARCH

    try:
        parse_target(arch)
    except ValueError as e:
        raise DSLError(str(e)) from None
    return arch


def _signature(fn: Callable[..., object], what: str, localns: Mapping[str, Any] | None = None
               ) -> tuple[list[tuple[str, Ptr | DType]], dict[str, object], Any]:
    """(ptx params [(name, Ptr|DType)], constants {name: default}, the return annotation) from the annotations.

    `localns` holds the names visible where the decorator was applied, so that string annotations
    (`from __future__ import annotations`) may use types imported inside a function.
    """
    try:
        ann = inspect.get_annotations(fn, locals=localns, eval_str=True)
    except NameError as e:
        raise DSLError(f"{what} {fn.__name__}: cannot resolve annotation: {e}") from None
    params, consts = [], {}
    for name, p in inspect.signature(fn).parameters.items():
        a = ann.get(name, inspect.Parameter.empty)
        if isinstance(a, Ptr | DType):
            params.append((name, a))
        elif p.default is not inspect.Parameter.empty:
            consts[name] = p.default
        else:
            raise DSLError(f"{what} {fn.__name__}: parameter {name!r} needs a PTX type annotation (u32, f32, "
                           f"ptr(f32), ...) or a default value (a compile-time constant)")
    return params, consts, ann.get("return")


def _ptx_param(fname: str, name: str, spec: Ptr | DType) -> ir.Param:
    if isinstance(spec, Ptr):
        align = spec.align or spec.elem.nbytes
        space = "." + spec.space if spec.space != "generic" else None
        return ir.Param(".param", ".u64", name, ptr_space=space, ptr_align=align if space else None)
    if spec.kind == "pred":
        raise DSLError(f"{fname}: parameter {name!r}: .pred parameters are not allowed; use u32")
    return ir.Param(".param", _mem_type(spec), name)


class Kernel:
    """A DSL kernel: traced per target into an `ir.Module`, printed, checked and launchable."""

    def __init__(self, fn: Callable[..., object], arch: str | None = "auto", name: str | None = None,
                 consts: Mapping[str, object] | None = None, maxntid: int | Sequence[int] | None = None,
                 minnctapersm: int | None = None, localns: Mapping[str, Any] | None = None) -> None:
        self.fn = fn
        self.name = name or fn.__name__
        self.arch = arch
        self.localns = localns
        self.params, self.defaults, _ = _signature(fn, "kernel", localns)
        self.consts = {**self.defaults, **(consts or {})}
        unknown = set(self.consts) - set(self.defaults)
        if unknown:
            raise DSLError(f"kernel {self.name}: unknown constants {', '.join(sorted(unknown))}")
        self.maxntid, self.minnctapersm = maxntid, minnctapersm
        self._modules: dict[str, ir.Module] = {}
        self._runtime: dict[int, tuple[ir.Module, RuntimeKernel]] = {}  # id(module) -> its runtime Kernel
        self.__doc__ = fn.__doc__
        self.__wrapped__ = fn

    def __repr__(self) -> str:
        sig = ", ".join(f"{n}: {s!r}" for n, s in self.params)
        return f"<kernel {self.name}({sig}) arch={self.arch}>"

    def __call__(self, *args: Any, **kwargs: Any) -> NoReturn:
        raise DSLError(f"kernel {self.name} is launched with {self.name}.launch(grid=, block=, args=[...]); "
                       f"calling it from Python or from another kernel is not supported (use @func for device "
                       f"functions)")

    def specialize(self, name: str | None = None, **consts: object) -> Kernel:
        """The kernel with other compile-time constants (parameters that have defaults), named
        `name` (default: the kernel's name with the constants appended, e.g. act_quant_pow2_scale1)."""
        if name is None:
            name = self.name + "".join(f"_{k}{_ident(v)}" for k, v in sorted(consts.items()))
        k = Kernel(self.fn, self.arch, name, {**self.consts, **consts}, self.maxntid, self.minnctapersm,
                   self.localns)
        if _trace_now(self.fn, self.arch):
            k.module()
        return k

    def module(self, arch: str | None = None) -> ir.Module:
        """The kernel (and the device functions it calls) as a checked `ir.Module` for `arch`."""
        arch = resolve_arch(arch or self.arch)
        m = self._modules.get(arch)
        if m is None:
            k = trace_cache.entry_key(self.fn, self.name, self.consts, arch, (self.maxntid, self.minnctapersm))
            m = trace_cache.load(k, f"<dsl {self.name}>") if k else None
            if m is None:
                m = self._build(arch)
                if k:
                    trace_cache.store(k, m)
            self._modules[arch] = m
        return m

    def ptx(self, arch: str | None = None) -> str:
        """The PTX text for `arch` (default: the kernel's own)."""
        return self.module(arch).to_ptx(canonical=True)

    def launch(self, grid: Any = (1,), block: Any = None, args: Any = (), *, device: Any = None,
               arch: str | None = None, **kw: Any) -> Any:
        """Run through the runtime: `device` is 'emu', 'cuda' or 'auto' (see ptxforge.runtime); the shape as
        keywords or a `LaunchConfig` in place of the grid (`launch(config, args)`), as `Kernel.launch`."""
        if block is not None:
            kw["block"] = block
        return self.runtime_kernel(arch).launch(grid, args=list(args), device=device, **kw)

    def runtime_kernel(self, arch: str | None = None) -> RuntimeKernel:
        """The launchable runtime Kernel for `arch`, knowing its pointer parameters' element types (one per
        module: its repeated launches reuse what the first checked, runtime/launch_plan.py)."""
        m = self.module(arch)
        hit = self._runtime.get(id(m))
        if hit is None or hit[0] is not m:
            hit = self._runtime[id(m)] = (m, RuntimeKernel(m, m.function(self.name),
                                                           pointee=[pointee_type(s) for _, s in self.params]))
        return hit[1]

    def _build(self, arch: str) -> ir.Module:
        b = Builder(self.name, arch, "entry")
        b.params = [_ptx_param(self.name, n, s) for n, s in self.params]
        with b:
            args = {n: (param_pointer(n, s) if isinstance(s, Ptr) else param_scalar(n, s)) for n, s in self.params}
            self.fn(**args, **self.consts)
        directives = []
        if self.maxntid:
            mt = (self.maxntid,) if isinstance(self.maxntid, int) else tuple(self.maxntid)
            directives.append((".maxntid", mt))
        if self.minnctapersm:
            directives.append((".minnctapersm", (self.minnctapersm,)))
        fn = _prune(b.function(directives))
        funcs = _collect_funcs(b, arch)
        version = max([b.min_ptx, target_min_ptx(arch), *(f[1] for f in funcs)])
        items: list[ir.Function | ir.Variable] = [*b.variables, *(v for f in funcs for v in f[2]),
                                                  *(f[0] for f in funcs), fn]
        m = ir.Module(version, ir.Target((arch,)), 64, tuple(_dedupe(items)), filename=f"<dsl {self.name}>")
        _validate(m)
        return m


def pointee_type(spec: Ptr | DType) -> PointeeType | None:
    """The runtime's PointeeType for a parameter annotation (None for scalars)."""
    if not isinstance(spec, Ptr):
        return None
    label = repr(spec).split(",")[0] + ")"
    if not spec.typed or spec.elem.kind == "b" and spec.elem.bits == 8:
        return PointeeType(label, None)
    if spec.elem.kind == "b":
        return PointeeType(label, None, spec.elem.nbytes)
    return PointeeType(label, T.HOST_DTYPE.get(spec.elem.name))


def _ident(v: object) -> str:
    if isinstance(v, bool):
        return str(int(v))
    return "".join(c if c.isalnum() else "_" for c in str(v))


def link(kernels: Iterable[Kernel], arch: str | None = None) -> ir.Module:
    """One module holding several kernels (and the device functions and shared variables they use)."""
    mods = [k.module(arch) for k in kernels]
    if not mods:
        raise DSLError("link: no kernels given")
    arches = {m.target.arch for m in mods}
    if len(arches) > 1:
        raise DSLError(f"link: the kernels target different archs ({', '.join(sorted(arches))}); pass arch=")
    items = list(_dedupe(it for m in mods for it in m.items))  # type: ignore[misc]  # DSL modules: functions, variables
    names = [f.name for f in items if isinstance(f, ir.Function) and f.is_kernel]
    dup = {n for n in names if names.count(n) > 1}
    if dup:
        raise DSLError(f"link: two kernels are named {', '.join(sorted(dup))}")
    return ir.Module(max(m.version for m in mods), mods[0].target, 64, tuple(items), filename="<dsl>")


def _dedupe(items: Iterable[ir.Function | ir.Variable]) -> Iterator[ir.Function | ir.Variable]:
    seen = set()
    for it in items:
        key: tuple[object, ...] = (type(it).__name__, it.name, it.kind if isinstance(it, ir.Function) else "")
        if isinstance(it, ir.Function) and it.is_kernel:
            key = key + (id(it),)
        if key not in seen:
            seen.add(key)
            yield it


def _collect_funcs(b: Builder, arch: str) -> list[tuple[ir.Function, tuple[int, int], list[ir.Variable]]]:
    """[(ir.Function, min ptx, variables)] of every device function called, callees first."""
    out, seen = [], set()

    def visit(df):
        if df.name in seen:
            return
        seen.add(df.name)
        built = df.built(arch)
        for callee in built.funcs.values():
            visit(callee)
        out.append((built.function, built.min_ptx, built.variables))
    for df in b.funcs.values():
        visit(df)
    return out


def _prune(f: ir.Function) -> ir.Function:
    """Drop prologue loads/moves whose register is never read (unused parameters, special registers)."""
    used: dict[str, int] = {}

    def count(ops):
        for o in ops:
            t = type(o)
            if t is ir.Register:
                used[o.name] = used.get(o.name, 0) + 1
            elif t is ir.Address and isinstance(o.base, ir.Register):
                used[o.base.name] = used.get(o.base.name, 0) + 1
            elif t is ir.Vector:
                count(o.elements)
            elif t is ir.PredPair:
                count((o.first, o.second))
            elif t is ir.Negated or t is ir.Minus:
                count((o.operand,))
            elif t is ir.ParenList or t is ir.AddressList:
                count(o.items)

    def walk(stmts):
        for s in stmts:
            if isinstance(s, ir.Instruction):
                count(s.operands)
                if s.guard:
                    used[s.guard.predicate] = used.get(s.guard.predicate, 0) + 1
            elif isinstance(s, ir.Block):
                walk(s.body)
    walk(f.body)
    body = []
    for s in f.body:  # type: ignore[union-attr]  # a built function has a body
        if (isinstance(s, ir.Instruction) and s.opcode in ("ld", "mov") and s.operands
                and isinstance(s.operands[0], ir.Register) and used.get(s.operands[0].name, 0) == 1
                and (s.opcode == "mov" and isinstance(s.operands[1], ir.SpecialRegister | ir.Symbol)
                     or s.opcode == "ld" and s.suffixes[0] == "param")):
            continue
        body.append(s)
    return ir.Function(f.kind, f.name, f.params, f.returns, f.linkage, f.directives, tuple(body))


def _validate(m: ir.Module) -> None:
    problems = validate(m)
    if problems:
        d = problems[0]
        raise DSLError(f"{d.message} (validator)", (d.file, d.line, d.col, ""))


def _trace_now(fn: Callable[..., object], arch: str | None) -> bool:
    """Whether a kernel with a fixed arch is traced where it is defined. Users' kernels are, so that errors point
    at the definition; ptxforge's own library kernels (tested in the suite) are traced at first use, so that a
    process importing `ptxforge.kernels` or `ptxforge.ep` pays only for the kernels it launches."""
    return arch not in (None, "auto") and not (getattr(fn, "__module__", None) or "").startswith("ptxforge.")


@overload
def kernel(fn: Callable[..., object], *, arch: str | None = "auto", name: str | None = None,
           maxntid: int | Sequence[int] | None = None, minnctapersm: int | None = None) -> Kernel: ...
@overload
def kernel(fn: None = None, *, arch: str | None = "auto", name: str | None = None,
           maxntid: int | Sequence[int] | None = None,
           minnctapersm: int | None = None) -> Callable[[Callable[..., object]], Kernel]: ...
def kernel(fn: Callable[..., object] | None = None, *, arch: str | None = "auto", name: str | None = None,
           maxntid: int | Sequence[int] | None = None,
           minnctapersm: int | None = None) -> Kernel | Callable[[Callable[..., object]], Kernel]:
    """Decorator: `@kernel` or `@kernel(arch="sm_80")` turns a Python function into a PTX kernel."""
    localns = sys._getframe(1).f_locals  # the decorating scope, for string annotations

    def wrap(f: Callable[..., object]) -> Kernel:
        k = Kernel(f, arch, name, None, maxntid, minnctapersm, localns)
        if _trace_now(f, arch):
            k.module()  # trace now: errors show where the kernel is defined
        return k
    return wrap(fn) if fn is not None else wrap


# --------------------------------------------------------------------------- device functions


class _Built:
    def __init__(self, function: ir.Function, min_ptx: tuple[int, int], variables: list[ir.Variable],
                 funcs: dict[str, DeviceFunction]) -> None:
        self.function, self.min_ptx, self.variables, self.funcs = function, min_ptx, variables, funcs


class DeviceFunction:
    """A `.func` called from kernels: `@func def f(x: f32) -> f32: ...`; calling it inside a kernel
    emits a PTX call sequence."""

    ret: DType | None

    def __init__(self, fn: Callable[..., object], name: str | None = None,
                 localns: Mapping[str, Any] | None = None) -> None:
        self.fn = fn
        self.name = name or fn.__name__
        self.params, consts, self.ret = _signature(fn, "func", localns)
        if consts:
            raise DSLError(f"func {self.name}: device functions take PTX-typed parameters only")
        if self.ret is not None and not isinstance(self.ret, DType):
            raise DSLError(f"func {self.name}: the return annotation must be a PTX type (f32, u32, ...)")
        self._built: dict[str, _Built] = {}

    def built(self, arch: str) -> _Built:
        got = self._built.get(arch)
        if got is None:
            b = Builder(self.name, arch, "func")
            b.params = [_ptx_param(self.name, f"{self.name}_param_{i}", s) for i, (_, s) in enumerate(self.params)]
            if self.ret is not None:
                b.returns = [ir.Param(".param", _mem_type(self.ret), "func_retval0")]
            with b:
                args = {}
                for i, (n, s) in enumerate(self.params):
                    pname = f"{self.name}_param_{i}"
                    args[n] = param_pointer(pname, s) if isinstance(s, Ptr) else param_scalar(pname, s)
                value = self.fn(**args)
                if self.ret is not None:
                    _store_return(self, value)
                elif value is not None:
                    raise DSLError(f"func {self.name} returns a value but has no return annotation")
            f = _prune(b.function())
            f = ir.Function("func", f.name, f.params, f.returns, None, (), f.body)
            got = _Built(f, b.min_ptx, b.variables, b.funcs)
            self._built[arch] = got
        return got

    def __call__(self, *args: Value | Pointer) -> Reg | None:
        b = current()
        if len(args) != len(self.params):
            raise DSLTypeError(f"{self.name} takes {len(self.params)} argument(s), got {len(args)}")
        self.built(b.arch)
        b.funcs[self.name] = self
        stmts: list[ir.Statement] = []
        names = []
        for i, ((pname, spec), a) in enumerate(zip(self.params, args, strict=True)):
            a = value_of(a)
            name = f"param{i}"
            if isinstance(spec, Ptr):
                if not isinstance(a, Pointer):
                    raise DSLTypeError(f"{self.name}: argument {pname} must be a pointer")
                a = a.value()
                mt = ".b64"
            else:
                if isinstance(a, Reg) and a.type != spec:
                    raise DSLTypeError(f"{self.name}: argument {pname} must be {spec}, got {a.type}")
                mt = _mem_type(spec)
            stmts.append(ir.Variable(".param", mt, name))
            # a pointer argument is a Reg by now, so `spec` is a DType where operand() is reached
            src = a.operand if isinstance(a, Reg) else operand(a, spec)  # type: ignore[arg-type]
            b.emit("st", [".param", mt], [ir.Address(ir.Symbol(name)), src], into=stmts)
            names.append(name)
        result = None
        call_ops: list[ir.Operand] = [ir.Symbol(self.name), ir.ParenList(tuple(ir.Symbol(n) for n in names))]
        if self.ret is not None:
            mt = _mem_type(self.ret)
            stmts.append(ir.Variable(".param", mt, "retval0"))
            call_ops.insert(0, ir.ParenList((ir.Symbol("retval0"),)))
        b.emit("call", ["uni"], call_ops, into=stmts)
        if self.ret is not None:
            result = new_reg(self.ret)
            b.emit("ld", [".param", _mem_type(self.ret)], [result.operand, ir.Address(ir.Symbol("retval0"))],
                   into=stmts)
        b.place(ir.Block(tuple(stmts)))
        return result


class ExternFunction(DeviceFunction):
    """A function the device runtime provides (`.extern .func`, declared in the module, no body), called
    like a `DeviceFunction`: `vprintf(format, args)`."""

    def __init__(self, name: str, params: Sequence[tuple[str, DType]], ret: DType | None) -> None:
        self.fn = None  # type: ignore[assignment]  # nothing to trace
        self.name, self.params, self.ret = name, list(params), ret
        self._types = [t for _, t in params]
        self._built = {}

    def built(self, arch: str) -> _Built:
        got = self._built.get(arch)
        if got is None:
            params = tuple(ir.Param(".param", _mem_type(t), f"{self.name}_param_{i}")
                           for i, t in enumerate(self._types))
            returns = (ir.Param(".param", _mem_type(self.ret), "func_retval0"),) if self.ret is not None else ()
            got = _Built(ir.Function("func", self.name, params, returns, ".extern", (), None), (1, 0), [], {})
            self._built[arch] = got
        return got


vprintf = ExternFunction("vprintf", [("format", T.u64), ("args", T.u64)], T.s32)
vprintf.__doc__ = """`vprintf(format, args)`: the device runtime's printf. `format`: the generic address of a
NUL-terminated format string; `args`: the address of the arguments, packed as nvcc packs them (each aligned to
its size), or 0."""


def _store_return(df: DeviceFunction, value: object) -> None:
    """Store `value` (what the device function's Python body returned) in its return parameter; only called
    when `df` has a return type."""
    b = current()
    value = value_of(value)
    if isinstance(value, Reg) and value.type != df.ret:
        raise DSLTypeError(f"func {df.name}: returns {value.type}, but is annotated -> {df.ret}")
    src = value.operand if isinstance(value, Reg) else operand(value, df.ret)  # type: ignore[arg-type]
    b.emit("st", [".param", _mem_type(df.ret)], [ir.Address(ir.Symbol("func_retval0")), src])  # type: ignore[arg-type]


@overload
def func(fn: Callable[..., object], *, name: str | None = None) -> DeviceFunction: ...
@overload
def func(fn: None = None, *, name: str | None = None) -> Callable[[Callable[..., object]], DeviceFunction]: ...
def func(fn: Callable[..., object] | None = None, *,
         name: str | None = None) -> DeviceFunction | Callable[[Callable[..., object]], DeviceFunction]:
    """Decorator: a device function (`.func`) callable from DSL kernels and other device functions."""
    localns = sys._getframe(1).f_locals

    def wrap(f: Callable[..., object]) -> DeviceFunction:
        return DeviceFunction(f, name, localns)
    return wrap(fn) if fn is not None else wrap


__all__ = ["Kernel", "kernel", "func", "DeviceFunction", "resolve_arch", "link", "T"]
