"""Emulator tests: each test of a test_emu_* module gets its own deterministic `rng` (by test name), so
results do not depend on which tests ran before it in the same worker."""

import zlib

import numpy as np
import pytest


@pytest.fixture(autouse=True)
def _per_test_rng(request):
    mod = request.module
    if mod.__name__.rpartition(".")[2].startswith("test_emu_") and isinstance(getattr(mod, "rng", None),
                                                                            np.random.Generator):
        mod.rng = np.random.default_rng(zlib.crc32(request.node.name.encode()))
    yield
