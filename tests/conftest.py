"""Shared test set-up: tests/ on sys.path (for corpus.py) and the GPU marker."""

import sys
from pathlib import Path

TESTS = Path(__file__).resolve().parent
if str(TESTS) not in sys.path:
    sys.path.insert(0, str(TESTS))
