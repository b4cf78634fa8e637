"""The errors `ptxforge.ep` raises: bad input and call mismatches (raised on every rank of the group), collective
timeouts and lost peers."""

from ptxforge.errors import Error, KernelFault


class EPError(Error, RuntimeError):
    """Base class of ptxforge.ep's errors."""


class EPInputError(EPError, ValueError):
    """Bad input on one or more ranks; every rank of the group raises it, with every rank's complaint."""


class EPCallMismatchError(EPInputError):
    """The ranks entered different calls (one skipped a call or made another); raised on every rank, naming
    each rank's call. The group stays usable: no data moved."""


class EPTimeoutError(EPError, TimeoutError):
    """A collective did not complete in time; names the call, the collective and the ranks waited for."""


class EPPeerLostError(EPError, ConnectionError):
    """A peer's process died or left the group (its connection was reset or closed); names the call and, where
    the ranks registered their processes, the rank that is gone. The process group cannot be used after it."""


class CommTimeout(EPError, KernelFault):
    """A wait of a communication kernel (backend="kernels") passed its bound: names the rank, kernel, role,
    channel and peer that waited and the counter values it saw. The kernel trapped; on a GPU the context is
    lost with it."""
