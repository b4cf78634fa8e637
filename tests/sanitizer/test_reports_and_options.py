"""Report text, JSON, deduplication and the cap; check options; shuffled block order; cross-block ordering."""

from __future__ import annotations

import json

import numpy as np
import pytest
from san_helpers import cu_line, launch_sanitized, planted_module

rng = np.random.default_rng(1)


def f32(n):
    return rng.standard_normal(n).astype(np.float32)


def run(kernel, san, num_sms=None, **kw):
    """Launch with a configured Sanitizer; its findings stay on `san` (the launch also raises them)."""
    from ptxforge.emu.sanitizer import SanitizerError

    try:
        kernel.launch(device="emu", options={"sanitize": san, "num_sms": num_sms}, **kw)
    except SanitizerError as e:
        assert e.reports == san.reports


def test_error_is_an_emulator_error_with_a_summary():
    from ptxforge.emu.errors import EmulatorError
    from ptxforge.emu.sanitizer import SanitizerError

    err = launch_sanitized("missing_sync", (2,), (256,), [f32(512), np.zeros(512, np.float32)])
    assert isinstance(err, SanitizerError) and isinstance(err, EmulatorError)
    text = str(err)
    assert text.startswith("========= Race (write-read) on __shared__ memory, 4 bytes")
    assert "ld.shared.f32" in text and "by thread (0,0,0) in block (0,0,0)" in text
    assert f"planted.cu:{cu_line('BUG: no barrier')}" in text
    assert text.rstrip().endswith("in kernel missing_sync")
    assert "ERROR SUMMARY: 1 error site (512 occurrences)" in text


def test_json_report_round_trips(tmp_path):
    from ptxforge.emu.sanitizer import write_json

    err = launch_sanitized("oob_shared_read", (2,), (128,), [f32(256), np.zeros(256, np.float32)])
    path = tmp_path / "report.json"
    write_json(path, err.reports, kernel=err.kernel, suppressed=err.suppressed)
    data = json.loads(path.read_text())
    assert data["tool"] == "ptxforge-sanitizer" and data["kernel"] == "oob_shared_read"
    assert data["error_sites"] == 1 and data["occurrences"] == 2
    r = data["reports"][0]
    assert r["kind"] == "out-of-bounds" and r["thread"] == [127, 0, 0] and r["block"] == [0, 0, 0]
    assert r["headline"] == "Invalid __shared__ read of size 4 bytes" and r["address"] == 512
    assert err.to_json()["reports"][0]["ptx_line"] == err.reports[0].ptx_line


def test_reports_are_capped_with_a_count():
    from ptxforge.emu.sanitizer import Sanitizer

    k = planted_module().kernel("last_block_sum_nofence")  # several racing load sites
    args = [np.arange(8, dtype=np.float32), np.zeros(8, np.float32), np.zeros(1, np.uint32), np.zeros(1, np.float32)]
    full = Sanitizer()
    run(k, full, grid=(8,), block=(32,), args=args)
    assert len(full.reports) >= 2
    capped = Sanitizer(max_reports=1)
    args = [np.arange(8, dtype=np.float32), np.zeros(8, np.float32), np.zeros(1, np.uint32), np.zeros(1, np.float32)]
    run(k, capped, grid=(8,), block=(32,), args=args)
    err = capped.error()
    assert len(err.reports) == 1 and err.suppressed == sum(r.count for r in full.reports) - err.reports[0].count
    assert "past the report cap" in str(err)


def test_check_families_can_be_turned_off():
    from ptxforge.emu.sanitizer import Sanitizer

    k = planted_module().kernel("missing_sync")
    san = Sanitizer(races=False)
    run(k, san, grid=(2,), block=(256,), args=[f32(512), np.zeros(512, np.float32)])
    assert san.reports == []
    k = planted_module().kernel("uninit_shared")
    san = Sanitizer(init=False)
    run(k, san, grid=(2,), block=(256,), args=[f32(512), np.zeros(512, np.float32)])
    assert san.reports == []


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_races_do_not_depend_on_the_block_order(seed):
    from ptxforge.emu.sanitizer import Sanitizer

    for name, out_n, line in (("missing_sync", 4096, "BUG: no barrier"), ("global_waw", 256, "BUG: every block")):
        k = planted_module().kernel(name)
        san = Sanitizer(shuffle_seed=seed)
        # one SM holds 8 blocks of 256 threads: 16 blocks run in two waves, in shuffled order
        run(k, san, grid=(16,), block=(256,), args=[f32(4096), np.zeros(out_n, np.float32)], num_sms=1)
        assert sum(r.count for r in san.reports) == (4096 if name == "missing_sync" else 15 * 256)
        kinds = {(r.kind, r.source.split(" ")[0].rsplit(":", 1)[1]) for r in san.reports}
        assert kinds == {("race", str(cu_line(line)))}, san.error()


