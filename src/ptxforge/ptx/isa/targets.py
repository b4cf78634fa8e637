"""Targets (`sm_90a`, `compute_80`, `sm_100f`) and the requirements instructions place on them.

The rules follow the PTX ISA 9.0 manual, section "PTX Module Directives: .target":

- a plain requirement `sm_X` is met by every target whose number is >= X (the onion-layer model),
  whatever its suffix;
- an architecture-specific requirement `sm_Xa` is met only by exactly `sm_Xa` (or another target the
  requirement lists explicitly, e.g. setmaxnreg also runs on `sm_100a` and `sm_100f`);
- a family-specific requirement `sm_Xf` is met by `f` and `a` targets of the same family whose number
  is >= X (families: sm_10x = 100, 103; sm_11x = 110, 101; sm_12x = 120, 121).
"""

from __future__ import annotations

import re
from dataclasses import dataclass

_TARGET_RE = re.compile(r"^(?:sm|compute)_(\d{1,4})([af]?)$")


def parse_target(target: str) -> tuple[int, str]:
    """`'sm_90a'` -> `(90, 'a')`; `'compute_80'` -> `(80, '')`. ValueError names what was wrong."""
    m = _TARGET_RE.match(target.strip())
    if not m:
        raise ValueError(f"not a PTX target: {target!r} (expected sm_NN, sm_NNa, sm_NNf or compute_NN)")
    return int(m.group(1)), m.group(2)


# What ptxas 13.0 knows (its verdicts are recorded in tests/ptx/data/ptxas_targets.txt): the PTX ISA versions,
# and for each sm number the first version that accepts `.target sm_NN` (`compute_NN` is the same); an `a`
# target needs PTX ISA 8.0 and an `f` target 8.8 as well. ptxas reads `.version 8.10` as 9.0 (major*10+minor);
# we accept only the spellings with a one-digit minor. PTX ISA 9.1-9.5 (CUDA 13.1-13.5) are newer than this
# ptxas but real: Triton writes them, and the runtime lowers them for an older ptxas or driver.
PTXAS_PTX_VERSIONS = frozenset(
    [(1, m) for m in range(6)] + [(2, m) for m in range(4)] + [(3, m) for m in range(3)] + [(4, m) for m in range(4)]
    + [(5, 0), (5, 1)] + [(6, m) for m in range(6)] + [(7, m) for m in range(9)] + [(8, m) for m in range(9)]
    + [(9, 0)])
PTX_VERSIONS = PTXAS_PTX_VERSIONS | {(9, m) for m in range(1, 6)}
SM_MIN_PTX = {
    10: (1, 0), 11: (1, 0), 12: (1, 2), 13: (1, 2), 20: (2, 0), 21: (2, 0), 30: (3, 0), 32: (4, 0), 35: (3, 1),
    37: (4, 1), 50: (4, 0), 52: (4, 1), 53: (4, 2), 60: (5, 0), 61: (5, 0), 62: (5, 0), 70: (5, 1), 72: (6, 1),
    75: (6, 3), 80: (7, 0), 82: (6, 2), 86: (7, 1), 87: (7, 4), 88: (7, 3), 89: (7, 8), 90: (7, 8), 100: (8, 6),
    101: (8, 6), 103: (8, 8), 110: (9, 0), 120: (8, 7), 121: (8, 8),
}
SUFFIX_MIN_PTX = {"": (1, 0), "a": (8, 0), "f": (8, 8)}
SUFFIXED = {"a": frozenset((90, 100, 101, 103, 110, 120, 121)), "f": frozenset((100, 101, 103, 110, 120, 121))}


def known_target(target: str) -> tuple[int, str]:
    """`parse_target` of a target ptxas 13.0 knows; ValueError naming the known ones for any other."""
    sm, suffix = parse_target(target)
    if sm not in SM_MIN_PTX or (suffix and sm not in SUFFIXED[suffix]):
        newer = ", ".join(f"sm_{n}{x}" for n in sorted(SM_MIN_PTX) if n >= 75
                          for x in ("", "a", "f") if not x or n in SUFFIXED[x])
        raise ValueError(f"unknown target {target.strip()!r}: ptxas 13.0 knows {newer} (and older ones from "
                         f"sm_10; compute_NN for each sm_NN)")
    return sm, suffix


