"""Per-instruction checks against the ISA table: known mnemonic, types, modifiers, operand count
and types, and the PTX version/target each feature needs."""

from __future__ import annotations

from collections.abc import Collection, Mapping
from functools import lru_cache

from ptxforge.ptx import ir
from ptxforge.ptx.ir import ALL_TYPES
from ptxforge.ptx.isa.data_sreg import special_register
from ptxforge.ptx.isa.effects import writes_result
from ptxforge.ptx.isa.lookup import _lookup
from ptxforge.ptx.isa.spec import InstrSpec, Role, Signature, holds
from ptxforge.ptx.isa.st_bulk import st_bulk_problems
from ptxforge.ptx.isa.targets import Requirement, format_version, parse_target
from ptxforge.ptx.isa.tensormap_replace import tensormap_replace_problems
from ptxforge.ptx.isa.typerules import (
    compatible,
    cvt_rounding_problem,
    immediate_problem,
    is_float,
    is_int,
    kind,
    type_bits,
)

Problem = tuple[ir.Span, str]

# ptxas lets only these read a special register (%tid.x ...) directly: "Special register argument not allowed"
SREG_OPCODES = frozenset({"mov", "cvt"})
# modifiers that only make sense for one kind of type, for the arithmetic families
INT_ONLY = frozenset((".hi", ".lo", ".wide", ".cc"))
FLOAT_ONLY = frozenset((".rn", ".rz", ".rm", ".rp", ".ftz", ".approx", ".full", ".NaN", ".xorsign", ".oob"))


def _split(instr: ir.Instruction, spec: InstrSpec) -> tuple[tuple[str, ...], tuple[str, ...]]:
    """(types, modifiers) of the suffixes after the family name, with dots."""
    return _split_suffixes(instr.suffixes, spec)


def _split_suffixes(suffixes: tuple[str, ...], spec: InstrSpec) -> tuple[tuple[str, ...], tuple[str, ...]]:
    rest = suffixes[spec.family.count("."):]
    types = tuple("." + s for s in rest if "." + s in ALL_TYPES)
    mods = tuple("." + s for s in rest if "." + s not in ALL_TYPES)
    return types, mods


def requirements(instr: ir.Instruction) -> list[Requirement]:
    """Every requirement the instruction places on the module: its family's, then those triggered
    by its modifiers, types or operand count, then those of special registers it reads (%clusterid
    needs sm_90). Empty for an unknown instruction."""
    return [*_requirements(instr.opcode, instr.suffixes, len(instr.operands)), *_sreg_requirements(instr)]


def _sreg_requirements(instr: ir.Instruction) -> list[Requirement]:
    out = []
    for op in instr.operands:
        if isinstance(op, ir.SpecialRegister):
            sreg = special_register(op.name)
            if sreg is not None and (sreg.requirement.min_ptx > (1, 0) or sreg.requirement.min_sm):
                out.append(sreg.requirement)
    return out


@lru_cache(maxsize=8192)
def _requirements(opcode: str, suffixes: tuple[str, ...], n: int) -> tuple[Requirement, ...]:
    spec = _lookup(".".join((opcode, *suffixes)))
    if spec is None:
        return ()
    types, _ = _split_suffixes(suffixes, spec)
    return (spec.requirement,) + tuple(g.req for g in spec.gates if holds(g.when, suffixes, types, n))


def check_instruction(instr: ir.Instruction, reg_types: Mapping[str, str],
                      version: tuple[int, int] | None = (9, 0), target: str | None = "sm_90a",
                      *, symbols: Collection[str] = ()) -> list[Problem]:
    """Problems with one instruction as (span, message) pairs; [] when it is fine.

    `reg_types` maps register names to their declared type ('.b32'). Operands naming something not
    in it (and every name in `symbols`) are not type-checked. `version`/`target` None skip those checks.
    """
    n = len(instr.operands)
    static = _static_messages(instr.opcode, instr.suffixes, n,
                              tuple(version) if version is not None else None, target)
    problems = [(instr.span, m) for m in static]
    problems += _operand_kind_problems(instr)
    spec = _lookup(instr.mnemonic)
    if spec is not None:
        for req in _sreg_requirements(instr):
            problems += [(instr.span, m) for m in _requirement_messages(spec, req, version, target)]
    sig, _ = _pick_signature(instr.opcode, instr.suffixes, n)
    if sig is not None and not sig.unchecked:
        types, vec, relaxed = _operand_context(instr.opcode, instr.suffixes)
        ctx = _Ctx(instr.mnemonic, types, reg_types, symbols, relaxed, vec)
        for i, (op, role) in enumerate(zip(instr.operands, sig.roles, strict=False)):
            problems += ctx.check(op, role, i + 1)
    if spec is not None and spec.extra.get("rule") == "st.bulk":
        problems += st_bulk_problems(instr, reg_types, version, symbols)
    if spec is not None and spec.extra.get("rule") == "tensormap.replace":
        problems += tensormap_replace_problems(instr, version, target)
    return problems


