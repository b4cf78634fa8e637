"""The PTX ISA as data: one table of instruction families (operands, types, modifiers, the PTX
version and target each needs) used by the validator, the DSL and the emulator.

    spec = lookup(instr)                      # InstrSpec | None (longest family prefix)
    reqs = requirements(instr)                # [Requirement(what, min_ptx, min_sm, arch_suffix)]
    parse_target("sm_90a")                    # (90, 'a')
    modifier_slot("shfl.sync", "mode")        # frozenset({'up', 'down', 'bfly', 'idx'}): a modifier group
    check_instruction(instr, reg_types, version=(9, 0), target="sm_90a")  # [(span, message)]
"""

from ptxforge.ptx.isa.check import check_instruction, lookup, requirements
from ptxforge.ptx.isa.spec import Gate, InstrSpec, Role, Signature
from ptxforge.ptx.isa.table import FAMILIES, modifier_slot
from ptxforge.ptx.isa.targets import Requirement, parse_target

__all__ = ["lookup", "InstrSpec", "check_instruction", "requirements", "Requirement", "parse_target",
           "FAMILIES", "Gate", "Role", "Signature", "modifier_slot"]
