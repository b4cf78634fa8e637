"""The errors `ptxforge.ep` raises: bad input (raised on every rank of the group) and collective timeouts."""

from ptxforge.errors import Error, KernelFault


class EPError(Error, RuntimeError):
    """Base class of ptxforge.ep's errors."""


class EPInputError(EPError, ValueError):
    """Bad input on one or more ranks; every rank of the group raises it, with every rank's complaint."""


class EPTimeoutError(EPError, TimeoutError):
    """A collective did not complete in time; names the call, the collective and the ranks waited for."""


class CommTimeout(EPError, KernelFault):
    """A wait of a communication kernel (backend="kernels") passed its bound: names the rank, kernel, role,
    channel and peer that waited and the counter values it saw. The kernel trapped; on a GPU the context is
    lost with it."""
