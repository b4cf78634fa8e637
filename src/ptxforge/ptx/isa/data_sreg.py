"""ISA table: special registers (PTX ISA 9.0 manual chapter 10): their width, the narrower widths
legacy code may read them with, and the PTX version/target each needs."""

from __future__ import annotations

from dataclasses import dataclass

from ptxforge.ptx.isa.targets import Requirement


@dataclass(frozen=True, slots=True)
class SpecialRegisterSpec:
    """`bits` is the register's width; `widths` every width a mov/cvt may read it with."""

    name: str
    bits: int
    widths: frozenset[int]
    requirement: Requirement


def _sreg(name: str, bits: int, ptx=(1, 0), sm: int = 0, widths=()) -> SpecialRegisterSpec:
    return SpecialRegisterSpec(name, bits, frozenset((bits, *widths)),
                               Requirement(f"special register {name}", tuple(ptx), sm))


_SPECS = [
    # %tid & co: .v4.u32 since PTX 2.0; 16-bit mov/cvt may read the low half (manual 10.1-10.2, 10.6-10.7)
    *(_sreg(n, 32, widths=(16,)) for n in ("%tid", "%ntid", "%ctaid", "%nctaid")),
    _sreg("%gridid", 64, (3, 0), widths=(16, 32)),
    _sreg("%laneid", 32, (1, 3)), _sreg("%warpid", 32, (1, 3)), _sreg("%nwarpid", 32, (2, 0), 20),
    _sreg("%smid", 32, (1, 3)), _sreg("%nsmid", 32, (2, 0), 20),
    _sreg("%is_explicit_cluster", 1, (7, 8), 90),
    *(_sreg(n, 32, (7, 8), 90) for n in ("%clusterid", "%nclusterid", "%cluster_ctaid", "%cluster_nctaid",
                                        "%cluster_ctarank", "%cluster_nctarank")),
    *(_sreg(f"%lanemask_{k}", 32, (2, 0), 20) for k in ("eq", "le", "lt", "ge", "gt")),
    _sreg("%clock", 32), _sreg("%clock_hi", 32, (5, 0), 20), _sreg("%clock64", 64, (2, 0), 20),
    *(_sreg(f"%pm{i}", 32, (1, 3) if i < 4 else (3, 0), 0 if i < 4 else 20) for i in range(8)),
    *(_sreg(f"%pm{i}_64", 64, (4, 0), 50) for i in range(8)),
    *(_sreg(f"%envreg{i}", 32, (2, 1)) for i in range(32)),
    _sreg("%globaltimer", 64, (3, 1), 30), _sreg("%globaltimer_lo", 32, (3, 1), 30),
    _sreg("%globaltimer_hi", 32, (3, 1), 30),
    *(_sreg(f"%reserved_smem_offset_{k}", 32, (7, 6), 80) for k in ("begin", "end", "cap", "0", "1")),
    _sreg("%total_smem_size", 32, (4, 1), 20), _sreg("%aggr_smem_size", 32, (8, 1), 90),
    _sreg("%dynamic_smem_size", 32, (4, 1), 20), _sreg("%current_graph_exec", 64, (8, 0), 50),
]

SPECIAL_REGISTERS: dict[str, SpecialRegisterSpec] = {s.name: s for s in _SPECS}


def special_register(name: str) -> SpecialRegisterSpec | None:
    """The spec of '%tid.x', '%clock64', '%envreg3' ...; None for an unknown name."""
    return SPECIAL_REGISTERS.get(name.split(".", 1)[0])
