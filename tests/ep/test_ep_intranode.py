"""ptxforge.ep on 4 real gloo processes (one node), in the style of DeepEP's test_intranode.py: the torch
backend, and backend="kernels" (the communication kernels on 4 emulated GPUs sharing memory through emulator
IPC) with 2, 4 and 20 SMs.

One world of 4 ranks runs every case of this module in turn (as DeepEP's test loops over its configs in one
process): the checks of ep_checks.py for each backend, the SM map of a kernels Buffer, and last the timeout
check (it leaves a dispatch unanswered on purpose). Each case comes back with its own result or traceback, so
each test below passes or fails on its own. The torch backend and the kernels on 4 SMs run every check; 2
and 20 SMs (1 and 10 channels) run the checks whose path depends on the channel count (CHANNEL_CHECKS): the
others would repeat, at 40 % of the world's time, what 4 SMs already showed. Of those, the default world runs
half at each count (each check at one of them: 16 s of the world's 80 s of CPU saved); the slow test runs the
other half on a world of its own."""

import traceback

import ep_warm
import pytest
from ep_checks import CHANNEL_CHECKS, CHECKS, Ctx, check_timeout, suite

from ptxforge.ep.spawn import run_ranks

WORLD = 4
BACKENDS = [("torch", None), ("kernels", 2), ("kernels", 4), ("kernels", 20)]


# the channel checks at 2 and 20 SMs in the default world; the others run in the slow world
QUICK_CHANNEL = {2: ("check_combine", "check_empty_ranks"), 20: ("check_dispatch_rows", "check_fp8_lossless")}
assert sorted(sum(QUICK_CHANNEL.values(), ())) == sorted(c.__name__ for c in CHANNEL_CHECKS)


def _checks(backend, num_sms, quick=True) -> list:
    if num_sms not in (2, 20):
        return CHECKS if quick else []
    return [c for c in CHANNEL_CHECKS if (c.__name__ in QUICK_CHANNEL[num_sms]) == quick]


def _name(backend, num_sms):
    return backend if num_sms is None else f"{backend}-{num_sms}sms"


def _case(fn, *args) -> dict:
    try:
        return {"ok": True, "value": fn(*args)}
    except BaseException:  # noqa: BLE001 - reported by the test that reads this case
        return {"ok": False, "error": traceback.format_exc()}


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


def slow_cases(rank, world) -> dict:
    return {_name(*b): suite(rank, world, world, False, *b, checks=_checks(*b, quick=False))
            for b in BACKENDS if _checks(*b, quick=False)}


def every_case(rank, world) -> dict:
    import torch.distributed as dist

    out = {_name(*b): suite(rank, world, world, False, *b, checks=_checks(*b)) for b in BACKENDS}
    out["sm_map"] = _case(sm_map_rank, rank, world)
    dist.barrier()
    out["check_timeout"] = _case(lambda: check_timeout(Ctx(rank, world, world)))
    return out


@pytest.fixture(scope="module")
def results():
    ep_warm.warm()  # the kernels every rank launches, built once here before the fork
    ep_warm.warm_comm()
    return run_ranks(every_case, WORLD, timeout_s=600)


def _passed(cases):
    failed = {r: case["error"] for r, case in enumerate(cases) if not case["ok"]}
    assert not failed, "\n".join(f"--- rank {r} ---\n{e}" for r, e in failed.items())
    return [case.get("value") for case in cases]


@pytest.mark.parametrize("backend, check", [(_name(*b), c.__name__) for b in BACKENDS for c in _checks(*b)],
                         ids=[f"{_name(*b)}-{c.__name__}" for b in BACKENDS for c in _checks(*b)])
def test_on_4_ranks(results, backend, check):
    values = _passed([res[backend][check] for res in results])
    if check == "check_moe_matches_reference":
        assert all(v["bf16"] < 5e-6 and v["fp8"] < 2e-3 for v in values)
    if check == "check_stats":
        assert all(v["ratio"] <= 0.53 for v in values)
    if check == "check_bad_input":  # every rank raised, with the same text
        for key in values[0]:
            assert len({v[key] for v in values}) == 1, key


SLOW = [(_name(*b), c.__name__) for b in BACKENDS for c in _checks(*b, quick=False)]


@pytest.mark.slow
def test_the_other_channel_checks_on_4_ranks():
    ep_warm.warm()
    ep_warm.warm_comm()
    results = run_ranks(slow_cases, WORLD, timeout_s=600)
    assert len(SLOW) == 4
    for backend, check in SLOW:
        _passed([res[backend][check] for res in results])


def test_timeout_on_4_ranks(results):
    """check_timeout's Buffer is a torch-backend one whatever the world's backend (the timeout comes from the
    ranks' agreement before a call), so it runs once, not once per backend."""
    values = _passed([res["check_timeout"] for res in results])
    assert values[-1] is None and all("ptxforge.ep dispatch" in v for v in values[:-1])


def test_sm_map_of_a_kernels_buffer_on_4_ranks(results):
    for rows in _passed([res["sm_map"] for res in results]):
        for call in ("dispatch", "combine"):
            blocks = [r for r in rows if r[0] == call and r[1] != "notify"]
            assert [(r[1], r[2], r[3]) for r in blocks] == [("sender", 0, 0), ("receiver", 0, 1), ("sender", 1, 2),
                                                         ("receiver", 1, 3)]
            assert all(r[4] for r in blocks)
            assert [r[1] for r in rows if r[0] == call and r[1] == "notify"] == ["notify"]
