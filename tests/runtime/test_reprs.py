"""Short reprs for launch results, modules and pipeline results; pictures for notebooks."""

import numpy as np

import ptxforge as pf


def test_launch_result_repr_is_short_and_shows_per_sm_counts():
    k = pf.parse_file(pf.example_path("vadd.ptx")).kernel("vadd")
    a = np.ones(100_000, np.float32)
    c = np.zeros_like(a)
    res = k.launch(grid=(391,), block=(256,), args=[a, a, c, np.int32(a.size)], device="emu")
    assert len(repr(res)) < 300, repr(res)
    assert "132 of 132 SMs busy" in str(res) and "thread-instructions each" in str(res)
    html = res._repr_html_()
    assert html.count("<rect") == 132 and "<svg" in html


def test_module_and_function_reprs_are_short():
    m = pf.parse_file(pf.example_path("demo.sm_90a.ptx"))
    assert len(repr(m)) < 300 and repr(m).startswith("<Module ") and "kernels" in repr(m)
    assert repr(m.kernels[0]).startswith("<Function .entry ")


def test_pipeline_result_shows_its_timeline():
    from ptxforge.pipeline import Costs, simulate

    r = simulate("dualpipe", pp=4, num_chunks=8, costs=Costs(F=1, B=2, W=1, FB=3))
    assert repr(r).startswith("<SimResult ") and "bubble" in repr(r) and len(repr(r)) < 200
    assert r._repr_html_().startswith("<svg")
    png = r._repr_png_()
    assert png is None or png[:8] == b"\x89PNG\r\n\x1a\n"
