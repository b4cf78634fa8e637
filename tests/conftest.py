"""Shared test set-up: tests/ on sys.path (for corpus.py) and the GPU marker."""

import os
import sys
import tempfile
from pathlib import Path

# Launches that name no device run on the emulator, also on a machine with a GPU: the suite tests the
# emulator; tests/gpu and the DSL examples name device="cuda" where they mean the GPU.
os.environ.setdefault("PTXFORGE_DEVICE", "emu")
# ptxas builds are cached on disk (ptxforge.cache): the suite uses a cache of its own, not the user's
os.environ.setdefault("PTXFORGE_CACHE_DIR", tempfile.mkdtemp(prefix="ptxforge-test-cache-"))

TESTS = Path(__file__).resolve().parent
if str(TESTS) not in sys.path:
    sys.path.insert(0, str(TESTS))