def _operand_kind_problems(instr: ir.Instruction) -> list[Problem]:
    """What ptxas refuses about operand kinds whatever the types: a result that is not a register, a special
    register read by anything but an integer mov/cvt, or written at all."""
    out: list[Problem] = []
    ops = instr.operands
    spec = _lookup(instr.mnemonic)
    if ops and spec is not None and writes_result(instr):  # ptxas: "Result register required"
        first = ops[0]
        if isinstance(first, ir.SpecialRegister):
            out.append((first.span or instr.span, f"{instr.mnemonic}: operand 1 is the result, and the special "
                                                  f"register {first.name} is read-only"))
        elif isinstance(first, ir.Immediate | ir.Address | ir.Symbol | ir.Expr):
            out.append((first.span or instr.span, f"{instr.mnemonic}: operand 1 is the result; it must be a "
                                                  f"register"))
    float_typed = any(s in _FLOAT_SUFFIXES for s in instr.suffixes)
    for i, op in enumerate(ops):
        sreg = _sreg_in(op)
        if sreg is None or i == 0 and out:
            continue
        if instr.opcode not in SREG_OPCODES:
            out.append((sreg.span or op.span, f"{instr.mnemonic}: operand {i + 1} is the special register "
                                              f"{sreg.name}, which only mov and cvt may read; copy it first "
                                              f"(mov.u32 %r, {sreg.name})"))
        elif float_typed:
            out.append((sreg.span or op.span, f"{instr.mnemonic}: the special register {sreg.name} is an integer; "
                                              f"mov or cvt it with integer types (cvt.u32.u32 / mov.u32) first"))
    return out


_FLOAT_SUFFIXES = frozenset({"f16", "f32", "f64", "bf16", "f16x2", "bf16x2", "tf32", "e4m3", "e5m2"})


def _sreg_in(op) -> ir.SpecialRegister | None:
    """The special register an operand reads directly (itself, negated, or a vector element), or None."""
    if isinstance(op, ir.SpecialRegister):
        return op
    if isinstance(op, ir.Vector):
        return next((s for s in map(_sreg_in, op.elements) if s is not None), None)
    if isinstance(op, ir.Minus | ir.Negated):
        return _sreg_in(op.operand)
    return None


@lru_cache(maxsize=8192)
def _operand_context(opcode: str, suffixes: tuple[str, ...]):
    spec = _lookup(".".join((opcode, *suffixes)))
    assert spec is not None  # asked only for instructions the table has
    types, mods = _split_suffixes(suffixes, spec)
    vec = next((int(m[2:]) for m in mods if m in (".v2", ".v4", ".v8")), None)
    return types, vec, spec.relaxed


@lru_cache(maxsize=16384)
def _static_messages(opcode: str, suffixes: tuple[str, ...], n: int, version, target) -> tuple[str, ...]:
    """Problems that depend only on the mnemonic, the operand count, the version and the target."""
    instr = ir.Instruction(opcode, suffixes, ())
    spec = _lookup(instr.mnemonic)
    if spec is None:
        return (f"unknown instruction '{instr.mnemonic}'",)
    types, mods = _split(instr, spec)
    out = [m for _, m in _check_suffixes(instr, spec, types, mods, n)]
    _, err = _pick_signature(opcode, suffixes, n)
    if err:
        out.append(err)
    out += [m for _, m in _check_requirements(instr, spec, types, version, target, n)]
    return tuple(out)


# --------------------------------------------------------------------------- suffixes


