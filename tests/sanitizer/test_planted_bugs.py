"""Each planted bug is found with the right kind, thread, block and line; each correct twin is silent."""

from __future__ import annotations

import numpy as np
import pytest
from san_helpers import cu_line, launch_sanitized, ptx_text

rng = np.random.default_rng(0)


def f32(n):
    return rng.standard_normal(n).astype(np.float32)


def only(err, kind):
    assert err is not None, "the sanitizer found nothing"
    hits = [r for r in err.reports if r.kind == kind]
    assert hits, f"no {kind} report in:\n{err}"
    return hits[0]


def check_site(r, marker, ptx_prefix):
    assert r.source is not None and r.source.split(" ")[0].endswith(f"planted.cu:{cu_line(marker)}"), r.source
    assert ptx_text(r.ptx_line).startswith(ptx_prefix), ptx_text(r.ptx_line)
    assert r.instruction.startswith(ptx_prefix)


@pytest.mark.parametrize("n", [1000, 256, 1024])  # 256 and 1024 floats fill whole pages: the red zone
def test_oob_global_read(n):                          # after each allocation must still catch in[n]
    a, out = f32(n), np.zeros(n, np.float32)
    err = launch_sanitized("oob_global_read", (4,), (256,), [a, out, np.int32(n)])
    r = only(err, "out-of-bounds")
    assert (r.access, r.space, r.size) == ("read", "global", 4)
    assert r.thread == ((n - 1) % 256, 0, 0) and r.block == ((n - 1) // 256, 0, 0)
    assert r.allocation.endswith("param_0") and r.offset == 4 * n and r.allocation_size == 4 * n
    assert r.count == 1 and len(err.reports) == 1
    check_site(r, "BUG: in[n]", "ld.global.f32")
    assert "Invalid __global__ read of size 4 bytes" in str(err) and r.instruction in str(err)
    # the good lanes still ran and their results were copied back
    np.testing.assert_array_equal(out[: n - 1], a[: n - 1] + a[1:])


def test_oob_global_write_keeps_in_bounds_results():
    n = 1000
    a, out = f32(n), np.full(n, -1, np.float32)
    err = launch_sanitized("oob_global_write", (4,), (256,), [a, out, np.int32(n)])
    r = only(err, "out-of-bounds")
    assert (r.access, r.space, r.thread, r.block) == ("write", "global", (231, 0, 0), (3, 0, 0))
    assert r.address == err.reports[0].address and r.offset == 4 * n
    check_site(r, "BUG: out[n]", "st.global.f32")
    np.testing.assert_array_equal(out[1:], 2 * a[:-1])
    assert out[0] == -1


@pytest.mark.parametrize("name", ["oob_global_read_ok", "oob_global_write_ok"])
def test_oob_global_twins(name):
    n = 1000
    assert launch_sanitized(name, (4,), (256,), [f32(n), np.zeros(n, np.float32), np.int32(n)]) is None


def test_oob_shared_read():
    err = launch_sanitized("oob_shared_read", (2,), (128,), [f32(256), np.zeros(256, np.float32)])
    r = only(err, "out-of-bounds")
    assert (r.access, r.space, r.thread, r.block) == ("read", "shared", (127, 0, 0), (0, 0, 0))
    assert r.address == 512 and r.allocation.endswith("oob_shared_readE1s") and r.offset == 512
    assert r.count == 2  # thread 127 of both blocks
    check_site(r, "BUG: s[128]", "ld.shared.f32")


def test_oob_shared_write():
    a, out = f32(256), np.zeros(256, np.float32)
    err = launch_sanitized("oob_shared_write", (2,), (128,), [a, out])
    r = only(err, "out-of-bounds")
    assert (r.access, r.space, r.thread, r.block) == ("write", "shared", (127, 0, 0), (0, 0, 0))
    assert len(err.reports) == 1
    check_site(r, "BUG: writes s[128]", "st.shared")
    np.testing.assert_array_equal(out, a.reshape(2, 128)[:, ::-1].reshape(-1))


@pytest.mark.parametrize("name", ["oob_shared_read_ok", "oob_shared_write_ok"])
def test_oob_shared_twins(name):
    assert launch_sanitized(name, (2,), (128,), [f32(256), np.zeros(256, np.float32)]) is None


def test_misaligned_vector_load():
    err = launch_sanitized("misaligned_vec", (1,), (64,), [f32(300), np.zeros(64, np.float32), np.int32(1)])
    r = only(err, "misaligned")
    assert (r.access, r.space, r.size, r.thread, r.block) == ("read", "global", 16, (0, 0, 0), (0, 0, 0))
    assert r.offset == 4 and r.count == 64
    check_site(r, "BUG when offset", "ld.global.v4.f32")
    a, out = f32(300), np.zeros(64, np.float32)
    assert launch_sanitized("misaligned_vec", (1,), (64,), [a, out, np.int32(4)]) is None
    np.testing.assert_allclose(out, a[4:260].reshape(64, 4).sum(1), rtol=1e-6)


def check_origin(r, marker, ptx_prefix):
    """A use-site report of an undefined value: `other` names the load it came from."""
    assert r.other["source"].split(" ")[0].endswith(f"planted.cu:{cu_line(marker)}"), r.other
    assert ptx_text(r.other["ptx_line"]).startswith(ptx_prefix) and r.other["instruction"].startswith(ptx_prefix)


def test_uninitialized_shared_read():
    from ptxforge.emu.sanitizer import Sanitizer

    err = launch_sanitized("uninit_shared", (2,), (256,), [f32(512), np.zeros(512, np.float32)])
    r = only(err, "uninitialized")
    assert (r.space, r.thread, r.block, r.address, r.size) == ("shared", (0, 0, 0), (0, 0, 0), 255 * 4, 4)
    assert r.count == 256 and len(err.reports) == 1  # threads 0..127 of both blocks
    check_site(r, "REPORT: uninitialized read", "st.global.f32")  # reported where the value is used
    check_origin(r, "REPORT: uninitialized read", "ld.shared.f32")
    assert r.other["use"] == "store" and "Uninitialized value used" in str(err) and "ld.shared.f32" in str(err)
    err = launch_sanitized("uninit_shared", (2,), (256,), [f32(512), np.zeros(512, np.float32)],
                           sanitize=Sanitizer(eager=True))  # the old behaviour: reported at the load
    r = only(err, "uninitialized")
    assert (r.space, r.thread, r.block, r.address, r.count) == ("shared", (0, 0, 0), (0, 0, 0), 255 * 4, 256)
    check_site(r, "REPORT: uninitialized read", "ld.shared.f32")
    assert launch_sanitized("uninit_shared_ok", (2,), (256,), [f32(512), np.zeros(512, np.float32)]) is None


def test_missing_syncthreads_race():
    err = launch_sanitized("missing_sync", (2,), (256,), [f32(512), np.zeros(512, np.float32)])
    r = only(err, "race")
    assert (r.space, r.access, r.thread, r.block, r.address) == ("shared", "read", (0, 0, 0), (0, 0, 0), 4)
    assert r.other["access"] == "write" and r.other["thread"] == (1, 0, 0) and r.other["block"] == (0, 0, 0)
    assert ptx_text(r.other["ptx_line"]).startswith("st.shared.f32")
    check_site(r, "BUG: no barrier", "ld.shared.f32")
    assert "Race (write-read) on __shared__ memory" in str(err)
    assert launch_sanitized("missing_sync_ok", (2,), (256,), [f32(512), np.zeros(512, np.float32)]) is None


def test_global_write_write_race_between_blocks():
    err = launch_sanitized("global_waw", (4,), (256,), [f32(1024), np.zeros(256, np.float32)])
    r = only(err, "race")
    assert (r.space, r.access, r.other["access"]) == ("global", "write", "write")
    assert r.thread == (0, 0, 0) and r.other["thread"] == (0, 0, 0)
    assert r.block != r.other["block"] and {r.block[1], r.other["block"][1]} == {0}
    assert r.allocation.endswith("param_1") and r.offset == 0
    check_site(r, "BUG: every block writes", "st.global.f32")
    out = np.zeros(256, np.float32)
    a = f32(1024)
    assert launch_sanitized("global_waw_ok", (4,), (256,), [a, out]) is None
    np.testing.assert_allclose(out, a.reshape(4, 256).sum(0), rtol=1e-5, atol=1e-6)


def test_barrier_in_divergent_code():
    err = launch_sanitized("divergent_barrier", (2,), (256,), [f32(512), np.zeros(512, np.float32)])
    r = only(err, "barrier-divergence")
    assert (r.thread, r.block) == ((0, 0, 0), (0, 0, 0)) and r.count == 2
    check_site(r, "BUG: only half of warp 0", "bar.sync")
    assert "16 thread(s) of a warp wait at this barrier (id 0) while 16 thread(s) of the same warp" in r.message
    assert launch_sanitized("divergent_barrier_ok", (2,), (256,), [f32(512), np.zeros(512, np.float32)]) is None


def test_invalid_shuffle_member_mask():
    x = np.arange(64, dtype=np.int32)
    err = launch_sanitized("bad_shfl_mask", (1,), (64,), [x, np.zeros(64, np.int32)])
    r = only(err, "invalid-member-mask")
    assert (r.thread, r.block, r.count) == ((0, 0, 0), (0, 0, 0), 2) and "16-31" in r.message
    check_site(r, "BUG: lanes 16..31 are named", "shfl.sync.bfly.b32")
    assert r.source.endswith("sm_30_intrinsics.hpp:409)")  # inlined from the intrinsic's header
    out = np.zeros(64, np.int32)
    assert launch_sanitized("bad_shfl_mask_ok", (1,), (64,), [x, out]) is None
    lane = x % 32
    np.testing.assert_array_equal(out, np.where(lane < 16, x + (x ^ 8), x))


def test_block_reduction_is_clean():
    a, out = f32(4 * 256), np.zeros(4, np.float32)
    assert launch_sanitized("block_reduce", (4,), (256,), [a, out]) is None
    np.testing.assert_allclose(out, a.reshape(4, 256).sum(1), rtol=1e-5, atol=1e-5)


def test_cp_async_destination_read_before_wait():
    err = launch_sanitized("async_early_read", (1,), (128,), [f32(128), np.zeros(128, np.float32)])
    r = only(err, "async-before-wait")
    assert (r.space, r.access, r.thread, r.block) == ("shared", "read", (0, 0, 0), (0, 0, 0))
    check_site(r, "BUG: read before cp.async", "ld.shared")
    a, out = f32(128), np.zeros(128, np.float32)
    assert launch_sanitized("async_early_read_ok", (1,), (128,), [a, out]) is None
    np.testing.assert_array_equal(out, a + a[::-1])


def test_cp_async_through_mbarrier_read_before_the_phase_completes():
    a = f32(128)
    err = launch_sanitized("mbarrier_early_read", (2,), (64,), [a, np.zeros(128, np.float32)])
    r = only(err, "async-before-wait")
    assert (r.space, r.access, r.thread, r.block, r.address) == ("shared", "read", (0, 0, 0), (0, 0, 0), 12)
    check_site(r, "BUG: read before the mbarrier", "ld.shared")
    out = np.zeros(128, np.float32)
    assert launch_sanitized("mbarrier_early_read_ok", (2,), (64,), [a, out]) is None
    np.testing.assert_array_equal(out, 2 * np.roll(a.reshape(2, 64), -1, axis=1).reshape(-1))


def test_uninitialized_global_read_of_device_malloc():
    err = launch_sanitized("uninit_malloc", (1,), (1,), [np.zeros(1, np.int32)])
    r = only(err, "uninitialized")
    assert (r.space, r.access, r.thread, r.block, r.size) == ("global", "read", (0, 0, 0), (0, 0, 0), 4)
    assert r.allocation == "device malloc" and r.offset == 63 * 4
    check_site(r, "REPORT: uninitialized global", "st.global.u32")
    check_origin(r, "REPORT: uninitialized global", "ld.u32")
    out = np.zeros(64, np.int32)
    assert launch_sanitized("uninit_malloc_ok", (1,), (64,), [out]) is None
    np.testing.assert_array_equal(out, np.arange(64))


def test_lane_outside_its_own_member_mask():
    x = np.arange(64, dtype=np.int32)
    err = launch_sanitized("shfl_mask_without_self", (1,), (64,), [x, np.zeros(64, np.int32)])
    r = only(err, "invalid-member-mask")
    assert (r.thread, r.block, r.count) == ((0, 0, 0), (0, 0, 0), 2) and "0xfffffffe" in r.message
    check_site(r, "BUG: lane 0 executes", "shfl.sync.idx.b32")


def test_uninitialized_local_read():
    from ptxforge.emu.sanitizer import Sanitizer

    x = np.arange(32, dtype=np.int32)
    assert launch_sanitized("uninit_local", (1,), (32,), [x, np.zeros(32, np.int32), np.int32(0)]) is None
    err = launch_sanitized("uninit_local", (1,), (32,), [x, np.zeros(32, np.int32), np.int32(0)],
                           sanitize=Sanitizer(init_local=True))  # local init checks are opt-in
    r = only(err, "uninitialized")
    assert (r.space, r.thread, r.block, r.address, r.count) == ("local", (4, 0, 0), (0, 0, 0), 16, 16)
    check_site(r, "REPORT: uninitialized local", "st.global.u32")
    check_origin(r, "REPORT: uninitialized local", "ld.local.u32")
    out = np.zeros(32, np.int32)
    assert launch_sanitized("uninit_local_ok", (1,), (32,), [x, out, np.int32(0)]) is None
    np.testing.assert_array_equal(out, x + (np.arange(32) & 7))
