"""`LaunchConfig` (a launch's shape, as cuda.core's) and `EmulatorOptions` (what only the emulator takes).

Both are checked when they are made, with the messages a launch gives, so a bad configuration is refused
where it is written; the checks that need the kernel (`.reqntid`, `.reqnctapercluster`, shared memory against
its static use) still run at the launch.

    cfg = LaunchConfig(grid=(64,), block=(256,), shmem_size=0)
    kernel.launch(cfg, [a, b, c, np.int32(n)], device="emu")
    kernel.launch(cfg, args, options=EmulatorOptions(sanitize=True, num_sms=8))
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, fields
from typing import Any

import numpy as np

from ptxforge.emu.hooks import Check
from ptxforge.emu.launch import sm_count
from ptxforge.emu.launch_checks import MAX_CLUSTER, dims, grid_and_block, shared_bytes
from ptxforge.emu.native.plan import requested_level, requested_tier
from ptxforge.emu.progress import check_time_options
from ptxforge.emu.sanitizer import Sanitizer
from ptxforge.errors import LaunchError

Dim3 = tuple[int, int, int]


@dataclass(frozen=True)
class LaunchConfig:
    """grid and block: 1 to 3 positive integers (or one int) within the driver's limits; shmem_size: dynamic
    shared memory bytes per block; cluster: the thread-block cluster shape, or None (the kernel's own
    `.reqnctapercluster`, or none); cooperative: a cooperative launch (every block resident at once).
    Stored normalized: grid, block and cluster as 3-tuples."""

    grid: Dim3 = (1, 1, 1)
    block: Dim3 = (1, 1, 1)
    shmem_size: int = 0
    cluster: Dim3 | None = None
    cooperative: bool = False

    def __post_init__(self) -> None:
        grid, block, shmem, cluster, cooperative = _checked(self.grid, self.block, self.shmem_size, self.cluster,
                                                            self.cooperative, "shmem_size")
        for name, value in (("grid", grid), ("block", block), ("shmem_size", shmem), ("cluster", cluster),
                            ("cooperative", cooperative)):
            object.__setattr__(self, name, value)

    @classmethod
    def from_keywords(cls, grid: Any, block: Any, shared_mem: Any = 0, cluster: Any = None,
                      cooperative: Any = False) -> LaunchConfig:
        """The config of `Kernel.launch`'s keyword form (its messages name `shared_mem`, the keyword used)."""
        config = object.__new__(cls)  # (checked once, here, not again by __post_init__)
        for name, value in zip(_CONFIG_FIELDS, _checked(grid, block, shared_mem, cluster, cooperative, "shared_mem"),
                               strict=True):
            object.__setattr__(config, name, value)
        return config

    @property
    def threads(self) -> int:
        """Threads per block."""
        return self.block[0] * self.block[1] * self.block[2]

    @property
    def blocks(self) -> int:
        """Blocks in the grid."""
        return self.grid[0] * self.grid[1] * self.grid[2]


def _checked(grid: Any, block: Any, shmem: Any, cluster: Any, cooperative: Any,
             shmem_name: str) -> tuple[Dim3, Dim3, int, Dim3 | None, bool]:
    grid3, block3 = grid_and_block(grid, block)
    size = shared_bytes(shmem, shmem_name)
    shape = None
    if cluster is not None:
        shape = dims(cluster, "cluster")
        n = shape[0] * shape[1] * shape[2]
        if n > MAX_CLUSTER:
            raise LaunchError(f"cluster {shape} has {n} CTAs; the limit is {MAX_CLUSTER}")
        if any(g % c for g, c in zip(grid3, shape, strict=True)):
            raise LaunchError(f"grid {grid3} is not a whole number of clusters {shape}: each grid dimension "
                              f"must be a multiple of the cluster's")
    if not isinstance(cooperative, bool | np.bool_):
        raise LaunchError(f"cooperative must be True or False, got {cooperative!r}")
    return grid3, block3, size, shape, bool(cooperative)


_CONFIG_FIELDS = ("grid", "block", "shmem_size", "cluster", "cooperative")


