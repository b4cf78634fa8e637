"""What a launch returns."""

from __future__ import annotations

import html
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
    printf_truncated: int = 0  # printf calls cut short or lost past the device's printf buffer (emulator)
    mode: str = ""  # the emulator's mode: "fast", or "reference" (no fast path, docs/emulator.md); "" on a GPU
    tier: str = ""  # on the emulator: "native" or "interp", the tier that ran it (docs/native-tier.md)
    tier_note: str = ""  # why the interpreter ran it where the native tier could have been used
    level: str = ""  # on the native tier: its compile level that ran it, "quick" or "opt"

    @property
    def rate(self) -> float:
        """Thread-instructions per second."""
        return self.thread_instructions / self.wall_s if self.wall_s > 0 else float("inf")

    def sm_summary(self) -> str:
        """'4 of 132 SMs busy, 3,072-3,200 thread-instructions each' (empty on a GPU: no counts there)."""
        counts = np.asarray(self.per_sm)
        if counts.size == 0:
            return ""
        busy = counts[counts > 0]
        if busy.size == 0:
            return f"0 of {counts.size} SMs busy"
        lo, hi = int(busy.min()), int(busy.max())
        each = f"{lo:,}" if lo == hi else f"{lo:,}-{hi:,}"
        waves = f", {self.waves} waves" if self.waves > 1 else ""
        return f"{busy.size} of {counts.size} SMs busy, {each} thread-instructions each{waves}"

    def __str__(self) -> str:
        if self.device == "cuda":
            return (f"{self.kernel}<<<{self.grid}, {self.block}>>> on {self.gpu or 'cuda'}: "
                    f"{self.wall_s * 1e3:.3f} ms kernel time (CUDA events)")
        return (f"{self.kernel}<<<{self.grid}, {self.block}>>> on {self.device}: "
                f"{self.thread_instructions:,} thread-instructions in {self.wall_s * 1e3:.1f} ms "
                f"({self.rate / 1e6:.1f} M/s); {self.sm_summary()}")

    def __repr__(self) -> str:
        printed = f", {len(self.printf)} printf lines" if self.printf else ""
        return f"<LaunchResult {self}{printed}>"

    def _repr_html_(self) -> str:
        """The summary and, on the emulator, a bar per SM of its thread-instructions (inline SVG)."""
        head = f"<p><code>{html.escape(str(self))}</code></p>"
        counts = np.asarray(self.per_sm, dtype=np.float64)
        if counts.size == 0 or counts.max() <= 0:
            return head
        w, h = max(2, min(6, 800 // counts.size)), 60
        bars = "".join(f'<rect x="{i * w}" y="{h - c / counts.max() * h:.1f}" width="{w - 1}" '
                       f'height="{c / counts.max() * h:.1f}" fill="#4a7ab5"><title>SM {i}: {int(c):,}</title></rect>'
                       for i, c in enumerate(counts))
        return (f'{head}<svg xmlns="http://www.w3.org/2000/svg" width="{w * counts.size}" height="{h}">{bars}</svg>'
                f"<p><small>thread-instructions per SM</small></p>")
