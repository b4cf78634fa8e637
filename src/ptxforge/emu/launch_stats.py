"""`EmulationStats`: what one emulated launch did, as `emulate` returns it."""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from dataclasses import MISSING, dataclass, fields
from typing import Any

import numpy as np


@dataclass(frozen=True, eq=False)
class EmulationStats(Mapping):
    """Counts of one launch. Also a read-only mapping of its field names (`stats["wall_s"]`), the form
    `emulate` returned before it had a type."""

    thread_instructions: int  # instructions executed, summed over the threads that executed them
    per_sm: np.ndarray  # thread-instructions per SM
    wall_s: float  # wall time of the launch
    waves: int  # waves of resident blocks the grid took
    resident_blocks: int  # blocks resident at once (on all SMs)
    steps: int  # warp-instruction steps the machine ran (0 on the native tier: it does not count them)
    printf_truncated: int = 0  # printf calls cut short or lost past the printf buffer (device_printf.py)
    mode: str = "fast"  # "reference": every instruction ran through its semantics function, no fast path
    tier: str = "interp"  # which tier ran the launch: "native" or "interp"
    tier_note: str = ""  # why the interpreter ran where the native tier was asked for or possible
    level: str = ""  # the native tier's compile level that ran it ("quick" or "opt"; "" on the interpreter)

    @classmethod
    def from_dict(cls, stats: Mapping[str, Any]) -> EmulationStats:
        """The stats of a machine's run (a dict of these fields)."""
        return cls(**{f.name: stats[f.name] for f in fields(cls) if f.name in stats})

    @classmethod
    def native(cls, stats: Mapping[str, Any]) -> EmulationStats:
        """The stats of a native-tier run (`native.select.run_native`'s dict, every key a field): filled in
        directly, not field by field through the frozen class's checks (a tiny launch's cost)."""
        made = object.__new__(cls)
        made.__dict__.update(_DEFAULTS)
        made.__dict__.update(stats)
        made.__dict__["tier"] = "native"
        return made

    def __getitem__(self, key: str) -> Any:
        if key not in _FIELDS:
            raise KeyError(key)
        return getattr(self, key)

    def __iter__(self) -> Iterator[str]:
        return iter(_FIELDS)

    def __len__(self) -> int:
        return len(_FIELDS)


_FIELDS = tuple(f.name for f in fields(EmulationStats))
_DEFAULTS = {f.name: f.default for f in fields(EmulationStats) if f.default is not MISSING}
