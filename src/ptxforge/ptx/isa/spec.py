"""The shape of one ISA table entry (`InstrSpec`) and the small languages the table is written in.

Operand signatures are comma-separated roles, one per operand:

    T, T0..T3   a value of the instruction's n-th type suffix (T = T0)
    W           a value twice as wide as T0 (mul.wide, mad.wide)
    .u32 .b64 … a value of that fixed type (shift amounts, masks); `.b32|` may be paired `d|%p`
    P           a predicate
    TP / PP     T (or P) optionally paired with a predicate: `%r1|%p1` (shfl.sync, setp)
    Tv          T, or a brace vector of T when the instruction has .v2/.v4/.v8 (ld, st, atom)
    Tp          T, or a brace vector packing T (mov.b32 d, {a, b})
    A           a memory operand [addr]
    I           an integer constant (immLut, wait_group N, cp-size)
    *           anything (not checked)
A trailing `?` makes a role optional and a final `...` accepts any further operands unchecked.

Conditions (for requirements gated on modifiers/types) are `|`-separated alternatives of
`&`-separated atoms: `bf16` (suffix present), `!approx` (absent), `L1::evict*` (a suffix with that
prefix), `T0=f32` (type suffix n is .f32), `#4` (exactly 4 operands).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from functools import cache

from ptxforge.ptx.isa.targets import Requirement


@dataclass(frozen=True, slots=True)
class Role:
    """One operand slot of a signature."""

    kind: str  # 'T', 'W', 'fixed', 'P', 'A', '*'
    index: int = 0  # type index for 'T'
    fixed: str = ""  # the type for 'fixed'
    optional: bool = False
    pair: bool = False  # may be `x|%p`
    vector: bool = False  # may be a brace vector sized by .vN
    pack: bool = False  # may be a brace vector packing the type (mov); with `vector`: a scalar of the type
    # whose bits unpack into the .vN elements (mov.v4.u32 %v, %r1)


@dataclass(frozen=True, slots=True)
class Signature:
    """One operand layout: the roles in order, and whether extra operands may follow."""

    roles: tuple[Role, ...]
    variadic: bool = False
    when: str = ""  # condition selecting this layout ('' = always eligible)

    @property
    def min_count(self) -> int:
        return sum(1 for r in self.roles if not r.optional)

    @property
    def max_count(self) -> int | None:
        return None if self.variadic else len(self.roles)

    @property
    def unchecked(self) -> bool:
        """True when no operand of this layout is type-checked."""
        return all(r.kind == "*" for r in self.roles)

    def accepts(self, n: int) -> bool:
        return self.min_count <= n and (self.max_count is None or n <= self.max_count)


@dataclass(frozen=True, slots=True)
class Gate:
    """A requirement that applies when `when` holds for the instruction."""

    when: str
    req: Requirement


@dataclass(frozen=True, slots=True)
class Removal:
    """A form the ISA removed: `when` the condition holds, from PTX `ptx` on targets >= `sm`."""

    when: str
    ptx: tuple[int, int]
    sm: int
    message: str


MEMORY_KINDS = ("none", "load", "store", "atomic", "async", "fence")
LANE_CLASSES = ("lane", "warp", "block", "cluster", "grid")
# an instruction's part in asynchronous work that completes later (Effects.async_part)
ASYNC_PARTS = ("", "copy", "bulk", "commit", "wait_group", "wait_all", "arrive", "mbarrier", "mbarrier_wait")


@dataclass(frozen=True, slots=True)
class Effects:
    """What an instruction does besides reading its operands: the liveness, divergence, sanitizer and
    parameter analyses read these instead of lists of opcodes.

    `writes`: the operands it writes (0 = the first). `memory`: none, load, store, atomic (a read-modify-
    write, or a reduction into memory), async (an asynchronous copy, or the groups, waits and fences that
    track asynchronous work) or fence (a barrier or memory fence). `lanes`: whose state its results depend on
    or it waits for: lane (its own registers only), warp, block, cluster (the CTA's place in its cluster),
    grid. `carry`: it reads or writes the carry flag (.cc, addc), state outside its operands. `loaded`: the
    written operands that receive the bytes it reads (ld, atom's old value; not an mbarrier's state). `order` and
    `scope` come from the instruction's suffixes (`effects.effects`), not from the table. `async_part`: its part in
    asynchronous work that completes later (what the sanitizer tracks): copy (an asynchronous copy whose
    destination is pending until its group's wait), bulk (a bulk copy or reduction, completed through an
    mbarrier's transaction count), commit / wait_group / wait_all (the async-copy groups), arrive
    (cp.async.mbarrier.arrive: the lane's earlier copies complete with the mbarrier's phase), mbarrier (an
    operation on an mbarrier object), mbarrier_wait (test_wait/try_wait: observes a phase), or "" (none).
    """

    writes: tuple[int, ...] = ()
    memory: str = "none"
    lanes: str = "lane"
    carry: bool = False
    loaded: tuple[int, ...] = ()  # the operands (among `writes`) that receive the bytes it reads from memory
    order: str = ""  # weak relaxed acquire release acq_rel sc volatile mmio, or "" when none is written
    scope: str = ""  # cta cluster gpu sys, or "" when none is written
    async_part: str = ""  # one of ASYNC_PARTS

    def __post_init__(self) -> None:
        if self.memory not in MEMORY_KINDS:
            raise ValueError(f"memory kind {self.memory!r}: expected one of {MEMORY_KINDS}")
        if self.lanes not in LANE_CLASSES:
            raise ValueError(f"lane class {self.lanes!r}: expected one of {LANE_CLASSES}")
        if self.async_part not in ASYNC_PARTS:
            raise ValueError(f"async part {self.async_part!r}: expected one of {ASYNC_PARTS}")

    @property
    def lane_local(self) -> bool:
        """Computes operand 0 from its own lane's operands and nothing else (no memory, no carry flag)."""
        return self.lanes == "lane" and self.memory == "none" and self.writes == (0,) and not self.carry


@dataclass(frozen=True, slots=True)
class InstrSpec:
    """One instruction family of the PTX ISA: its operands, types, modifiers and requirements.

    `types`/`modifiers` are the allowed suffixes (with dots) or None where the table does not
    restrict them. `relaxed` selects the manual's relaxed operand-size rules (ld, st, cvt).
    `needs` lists (condition, alternatives): when the condition holds, one of the alternatives
    must be present (e.g. div.f32 needs one of .approx/.full/.rn/...). `mod_types` restricts
    modifiers to some types (.approx only on div.f32); `combos` lists the allowed type tuples when
    an instruction has several type suffixes (add.f32.bf16). `effects` (refined by `effects_when`) says what it
    writes, its memory kind and its lane class (see Effects). `slots` names the manual's modifier groups
    (('rnd', {'.rn', '.rz', ...}), ('cmp_float', ...)): the values a builder picks one of; `slot(name)` reads one.
    """

    family: str
    signatures: tuple[Signature, ...]
    requirement: Requirement
    types: frozenset[str] | None = None
    ntypes: tuple[int, ...] | None = None
    modifiers: frozenset[str] | None = None
    gates: tuple[Gate, ...] = ()
    relaxed: bool = False
    removed: tuple[Removal, ...] = ()
    needs: tuple[tuple[str, tuple[str, ...]], ...] = ()
    mod_types: tuple[tuple[str, frozenset[str]], ...] = ()
    combos: frozenset[tuple[str, ...]] | None = None
    group: str = ""
    summary: str = ""
    extra: dict = field(default_factory=dict, compare=False, hash=False)
    slots: tuple[tuple[str, frozenset[str]], ...] = ()
    effects: Effects | None = None  # None: not described yet (tests/ptx/test_isa_effects.py fails on it)
    effects_when: tuple[tuple[str, Effects], ...] = ()  # (condition, effects) refinements, the first that holds

    def slot(self, name: str) -> frozenset[str]:
        """The values (with dots) of the modifier group `name` of this family."""
        for slot_name, values in self.slots:
            if slot_name == name:
                return values
        raise KeyError(f"{self.family} has no modifier slot {name!r}; its slots: {[n for n, _ in self.slots]}")


# --------------------------------------------------------------------------- parsing the mini-languages


def parse_signature(text: str, when: str = "") -> Signature:
    """Parse 'TP, T, .u32, .u32?, ...' into a Signature."""
    roles: list[Role] = []
    variadic = False
    for raw in (t.strip() for t in text.split(",")):
        if not raw:
            continue
        if raw == "...":
            variadic = True
            continue
        optional = raw.endswith("?")
        tok = raw.rstrip("?")
        roles.append(_parse_role(tok, optional))
    return Signature(tuple(roles), variadic, when)


def _parse_role(tok: str, optional: bool) -> Role:
    if tok.startswith("."):
        pair = tok.endswith("|")
        return Role("fixed", fixed=tok.rstrip("|"), optional=optional, pair=pair)
    if tok in ("P", "PP"):
        return Role("fixed", fixed=".pred", optional=optional, pair=tok == "PP")
    if tok in ("A", "*", "W", "I"):
        return Role(tok, optional=optional)
    if tok.startswith("T"):
        rest = tok[1:]
        flags = ""
        while rest and rest[-1] in "Pvp":
            flags += rest[-1]
            rest = rest[:-1]
        index = int(rest) if rest else 0
        return Role("T", index=index, optional=optional, pair="P" in flags, vector="v" in flags,
                    pack="p" in flags)
    raise ValueError(f"bad operand role {tok!r}")


def holds(cond: str, suffixes: tuple[str, ...], types: tuple[str, ...], n_operands: int) -> bool:
    """Evaluate a gate condition (see module docstring) for one instruction."""
    if not cond:
        return True
    present = frozenset(suffixes)
    return any(all(_atom(a, present, suffixes, types, n_operands) for a in alt) for alt in _compile(cond))


@cache
def _compile(cond: str) -> tuple[tuple[tuple[str, str, bool], ...], ...]:
    """'a&!b|T0=f32' -> ((('has', 'a', False), ('has', 'b', True)), (('type', '0=f32', False),))"""
    alts = []
    for alt in cond.split("|"):
        atoms = []
        for a in alt.split("&"):
            a = a.strip()
            neg = a.startswith("!")
            a = a.lstrip("!")
            if a.startswith("#"):
                atoms.append(("count", a[1:], neg))
            elif a.startswith("T") and "=" in a:
                atoms.append(("type", a[1:], neg))
            elif a.endswith("*"):
                atoms.append(("prefix", a[:-1], neg))
            else:
                atoms.append(("has", a, neg))
        alts.append(tuple(atoms))
    return tuple(alts)


def _atom(atom, present, suffixes, types, n) -> bool:
    kind, arg, neg = atom
    if kind == "has":
        r = arg in present
    elif kind == "count":
        r = n == int(arg)
    elif kind == "type":
        idx, t = arg.split("=")
        i = int(idx)
        r = i < len(types) and types[i] == "." + t
    else:
        r = any(s.startswith(arg) for s in suffixes)
    return r != neg
