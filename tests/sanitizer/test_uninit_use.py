"""Uninitialized reads reported where the value is used (memcheck's rule), and `eager=True` at the load."""

from __future__ import annotations

import numpy as np
import pytest
from test_sync_order import cu_line, run

rng = np.random.default_rng(2)


def f32(n):
    return rng.standard_normal(n).astype(np.float32)


def uninit(err):
    assert err is not None, "the sanitizer found nothing"
    hits = [r for r in err.reports if r.kind == "uninitialized"]
    assert hits, str(err)
    return hits


def test_an_undefined_value_that_is_never_used_is_clean():
    """Like DeepGEMM's unused scale: loaded from uninitialized shared memory, selected away."""
    x, out = f32(64), np.zeros(64, np.float32)
    assert run("uninit_unused", (1,), (64,), [x, out, np.zeros(1, np.int32)]) is None
    np.testing.assert_array_equal(out, np.tile(x[:32], 2))


def test_eager_reports_at_the_load():
    from ptxforge.emu.sanitizer import Sanitizer

    err = run("uninit_unused", (1,), (64,), [f32(64), np.zeros(64, np.float32), np.zeros(1, np.int32)],
              sanitize=Sanitizer(eager=True))
    r = uninit(err)[0]
    assert r.instruction.startswith("ld.shared") and r.thread == (32, 0, 0) and r.count == 32
    assert "use" not in r.other


def test_copying_an_undefined_value_back_is_clean():
    x, out = f32(64), np.zeros(64, np.float32)
    assert run("uninit_store_back", (1,), (64,), [x, out]) is None
    np.testing.assert_array_equal(out[:32], x[:32])


@pytest.mark.parametrize(("name", "use", "marker", "prefix"), [
    ("uninit_used", "store", "REPORT: the undefined value reaches global", "st.global"),
    ("uninit_branch", "branch", "REPORT: the undefined value decides", "@"),
    ("uninit_address", "address", "REPORT: the undefined value is an address", "ld.global"),
    ("uninit_shfl", "collective", "REPORT: the undefined value enters", "shfl.sync"),
])
def test_uses_of_an_undefined_value(name, use, marker, prefix):
    err = run(name, (1,), (64,), [f32(64), np.zeros(64, np.float32)])
    r = uninit(err)[0]
    assert r.other["use"] == use, str(err)
    assert r.thread == (32, 0, 0) and r.space == "shared" and r.address == 128 and r.count == 32
    assert r.instruction.startswith(prefix) or (prefix == "@" and "bra" in r.instruction), r.instruction
    assert r.source.split(" ")[0].endswith(f"sync_san.cu:{cu_line(marker)}")
    assert r.other["instruction"].startswith("ld.shared") and "used as" in r.message
    assert "Uninitialized value used: loaded from __shared__ memory" in str(err)


def test_reports_fold_by_site_with_a_count():
    err = run("uninit_used", (4,), (64,), [f32(64), np.zeros(256, np.float32)])
    rs = uninit(err)
    assert len(rs) == 1 and rs[0].count == 4 * 32
    assert "(this site: 128 times" in str(err)


def test_arithmetic_atomics_on_undefined_counters_report_at_the_atomic():
    x = np.arange(64, dtype=np.int32)
    err = run("uninit_histogram", (1,), (64,), [x, np.zeros(16, np.int32)])
    r = uninit(err)[0]
    assert r.instruction.startswith("atom.shared.add") or r.instruction.startswith("red.shared.add"), r.instruction
    assert r.source.split(" ")[0].endswith(f"sync_san.cu:{cu_line('REPORT: an undefined counter')}")
    assert r.access == "atomic" and r.space == "shared"
