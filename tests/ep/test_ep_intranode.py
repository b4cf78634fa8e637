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


def sm_map_rank(rank, world):
    from ep_checks import E, encoded_x, random_topk

    import ptxforge.ep as deep_ep

    deep_ep.Buffer.set_num_sms(4)
    buf = deep_ep.Buffer(None, 0, 0, num_ranks_per_node=world, backend="kernels", timeout_s=30)
    idx, w = random_topk(rank)
    x = encoded_x(rank)
    ntr, _, nte, in_rank, _ = buf.get_dispatch_layout(idx, E)
    recv, _, _, _, handle, _ = buf.dispatch(x, num_tokens_per_rank=ntr, is_token_in_rank=in_rank,
                                            num_tokens_per_expert=nte, topk_idx=idx, topk_weights=w)
    buf.combine(recv, handle)
    return [(row["call"], row["role"], row["channel"], row["sm"], row["thread_instructions"] > 0)
            for row in buf.sm_map()]


def test_sm_map_of_a_kernels_buffer_on_4_ranks():
    for rows in run_ranks(sm_map_rank, WORLD, timeout_s=120):
        for call in ("dispatch", "combine"):
            blocks = [r for r in rows if r[0] == call and r[1] != "notify"]
            assert [(r[1], r[2], r[3]) for r in blocks] == [("sender", 0, 0), ("receiver", 0, 1), ("sender", 1, 2),
                                                         ("receiver", 1, 3)]
            assert all(r[4] for r in blocks)
            assert [r[1] for r in rows if r[0] == call and r[1] == "notify"] == ["notify"]
