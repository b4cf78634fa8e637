"""`python -m ptxforge ...`: the same command line as the `ptxforge` script."""

import sys

from ptxforge.cli.main import main

if __name__ == "__main__":
    sys.exit(main())