def test_fence_and_atomic_order_blocks():
    a = np.arange(8, dtype=np.float32)

    def args():
        return [a, np.zeros(8, np.float32), np.zeros(1, np.uint32), np.zeros(1, np.float32)]
    ok = args()
    assert launch_sanitized("last_block_sum", (8,), (32,), ok) is None
    assert ok[3][0] == 2 * a.sum()
    err = launch_sanitized("last_block_sum_nofence", (8,), (32,), args())
    assert err is not None and {r.kind for r in err.reports} == {"race"}
    r = err.reports[0]
    assert r.space == "global" and r.access == "read" and r.other["access"] == "write"
    assert r.thread == (0, 0, 0) and r.block != r.other["block"]
    assert r.source.startswith(str(r.source.split(":")[0])) and r.source.endswith(f":{cu_line('REPORT: unordered')}")


@pytest.mark.parametrize("seed", [3, 4])
def test_shuffled_order_reports_the_same_culprit_and_computes_the_same(seed):
    from ptxforge.emu.sanitizer import Sanitizer

    n = 1000
    a = f32(n)
    k = planted_module().kernel("oob_global_write")
    plain = np.zeros(n, np.float32)
    run(k, Sanitizer(), grid=(4,), block=(256,), args=[a, plain, np.int32(n)])
    san = Sanitizer(shuffle_seed=seed)
    out = np.zeros(n, np.float32)
    run(k, san, grid=(4,), block=(256,), args=[a, out, np.int32(n)], num_sms=1)
    assert np.array_equal(out, plain)
    (r,) = san.reports
    assert (r.kind, r.thread, r.block, r.count) == ("out-of-bounds", (231, 0, 0), (3, 0, 0), 1)


def test_reports_survive_a_launch_that_deadlocks():
    """An out-of-bounds store, then a barrier that waits for 64 threads in a block of 32: the watchdog ends
    the launch, and the sanitizer's report comes out with the deadlock named after it."""
    import ptxforge as pf
    from ptxforge.emu.errors import WatchdogTimeout

    src = (".version 8.0\n.target sm_80\n.address_size 64\n.visible .entry k(.param .u64 p)\n{\n"
           "\t.reg .b32 %r<3>;\n\t.reg .b64 %rd<4>;\n\tld.param.u64 %rd1, [p];\n\tmov.u32 %r1, %tid.x;\n"
           "\tmul.wide.u32 %rd2, %r1, 4;\n\tadd.s64 %rd3, %rd1, %rd2;\n\tst.global.u32 [%rd3+128], %r1;\n"
           "\tbar.sync 0, 64;\n\tret;\n}\n")
    k = pf.parse(src, filename="dl.ptx").kernel("k")
    in_bounds = pf.parse(src.replace("[%rd3+128]", "[%rd3]"), filename="dl.ptx").kernel("k")
    with pytest.raises(WatchdogTimeout, match=r"waits at barrier 0 dl.ptx:13: bar.sync 0, 64"):
        in_bounds.launch(grid=(1,), block=(32,), args=[np.zeros(32, np.uint32)], device="emu")
    with pytest.raises(pf.SanitizerError) as ei:
        k.launch(grid=(1,), block=(32,), args=[np.zeros(32, np.uint32)], device="emu", options={"sanitize": True})
    err = ei.value
    (r,) = err.reports
    assert r.kind == "out-of-bounds" and r.ptx_line == 12 and r.count == 32
    assert "deadlock" in err.stopped and "the launch then stopped: deadlock" in str(err)
    assert isinstance(err.__cause__, WatchdogTimeout) and err.to_json()["stopped"] == err.stopped
