"""The internode communication kernels (ptxforge.kernels.internode_*) on one emulated Cluster of 2 nodes x 2
GPUs: dispatch and combine bit-identical to a numpy reference of DeepEP's contract, race-free under the
sanitizer, planted ordering bugs found, a wrong count stopped by the bounded waits.

The default suite keeps one planted bug and the wrong count (its first dispatch checked bit for bit against
the reference); the dispatch + combine bit-identical cases (the default suite runs BF16 and FP8 through the same
kernels in test_ep_kernels_internode.py's world), the sanitized race-free run, the other planted bugs, the
adversarial seeds and the link bytes are slow-marked (`make test-all` runs them)."""

import internode_links as L
import numpy as np
import pytest
from ep_checks import E
from internode_cases import BF16, combine_reference, dispatch_reference, expert_out, in_rank_of, inputs, same_bits

from ptxforge.emu import Cluster
from ptxforge.emu.sanitizer import SanitizerError
from ptxforge.ep.errors import CommTimeout
from ptxforge.ep.internode_cluster import ClusterGroup
from ptxforge.errors import KernelFault

NODES, GPUS = 2, 2
R = NODES * GPUS
FIELDS = ("recv_x", "recv_scales", "recv_idx", "recv_w", "recv_src", "expert_counts")


def run_calls(form, num_sms, sanitize=False, empty=1, nodes=NODES, gpus=GPUS, tokens=24, hidden=256, **ring):
    """Dispatch, a cached dispatch, combine with weights and two biases, a plain combine; checks each
    against the reference bit for bit. Returns the group."""
    ranks = nodes * gpus
    cluster = Cluster(nodes=nodes, gpus_per_node=gpus, sms=max(num_sms, 2), sanitize=sanitize, watchdog_s=300)
    group = ClusterGroup(cluster, timeout_s=300, **ring)  # wall-clock bounds: generous under load
    ins = [inputs(r, form, tokens, hidden, empty=r == empty) for r in range(ranks)]
    scales = [i[1] for i in ins] if ins[0][1] is not None else None
    outs = group.dispatch([i[0] for i in ins], scales, [i[2] for i in ins], [i[3] for i in ins], num_experts=E,
                          num_sms=num_sms)
    ref = dispatch_reference(ins, ranks, E)
    for r, o in enumerate(outs):
        for f in FIELDS:
            same_bits(ref[r][f], getattr(o, f), f"rank {r} {f}")
    sends = np.stack([in_rank_of(i[2], ranks, E).sum(0) for i in ins])  # [source, destination]: a recount
    for r, o in enumerate(outs):
        assert np.array_equal(o.handle.rank_prefix, np.cumsum(sends, 0)), r
        assert np.array_equal(o.handle.is_token_in_rank, in_rank_of(ins[r][2], ranks, E)), r
    again = group.dispatch([i[0] for i in ins], scales, handles=[o.handle for o in outs])
    for r, o in enumerate(again):
        same_bits(ref[r]["recv_x"], o.recv_x, f"rank {r} cached recv_x")
        same_bits(ref[r]["recv_scales"], o.recv_scales, f"rank {r} cached recv_scales")
        assert o.recv_idx is None and o.recv_w is None
    ys = [expert_out(o.recv_x, r, form) for r, o in enumerate(outs)]
    ws = [o.recv_w for o in outs]
    biases = [(np.full((tokens, hidden), 0.5, BF16), (np.arange(tokens * hidden) % 7 - 3).astype(BF16).reshape(
        tokens, hidden))] * ranks
    got = group.combine(ys, [o.handle for o in outs], ws, biases)
    want = combine_reference(ins, ys, ws, biases, nodes, gpus, E)
    plain = group.combine(ys, [o.handle for o in outs])
    want_plain = combine_reference(ins, ys, None, None, nodes, gpus, E)
    for r in range(ranks):
        same_bits(want[r][0], got[r][0], f"rank {r} combined x")
        same_bits(want[r][1], got[r][1], f"rank {r} combined weights")
        same_bits(want_plain[r][0], plain[r][0], f"rank {r} plain combined x")
        assert plain[r][1] is None
    assert outs[empty].handle.chan_prefix.sum() == 0  # the empty rank sent nothing
    return group


