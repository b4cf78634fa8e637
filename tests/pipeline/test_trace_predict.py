"""The planner on measured runs (ptxforge.plan.measured, `ptxforge plan --measured`): per-op costs from spans,
the predicted step and overlap, exact on constructed spans and within a stated tolerance on real gloo runs."""

from __future__ import annotations

import json
import re

import pytest

from ptxforge.cli.main import main
from ptxforge.pipeline.trace import TraceSpan, overlap_fraction, save_json
from ptxforge.plan.measured import measured_costs, planner_fb, planner_overlap, predict


def S(rank, name, kind, a, b, mb=None, **attrs):
    return TraceSpan(rank, name, kind, a, b, mb, attrs)


def constructed() -> list[TraceSpan]:
    """One rank: F (attention 4, synchronous dispatch 2, experts 2, synchronous combine 2), a full B of 20, a W
    of 5, an FB whose two computations of 10 each hide a dispatch of 4 and a combine of 6; 1 idle between."""
    return [
        S(0, "F", "chunk", 0, 10, 0), S(0, "attention", "compute", 0, 4, 0), S(0, "dispatch", "comm", 4, 6, 0),
        S(0, "experts", "compute", 6, 8, 0), S(0, "combine", "comm", 8, 10, 0),
        S(0, "B", "chunk", 11, 31, 0, zb=False),
        S(0, "W", "chunk", 32, 37, 0),
        S(0, "FB", "chunk", 38, 58, 1), S(0, "attention", "compute", 38, 48, 1), S(0, "dispatch", "comm", 40, 44, 1),
        S(0, "experts.backward", "compute", 48, 58, 0), S(0, "combine", "comm", 50, 56, 1),
    ]


def test_measured_costs_are_exact_on_constructed_spans():
    mc = measured_costs(constructed())
    f, b, w, fb = (mc.ops[k] for k in ("F", "B", "W", "FB"))
    assert (f.count, f.duration, f.comm, f.exposed, f.compute) == (1, 10, 4, 4, 6)
    assert (f.dispatch_calls, f.combine_calls) == (1, 1)
    assert (b.duration, b.comm, w.duration) == (20, 0, 5)
    assert (fb.duration, fb.comm, fb.exposed, fb.compute) == (20, 10, 0, 20)
    assert mc.gap == 1 and mc.step == 58 and mc.steps == 1
    assert (mc.dispatch, mc.combine, mc.dispatch_count) == (3, 4, 2)  # medians per call: (2, 4), (2, 6)
    c = mc.costs()
    assert (c.F, c.B, c.W, c.FB) == (11, 21, 6, 21)  # each op plus the gap a rank idles before it


def test_prediction_is_exact_on_constructed_spans():
    mc = measured_costs(constructed())
    assert planner_fb(mc) == 26  # max(compute 6 + 20, comm 4 + 0)
    pred = predict(mc, "dualpipev", pp=1, num_chunks=2)
    # DualPipeV on one rank: F F F B FB B Bzb W, each op + 1 of gap; Bzb = B - W
    assert pred.step_measured_fb == 3 * 11 + 21 + 21 + 21 + (21 - 6) + 6 == 117
    assert pred.step_planner == 117 - 21 + 27 and pred.step_serial == 117 - 21 + 31
    # 3 F chunks expose 4 each; the FB chunk hides its 4 (the planner counts F's and B's communication)
    assert pred.overlap_planner == pytest.approx(4 / 16, abs=1e-15)
    assert planner_overlap(mc, {"F": 1, "FB": 1}) == 0.5


def test_backward_for_input_only_adds_w_for_the_full_backward():
    spans = [S(0, "F", "chunk", 0, 10, 0), S(0, "B", "chunk", 10, 18, 0, zb=True), S(0, "W", "chunk", 18, 24, 0)]
    mc = measured_costs(spans)
    assert set(mc.ops) == {"F", "Bin", "W"} and mc.backward_full == 14 and mc.costs().B == 14


def test_warmup_steps_are_left_out():
    spans = [S(0, "step", "step", 0, 100, step=0), S(0, "F", "chunk", 0, 90, 0, step=0),
             S(0, "step", "step", 100, 120, step=1), S(0, "F", "chunk", 100, 110, 0, step=1)]
    assert measured_costs(spans).ops["F"].duration == 50
    mc = measured_costs(spans, warmup_steps=1)
    assert mc.ops["F"].duration == 10 and mc.step == 20 and mc.steps == 1