@dataclass(frozen=True)
class EmulatorOptions:
    """The launch options only the emulator has. sanitize: False, True (every check) or a
    `ptxforge.emu.sanitizer.Sanitizer`; num_sms: SMs to emulate (None: the device's); watchdog_s: seconds the
    launch may go without progress (inf: no limit); time_limit_s: a wall-clock limit (None: none); printf: a
    callable given each line of device printf output (None: print it); checks: `ptxforge.emu.hooks.Check`s that
    watch the launch beside the sanitizer (see README, "Writing a check"); reference: run every instruction
    through its semantics function with no fast path (as PTXFORGE_EMU_REFERENCE=1; docs/emulator.md); tier: "auto",
    "native" or "interp" (None: $PTXFORGE_EMU_TIER, else "auto"; see docs/native-tier.md); threads: the native
    tier's worker threads (None: every core); level: the native tier's compile level, "auto", "quick" or "opt"
    (None: $PTXFORGE_NATIVE_LEVEL, else "auto": quick for a lukewarm kernel, optimized for a hot one)."""

    sanitize: Any = False
    num_sms: int | None = None
    watchdog_s: float = 60.0
    time_limit_s: float | None = None
    printf: Callable[[str], Any] | None = None
    checks: tuple[Check, ...] = ()
    reference: bool = False
    tier: str | None = None
    threads: int | None = None
    level: str | None = None

    def __post_init__(self) -> None:
        if self.tier is not None:
            requested_tier(self.tier)  # a LaunchError naming the tiers
        if self.level is not None:
            requested_level(self.level)  # a LaunchError naming the levels
        if self.threads is not None and (isinstance(self.threads, bool) or not isinstance(self.threads, int)
                                         or self.threads < 1):
            raise LaunchError(f"threads must be a whole number of at least 1, not {self.threads!r}")
        watchdog_s, time_limit_s = check_time_options(self.watchdog_s, self.time_limit_s)
        object.__setattr__(self, "watchdog_s", watchdog_s)
        object.__setattr__(self, "time_limit_s", time_limit_s)
        if self.num_sms is not None:
            object.__setattr__(self, "num_sms", sm_count(self.num_sms))
        if self.printf is not None and not callable(self.printf):
            raise LaunchError(f"printf must be a callable taking each line of output, got {self.printf!r}")
        object.__setattr__(self, "checks", tuple(self.checks))
        bad = [c for c in self.checks if not isinstance(c, Check)]
        if bad:
            raise LaunchError(f"checks must be ptxforge.emu.hooks.Check instances, got {bad[0]!r}")
        if not isinstance(self.reference, bool | np.bool_):
            raise LaunchError(f"reference must be True or False, got {self.reference!r}")
        object.__setattr__(self, "reference", bool(self.reference))
        if isinstance(self.sanitize, np.bool_):
            object.__setattr__(self, "sanitize", bool(self.sanitize))
        if not isinstance(self.sanitize, bool):
            if not isinstance(self.sanitize, Sanitizer):
                raise LaunchError(f"sanitize must be True, False or a Sanitizer, got {self.sanitize!r}")
        object.__setattr__(self, "_given", tuple(name for name in _OPTION_NAMES if name != "watchdog_s"
                                                  and getattr(self, name) not in (None, False, ())))

    @classmethod
    def from_mapping(cls, options: Any) -> EmulatorOptions:
        """`options=` as given to a launch: an EmulatorOptions, or a dict of its fields ({"reference": True})."""
        if isinstance(options, cls):
            return options
        if not isinstance(options, dict):
            raise LaunchError(f"options must be an EmulatorOptions or a dict of its fields, got {options!r}")
        # options of plain values that passed are remembered by value and type (equal ones pass or fail alike);
        # objects (a Sanitizer, printf, checks) are not: the options must hold the very objects given
        key: tuple | None = None
        types = tuple(map(type, options.values()))
        if _PLAIN.issuperset(types):
            key = (tuple(options.items()), types)
            hit = _MADE.get(key)
            if hit is not None:
                return hit
        names = _OPTION_NAMES
        unknown = [k for k in options if k not in names]
        if unknown:
            raise LaunchError(f"unknown emulator option {unknown[0]!r}; the options are {', '.join(names)}")
        made = cls(**options)
        if key is not None:
            if len(_MADE) >= 256:
                _MADE.clear()
            _MADE[key] = made
        return made

    def given(self) -> list[str]:
        """The options set to something a GPU cannot do (watchdog_s is not one: a GPU has no watchdog); found
        when the options are made (they are frozen), not at every launch."""
        return list(self.__dict__["_given"])


_OPTION_NAMES = tuple(f.name for f in fields(EmulatorOptions))
_PLAIN = frozenset({type(None), bool, int, float, str})
_MADE: dict[tuple, EmulatorOptions] = {}  # from_mapping's: (the options' items, their values' types) -> the options
