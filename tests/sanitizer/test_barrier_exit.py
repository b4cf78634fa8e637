"""Planted bug: an aligned barrier reached by part of a warp while the rest of the warp exits."""

from __future__ import annotations

import numpy as np
from san_helpers import launch_sanitized
from test_planted_bugs import check_site, only


def f32(n):
    return np.arange(n, dtype=np.float32)


def test_barrier_with_the_rest_of_the_warp_exited():
    out = np.zeros(512, np.float32)
    err = launch_sanitized("exit_divergent_barrier", (2,), (256,), [f32(512), out])
    r = only(err, "barrier-divergence")
    assert (r.thread, r.block) == ((0, 0, 0), (0, 0, 0)) and r.count == 2
    check_site(r, "BUG: threads 16.. of every warp exit instead", "bar.sync")
    assert "16 thread(s) of a warp wait at this aligned barrier (id 0) while 16 thread(s)" in r.message
    np.testing.assert_array_equal(out, f32(512) * 2)  # the results still came back


def test_whole_warps_leaving_before_a_barrier_is_fine():
    out = np.zeros(512, np.float32)
    a = f32(512)
    assert launch_sanitized("exit_warp_aligned_ok", (2,), (256,), [a, out, np.int32(320)]) is None
    ref = a[:320].reshape(-1, 2)[:, ::-1].reshape(-1)
    np.testing.assert_array_equal(out[:320], ref)