def test_pieces_with_a_phase_are_not_chunks_but_their_envelopes_are():
    """A model that times its pieces (attention, experts ...) with attrs phase=forward/backward: without chunk
    envelopes there are no per-op costs (and the report says how to record them); with the executor's op
    spans added, the pieces and the communication fall inside them."""
    from ptxforge.pipeline.ops import Op
    from ptxforge.pipeline.trace import Recorder, executor_spans

    pieces = [S(0, "attention", "compute", 0, 3, 0, phase="forward"), S(0, "dispatch", "comm", 3, 5, 0),
              S(0, "experts", "compute", 5, 8, 0, phase="forward"),
              S(0, "experts backward", "compute", 9, 15, 0, phase="backward")]
    mc = measured_costs(pieces)
    assert mc.ops == {} and "no chunk spans" in mc.notes[0] and "executor_spans" in mc.notes[0]
    rec = Recorder(0)
    rec.add(pieces)
    rec.add(executor_spans([(Op("F", 0, 0), 0.0, 8.0, 7.5), (Op("B", 0, 0), 9.0, 15.0, 6.0)], 0, step=1))
    mc = measured_costs(rec.spans)
    assert (mc.ops["F"].duration, mc.ops["F"].comm, mc.ops["F"].compute) == (8, 2, 6)
    assert mc.ops["B"].duration == 6 and mc.gap == 1
    assert [s.attrs["step"] for s in rec.spans if s.kind == "chunk"] == [1, 1]
    with pytest.raises(TypeError, match="Recorder.add takes TraceSpan objects, got tuple"):
        rec.add([(0, 1)])


def test_nothing_to_predict_from_is_said():
    with pytest.raises(ValueError, match="no forward chunk"):
        predict(measured_costs([S(0, "dispatch", "comm", 0, 1)]), "dualpipev", 1, 2)


# --------------------------------------------------------------------------- the command line

