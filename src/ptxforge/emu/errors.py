"""Errors the emulator raises: each names the PTX line, the thread and the block involved.

Their place in ptxforge's one tree of errors is drawn in `ptxforge.errors`: the faults of a running kernel are
also `KernelFault`s (as a GPU's are), a refused launch is the shared `LaunchError` (importable from here too).
"""

from __future__ import annotations

from ptxforge.errors import Error, KernelFault, LaunchError

__all__ = ["EmulatorError", "InternalEmulatorError", "KernelTrap", "LaunchError", "MemoryFault",
           "TimeLimitExceeded", "UnsupportedInstruction", "WatchdogTimeout"]


class EmulatorError(Error):
    """Base class: a kernel could not be emulated or failed while running."""


class UnsupportedInstruction(EmulatorError):
    """An instruction (or a form of it) the emulator does not implement."""


class MemoryFault(EmulatorError, KernelFault):
    """An out-of-bounds, misaligned or otherwise invalid memory access (never a host crash)."""

    # set where an op raises it, before the machine fills in the thread, block and line (see machine._locate)
    _lane: int  # the faulting lane
    _pc: int  # the op, for a fault raised in a compacted session (compact.py)

    def __init__(self, message: str, *, kind: str = "out-of-bounds", address: int | None = None,
                 size: int | None = None, thread: tuple[int, int, int] | None = None,
                 block: tuple[int, int, int] | None = None, ptx_line: int | None = None, instruction: str = ""):
        super().__init__(message)
        self.kind = kind
        self.address = address
        self.size = size
        self.thread = thread
        self.block = block
        self.ptx_line = ptx_line
        self.instruction = instruction


class KernelTrap(EmulatorError, KernelFault):
    """The kernel executed `trap` (or an assertion failed through __assertfail)."""


class WatchdogTimeout(EmulatorError, KernelFault):
    """The kernel made no progress: a deadlock at barriers/warp syncs, or a state that keeps repeating."""


class TimeLimitExceeded(WatchdogTimeout):
    """The launch ran past the `time_limit_s` its caller set (it may still have been making progress)."""


class InternalEmulatorError(EmulatorError):
    """A bug in the emulator, not in the kernel: an unexpected exception while executing an instruction
    (reported with the instruction, as "internal error while emulating"). Never expected for any input."""
