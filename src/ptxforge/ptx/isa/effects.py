"""An instruction's effects (spec.Effects) as its family describes them, refined by its modifiers, with the
memory order and scope its suffixes name: what the liveness, divergence, sanitizer and parameter analyses
read instead of lists of opcodes.

    effects(ins)             # Effects(writes=(0,), memory='load', lanes='lane', order='acquire', scope='gpu')
    effects('atom.add.u32')  # (a mnemonic works too; the operand count only matters for `#n` conditions)
"""

from __future__ import annotations

import dataclasses
from functools import lru_cache

from ptxforge.ptx import ir
from ptxforge.ptx.isa.lookup import lookup
from ptxforge.ptx.isa.spec import Effects, holds

ORDERS = ("weak", "relaxed", "acquire", "release", "acq_rel", "sc", "volatile", "mmio")
STRONG_ORDERS = frozenset(ORDERS) - {"weak"}  # the orders of a strong access (the memory model's "morally strong")
SCOPES = {"cta": "cta", "cluster": "cluster", "gpu": "gpu", "sys": "sys", "gl": "gpu"}  # membar.gl is .gpu


def effects(instr: ir.Instruction | str) -> Effects | None:
    """The effects of an instruction (or a mnemonic); None when the table does not know it or does not
    describe its family's effects."""
    if isinstance(instr, str):
        return _effects(instr, -1)
    return _effects(instr.mnemonic, len(instr.operands))


@lru_cache(maxsize=8192)
def _effects(mnemonic: str, n: int) -> Effects | None:
    spec = lookup(mnemonic)
    if spec is None or spec.effects is None:
        return None
    suffixes = tuple(mnemonic.split(".")[1:])
    types = tuple("." + s for s in suffixes[spec.family.count("."):] if "." + s in ir.ALL_TYPES)
    found = next((e for when, e in spec.effects_when if holds(when, suffixes, types, n)), spec.effects)
    order = next((s for s in suffixes if s in ORDERS), "")
    scope = next((SCOPES[s] for s in suffixes if s in SCOPES), "")
    return dataclasses.replace(found, order=order, scope=scope) if order or scope else found


def writes_result(instr: ir.Instruction | str) -> bool:
    """Its first operand is a register it writes (the validator's "result register required")."""
    e = effects(instr)
    return e is not None and 0 in e.writes


def lane_local(instr: ir.Instruction | str) -> bool:
    """It computes operand 0 from its own lane's operands only (see Effects.lane_local)."""
    e = effects(instr)
    return e is not None and e.lane_local


def reads_own_lane_only(instr: ir.Instruction | str) -> bool:
    """Its register operands are read by its own lane only, when it runs (lane class "lane", not asynchronous)."""
    e = effects(instr)
    return e is not None and e.lanes == "lane" and e.memory != "async"


def addresses_memory(instr: ir.Instruction) -> bool:
    """Its address operands ([reg+off]) name memory: it touches memory, or the family takes addresses
    (prefetch and other cache hints)."""
    e = effects(instr)
    if e is not None and e.memory != "none":
        return True
    spec = lookup(instr)
    return spec is not None and any(r.kind == "A" for sig in spec.signatures for r in sig.roles)