def _check_suffixes(instr, spec: InstrSpec, types, mods, n: int) -> list[Problem]:
    out: list[Problem] = []
    fam, span = spec.family, instr.span
    if spec.ntypes is not None and len(types) not in spec.ntypes:
        want = " or ".join(str(n) for n in spec.ntypes)
        out.append((span, f"{fam}: expected {want} type suffix{'es' if spec.ntypes != (1,) else ''}, "
                          f"got {len(types)}" + (f" ({' '.join(types)})" if types else "")))
    if spec.types is not None:
        for t in types:
            if t not in spec.types:
                out.append((span, f"{fam}: type {t} is not allowed (allowed: {_listing(spec.types)})"))
    reported = set()
    if spec.extra.get("arith"):
        for m in mods:
            if m in INT_ONLY and types and all(is_float(t) for t in types):
                out.append((span, f"{fam}: type {types[0]} does not allow modifier {m}"))
                reported.add(m)
            elif m in FLOAT_ONLY and types and all(is_int(t) or kind(t) == "b" for t in types):
                out.append((span, f"{fam}: type {types[0]} does not allow modifier {m}"))
                reported.add(m)
    if spec.modifiers is not None:
        for m in mods:
            if m not in spec.modifiers and m not in reported:
                out.append((span, f"{fam}: unknown modifier {m}"))
    if spec.extra.get("rule") == "cvt" and len(types) == 2:
        msg = cvt_rounding_problem(types[0], types[1], mods)
        if msg:
            out.append((span, f"{instr.mnemonic}: {msg}"))
    if types:
        for m, allowed in spec.mod_types:
            if m in mods and types[0] not in allowed:
                out.append((span, f"{fam}: modifier {m} is not allowed with type {types[0]} "
                                  f"(only {_listing(allowed)})"))
    if spec.combos is not None and len(types) > 1 and types not in spec.combos:
        out.append((span, f"{fam}: type combination {''.join(types)} is not allowed"))
    groups = {values: slot for slot, values in spec.slots}
    for cond, alternatives in spec.needs:
        if holds(cond, instr.suffixes, types, n):
            chosen = [m for m in mods if m in alternatives]
            if not chosen:
                out.append((span, f"{instr.mnemonic}: needs one of {', '.join(alternatives)}"))
            slot = groups.get(frozenset(alternatives))
            if len(chosen) > 1 and slot is not None:  # a required modifier group is one choice (ptxas: "Multiple
                # clamp modifiers specified")
                out.append((span, f"{instr.mnemonic}: {' and '.join(chosen)} are both {slot} modifiers; give one"))
    return out


def _listing(items) -> str:
    items = sorted(items)
    return ", ".join(items) if len(items) <= 12 else ", ".join(items[:12]) + ", ..."


# --------------------------------------------------------------------------- operands


@lru_cache(maxsize=8192)
def _pick_signature(opcode: str, suffixes: tuple[str, ...], n: int) -> tuple[Signature | None, str | None]:
    spec = _lookup(".".join((opcode, *suffixes)))
    if spec is None:
        return None, None
    types, _ = _split_suffixes(suffixes, spec)
    eligible = [s for s in spec.signatures if holds(s.when, suffixes, types, n)]
    if not eligible:
        return None, None
    for sig in eligible:
        if sig.accepts(n):
            return sig, None
    return None, f"{spec.family}: expected {_counts(eligible)} operand{'s' if _plural(eligible) else ''}, got {n}"


def _counts(sigs: list[Signature]) -> str:
    if any(s.variadic for s in sigs):
        return f"at least {min(s.min_count for s in sigs)}"
    counts = sorted({c for s in sigs for c in range(s.min_count, (s.max_count or 0) + 1)})  # none is variadic
    if len(counts) == 1:
        return str(counts[0])
    if counts == list(range(counts[0], counts[-1] + 1)) and len(counts) > 2:
        return f"{counts[0]} to {counts[-1]}"
    return ", ".join(str(c) for c in counts[:-1]) + f" or {counts[-1]}"


def _plural(sigs) -> bool:
    return not (len(sigs) == 1 and sigs[0].min_count == sigs[0].max_count == 1)


