"""ptxforge.pipeline.trace: recording spans, the overlap fraction, the JSON file and the timeline picture."""

from __future__ import annotations

import json
import re
import threading
from xml.etree import ElementTree

import pytest

from ptxforge.pipeline.trace import (
    Recorder,
    TraceFileError,
    TraceSpan,
    comm_overlap,
    load_json,
    overlap_fraction,
    save_json,
    to_svg,
)


class FakeClock:
    """A clock the test advances by hand, so recorded times are exact."""

    def __init__(self) -> None:
        self.t = 0.0

    def __call__(self) -> float:
        return self.t


def S(rank, name, kind, a, b, mb=None, **attrs):
    return TraceSpan(rank, name, kind, a, b, mb, attrs)


def test_span_and_begin_end_record_exact_clock_values():
    clock = FakeClock()
    rec = Recorder(1, clock=clock)
    with rec.span("F", "compute", mb=2, chunk=0):
        clock.t = 1.5
        h = rec.begin("dispatch", "comm", mb=3, tokens=64)
        clock.t = 2.0
    clock.t = 4.25
    rec.end(h, bytes=1024)
    assert rec.spans == [S(1, "F", "compute", 0.0, 2.0, 2, chunk=0),
                         S(1, "dispatch", "comm", 1.5, 4.25, 3, tokens=64, bytes=1024)]
    assert rec.open_spans == []


def test_a_span_whose_body_raises_is_recorded_with_the_error():
    clock = FakeClock()
    rec = Recorder(0, clock=clock)
    with pytest.raises(KeyError), rec.span("B", "compute", mb=1):
        clock.t = 3.0
        raise KeyError("x")
    assert rec.spans == [S(0, "B", "compute", 0.0, 3.0, 1, error="KeyError")]


def test_ending_a_span_twice_names_it():
    rec = Recorder(0)
    h = rec.begin("combine", "comm")
    rec.end(h)
    with pytest.raises(ValueError, match=r"span 'combine' \(id 0\) was already ended"):
        rec.end(h)


def test_a_disabled_recorder_records_nothing():
    rec = Recorder(0, enabled=False)
    with rec.span("F", "compute"):
        pass
    rec.end(rec.begin("dispatch", "comm"))
    assert rec.spans == []


def test_spans_may_end_on_another_thread():
    rec = Recorder(0)
    handles = [rec.begin(f"c{i}", "comm", mb=i) for i in range(50)]
    threads = [threading.Thread(target=rec.end, args=(h,)) for h in handles]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=10)
    assert sorted(s.mb for s in rec.spans) == list(range(50)) and rec.open_spans == []


# --------------------------------------------------------------------------- overlap fraction

def test_overlap_fraction_is_exact_on_constructed_spans():
    spans = [
        # rank 0: comm 0-4 and 6-10 (8 s); compute 1-3 and 2-7 (nested/overlapping: union 1-7) covers 1-4, 6-7
        S(0, "dispatch", "comm", 0, 4), S(0, "combine", "comm", 6, 10),
        S(0, "F", "compute", 1, 3), S(0, "B", "compute", 2, 7),
        S(0, "wait", "wait", 4, 6),  # waiting is neither
        # rank 1: two comm spans overlapping each other (union 0-3), compute 2-5: covered 1 of 3
        S(1, "dispatch", "comm", 0, 2), S(1, "combine", "comm", 1, 3), S(1, "W", "compute", 2, 5),
        # compute on another rank covers nothing here
        S(2, "F", "compute", 0, 10),
    ]
    assert overlap_fraction(spans, 0) == pytest.approx(4 / 8, abs=1e-15)
    assert overlap_fraction(spans, 1) == pytest.approx(1 / 3, abs=1e-15)
    assert overlap_fraction(spans, 2) == 0.0  # no communication at all
    assert comm_overlap(spans) == (11.0, 5.0)
    assert overlap_fraction(spans) == pytest.approx(5 / 11, abs=1e-15)


