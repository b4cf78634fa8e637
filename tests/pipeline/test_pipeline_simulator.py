"""The simulator against DeepSeek's table (REFERENCE.md), where it is exact and where it is an approximation,
and the timeline pictures."""

from __future__ import annotations

import xml.etree.ElementTree as ET

import pytest

from ptxforge.pipeline import Costs, build_schedule, compare, formula_row, simulate
from ptxforge.pipeline.engine import run
from ptxforge.pipeline.simulator import APPROXIMATIONS, format_compare
from ptxforge.pipeline.timeline import to_png, to_svg

PPS = (4, 8, 16)
# costs (F, B, W, F&B); B is the full backward. All have F = B - W, the DualPipe figure's assumption.
EXACT_COSTS = [Costs(1, 2, 1, 3), Costs(1, 2, 1, 2.5), Costs(2, 3, 1, 5), Costs(2, 3, 1, 4), Costs(3, 4, 1, 7),
               Costs(1, 1, 0, 2), Costs(1.5, 2, 0.5, 3)]


def _chunk_counts(pp):
    return (2 * pp, 3 * pp + 2)


@pytest.mark.parametrize("pp", PPS)
@pytest.mark.parametrize("costs", [*EXACT_COSTS, Costs(1, 3, 1), Costs(2, 2, 1), Costs(1, 4, 2), Costs(3, 3, 1)],
                         ids=str)
def test_1f1b_row_exact(pp, costs):
    for n in _chunk_counts(pp):
        res = simulate("1f1b", pp, n, costs)
        f = formula_row("1f1b", pp, costs)
        assert res.bubble == [pytest.approx(f.bubble)] * pp  # every rank idles (PP-1)(F+B)
        assert max(res.peak_activation) == f.activation_memory == pp
        assert max(res.param_memory) == f.param_memory == 1


@pytest.mark.parametrize("pp", PPS)
@pytest.mark.parametrize("costs", [c for c in EXACT_COSTS if c.W <= c.F] + [Costs(1, 3, 1), Costs(2, 2, 1)],
                         ids=str)
def test_zb1p_row_exact_when_w_fits(pp, costs):
    for n in _chunk_counts(pp):
        res = simulate("zb1p", pp, n, costs)
        f = formula_row("zb1p", pp, costs)
        assert res.max_bubble == pytest.approx(f.bubble)
        assert max(res.peak_activation) == f.activation_memory == pp
        assert max(res.param_memory) == f.param_memory == 1


@pytest.mark.parametrize("pp", PPS)
def test_zb1p_row_is_approximate_when_w_exceeds_f(pp):
    costs = Costs(1, 4, 2)  # W > F: W no longer fits the gaps
    res = simulate("zb1p", pp, 3 * pp, costs)
    assert res.max_bubble > formula_row("zb1p", pp, costs).bubble
    assert res.max_bubble == pytest.approx((pp - 1) * (costs.F + costs.B - costs.W - min(costs.F, costs.W)))
    assert "W <= F" in APPROXIMATIONS["zb1p"]


@pytest.mark.parametrize("name", ["dualpipe", "dualpipev"])
@pytest.mark.parametrize("pp", PPS)
@pytest.mark.parametrize("costs", EXACT_COSTS, ids=str)
def test_dualpipe_rows_exact_when_f_equals_b_input(name, pp, costs):
    for n in _chunk_counts(pp):
        res = simulate(name, pp, n, costs)
        f = formula_row(name, pp, costs)
        assert res.schedule.num_ranks == f.devices == (pp if name == "dualpipe" else pp // 2)
        assert res.max_bubble == pytest.approx(f.bubble), (n, res.bubble)
        if costs.fb == costs.F + costs.B:
            assert min(res.bubble) == pytest.approx(f.bubble)  # all ranks equal without overlap gain
        assert max(res.peak_activation) == f.activation_memory == pp + 1
        assert max(res.param_memory) == f.param_memory == 2


@pytest.mark.parametrize("name", ["dualpipe", "dualpipev"])
@pytest.mark.parametrize("pp", PPS)
def test_dualpipe_rows_approximate_otherwise(name, pp):
    slow_f = Costs(3, 3, 1)  # F > B - W, no overlap gain: larger by (PP/2)(F - (B - W))
    res = simulate(name, pp, 3 * pp, slow_f)
    assert res.max_bubble - formula_row(name, pp, slow_f).bubble == pytest.approx(pp / 2 * (3 - 2))
    fast_f = Costs(1, 3, 1)  # F < B - W: the schedule beats the formula
    res = simulate(name, pp, 3 * pp, fast_f)
    assert res.max_bubble < formula_row(name, pp, fast_f).bubble


def test_p2p_latency_adds_bubble():
    for name in ("1f1b", "zb1p", "dualpipe"):
        base = simulate(name, 8, 16, Costs(1, 2, 1, 3))
        slow = simulate(name, 8, 16, Costs(1, 2, 1, 3, p2p=0.25))
        assert slow.makespan > base.makespan


def test_dualpipe_beats_the_others_at_equal_stages():
    rows = {r.schedule: r for r in compare(8, 20, Costs(1, 2, 1, 3))}
    assert rows["DualPipe"].bubble < rows["ZB1P"].bubble < rows["1F1B"].bubble
    assert rows["DualPipeV"].devices == 4
    text = format_compare(list(rows.values()))
    assert "DualPipeV" in text and "formula" in text.splitlines()[0]


def test_w_holding_activation_keeps_zb1p_at_pp():
    res = run(build_schedule("zb1p", 8, 24), Costs(), w_holds_activation=True)
    assert max(res.peak_activation) == 8


def test_costs_validation():
    with pytest.raises(ValueError, match="cannot exceed"):
        Costs(1, 1, 2)
    with pytest.raises(ValueError, match=">= 0"):
        Costs(-1, 2, 1)


def test_svg_timeline_has_one_cell_per_piece(tmp_path):
    res = simulate("dualpipe", 8, 20, Costs(1, 2, 1, 3))
    path = tmp_path / "t.svg"
    text = to_svg(res, path)
    root = ET.fromstring(path.read_text())
    assert text == path.read_text()
    rects = root.findall("{http://www.w3.org/2000/svg}rect")
    pieces = sum(2 if sp.op.kind == "FB" else 1 for sp in res.spans)
    # background + one frame per device row + colored pieces + one border per op + 5 legend entries (FB has 3)
    assert len(rects) == 1 + 8 + pieces + len(res.spans) + 4 + 3
    labels = [t.text for t in root.findall("{http://www.w3.org/2000/svg}text")]
    assert "Device 7" in labels and "Forward" in labels and "Overlapped forward &amp; backward" not in labels


def test_png_timeline(tmp_path):
    pytest.importorskip("matplotlib")
    res = simulate("dualpipev", 8, 10, Costs(1, 2, 1, 3))
    path = tmp_path / "t.png"
    to_png(res, path)
    data = path.read_bytes()
    assert data[:8] == b"\x89PNG\r\n\x1a\n" and len(data) > 10_000
