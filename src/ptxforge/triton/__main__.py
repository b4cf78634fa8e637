"""`python -m ptxforge.triton [--sanitize] [--arch SM] SCRIPT.py [ARGS ...]`: run a script, unmodified, with
its Triton launches on the emulator."""

import argparse
import os
import runpy
import sys

from ptxforge import environment
from ptxforge.environment import EnvironmentVariableError

DESCRIPTION = """\
Run a Python script, unmodified, with every Triton launch it makes running its real compiled PTX on
ptxforge's CPU emulator: no GPU, no CUDA driver. Arguments after SCRIPT.py go to the script (sys.argv).
The script need not import ptxforge."""

EPILOG = """\
environment (the options win over it):
  PTXFORGE_TRITON_SANITIZE=1  as --sanitize
  PTXFORGE_TRITON_ARCH=sm_80  as --arch

examples:
  python -m ptxforge.triton 01-vector-add.py
  python -m ptxforge.triton --sanitize --arch sm_80 my_kernels_test.py -k softmax"""


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="python -m ptxforge.triton", description=DESCRIPTION, epilog=EPILOG,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--sanitize", action="store_true",
                        help="run every launch under the sanitizer; a launch with findings raises SanitizerError")
    parser.add_argument("--arch", metavar="SM",
                        help="the target Triton compiles for (default sm_90a), e.g. sm_80, sm_90a")
    parser.add_argument("script", metavar="SCRIPT.py", help="the Python script to run")
    parser.add_argument("args", nargs=argparse.REMAINDER, help="arguments passed on to the script")
    return parser


def main(argv: list[str]) -> None:
    parser = _parser()
    if not any(a in ("-h", "--help") for a in argv) and not [a for a in argv if not a.startswith("-")]:
        parser.error("give the script to run: python -m ptxforge.triton SCRIPT.py [ARGS ...]")
    opts = parser.parse_args(argv)
    if not os.path.isfile(opts.script):
        what = "is a directory" if os.path.isdir(opts.script) else "does not exist"
        parser.error(f"{opts.script}: {what}")
    try:
        environment.triton_emulation()  # a malformed PTXFORGE_TRITON* variable is an error before the script runs
    except EnvironmentVariableError as exc:
        parser.error(str(exc))
    if opts.sanitize:
        os.environ["PTXFORGE_TRITON_SANITIZE"] = "1"
    if opts.arch:
        os.environ["PTXFORGE_TRITON_ARCH"] = opts.arch
    os.environ["PTXFORGE_TRITON"] = "1"  # the script's launches (and its child processes') run on the emulator
    import ptxforge.triton  # imports triton and torch: after the arguments are known to be right
    from ptxforge.triton.driver import capability  # with the package above: after the arguments are checked

    try:
        capability(environment.triton_emulation()[2])
    except ValueError as exc:
        parser.error(str(exc))
    ptxforge.triton._from_environment()
    sys.argv = [opts.script, *opts.args]
    sys.path.insert(0, os.path.dirname(os.path.abspath(opts.script)))
    runpy.run_path(opts.script, run_name="__main__")


if __name__ == "__main__":
    main(sys.argv[1:])
