"""ptxforge.ep on 8 real gloo processes as 2 nodes x 4 ranks: two-hop node-limited dispatch, in the style of
DeepEP's test_internode.py."""

import ep_warm
import pytest
from ep_checks import CHECKS, suite

from ptxforge.ep.spawn import run_ranks

WORLD, PER_NODE = 8, 4


@pytest.fixture(scope="module")
def results():
    ep_warm.warm()  # the kernels every rank launches, built once here before the fork (torch backend: no comm ones)
    return run_ranks(suite, WORLD, PER_NODE, False, timeout_s=300)


@pytest.mark.parametrize("check", [c.__name__ for c in CHECKS])
def test_on_2_nodes_of_4(results, check):
    failed = {r: res[check]["error"] for r, res in enumerate(results) if not res[check]["ok"]}
    assert not failed, "\n".join(f"--- rank {r} ---\n{e}" for r, e in failed.items())
    values = [res[check].get("value") for res in results]
    if check == "check_moe_matches_reference":
        assert all(v["bf16"] < 5e-6 and v["fp8"] < 2e-3 for v in values)
    if check == "check_stats":
        assert all(v["ratio"] <= 0.53 for v in values)