class _Ctx:
    """What operand checks need to know about the instruction."""

    def __init__(self, mnemonic, types, reg_types, symbols, relaxed, vec):
        self.mn, self.types, self.regs, self.symbols = mnemonic, types, reg_types, symbols
        self.relaxed, self.vec = relaxed, vec
        self.from_suffix = True

    def expected(self, role: Role) -> str | None:
        if role.kind == "fixed":
            return role.fixed
        if role.kind == "T":
            return self.types[role.index] if role.index < len(self.types) else None
        if role.kind == "W" and self.types:
            t = self.types[0]
            wide = f".{t[1]}{type_bits(t) * 2}"
            return wide if wide in ALL_TYPES else None
        return None

    def check(self, op, role: Role, pos: int) -> list[Problem]:
        if role.kind == "*":
            return []
        if role.kind == "A":
            return self.check_address(op, pos)
        if role.kind == "I":
            if isinstance(op, ir.Immediate) and not op.is_float or isinstance(op, ir.Expr | ir.Symbol):
                return []
            return [(op.span, f"{self.mn}: operand {pos} must be an integer constant")]
        want = self.expected(role)
        if want is None:
            return []
        relaxed = self.relaxed and role.kind == "T"
        self.from_suffix = role.kind in ("T", "W")
        if isinstance(op, ir.PredPair):
            if not role.pair:
                return [(op.span, f"{self.mn}: operand {pos} cannot be a pair 'a|p'")]
            return self.scalar(op.first, want, relaxed, pos) + self.scalar(op.second, ".pred", False, pos)
        if isinstance(op, ir.Vector) and len(op.elements) == 1 and not (role.vector and self.vec):
            op = op.elements[0]  # Triton writes scalar loads as `ld.global.b32 { %r1 }, [...]`
        if isinstance(op, ir.Vector):
            if role.vector and self.vec:
                return self.vector(op, want, relaxed, pos)
            if role.pack:
                return self.packed(op, want, pos)
            if role.vector:
                return [(op.span, f"{self.mn}: operand {pos} is a vector, but the instruction has no .v2/.v4/.v8")]
            return [(op.span, f"{self.mn}: operand {pos} is a vector, expected a {want} value")]
        if role.vector and self.vec and not isinstance(op, ir.Sink) and not role.pack:
            return [(op.span, f"{self.mn}: operand {pos} must be a vector of {self.vec} elements for "
                              f".v{self.vec}")]
        return self.scalar(op, want, relaxed, pos)

    def scalar(self, op, want: str, relaxed: bool, pos: int) -> list[Problem]:
        if isinstance(op, ir.Minus):
            op = op.operand
        if isinstance(op, ir.RegisterOffset):
            if kind(want) not in ("b", "s", "u"):  # ptxas 13.0 crashes on a float one
                return [(op.span, f"{self.mn}: operand {pos} adds a constant to a register, which needs an "
                                  f"integer type, not {want}")]
            reg, t = op.register, self.regs.get(op.register.name)
            if t in ALL_TYPES and reg.name not in self.symbols and kind(t) not in ("b", "s", "u"):
                return [(op.span, f"{self.mn}: operand {pos} adds a constant to {reg.name} ({t}), which needs an "
                                  f"integer register")]
            return []  # ptxas takes register + constant as a value of the instruction's type, any register width
        if isinstance(op, ir.Negated):
            if want != ".pred":
                return [(op.span, f"{self.mn}: operand {pos} is negated with '!', which needs a predicate")]
            op = op.operand
        if isinstance(op, ir.Register):
            t = self.regs.get(op.name)
            if t is None and self.mn.split(".")[0] in ir.VIDEO_OPCODES:
                t = self.regs.get(ir.split_selector(op.name)[0])
            if t is None or op.name in self.symbols or t not in ALL_TYPES:
                return []
            if not compatible(want, t, relaxed, self.from_suffix):
                return [(op.span, f"{self.mn}: operand {pos} is {op.name} ({t}), expected {want}")]
            return []
        if isinstance(op, ir.SpecialRegister):
            sreg = special_register(op.name)
            if sreg is None or type_bits(want) in sreg.widths:
                return []
            what = ".pred" if sreg.bits == 1 else f"{sreg.bits}-bit"
            return [(op.span, f"{self.mn}: operand {pos} is {op.name} ({what}), expected {want}")]
        if isinstance(op, ir.Immediate):
            msg = immediate_problem(want, op.value, op.text)
            return [(op.span, f"{self.mn}: operand {pos}: {msg}")] if msg else []
        if isinstance(op, ir.Address | ir.AddressList):
            return [(op.span, f"{self.mn}: operand {pos} is a memory operand [...], expected a {want} value")]
        return []

    def vector(self, op: ir.Vector, want: str, relaxed: bool, pos: int) -> list[Problem]:
        if len(op.elements) != self.vec:
            return [(op.span, f"{self.mn}: operand {pos} has {len(op.elements)} elements, "
                              f".v{self.vec} needs {self.vec}")]
        out: list[Problem] = []
        sizes = set()
        for e in op.elements:
            if isinstance(e, ir.RegisterOffset):  # ptxas: a syntax error
                out.append((e.span, f"{self.mn}: a vector element cannot add a constant to a register"))
                continue
            out += self.scalar(e, want, relaxed, pos)
            if isinstance(e, ir.Register) and self.regs.get(e.name) in ALL_TYPES:
                sizes.add(type_bits(self.regs[e.name]))
        if not out and len(sizes) > 1:
            out.append((op.span, f"{self.mn}: operand {pos} mixes registers of different sizes"))
        return out

    def packed(self, op: ir.Vector, want: str, pos: int) -> list[Problem]:
        """mov.b32 d, {a, b}: the elements together must be as wide as the type, and equally wide."""
        sizes: list[int | None] = []
        for e in op.elements:
            if isinstance(e, ir.Register) and self.regs.get(e.name) in ALL_TYPES:
                sizes.append(type_bits(self.regs[e.name]))
            elif isinstance(e, ir.Sink | ir.Immediate):  # an immediate takes the registers' size
                sizes.append(None)
            else:
                return []
        known = {s for s in sizes if s is not None}
        if len(known) > 1:
            return [(op.span, f"{self.mn}: operand {pos} mixes registers of different sizes")]
        if known and known.pop() * len(sizes) != type_bits(want):
            what = "registers" if all(isinstance(e, ir.Register) for e in op.elements) else "elements"
            return [(op.span, f"{self.mn}: operand {pos} packs {len(sizes)} {what} of "
                              f"{next(s for s in sizes if s)} bits, but {want} is {type_bits(want)} bits")]
        return []

    def check_address(self, op, pos: int) -> list[Problem]:
        if isinstance(op, ir.Address):
            b = op.base
            if isinstance(b, ir.Register):
                t = self.regs.get(b.name)
                if t in ALL_TYPES and b.name not in self.symbols and kind(t) not in ("b", "s", "u"):
                    return [(b.span, f"{self.mn}: address register {b.name} is {t}; use an integer or "
                                     f"bit-size register")]
                if t in ALL_TYPES and b.name not in self.symbols and type_bits(t) == 32 and _wide_address(self.mn):
                    return [(b.span, f"{self.mn}: address register {b.name} is 32-bit; a generic or .global "
                                     f"address needs a 64-bit register (ptxas: 32-bit compilation is no longer "
                                     f"supported)")]
            return []
        if isinstance(op, ir.AddressList | ir.Expr):
            return []
        return [(op.span, f"{self.mn}: operand {pos} must be a memory operand in brackets, e.g. [%rd1]")]