@pytest.mark.slow
def test_bf16_at_2_sms_bit_identical():
    run_calls("bf16", 2, tokens=16, hidden=128)


@pytest.mark.slow
def test_bf16_at_2_sms_bit_identical_and_race_free_under_the_sanitizer():
    group = run_calls("bf16", 2, sanitize=True, tokens=16, hidden=128)
    roles = {row["role"] for row in group.sm_map(0)}
    assert {"notify", "forwarder", "NVLink sender + RDMA receiver"} <= roles


@pytest.mark.slow
def test_fp8_at_4_sms_bit_identical():
    group = run_calls("fp8", 4, empty=2, tokens=16, hidden=128)
    disp = [row for row in group.sm_map(3) if row["call"] == "dispatch" and row["role"] != "notify"]
    assert sorted(row["sm"] for row in disp) == [0, 1, 2, 3]
    assert [row["role"] for row in sorted(disp, key=lambda row: row["block"])] == [
        "RDMA sender + coordinator + NVLink receiver", "forwarder"] * 2
    assert all(row["thread_instructions"] > 0 for row in disp)


@pytest.mark.slow
@pytest.mark.parametrize("form,num_sms", [("bf16", 4), ("fp8", 2), ("bf16", 20), ("fp8", 20), ("fp8-ue8m0", 4)])
def test_bit_identical_slow_matrix(form, num_sms):
    run_calls(form, num_sms)


@pytest.mark.slow
def test_2_nodes_of_4_gpus_bit_identical():
    run_calls("fp8", 4, gpus=4, empty=5, tokens=16)


def _bug_run(bug, call, sanitize=True, adversarial=None, timeout_s=300.0, rdma_ring=4, tokens=16):
    """Small rings wrap (the send buffer is reused); a ring larger than a channel's tokens never quiets."""
    cluster = Cluster(nodes=NODES, gpus_per_node=GPUS, sms=2, sanitize=sanitize, watchdog_s=300,
                      adversarial=adversarial)
    group = ClusterGroup(cluster, timeout_s=timeout_s, rdma_ring=rdma_ring, nvl_ring=4, chunk=2)
    ins = [inputs(r, "bf16", tokens, 128) for r in range(R)]
    outs = group.dispatch([i[0] for i in ins], None, [i[2] for i in ins], [i[3] for i in ins], num_experts=E,
                          num_sms=2, bug=bug if call == "dispatch" else "")
    if call == "dispatch":
        return ins, outs
    ys = [expert_out(o.recv_x, r, "bf16") for r, o in enumerate(outs)]
    return ins, ys, group.combine(ys, [o.handle for o in outs], bug=bug)


PLANTED = {"no_fence": ("unfenced-signal", "signal"), "reuse": ("send-before-quiet", "target"),
           "gpu_scope": ("race", "scope")}


