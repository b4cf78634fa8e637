"""The PTX ISA as data: one table of instruction families (operands, types, modifiers, the PTX
version and target each needs, and its effects), read by the validator, the DSL, the emulator and its analyses.

    spec = lookup(instr)                      # InstrSpec | None (longest family prefix)
    reqs = requirements(instr)                # [Requirement(what, min_ptx, min_sm, arch_suffix)]
    parse_target("sm_90a")                    # (90, 'a')
    modifier_slot("shfl.sync", "mode")        # frozenset({'up', 'down', 'bfly', 'idx'}): a modifier group
    check_instruction(instr, reg_types, version=(9, 0), target="sm_90a")  # [(span, message)]
    effects(instr)                            # Effects: operands written, memory kind, order, scope, lane class
"""

from ptxforge.ptx.isa.check import check_instruction, requirements
from ptxforge.ptx.isa.effects import effects
from ptxforge.ptx.isa.lookup import lookup
from ptxforge.ptx.isa.spec import Effects, Gate, InstrSpec, Role, Signature
from ptxforge.ptx.isa.table import FAMILIES, modifier_slot
from ptxforge.ptx.isa.targets import Requirement, parse_target

__all__ = ["lookup", "effects", "Effects", "InstrSpec", "check_instruction", "requirements", "Requirement",
           "parse_target", "FAMILIES", "Gate", "Role", "Signature", "modifier_slot"]
