"""ptxforge: PTX-level GPU programming from Python.

Parse, print, validate and retarget real PTX; run it on a CPU emulator or a GPU.
"""

from ptxforge.ptx.errors import PTXError, PTXSyntaxError, PTXValidationError
from ptxforge.ptx.parser import parse, parse_file

__version__ = "0.1.0"
__all__ = ["parse", "parse_file", "PTXError", "PTXSyntaxError", "PTXValidationError", "__version__"]
