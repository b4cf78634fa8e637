"""ptxforge.ep on 4 real gloo processes (one node), in the style of DeepEP's test_intranode.py: the torch
backend, and backend="kernels" (the communication kernels on 4 emulated GPUs sharing memory through emulator
IPC) with 2, 4 and 20 SMs."""

import ep_warm  # noqa: F401 - builds the emulator kernels once, before the ranks are forked
import pytest
from ep_checks import CHECKS, suite

from ptxforge.ep.spawn import run_ranks

WORLD = 4


BACKENDS = [("torch", None), ("kernels", 2), ("kernels", 4), ("kernels", 20)]


@pytest.fixture(scope="module", params=BACKENDS, ids=lambda b: b[0] if b[1] is None else f"{b[0]}-{b[1]}sms")
def results(request):
    backend, num_sms = request.param
    return run_ranks(suite, WORLD, WORLD, True, backend, num_sms, timeout_s=300)


def _passed(results, name):
    failed = {r: res[name]["error"] for r, res in enumerate(results) if not res[name]["ok"]}
    assert not failed, "\n".join(f"--- rank {r} ---\n{e}" for r, e in failed.items())
    return [res[name].get("value") for res in results]


@pytest.mark.parametrize("check", [c.__name__ for c in CHECKS] + ["check_timeout"])
def test_on_4_ranks(results, check):
    values = _passed(results, check)
    if check == "check_moe_matches_reference":
        assert all(v["bf16"] < 5e-6 and v["fp8"] < 2e-3 for v in values)
    if check == "check_stats":
        assert all(v["ratio"] <= 0.53 for v in values)
    if check == "check_bad_input":  # every rank raised, with the same text
        for key in values[0]:
            assert len({v[key] for v in values}) == 1, key
    if check == "check_timeout":
        assert values[-1] is None and all("ptxforge.ep dispatch" in v for v in values[:-1])