_NARROW_SPACES = frozenset({"shared", "local", "param", "const"})


def _wide_address(mnemonic: str) -> bool:
    """Whether a load/store/atomic addresses generic or global memory, where addresses are 64-bit."""
    parts = mnemonic.split(".")
    if parts[:2] == ["st", "bulk"]:  # ptxas takes a 32-bit generic st.bulk address (zero-extended)
        return False
    return parts[0] in ("ld", "st", "atom", "red", "ldu") and not any(
        p.split("::")[0] in _NARROW_SPACES for p in parts[1:])


# --------------------------------------------------------------------------- version and target


def _requirement_messages(spec: InstrSpec | None, req: Requirement, version, target) -> list[str]:
    """Messages for one requirement the module's version or target does not meet."""
    if target is not None:
        try:
            parse_target(target)
        except ValueError:
            target = None
    fam = spec.family if spec else "?"
    subject = fam if req.what == fam else f"{fam}: {req.what}"
    out = []
    if version is not None and not req.version_ok(version, target):
        need = req.ptx_needed(target)
        on = f" on {target}" if need != req.min_ptx else ""
        out.append(f"{subject} needs PTX ISA {format_version(need)}{on}; this module is "
                   f".version {format_version(version)}")
    if target is not None and req.min_sm and not req.target_ok(target):
        out.append(f"{subject} needs {req.target_text()}; this module targets {target}")
    return out


def _check_requirements(instr, spec: InstrSpec, types, version, target, n: int) -> list[Problem]:
    out: list[Problem] = []
    fam, span = spec.family, instr.span
    try:
        sm, _ = parse_target(target) if target else (None, None)
    except ValueError:
        target, sm = None, None
    for req in _requirements(instr.opcode, instr.suffixes, n):
        out += [(span, m) for m in _requirement_messages(spec, req, version, target)]
    if version is not None and sm is not None:
        for r in spec.removed:
            if tuple(version) >= r.ptx and sm >= r.sm and holds(r.when, instr.suffixes, types, n):
                out.append((span, f"{fam}: {r.message}"))
    return out
