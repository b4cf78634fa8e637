"""What a launch returns."""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np


@dataclass
class LaunchResult:
    """Statistics of one launch. On the emulator: thread-instructions executed, wall time, per-SM
    instruction counts. On a GPU: the kernel time from CUDA events (no instruction counts)."""

    kernel: str
    device: str
    grid: tuple
    block: tuple
    thread_instructions: int
    wall_s: float
    per_sm: np.ndarray
    waves: int = 1
    printf: list = field(default_factory=list)
    gpu: str = ""  # the GPU's name for a launch on "cuda"

    @property
    def rate(self) -> float:
        """Thread-instructions per second."""
        return self.thread_instructions / self.wall_s if self.wall_s > 0 else float("inf")

    def __str__(self) -> str:
        if self.device == "cuda":
            return (f"{self.kernel}<<<{self.grid}, {self.block}>>> on {self.gpu or 'cuda'}: "
                    f"{self.wall_s * 1e3:.3f} ms kernel time (CUDA events)")
        return (f"{self.kernel}<<<{self.grid}, {self.block}>>> on {self.device}: "
                f"{self.thread_instructions:,} thread-instructions in {self.wall_s * 1e3:.1f} ms "
                f"({self.rate / 1e6:.1f} M/s)")
