"""The errors ptxforge raises on purpose, in one tree under `ptxforge.Error`; the family says who must act.

    Error
    ├── PTXError             the PTX (or DSL kernel code) is wrong: FILE:LINE:COL diagnostics
    │                        (ptxforge.ptx.errors: PTXSyntaxError, PTXValidationError; DSLError, PtxasError)
    ├── LaunchError          a launch refused before anything ran: its configuration or arguments (a ValueError)
    ├── KernelFault          the kernel failed while running, on a GPU or on the emulator
    │   ├── CudaError        a CUDA driver call failed (ptxforge.runtime.cuda_driver); CudaContextLost after it
    │   ├── MemoryFault, KernelTrap, WatchdogTimeout > TimeLimitExceeded   (also EmulatorErrors)
    │   └── CommTimeout      a communication kernel's wait passed timeout_s (ptxforge.ep; also an EPError)
    ├── DeviceUnavailable    the device asked for cannot be used on this machine (CudaUnavailable)
    ├── EmulatorError        the emulator's own (ptxforge.emu.errors): UnsupportedInstruction,
    │   │                    InternalEmulatorError, NodeStopped, and the emulator's kernel faults above
    │   └── SanitizerError   the sanitizer found errors in a kernel; `.reports` lists them
    └── the other layers' own: EPError (ptxforge.ep), ScheduleError, StepArgumentError, PeerFailed (pipeline),
        PtxasError, DisassemblyError (runtime), ToolNotFound, ConstExprError, UnknownPreset, UserError (cli)

A GPU fault is a KernelFault, never an EmulatorError. Each family keeps the built-in base its callers catch
(LaunchError is a ValueError, EPTimeoutError a TimeoutError ...). This module imports nothing of ptxforge,
so every layer may import it; the families whose base lives with its layer (PTXError in ptxforge.ptx.errors,
EmulatorError in ptxforge.emu.errors, SanitizerError in ptxforge.emu.sanitizer) are imported from there, or
from the package (`ptxforge.EmulatorError`), never through this module.
"""

from __future__ import annotations


class Error(Exception):
    """The root of every error ptxforge raises on purpose."""


class LaunchError(Error, ValueError):
    """A launch was refused before anything ran: a bad configuration or bad arguments, named precisely."""


class KernelFault(Error):
    """The kernel failed while it ran: an illegal address, a trap, a hang, a fault the GPU reported."""


class DeviceUnavailable(Error):
    """The device asked for cannot be used on this machine; the message says why and what to use instead."""


__all__ = ["DeviceUnavailable", "Error", "KernelFault", "LaunchError"]
