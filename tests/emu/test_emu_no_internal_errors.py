"""No input makes the emulator fail with an "internal error while emulating": tests/conftest.py fails any
test during which one is raised (caught or not), so every corpus launch in tests/emu and tests/sanitizer
checks it. These tests check that guard, and run the corpus kernels the sanitizer's table lists once
without the sanitizer, where other code paths run."""

import pytest
from emu_corpus import corpus_module

from ptxforge.emu.errors import EmulatorError, InternalEmulatorError


def test_the_guard_sees_an_internal_error_even_when_it_is_caught(request):
    with pytest.raises(EmulatorError):
        raise InternalEmulatorError("k.ptx:3: add.u32 ...: internal error while emulating: ValueError")
    assert request.node.internal_emulator_errors == [
        "k.ptx:3: add.u32 ...: internal error while emulating: ValueError"]
    request.node.internal_emulator_errors.clear()  # this one was planted


def _launches():
    from sanitizer.corpus_launches import LAUNCHES

    return LAUNCHES


@pytest.mark.parametrize("entry", _launches(), ids=lambda e: f"{e[0]}:{e[1]}")
def test_corpus_kernel_runs_without_internal_error(entry):
    name, kernel, grid, block, args, shared = entry[:6]
    k = corpus_module(name).kernel(kernel)
    k.launch(grid=grid, block=block, args=args(), device="emu", shared_mem=shared)