def test_fully_hidden_and_fully_exposed_communication():
    assert overlap_fraction([S(0, "F", "compute", 0, 10), S(0, "dispatch", "comm", 2, 5)]) == 1.0
    assert overlap_fraction([S(0, "F", "compute", 0, 2), S(0, "dispatch", "comm", 2, 5)]) == 0.0


# --------------------------------------------------------------------------- JSON

def test_json_round_trip(tmp_path):
    spans = [S(0, "F", "compute", 0.001, 0.0025, 0, chunk=1, shape=[4, 8]),
             S(1, "dispatch", "comm", 0.0, 0.004, None, backend="torch", fp8=True)]
    path = tmp_path / "spans.json"
    save_json(spans, path)
    assert load_json(path) == spans
    assert json.loads(path.read_text())["format"] == "ptxforge-trace"


def test_attrs_that_are_not_json_are_kept_as_text(tmp_path):
    path = tmp_path / "s.json"
    save_json([S(0, "F", "compute", 0, 1, dtype=complex(1, 2))], path)
    assert load_json(path)[0].attrs == {"dtype": "(1+2j)"}


@pytest.mark.parametrize(("text", "message"), [
    ('{"spans": [', r"s\.json:1:\d+: not JSON"),
    ('[1, 2]', "not a ptxforge spans file"),
    ('{"format": "ptxforge-trace", "version": 9, "spans": []}', "spans file version 9"),
    ('{"format": "ptxforge-trace", "version": 1, "spans": [{"rank": 0, "name": "F", "kind": "compute", '
     '"start": 2, "end": 1}]}', r"spans\[0\]: end 1 is before start 2"),
    ('{"format": "ptxforge-trace", "version": 1, "spans": [{"rank": 0, "name": "F", "start": 0, "end": 1}]}',
     r"spans\[0\]: missing kind"),
])
def test_a_bad_spans_file_is_named_with_its_fault(tmp_path, text, message):
    path = tmp_path / "s.json"
    path.write_text(text)
    with pytest.raises(TraceFileError, match=message):
        load_json(path)


def test_a_missing_spans_file_is_named(tmp_path):
    with pytest.raises(TraceFileError, match=r"nope\.json: cannot read spans file"):
        load_json(tmp_path / "nope.json")


# --------------------------------------------------------------------------- the picture

def _rects(svg: str) -> list[dict[str, str]]:
    return [dict(re.findall(r'([\w-]+)="([^"]*)"', m)) for m in re.findall(r'<rect class="span"([^>]*)>', svg)]


def test_svg_has_one_row_per_rank_and_spans_in_their_lanes(tmp_path):
    spans = [S(0, "F", "compute", 0.000, 0.004, 0), S(0, "dispatch", "comm", 0.001, 0.003, 1),
             S(3, "B", "compute", 0.002, 0.008, 0), S(3, "combine", "comm", 0.006, 0.010, 0),
             S(3, "wait", "wait", 0.005, 0.006)]
    svg = to_svg(spans, tmp_path / "t.svg", caption=["predicted 9.0 ms   measured 10.0 ms"])
    assert (tmp_path / "t.svg").read_text() == svg
    ElementTree.fromstring(svg)  # well-formed XML
    assert re.findall(r'<g class="rank" data-rank="(\d+)">', svg) == ["0", "3"]
    rects = _rects(svg)
    assert [(r["data-rank"], r["data-kind"], r["data-lane"]) for r in rects] == [
        ("0", "compute", "0"), ("0", "comm", "1"), ("3", "compute", "0"), ("3", "wait", "1"), ("3", "comm", "1")]
    # x positions follow time (1100 px over 10 ms, after a 92 px label column); rank 3's rows sit lower
    xs = [float(r["x"]) for r in rects]
    assert xs == pytest.approx([92.0, 92 + 110, 92 + 220, 92 + 550, 92 + 660])
    assert [float(r["width"]) for r in rects] == pytest.approx([440, 220, 660, 110, 440])
    ys = {(r["data-rank"], r["data-lane"]): float(r["y"]) for r in rects}
    assert ys[("0", "0")] < ys[("0", "1")] < ys[("3", "0")] < ys[("3", "1")]
    # the overlap strip: rank 0 overlapped 1-3 ms; rank 3 overlapped 6-8 ms; each row's share at its end
    strips = re.findall(r'<rect class="overlap" data-rank="(\d+)" x="([\d.]+)" y="[\d.]+" width="([\d.]+)"', svg)
    assert [(r, float(x), float(w)) for r, x, w in strips] == [("0", 202.0, 220.0), ("3", 752.0, 220.0)]
    assert ">100%</text>" in svg and ">50%</text>" in svg
    assert "predicted 9.0 ms   measured 10.0 ms" in svg and "Dispatch" in svg and "Combine" in svg


