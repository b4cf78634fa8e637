"""Finding an instruction's family in the ISA table: the longest family name that prefixes its mnemonic."""

from __future__ import annotations

from functools import lru_cache

from ptxforge.ptx import ir
from ptxforge.ptx.isa.spec import InstrSpec
from ptxforge.ptx.isa.table import FAMILIES


def _mnemonic(instr_or_text: ir.Instruction | str) -> str:
    return instr_or_text if isinstance(instr_or_text, str) else instr_or_text.mnemonic


def lookup(instr: ir.Instruction | str) -> InstrSpec | None:
    """The spec of the longest known family that prefixes the mnemonic ('cp.async.bulk.tensor' for
    'cp.async.bulk.tensor.2d.shared::cluster.global...'); accepts an Instruction or a mnemonic."""
    return _lookup(_mnemonic(instr))


@lru_cache(maxsize=8192)
def _lookup(mnemonic: str) -> InstrSpec | None:
    parts = mnemonic.split(".")
    for k in range(len(parts), 0, -1):
        spec = FAMILIES.get(".".join(parts[:k]))
        if spec is None and "::" in parts[k - 1]:  # 'tcgen05.fence::before_thread_sync'
            spec = FAMILIES.get(".".join(parts[:k - 1] + [parts[k - 1].split("::")[0]]))
        if spec is not None:
            return spec
    return None
