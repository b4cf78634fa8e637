"""The ISA table: every instruction family, keyed by its dotted name ('cp.async.bulk.tensor')."""

from __future__ import annotations

from ptxforge.ptx.isa import data_alu, data_mem, data_mma, data_sync
from ptxforge.ptx.isa.spec import InstrSpec


def _collect() -> dict[str, InstrSpec]:
    table: dict[str, InstrSpec] = {}
    for module in (data_alu, data_mem, data_sync, data_mma):
        for spec in module.SPECS:
            if spec.family in table:
                raise RuntimeError(f"ISA table lists {spec.family} twice")
            table[spec.family] = spec
    return table


FAMILIES: dict[str, InstrSpec] = _collect()


def modifier_slot(family: str, slot: str) -> frozenset[str]:
    """The values of modifier group `slot` of `family`, spelled as `Instruction.suffixes` spells them
    (no dot): modifier_slot('shfl.sync', 'mode') == {'up', 'down', 'bfly', 'idx'}. KeyError names what exists."""
    return frozenset(v.lstrip(".") for v in FAMILIES[family].slot(slot))
