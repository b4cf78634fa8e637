"""backend="kernels" in one process: every rank of a 4-GPU emulated Node runs the communication kernels
(ptxforge.ep.NodeGroup), and each result is bit-identical to the torch backend's on 4 gloo ranks."""

import pytest
import torch
from ep_checks import E
from kernel_cases import FORMS, NUM_SMS, WORLD, expert_out, inputs, same, torch_rank

from ptxforge.emu import Node
from ptxforge.emu.sanitizer import SanitizerError
from ptxforge.ep import Config
from ptxforge.ep.node_group import NodeGroup
from ptxforge.ep.spawn import run_ranks


@pytest.fixture(scope="module")
def reference():
    return run_ranks(torch_rank, WORLD, timeout_s=240)


def run_node(form, num_sms, sanitize=False):
    """run_case's calls for every rank at once on one Node."""
    node = Node(gpus=WORLD, sms=132, sanitize=sanitize, watchdog_s=30)
    group = NodeGroup(node)
    ins = [inputs(r, form) for r in range(WORLD)]
    cfg = Config(num_sms, 6, 16)
    outs = group.dispatch([i[0] for i in ins], topk_idx=[i[1] for i in ins], topk_weights=[i[2] for i in ins],
                          num_experts=E, config=cfg, expert_alignment=4)
    cached = group.dispatch([i[0] for i in ins], handles=[o[4] for o in outs], config=cfg)
    ys = [expert_out(o[0], r) for r, o in enumerate(outs)]
    comb = group.combine(ys, [o[4] for o in outs], topk_weights=[o[2] for o in outs], bias=[i[3] for i in ins],
                         config=Config(num_sms, 3, 8))
    plain = group.combine(ys, [o[4] for o in outs])
    return group, [{"recv": o[0], "idx": o[1], "w": o[2], "counts": o[3], "handle": tuple(o[4]), "cached": c[0],
                    "combined": cb[0], "combined_w": cb[1], "plain": p[0], "none_w": p[1]}
                   for o, c, cb, p in zip(outs, cached, comb, plain, strict=True)]


# Each form and each SM count runs in the default suite (a pairwise cover: 8 s of CPU a case at 2 SMs); the
# rest of the grid is slow-marked.
QUICK = {("bf16", 2), ("fp8", 4), ("bf16", 20)}


@pytest.mark.parametrize("form, num_sms", [pytest.param(f, n, marks=() if (f, n) in QUICK else pytest.mark.slow)
                                           for f in FORMS for n in NUM_SMS])
def test_bit_identical_to_torch_backend(reference, form, num_sms):
    _, got = run_node(form, num_sms)
    for r in range(WORLD):
        want = reference[r][form, num_sms]
        for key in want:
            same(want[key], got[r][key], f"rank {r} {key}")


def test_sm_map_roles():
    group, _ = run_node("bf16", 4)
    rows = group.sm_map(1)
    disp = [row for row in rows if row["call"] == "dispatch" and row["role"] != "notify"]
    assert sorted(row["sm"] for row in disp) == [0, 1, 2, 3]  # the 4 blocks on SMs 0-3 of the budget
    assert [row["role"] for row in sorted(disp, key=lambda row: row["block"])] == ["sender", "receiver"] * 2
    assert all(row["thread_instructions"] > 0 for row in disp)


def test_race_free_under_the_node_sanitizer():
    run_node("fp8", 2, sanitize=True)  # one channel: the rings wrap; any race or scope error raises


@pytest.mark.parametrize("bug", ["early_tail", "gpu_scope"])
def test_planted_bugs_are_found_with_the_ptx_line(bug):
    node = Node(gpus=2, sms=132, sanitize=True, watchdog_s=30)
    group = NodeGroup(node)
    ins = [inputs(r, "bf16") for r in range(2)]
    with pytest.raises(SanitizerError) as err:
        group.dispatch([i[0] for i in ins], topk_idx=[i[1] for i in ins], topk_weights=[i[2] for i in ins],
                       num_experts=E, config=Config(2, 6, 16), bug=bug)
    reports = err.value.reports
    cross = [rep for rep in reports if rep.other and rep.other.get("gpu") != rep.gpu]
    assert cross, str(err.value)
    rep = cross[0]
    assert rep.ptx_line and rep.instruction and rep.other["ptx_line"]
    if bug == "gpu_scope":
        assert "scope error" in rep.message and ".gpu" in rep.other["instruction"] + rep.instruction
        assert any("st.release.gpu" in (r.other or {}).get("instruction", "") for r in cross)
    else:
        assert "no release/acquire pair" in rep.message
        assert rep.other["instruction"].startswith("st.global")  # the payload written after its tail


def test_dispatch_without_topk_idx_or_handles_is_an_error():
    group = NodeGroup(Node(gpus=2, sms=8))
    x = [torch.zeros((4, 128), dtype=torch.bfloat16)] * 2
    with pytest.raises(ValueError, match="needs topk_idx and num_experts, or the handles"):
        group.dispatch(x, num_experts=8)
    with pytest.raises(ValueError, match="needs topk_idx and num_experts"):
        group.dispatch(x, topk_idx=[torch.zeros((4, 2), dtype=torch.int64)] * 2)
