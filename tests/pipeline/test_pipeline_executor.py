"""The executor on real gloo processes against a single-process reference (DeepSeek's own acceptance check,
with float64): DualPipe on 2, 4 and 8 ranks, DualPipeV on 1 to 4 ranks, plus 1F1B and ZB1P baselines.

One 8-process world runs every scenario (tests/pipeline/pipeline_world.py); each test reads its reports. The
ranks are forked from the test process (start="fork": torch is imported once, not once per rank, which was
most of this file's minute); test_pipeline_launch.py keeps the default, spawned start under test.
"""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")

import pipeline_world  # noqa: E402  (tests/pipeline is on sys.path under pytest)

from ptxforge.pipeline.launch import spawn  # noqa: E402

WORLD = 8


@pytest.fixture(scope="module")
def reports():
    per_rank = spawn(pipeline_world.run_all, WORLD, timeout=240, start="fork")
    by_scenario: dict[int, list[dict]] = {}
    for reps in per_rank:
        for rep in reps:
            by_scenario.setdefault(rep["scenario"], []).append(rep)
    return by_scenario


IDS = [f"{k}-{len(r)}ranks-{c}chunks-{cls.__name__}{'-mapped' if m else ''}{'-batchdim1' if bd else ''}-"
       f"{str(dt).split('.')[-1]}" for k, r, c, cls, m, bd, dt in pipeline_world.SCENARIOS]


@pytest.mark.parametrize("idx", range(len(pipeline_world.SCENARIOS)), ids=IDS)
def test_scenario_matches_reference(reports, idx):
    kind, ranks, chunks, cls, *_ = pipeline_world.SCENARIOS[idx]
    reps = reports[idx]
    assert len(reps) == len(ranks)
    for rep in reps:
        where = f"pp rank {rep['pp']}"
        assert rep["train_loss_equal"], f"{where}: losses not bit-equal to the reference"
        assert rep["train_outputs_none"], where
        # the issue asks for 1e-10; deepseek-ai/DualPipe's own check uses 1e-13, which holds too
        assert rep["grad_cos_diff"] <= 1e-13, f"{where}: gradient cosine difference {rep['grad_cos_diff']}"
        assert rep["train_outputs_equal"], f"{where}: outputs/loss with return_outputs=True differ"
        assert rep["infer_equal"], f"{where}: no-grad inference step differs"
        assert rep["infer_no_grads"], f"{where}: inference step produced gradients"
        assert rep["bad_chunks_error"], f"{where}: invalid micro-batch count was accepted"
        if kind in ("dualpipe", "zb1p"):
            assert rep["deferred_w"] > 0, f"{where}: no weight gradient was deferred"
    if cls is pipeline_world.OverlapStage and len(ranks) > 1:
        assert sum(rep["hook_calls"] for rep in reps) > 0, "overlapped_forward_backward was never called"
    if cls is pipeline_world.PlainStage:
        assert all(rep["hook_calls"] == 0 for rep in reps)


def test_world_sizes_cover_the_issue():
    dual = {len(r) for k, r, *_ in pipeline_world.SCENARIOS if k == "dualpipe"}
    dualv = {len(r) for k, r, *_ in pipeline_world.SCENARIOS if k == "dualpipev"}
    assert {2, 4, 8} <= dual and {1, 2, 3, 4} <= dualv


def test_drop_in_import_names():
    import inspect

    from ptxforge.pipeline import (  # noqa: F401
        DualPipe,
        DualPipeV,
        WeightGradStore,
        set_p2p_tensor_dtype,
        set_p2p_tensor_shapes,
    )

    sig = inspect.signature(DualPipe.__init__)
    positional = [n for n, p in sig.parameters.items() if p.kind is not p.KEYWORD_ONLY]
    assert positional == ["self", "modules", "batch_dim", "process_group", "rank_mapping"]  # DualPipe's own
    assert [n for n, p in sig.parameters.items() if p.kind is p.KEYWORD_ONLY] == ["timeout_s"]  # ours, by name
    step = inspect.signature(DualPipeV.step)
    assert {"num_chunks", "criterion", "labels", "return_outputs"} <= set(step.parameters)


def test_weight_grad_store_fifo():
    from ptxforge.pipeline import WeightGradStore

    WeightGradStore.clear()
    seen = []
    WeightGradStore.put(lambda: seen.append(1))
    WeightGradStore.flush()
    WeightGradStore.put(lambda: seen.append(2))
    WeightGradStore.put(lambda: seen.append(3))
    WeightGradStore.flush()
    WeightGradStore.pop()
    WeightGradStore.pop()
    assert seen == [1, 2, 3]
    with pytest.raises(RuntimeError, match="no deferred"):
        WeightGradStore.pop()
    WeightGradStore.clear()


def test_split_grad_linear_matches_nn_linear():
    from ptxforge.pipeline import WeightGradStore
    from ptxforge.pipeline.layers import SplitGradLinear

    torch.manual_seed(0)
    ref = torch.nn.Linear(5, 3).double()
    lin = SplitGradLinear(5, 3).double()
    lin.load_state_dict(ref.state_dict())
    x = torch.randn(4, 2, 5, dtype=torch.float64)
    ref(x).square().sum().backward()
    WeightGradStore.clear()
    WeightGradStore.enabled = True
    lin(x).square().sum().backward()
    WeightGradStore.enabled = False
    WeightGradStore.flush()
    assert lin.weight.grad is None and torch.allclose(lin.bias.grad, ref.bias.grad)
    WeightGradStore.pop()
    assert torch.allclose(lin.weight.grad, ref.weight.grad)
    WeightGradStore.clear()


def test_constructor_checks_the_stage_count():
    from ptxforge.pipeline import DualPipe, OneFOneB

    stage = torch.nn.Linear(2, 2)
    with pytest.raises(ValueError, match="takes 2 stage module"):
        DualPipe((stage,))
    # a single nn.Sequential is one stage for the one-stage-per-rank schedules, not a list of stages
    with pytest.raises(RuntimeError, match="not initialized"):
        OneFOneB(torch.nn.Sequential(stage, torch.nn.Linear(2, 2)))