def _check_planted(bug, call, tokens=16):
    with pytest.raises(SanitizerError) as err:
        _bug_run(bug, call, tokens=tokens)
    kind, _ = PLANTED[bug]
    reports = [rep for rep in err.value.reports if rep.kind == kind]
    assert reports, str(err.value)[:3000]
    other = "gpu" if bug != "reuse" else "target_gpu"
    cross = [rep for rep in reports if rep.other and rep.other.get(other) is not None
             and rep.other[other] // GPUS != rep.gpu // GPUS] if bug != "gpu_scope" else \
        [rep for rep in reports if rep.other and rep.other.get("gpu") != rep.gpu]
    assert cross, [(rep.gpu, rep.other) for rep in reports]
    rep = cross[0]
    text = str(rep)
    assert rep.ptx_line and rep.other["ptx_line"]
    assert f"GPU {rep.gpu}" in text and f"GPU {rep.other[other]}" in text
    if bug == "no_fence":
        assert "nvshmem_fence" in text and rep.other["signal_line"]
    elif bug == "reuse":
        assert "before nvshmem_quiet" in text and "nvshmemx_putmem_nbi_warp" in text
    else:
        assert "scope error" in text and "st.release.gpu" in text


def test_a_dispatch_tail_raised_without_a_fence_is_reported_with_the_ptx_line_and_both_gpus():
    _check_planted("no_fence", "dispatch", tokens=8)


@pytest.mark.slow
@pytest.mark.parametrize("bug", ["reuse", "gpu_scope"])
def test_planted_dispatch_bugs_are_reported_with_the_ptx_line_and_both_gpus(bug):
    _check_planted(bug, "dispatch")


@pytest.mark.slow
@pytest.mark.parametrize("bug", ["no_fence", "reuse", "gpu_scope"])
def test_planted_combine_bugs_are_reported_with_the_ptx_line_and_both_gpus(bug):
    _check_planted(bug, "combine")


def _adversarial_outcome(bug, seed):
    """True when the run is wrong or stops with an error; False when every rank's result is right. (A token
    whose slot is read before its data arrives is not forwarded: a receiver then waits, bounded by 4 s; the
    fenced kernel gets a bound no loaded machine reaches.)"""
    try:
        ins, outs = _bug_run(bug, "dispatch", sanitize=False, adversarial=seed, timeout_s=4.0 if bug else 300.0,
                             rdma_ring=16)
    except KernelFault:  # a garbage row index faults, a garbage count times out (CommTimeout)
        return True
    ref = dispatch_reference(ins, R, E)
    try:
        for r, o in enumerate(outs):
            for f in FIELDS:
                same_bits(ref[r][f], getattr(o, f), f)
    except AssertionError:
        return True
    return False


@pytest.mark.slow
@pytest.mark.parametrize("seed", [0])
def test_the_adversarial_mode_catches_the_missing_fence_and_passes_the_fenced_kernel(seed):
    assert _adversarial_outcome("no_fence", seed)
    assert not _adversarial_outcome("", seed)


@pytest.mark.slow
def test_the_adversarial_mode_on_10_seeds():
    caught = [_adversarial_outcome("no_fence", s) for s in range(10)]
    assert sum(caught) >= 9, caught
    assert not any(_adversarial_outcome("", s) for s in range(10))


def test_a_wrong_count_is_stopped_within_the_timeout_naming_node_gpu_warp_counter_wanted_and_seen():
    import math
    import time

    cluster = Cluster(nodes=NODES, gpus_per_node=GPUS, sms=2, watchdog_s=120)
    group = ClusterGroup(cluster, timeout_s=300.0)
    ins = [inputs(r, "bf16", 16, 128) for r in range(R)]
    t0 = time.monotonic()
    outs = group.dispatch([i[0] for i in ins], None, [i[2] for i in ins], [i[3] for i in ins], num_experts=E,
                          num_sms=2)
    normal_s = time.monotonic() - t0
    ref = dispatch_reference(ins, R, E)
    for r, o in enumerate(outs):
        for f in FIELDS:
            same_bits(ref[r][f], getattr(o, f), f"rank {r} {f}")
    handles = [o.handle for o in outs]
    for h in handles:  # every rank expects one token more from source rank 0 than it will get
        h.recv_chan[0] += 1
    # each wait's bound is wall time. No wait of a dispatch lasts longer than the whole dispatch did (all GPUs
    # in this one process, the same schedule): four times the time the normal dispatch took, at the load of the
    # moment, leaves the normal waits room, so only the planted wait reaches it
    bound = max(4, math.ceil(4 * normal_s))
    group.timeout_s = float(bound)
    t0 = time.monotonic()
    with pytest.raises(CommTimeout) as err:
        group.dispatch([i[0] for i in ins], None, handles=handles)
    assert time.monotonic() - t0 < 90 + 4 * bound
    text = str(err.value)
    # the first rank whose wait timed out stops the cluster (the others' launches fail with it): each record
    # present names the receiver that waits for rank 0's forwarder on its node
    named = 0
    for r in range(R):
        node, first = r // GPUS, r // GPUS * GPUS
        want = int(sum(handles[r].recv_chan[m * GPUS, -1] for m in range(NODES)))
        line = (f"node {node} GPU {r}: the internode dispatch kernel timed out: channel 0, peer GPU {first}, block 0 "
                f"warp {NODES + 1} waited on the NVLink tail the peer's forwarder published: wanted {want}, "
                f"saw {want - 1}")
        named += line in text
        assert (line in text) == (f"node {node} GPU {r}:" in text), text
    assert named >= 1, text
    assert f"timeout_s = {bound} s" in text


@pytest.mark.slow
def test_bytes_per_scale_out_link_equal_what_ptxforge_plan_predicts_for_the_routing(tmp_path):
    ids = L.torus_routing(NODES, GPUS)
    tokens, k = ids.shape[1:]
    plan_d, plan_c = L.planned(tmp_path, ids, NODES, GPUS)
    cluster = Cluster(nodes=NODES, gpus_per_node=GPUS, sms=2)
    group = ClusterGroup(cluster, timeout_s=300)
    xs = [np.zeros((tokens, 2 * L.HIDDEN), np.uint8) for _ in range(R)]
    ws = [np.ones((tokens, k), np.float32) for _ in range(R)]
    outs = group.dispatch(xs, None, list(ids), ws, num_experts=E, num_sms=2)
    dispatch_links = group.traffic[-1]
    ys = [np.zeros((o.recv_x.shape[0], L.HIDDEN), BF16) for o in outs]
    group.combine(ys, [o.handle for o in outs], [o.recv_w for o in outs])
    combine_links = group.traffic[-1]
    d_slot = L.slots(GPUS)[0]
    for r in range(R):  # each token crosses the scale-out link once per remote node it reaches: one slot each
        node_hit = outs[r].handle.is_token_in_rank.reshape(tokens, NODES, GPUS).any(-1)
        remote = int(np.delete(node_hit, r // GPUS, axis=1).sum())
        rdma = [t for t in dispatch_links.links if t.src == r and t.kind == "rdma"]
        signals = sum(t.messages for t in rdma) - remote  # one message per slot put, the rest tails and heads
        assert sum(t.bytes for t in rdma) == remote * d_slot + 8 * signals
    for r in range(R):  # the NVLink stores are plain peer stores: measured by the Buffer world's test
        for links, plan in ((dispatch_links, plan_d), (combine_links, plan_c)):
            L.assert_as_planned(r, {"rdma": sum(t.bytes for t in links.links if t.src == r and t.kind == "rdma")},
                                plan)


def test_a_timeout_record_is_claimed_filled_then_published_so_a_half_written_one_is_never_read():
    """Two ranks' waits can time out together; the first trap stops the cluster, possibly while the second
    fills its record. The record's first word says "claimed" until every field is stored, then the kernel's
    word is stored last (release), and the host skips a claimed record instead of printing its zeros."""
    import re

    from ptxforge.ep.internode_cluster import _special
    from ptxforge.kernels import internode_layout as L
    from ptxforge.kernels.internode_dispatch import internode_dispatch

    half = [L.TIMEOUT_CLAIMED, 0, 0, 0, 0, 0, 0, 0, 0, 0]
    assert len(half) == L.TIMEOUT_WORDS and L.describe_timeout(half) is None
    whole = [L.KERNELS.index("dispatch") + 1, L.ROLES.index("nvl_receiver"), 0, 0, 0, 0, 0, 3, 20, 19]
    assert "block 0 warp 3" in L.describe_timeout(whole) and "wanted 20, saw 19" in L.describe_timeout(whole)
    k = _special(internode_dispatch, N=NODES, G=GPUS, UNIT=16, HAS_SCALES=False, HAS_TOPK=True, HAS_W=True, BUG="")
    lines = k.ptx().splitlines()
    claimed = f"0, {L.TIMEOUT_CLAIMED};"
    claim = next(i for i, s in enumerate(lines) if "atom.global.cas.b32" in s and s.endswith(claimed))
    record = re.search(r"\[(%rd\d+)\]", lines[claim]).group(1)
    stores = [i for i, s in enumerate(lines) if f"[{record}" in s and s.lstrip().startswith("st.")]
    printed = next(i for i in range(claim, len(lines)) if "vprintf" in lines[i])
    assert len(stores) == L.TIMEOUT_WORDS  # the role and the 8 fields, then the kernel's word
    assert f"st.release.sys.global.u32 \t[{record}]," in lines[stores[-1]] and stores[-1] < printed
    assert all(f"[{record}+" in lines[i] for i in stores[:-1]) and claim < stores[0]
