"""The errors `ptxforge.ep` raises: bad input (raised on every rank of the group) and collective timeouts."""

from ptxforge.errors import Error


class EPError(Error, RuntimeError):
    """Base class of ptxforge.ep's errors."""


class EPInputError(EPError, ValueError):
    """Bad input on one or more ranks; every rank of the group raises it, with every rank's complaint."""


class EPTimeoutError(EPError, TimeoutError):
    """A collective did not complete in time; names the call, the collective and the ranks waited for."""