def test_svg_nests_spans_splits_fb_chunks_and_marks_steps():
    spans = [S(0, "step", "step", 0.0, 0.010, step=4), S(0, "F", "chunk", 0.0, 0.004, 1),
             S(0, "attention", "compute", 0.0, 0.002, 1), S(0, "FB", "chunk", 0.005, 0.009, 2)]
    svg = to_svg(spans)
    rects = {r["data-name"]: r for r in _rects(svg)}
    assert set(rects) == {"F", "attention", "FB"}  # the step is a boundary, not a cell
    assert float(rects["attention"]["y"]) > float(rects["F"]["y"])  # the child sits in its parent's lower band
    assert float(rects["attention"]["height"]) < float(rects["F"]["height"])
    assert 'fill-opacity="0.35"' in svg  # the F envelope, which has a span inside, is tinted
    # FB without children: an orange half and a green half (DualPipe's figure), each 220 px of the 440
    halves = re.findall(r'<rect x="([\d.]+)" y="[\d.]+" width="([\d.]+)" height="[\d.]+" fill="(#F4B13E|#7AD151)"/>',
                        svg)
    assert (f"{92 + 550:.2f}", "220.00", "#F4B13E") in halves and (f"{92 + 770:.2f}", "220.00", "#7AD151") in halves
    assert '<line class="step"' in svg and ">step 4</text>" in svg


