"""`python -m ptxforge.triton script.py ARGS`: run a script with its Triton launches on the emulator
(`PTXFORGE_TRITON_SANITIZE=1` adds the sanitizer, `PTXFORGE_TRITON_ARCH` picks the target)."""

import os
import runpy
import sys

from ptxforge import environment

if len(sys.argv) < 2:
    print("usage: python -m ptxforge.triton SCRIPT.py [ARGS ...]", file=sys.stderr)
    sys.exit(2)
if not environment.triton_emulation()[0]:
    os.environ["PTXFORGE_TRITON"] = "1"  # the script's launches run on the emulator
import ptxforge.triton  # noqa: E402  (imported before this module ran, with the environment it had then)

ptxforge.triton._from_environment()

sys.argv = sys.argv[1:]
sys.path.insert(0, os.path.dirname(os.path.abspath(sys.argv[0])))
runpy.run_path(sys.argv[0], run_name="__main__")
