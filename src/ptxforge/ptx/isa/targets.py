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

_TARGET_RE = re.compile(r"^(?:sm|compute)_(\d+)([af]?)$")


def parse_target(target: str) -> tuple[int, str]:
    """`'sm_90a'` -> `(90, 'a')`; `'compute_80'` -> `(80, '')`. ValueError names what was wrong."""
    m = _TARGET_RE.match(target.strip())
    if not m:
        raise ValueError(f"not a PTX target: {target!r} (expected sm_NN, sm_NNa, sm_NNf or compute_NN)")
    return int(m.group(1)), m.group(2)


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
