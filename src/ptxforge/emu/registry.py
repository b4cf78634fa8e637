"""Which builder compiles each instruction family of the ISA table (`ptxforge.ptx.isa.FAMILIES`).

Builders register against the table: `register('cp', build_cp)` binds every family named `cp` or
`cp.<more>` ('cp.async', 'cp.async.bulk.tensor', ...) that no longer name binds ('st.bulk' keeps its own
builder whatever the order), and a name that is no table family is an error, so
the emulator cannot grow an instruction the validator does not know. A family the emulator does not run
is listed in `UNSUPPORTED` with the reason; the registry never binds it, and an instruction of it fails
with that reason when a thread executes it. tests/emu/test_emu_registry.py checks that every family of
the table is exactly one of the two.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING

from ptxforge.ptx import ir
from ptxforge.ptx.isa import FAMILIES, InstrSpec, lookup

if TYPE_CHECKING:
    from collections.abc import Callable

    from ptxforge.emu.op import Op
    from ptxforge.emu.operands import Ctx

    Builder = Callable[[Ctx], Op]  # compiles one instruction (its Ctx) to an Op

# family -> why the emulator does not run it (an instruction of it fails when executed, naming the reason)
UNSUPPORTED: dict[str, str] = {
    "tex": "texture fetches need texture/sampler objects, which the emulator's runtime does not bind",
    "tld4": "texture gathers need texture/sampler objects, which the emulator's runtime does not bind",
    "txq": "texture queries need texture objects, which the emulator's runtime does not bind",
    "istypep": "texture/sampler/surface handles are not modelled",
    "suld": "surface loads need surface objects, which the emulator's runtime does not bind",
    "sust": "surface stores need surface objects, which the emulator's runtime does not bind",
    "sured": "surface reductions need surface objects, which the emulator's runtime does not bind",
    "suq": "surface queries need surface objects, which the emulator's runtime does not bind",
    "alloca": "dynamic stack allocation is not modelled (local memory is laid out statically)",
    "stacksave": "the stack pointer is not modelled (local memory is laid out statically)",
    "stackrestore": "the stack pointer is not modelled (local memory is laid out statically)",
    "multimem.ld_reduce": "multimem addresses (NVLink multicast objects) are not modelled",
    "multimem.st": "multimem addresses (NVLink multicast objects) are not modelled",
    "multimem.red": "multimem addresses (NVLink multicast objects) are not modelled",
    "multimem.cp.async.bulk": "multimem addresses (NVLink multicast objects) are not modelled",
    "multimem.cp.reduce.async.bulk": "multimem addresses (NVLink multicast objects) are not modelled",
    "clusterlaunchcontrol.try_cancel": "cluster launch control (work stealing, sm_100) is not modelled",
    "clusterlaunchcontrol.query_cancel": "cluster launch control (work stealing, sm_100) is not modelled",
    "tcgen05.cp": "shared-memory to tensor-memory copies are not implemented yet",
    "tcgen05.shift": "tensor-memory row shifts are not implemented yet",
}


class Registry:
    """family -> builder, bound against an ISA table."""

    def __init__(self, table: Mapping[str, InstrSpec] = FAMILIES,
                 unsupported: Mapping[str, str] = UNSUPPORTED) -> None:
        unknown = sorted(set(unsupported) - set(table))
        if unknown:
            raise ValueError(f"UNSUPPORTED names families the ISA table does not have: {unknown}")
        self.table = table
        self.unsupported = unsupported
        self.builders: dict[str, Builder] = {}
        self._bound_by: dict[str, str] = {}  # family -> the name its builder was registered under

    def register(self, name: str, builder: Builder) -> None:
        """Bind `builder` to the family `name` and every family below it (`name.<more>`), but the
        UNSUPPORTED ones and those a longer name binds."""
        families = [f for f in self.table if f == name or f.startswith(name + ".")]
        if not families:
            raise ValueError(f"a builder for {name!r}, which names no instruction family of the ISA table")
        for family in families:
            if family in self.unsupported:
                continue
            held = self._bound_by.get(family)
            if held == name:
                raise ValueError(f"two builders for {family!r}")
            if held is None or len(name) > len(held):
                self.builders[family] = builder
                self._bound_by[family] = name

    def register_all(self, builders: Mapping[str, Builder]) -> None:
        for name, builder in builders.items():
            self.register(name, builder)

    def resolve(self, ins: ir.Instruction) -> tuple[Builder | None, str]:
        """(the builder of the instruction's family, '') or (None, why it does not run)."""
        spec = lookup(ins)
        if spec is None:
            return None, f"instruction {ins.opcode!r} is not supported"
        builder = self.builders.get(spec.family)
        if builder is not None:
            return builder, ""
        reason = self.unsupported.get(spec.family, "no emulator builder is registered for it")
        return None, f"{spec.family} is not supported: {reason}"

    def missing(self) -> list[str]:
        """Table families with neither a builder nor an UNSUPPORTED entry."""
        return [f for f in self.table if f not in self.builders and f not in self.unsupported]