def test_plan_measured_prints_predicted_beside_measured(tmp_path, capsys):
    path = tmp_path / "spans.json"
    save_json(constructed(), path, meta={"schedule": "dualpipev", "pp": 1, "num_chunks": 2})
    svg = tmp_path / "t.svg"
    assert main(["plan", "--measured", str(path), "--svg", str(svg)]) == 0
    out = capsys.readouterr().out
    assert re.search(r"F\s+1\s+10000\.00\s+6000\.00\s+4000\.00\s+4000\.00", out)  # ms
    assert re.search(r"step \(ms\), FB as measured\s+117000\.00\s+58000\.00\s+\+101\.7%", out)
    assert re.search(r"overlap fraction\s+25%\s+71%", out)  # measured: the FB hid its 10 of the 14 in all
    text = svg.read_text()
    assert "planner predicts 25%, measured 71%" in text and text.count('<g class="rank"') == 1
    assert main(["plan", "--measured", str(path), "--json", "--pp", "1", "--micro-batches", "4"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert doc["prediction"]["num_chunks"] == 4 and doc["ops"]["FB"]["comm_s"] == 10
    assert doc["measured_overlap"] == pytest.approx(overlap_fraction(constructed()))


def test_plan_measured_without_sizes_reports_costs_and_says_what_is_missing(tmp_path, capsys):
    path = tmp_path / "spans.json"
    save_json(constructed(), path)
    assert main(["plan", "--measured", str(path)]) == 0
    out = capsys.readouterr().out
    assert "measured per-op costs" in out and "no prediction: give --pp and --micro-batches" in out


@pytest.mark.parametrize(("argv", "meta", "needle"), [
    (["--pp", "2", "--micro-batches", "2"], {}, "spans.json: dualpipev with 2 pipeline ranks and 2 micro-batches: "
                                                "[dualpipev:micro-batches>=2*ranks] DualPipeV needs at least 2*ranks "
                                                "= 4 micro-batches, got 2"),
    ([], {"pp": "two", "num_chunks": 4}, "meta pp must be an integer, got 'two' (or give --pp)"),
    (["--warmup-steps", "-1"], {}, "--warmup-steps must be >= 0"),
])
def test_plan_measured_errors_name_the_problem(tmp_path, capsys, argv, meta, needle):
    path = tmp_path / "spans.json"
    save_json(constructed(), path, meta=meta)
    assert main(["plan", "--measured", str(path), *argv]) == 1
    err = capsys.readouterr().err
    assert needle in err and "Traceback" not in err


def test_plan_measured_bad_files(tmp_path, capsys):
    assert main(["plan", "--measured", str(tmp_path / "none.json")]) == 1
    assert "none.json: cannot read spans file" in capsys.readouterr().err
    path = tmp_path / "spans.json"
    save_json(constructed(), path)
    assert main(["plan", "--measured", str(path), "--svg", str(path)]) == 1  # would destroy the input
    assert "is the same file as --measured" in capsys.readouterr().err
    assert main(["plan", "--svg", str(tmp_path / "x.svg")]) == 1
    assert "--svg goes with --measured SPANS.json" in capsys.readouterr().err


def test_the_measured_step_without_step_spans_is_said_how_it_was_taken(tmp_path, capsys):
    spans = [S(0, "F", "chunk", 0, 10, 0), S(0, "F", "chunk", 30, 40, 0)]
    mc = measured_costs(spans, steps=2)
    assert mc.step == 20 and mc.steps == 2 and "the extent of all spans / 2 steps" in mc.notes[-1]
    by_attr = [S(0, "F", "chunk", 0, 10, 0, step=1), S(1, "F", "chunk", 2, 14, 0, step=1),
               S(0, "F", "chunk", 30, 40, 0, step=2)]
    mc = measured_costs(by_attr)
    assert (mc.step, mc.steps) == (12, 2) and "from its spans' first start to last end" in mc.notes[-1]
    path = tmp_path / "s.json"
    save_json(spans, path, meta={"steps": 2})
    assert main(["plan", "--measured", str(path)]) == 0
    assert "note: measured step: the extent of all spans / 2 steps" in capsys.readouterr().out


def test_replay_simulates_each_step_with_its_own_op_times_and_sums_the_waits():
    """Two EP slices of a 1F1B pipeline (pp 2): slice 0's ops are fast, slice 1's three times slower in step 1
    and the other way round in step 2. Means per op kind predict a step between the two; the replay simulates
    each step's slices with their own times and takes the slower, as the run's step does. Waits: a p2p wait
    span carries its step, an EP wait span is counted in the step span around it."""
    from ptxforge.pipeline.engine import Costs, run
    from ptxforge.pipeline.schedules import one_f_one_b
    from ptxforge.plan.measured import replay

    sched = one_f_one_b(2, 2)
    spans = []
    for step in (1, 2):
        end = 0.0
        for ep_rank in (0, 1):
            slow = 3.0 if (ep_rank == 1) == (step == 1) else 1.0
            res = run(sched, Costs(F=slow, B=2 * slow, W=0))
            for sp in res.spans:
                rank = sp.rank * 2 + ep_rank  # global rank: pipeline rank * ep + EP rank
                spans.append(S(rank, sp.op.kind, "chunk", 100 * step + sp.start, 100 * step + sp.end, sp.op.mb,
                               module=sp.op.module, zb=False, step=step))
            end = max(end, res.makespan)
        for rank in range(4):
            spans.append(S(rank, "step", "step", 100 * step, 100 * step + end, step=step))
            spans.append(S(rank, "p2p wait", "wait", 100 * step, 100 * step + 0.5, step=step))
            spans.append(S(rank, "dispatch 0 wait", "wait", 100 * step + 1, 100 * step + 1.25))
    mc = measured_costs(spans)
    rp = replay(spans, mc, "1f1b", 2, 2, ep=2)
    g = mc.gap
    expected = run(sched, Costs(F=3 + g, B=6 + g, W=0)).makespan
    assert rp is not None and rp.steps == [expected, expected] and rp.step == expected
    assert predict(mc, "1f1b", 2, 2).step < 0.8 * rp.step  # the means: every op at 2 and 4
    assert (rp.p2p_wait, rp.ep_wait) == (0.5, 0.25)
    fast, slow_res = (run(sched, Costs(F=f + g, B=2 * f + g, W=0)) for f in (1, 3))
    idle = [r.makespan - b for r in (fast, slow_res) for b in r.busy]
    assert rp.p2p_wait_replayed == pytest.approx(sum(idle) / len(idle))
