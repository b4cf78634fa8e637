"""One step schedule (emu/wave_schedule.py) drives both the machine's loop and the compacted sessions.

Changing a rule of the schedule in its one place (here the rotation period) changes the steps the wave takes,
and the sessions follow it step for step: memory, counts and machine steps stay those of the machine stepping
every lane itself (reference mode).
"""

import ast
from pathlib import Path

import numpy as np
import pytest
from test_emu_compaction import COLLATZ, PARAMS3, assert_same, both, kernel

from ptxforge.emu import wave_schedule

SRC = Path(wave_schedule.__file__).parent


def _collatz(monkeypatch):
    k = kernel(COLLATZ, PARAMS3)
    blocks, threads = 8, 128
    n = blocks * threads
    seeds = np.random.default_rng(7).integers(1, 3000, n).astype(np.uint32)
    seeds[::17] = 0
    out = np.zeros((n, 2), np.uint32)
    ctr = np.zeros(1, np.uint32)
    return both(lambda: k.launch(grid=(blocks,), block=(threads,), args=[out, seeds, ctr]), [out, ctr],
                monkeypatch)


@pytest.mark.parametrize("period", [3, 17])
def test_sessions_follow_a_changed_rotation(period, monkeypatch):
    default = _collatz(monkeypatch)
    monkeypatch.setattr(wave_schedule, "ROTATE_EVERY", period)
    off, on = _collatz(monkeypatch)
    assert_same(off, on, min_session_steps=50)
    # the rule really changed the schedule: the lanes leave the loop in another order (the tickets) or
    # the wave takes another number of steps
    (mem_default, *_, steps_default, _), _ = default
    (mem, *_, steps, _) = off
    assert steps != steps_default or not np.array_equal(mem[0], mem_default[0])


def test_the_schedule_is_written_once():
    """The machine's loop and the sessions keep no rotation, tick or call-context rule of their own."""
    for name in ("machine.py", "compact.py"):
        tree = ast.parse((SRC / name).read_text())
        names = {n.id for n in ast.walk(tree) if isinstance(n, ast.Name)}
        assert not names & {"ROTATE_EVERY", "rotate_every", "rot_last", "div_steps"}, name
        calls = {n.func.id for n in ast.walk(tree) if isinstance(n, ast.Call) and isinstance(n.func, ast.Name)}
        if name == "compact.py":
            assert "one_context" in calls