def target_min_ptx(target: str) -> tuple[int, int]:
    """The oldest PTX ISA version that accepts `.target target`; ValueError for a target ptxas does not know."""
    sm, suffix = known_target(target)
    return max(SM_MIN_PTX[sm], SUFFIX_MIN_PTX[suffix])


def version_problem(version: tuple[int, int]) -> str | None:
    """Why `.version major.minor` is refused (ptxas says "Unsupported .version"), or None for a PTX ISA version."""
    if tuple(version) in PTX_VERSIONS:
        return None
    return (f"unsupported .version {version[0]}.{version[1]}: the PTX ISA versions are 1.0-1.5, 2.0-2.3, 3.0-3.2, "
            f"4.0-4.3, 5.0-5.1, 6.0-6.5, 7.0-7.8, 8.0-8.8 and 9.0-9.5 (ptxas 13.0 reads up to 9.0)")


def family(sm: int) -> int:
    """The architecture family of an sm number: 100/103 -> 10, 101/110 -> 11, 120/121 -> 12."""
    if sm == 101:
        return 11
    return sm // 10


@dataclass(frozen=True, slots=True)
class Requirement:
    """What an instruction (or one of its modifiers/types) needs: a PTX ISA version and a target.

    `what` names the feature ('wgmma.mma_async', 'modifier .L2::256B', 'type .bf16').
    `arch_suffix` is '' (sm >= min_sm), 'a' (exactly sm_{min_sm}a) or 'f' (family of min_sm, >= min_sm).
    `also` lists further targets that satisfy an 'a'/'f' requirement ('sm_100a', 'sm_120f', ...).
    `ptx_on` raises the PTX version needed on particular sm numbers: ((89, (8, 1)),) means sm_89
    needs PTX ISA 8.1 although newer targets need only `min_ptx`.
    """

    what: str
    min_ptx: tuple[int, int] = (1, 0)
    min_sm: int = 0
    arch_suffix: str = ""
    also: tuple[str, ...] = ()
    ptx_on: tuple[tuple[int, tuple[int, int]], ...] = ()

    def ptx_needed(self, target: str | None = None) -> tuple[int, int]:
        """The PTX ISA version this requirement needs on `target`."""
        if target is not None and self.ptx_on:
            try:
                sm, _ = parse_target(target)
            except ValueError:
                return self.min_ptx
            for on_sm, ver in self.ptx_on:
                if sm == on_sm:
                    return max(ver, self.min_ptx)
        return self.min_ptx

    def version_ok(self, version: tuple[int, int], target: str | None = None) -> bool:
        return tuple(version) >= self.ptx_needed(target)

    def target_ok(self, target: str) -> bool:
        """True when `target` provides this feature."""
        sm, suffix = parse_target(target)
        if _meets(sm, suffix, self.min_sm, self.arch_suffix):
            return True
        for alt in self.also:
            asm, asuf = parse_target(alt)
            if _meets(sm, suffix, asm, asuf):
                return True
        return False

    def target_text(self) -> str:
        """'sm_90', 'sm_90a', 'sm_90a (or sm_100a, sm_100f)' for messages."""
        if self.min_sm == 0:
            return "any target"
        base = f"sm_{self.min_sm}{self.arch_suffix}"
        return f"{base} (or {', '.join(self.also)})" if self.also else base


def _meets(sm: int, suffix: str, need_sm: int, need_suffix: str) -> bool:
    sm, need_sm = _RENAMED.get(sm, sm), _RENAMED.get(need_sm, need_sm)
    if need_suffix == "":
        return sm >= need_sm
    if need_suffix == "a":
        return suffix == "a" and sm == need_sm
    # 'f': family-specific features run on f- and a-targets of the same family, same or later
    return suffix in ("a", "f") and family(sm) == family(need_sm) and sm >= need_sm


_RENAMED = {101: 110}  # sm_101 was renamed sm_110 in PTX ISA 9.0


def format_version(v: tuple[int, int]) -> str:
    return f"{v[0]}.{v[1]}"
