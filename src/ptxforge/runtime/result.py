"""What a launch returns."""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np


@dataclass
class LaunchResult:
    """Statistics of one launch: thread-instructions executed, wall time, per-SM instruction counts."""

    kernel: str
    device: str
    grid: tuple
    block: tuple
    thread_instructions: int
    wall_s: float
    per_sm: np.ndarray
    waves: int = 1
    printf: list = field(default_factory=list)

    @property
    def rate(self) -> float:
        """Thread-instructions per second."""
        return self.thread_instructions / self.wall_s if self.wall_s > 0 else float("inf")

    def __str__(self) -> str:
        return (f"{self.kernel}<<<{self.grid}, {self.block}>>> on {self.device}: "
                f"{self.thread_instructions:,} thread-instructions in {self.wall_s * 1e3:.1f} ms "
                f"({self.rate / 1e6:.1f} M/s)")