def test_png_is_written(tmp_path):
    pytest.importorskip("matplotlib")
    from ptxforge.pipeline.trace import to_png

    to_png([S(0, "F", "compute", 0, 0.002, 0), S(0, "dispatch", "comm", 0.001, 0.003, 0)], tmp_path / "t.png")
    assert (tmp_path / "t.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


# --------------------------------------------------------------------------- real ranks

def _two_ranks(rank: int, world: int):
    import time

    import torch
    import torch.distributed as dist

    from ptxforge.pipeline.trace import gather_spans

    rec = Recorder(rank)
    dist.barrier()
    send = torch.full((world, 4), float(rank))
    recv = torch.empty_like(send)
    for mb in range(2):
        h = rec.begin("dispatch", "comm", mb=mb)
        work = dist.all_to_all_single(recv, send, async_op=True)
        with rec.span("F", "compute", mb=mb):
            time.sleep(0.02)
        work.wait()
        rec.end(h)
    return gather_spans(rec), recv[:, 0].tolist()


def test_gather_spans_collects_every_rank_on_rank_0_on_one_time_base():
    pytest.importorskip("torch")
    from ptxforge.pipeline.launch import spawn

    (spans, recv0), (none, recv1) = spawn(_two_ranks, 2, start="fork", timeout=120)
    assert none is None and recv0 == recv1 == [0.0, 1.0]
    assert sorted({s.rank for s in spans}) == [0, 1] and len(spans) == 8
    assert min(s.start for s in spans) == 0.0
    for r in (0, 1):
        mine = [s for s in spans if s.rank == r]
        # both ranks began right after the same barrier: their first span starts near 0 on the common clock
        assert min(s.start for s in mine) < 0.05
        assert all(s.duration >= 0.02 for s in mine if s.name == "F")
        # each dispatch was issued before its forward and waited for after it: the forwards are what covered it
        total, covered = comm_overlap(mine)
        assert covered == pytest.approx(sum(s.duration for s in mine if s.name == "F"), rel=1e-12)
        assert total >= covered > 0.5 * total


def test_waiting_inside_a_compute_span_does_not_hide_communication():
    spans = [S(0, "F", "compute", 0, 10), S(0, "dispatch", "comm", 2, 8), S(0, "wait", "wait", 5, 8)]
    assert overlap_fraction(spans) == pytest.approx(3 / 6, abs=1e-15)  # 2-5 hidden, 5-8 waited for


def test_chunk_envelopes_are_not_computation():
    spans = [S(0, "F", "chunk", 0, 10, 0), S(0, "attention", "compute", 0, 3, 0), S(0, "dispatch", "comm", 3, 6, 1)]
    assert overlap_fraction(spans) == 0.0


@pytest.mark.parametrize(("span", "cat"), [
    (S(0, "F", "chunk", 0, 1), "forward"), (S(0, "forward.layer3", "compute", 0, 1), "forward"),
    (S(0, "B", "chunk", 0, 1), "backward"), (S(0, "W", "chunk", 0, 1), "weight"), (S(0, "FB", "chunk", 0, 1), "fb"),
    (S(0, "attention.backward", "compute", 0, 1), "backward"),
    (S(0, "mlp", "compute", 0, 1, phase="bwd"), "backward"), (S(0, "mlp", "compute", 0, 1), "compute"),
    (S(0, "dispatch", "comm", 0, 1), "dispatch"), (S(0, "low_latency_combine", "comm", 0, 1), "combine"),
    (S(0, "recv", "comm", 0, 1), "p2p"), (S(0, "allreduce", "comm", 0, 1), "comm"), (S(0, "x", "wait", 0, 1), "wait"),
])
def test_category_reads_kind_name_and_phase(span, cat):
    from ptxforge.pipeline.trace import category

    assert category(span) == cat


def test_meta_round_trips(tmp_path):
    from ptxforge.pipeline.trace import load_trace

    save_json([S(0, "F", "chunk", 0, 1, 0)], tmp_path / "s.json", meta={"schedule": "dualpipev", "pp": 2})
    spans, meta = load_trace(tmp_path / "s.json")
    assert meta == {"schedule": "dualpipev", "pp": 2} and spans == [S(0, "F", "chunk", 0, 1, 0)]


def test_svg_escapes_names_and_captions():
    svg = to_svg([S(0, 'x<y & "z"', "compute", 0, 1, 0), S(0, "f&b", "comm", 0, 1)], title="a < b",
                 caption=["step <1 ms> & more"])
    root = ElementTree.fromstring(svg)
    texts = ["".join(t.itertext()) for t in root.iter("{http://www.w3.org/2000/svg}text")]
    assert "a < b" in texts and "step <1 ms> & more" in texts


def _subgroup(rank: int, world: int):
    import torch.distributed as dist

    from ptxforge.pipeline.trace import gather_spans

    group = dist.new_group([1, 2])  # every rank creates it; only its members gather
    rec = Recorder(rank)
    with rec.span("F", "compute", mb=rank):
        pass
    out = gather_spans(rec, group) if rank in (1, 2) else "not a member"
    dist.barrier()  # rank 0 holds the store the subgroup's members connect through: it must not leave first
    return out


def test_gather_spans_over_a_subgroup_collects_on_its_first_member():
    pytest.importorskip("torch")
    from ptxforge.pipeline.launch import spawn

    out = spawn(_subgroup, 3, start="fork", timeout=120)
    assert out[0] == "not a member" and out[2] is None
    assert [(s.rank, s.mb) for s in out[1]] == [(1, 1), (2, 2)]
