"""Helpers the table modules are written with: `fam` for a family, `gate` for a gated requirement,
and the type sets the manual's syntax sections name."""

from __future__ import annotations

from typing import Any

from ptxforge.ptx.isa.spec import Effects, Gate, InstrSpec, Removal, parse_signature
from ptxforge.ptx.isa.targets import Requirement


def _set(text: str) -> frozenset[str]:
    return frozenset(text.split())


U = _set(".u16 .u32 .u64")
S = _set(".s16 .s32 .s64")
B = _set(".b16 .b32 .b64")
INT = U | S
U8 = _set(".u8 .u16 .u32 .u64")
S8 = _set(".s8 .s16 .s32 .s64")
B8 = _set(".b8 .b16 .b32 .b64")
F = _set(".f32 .f64")
HALF = _set(".f16 .f16x2 .bf16 .bf16x2")
BF = _set(".bf16 .bf16x2")
RND = _set(".rn .rz .rm .rp")
IRND = _set(".rni .rzi .rmi .rpi")
SCOPE = _set(".cta .cluster .gpu .sys")
SEM = _set(".relaxed .acquire .release .acq_rel .weak .volatile .mmio")
SPACES = _set(".global .shared .shared::cta .shared::cluster .local .const .param .param::entry .param::func")
VEC = _set(".v2 .v4 .v8")

# targets that carry the sm_100a / sm_120a architecture- and family-specific features
BLACKWELL_A = ("sm_110a", "sm_120a", "sm_100f", "sm_110f", "sm_120f")
BLACKWELL_DC = ("sm_110a", "sm_100f", "sm_110f")  # datacenter parts: tcgen05 & co


def fx(writes: Any = (), memory: str = "none", lanes: str = "lane", carry: bool = False, loaded: Any = (),
       part: str = "") -> Effects:
    """An instruction's effects (see spec.Effects); `writes` and `loaded` list operand indexes, `part` is its
    `async_part`."""
    return Effects(tuple(writes), memory, lanes, carry, tuple(loaded), async_part=part)


# the common cases
RESULT = fx((0,))  # computes operand 0 from its own lane's operands
CARRY = fx((0,), carry=True)  # ... and reads or writes the carry flag
NOTHING = fx()  # no register written, no memory touched, its own lane only (control flow, hints)


def req(what: str, ptx: Any = (1, 0), sm: int = 0, sfx: str = "", also: Any = (), ptx_on: Any = ()) -> Requirement:
    return Requirement(what, tuple(ptx), sm, sfx, tuple(also), tuple(ptx_on))


def gate(when: str, what: str, ptx: Any = (1, 0), sm: int = 0, sfx: str = "", also: Any = (),
         ptx_on: Any = ()) -> Gate:
    """A requirement triggered when `when` holds (see `spec.holds`)."""
    return Gate(when, req(what, ptx, sm, sfx, also, ptx_on))


def removed(when: str, ptx: Any, sm: int, message: str) -> Removal:
    return Removal(when, tuple(ptx), sm, message)


def fam(name: str, ops: Any, *, types: Any = None, ntypes: Any = None, mods: Any = None, ptx: Any = (1, 0),
        sm: int = 0, sfx: str = "", also: Any = (), gates: Any = (), relaxed: bool = False, gone: Any = (),
        needs: Any = (), group: str = "", summary: str = "", arith: bool = False, rule: str = "",
        mod_types: Any = None, combos: Any = None, slots: Any = None, effects: Effects | None = None,
        effects_when: Any = None) -> InstrSpec:
    """Build one InstrSpec. `ops` is a signature string or a list of (condition, signature) pairs
    tried in order (the first whose condition holds and whose operand count fits is used). `slots` maps
    a modifier group's name to its values ({'rnd': RND}); where `mods` is given they are among them.
    `effects` describes what it does (fx(...)); `effects_when` maps conditions to effects that replace it."""
    if isinstance(ops, str):
        ops = [("", ops)]
    sigs = tuple(parse_signature(text, when) for when, text in ops)
    extra: dict[str, bool | str] = {"arith": True} if arith else {}
    if rule:
        extra["rule"] = rule  # a check too irregular for the table, implemented in check.py
    return InstrSpec(
        family=name, signatures=sigs, requirement=req(name, ptx, sm, sfx, also),
        types=frozenset(types) if types is not None else None,
        ntypes=tuple(ntypes) if ntypes is not None else None,
        modifiers=frozenset(mods) if mods is not None else None,
        gates=tuple(gates), relaxed=relaxed, removed=tuple(gone),
        needs=tuple((c, tuple(sorted(a))) for c, a in needs), group=group, summary=summary, extra=extra,
        mod_types=tuple((m, frozenset(t)) for m, t in (mod_types or {}).items()),
        combos=frozenset(tuple(c.split()) for c in combos) if combos is not None else None,
        slots=tuple((n, frozenset(v)) for n, v in (slots or {}).items()),
        effects=effects, effects_when=tuple((effects_when or {}).items()),
    )
