"""One warp fills wgmma operands in shared memory, the warpgroup multiplies them with no barrier between its
warps: the MMA orders the fill when the filling warp belongs to the warpgroup (it issues the MMA after its
writes and fence.proxy.async); a warp of another warpgroup is not ordered (docs/sanitizer-rulings.md)."""

import functools
from pathlib import Path

import numpy as np
import pytest

import ptxforge as pf
from ptxforge.emu.sanitizer import SanitizerError

CORPUS = Path(__file__).resolve().parents[1] / "corpus" / "ptx" / "cuda"
rng = np.random.default_rng(26)


@functools.cache
def corpus_module(name, flavor):
    return pf.parse_file(CORPUS / f"{name}.{flavor}.ptx")


def _launch(flavor, filler, rows):
    A = rng.integers(-4, 5, (64, 16)).astype(np.float16)
    Bt = rng.integers(-4, 5, (8, 16)).astype(np.float16)
    D = np.zeros((64, 8), np.float32)
    k = corpus_module("wgmma_fill_sm90a", flavor).kernel("wgmma_one_warp_fills")
    k.launch(grid=(1,), block=(256,), args=[A, Bt, D, np.int32(filler), np.int32(rows)], options={"sanitize": True})
    want = A.astype(np.float32) @ Bt.astype(np.float32).T
    want[rows:] = 0
    return D, want


@pytest.mark.parametrize("flavor", ["sm_90a.O3", "sm_90a.G"])
@pytest.mark.parametrize("filler", [0, 1, 3])
def test_a_warp_of_the_warpgroup_filling_is_ordered_by_the_mma(flavor, filler):
    D, want = _launch(flavor, filler, rows=50)
    np.testing.assert_array_equal(D, want)


@pytest.mark.parametrize("filler", [4, 7])
def test_a_warp_of_another_warpgroup_filling_is_a_race(filler):
    with pytest.raises(SanitizerError) as e:
        _launch("sm_90a.O3", filler, rows=64)
    races = [r for r in e.value.reports if r.kind == "race"]
    assert races and all(r.space == "shared" for r in races)
    r = races[0]
    assert {r.access, r.other["access"]} == {"read", "write"} and "wgmma" in (r.instruction + r.other["instruction"])
    assert r.thread[0] // 128 != r.other["thread"][0] // 128  # the two accesses come from different warpgroups
