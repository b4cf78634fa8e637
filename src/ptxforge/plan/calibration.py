"""Per-SM copy rates measured on GPUs by scripts/calibrate_copy.py, which rewrites the MEASURED line.

A preset named here takes these figures (GB/s per SM) in place of its assumed ones; the docs and
`ptxforge plan --list` show the date and device. Empty until a session with a GPU runs the script.
"""

from typing import Any

MEASURED: dict[str, dict[str, Any]]  # preset -> {"device", "date", "how", rate fields}; the script writes the next line
MEASURED = {}
