"""`LaunchConfig` and `EmulatorOptions`: checked when made, and taken by `Kernel.launch` beside the keyword form;
`emulate`'s typed result."""

from __future__ import annotations

import dataclasses
import math

import numpy as np
import pytest

import ptxforge as pf
from ptxforge.emu.launch import emulate
from ptxforge.emu.launch_stats import EmulationStats
from ptxforge.runtime.launch_config import EmulatorOptions, LaunchConfig

FILL = """.version 8.0
.target sm_80
.address_size 64
.visible .entry fill(.param .u64 out)
{
    .reg .b32 %r<4>;
    .reg .b64 %rd<4>;
    ld.param.u64 %rd1, [out];
    mov.u32 %r1, %ctaid.x;
    mov.u32 %r2, %ntid.x;
    mov.u32 %r3, %tid.x;
    mad.lo.u32 %r1, %r1, %r2, %r3;
    mul.wide.u32 %rd2, %r1, 4;
    add.u64 %rd3, %rd1, %rd2;
    st.global.u32 [%rd3], %r1;
    ret;
}
"""


@pytest.fixture(scope="module")
def fill():
    return pf.parse(FILL, filename="fill.ptx").kernel("fill")


def test_normalized_and_frozen():
    cfg = LaunchConfig(grid=4, block=(16, 2), shmem_size=np.int64(128), cluster=(2,))
    assert (cfg.grid, cfg.block, cfg.shmem_size, cfg.cluster, cfg.cooperative) == (
        (4, 1, 1), (16, 2, 1), 128, (2, 1, 1), False)
    assert (cfg.threads, cfg.blocks) == (32, 4) and type(cfg.shmem_size) is int
    with pytest.raises(dataclasses.FrozenInstanceError):
        cfg.grid = (1, 1, 1)  # type: ignore[misc]


@pytest.mark.parametrize("kwargs, message", [
    ({"grid": 0}, "grid must be 1 to 3 positive integers, got (0,)"),
    ({"grid": (1, 2, 3, 4)}, "grid must be 1 to 3 positive integers, got (1, 2, 3, 4)"),
    ({"grid": "x"}, "grid must be 1 to 3 positive integers, got 'x'"),
    ({"block": (2000,)}, "block (2000, 1, 1) has 2000 threads; the limit is 1024"),
    ({"block": (1, 1, 65)}, "block z dimension 65 exceeds 64 (block (1, 1, 65))"),
    ({"grid": (1, 65536)}, "grid y dimension 65536 exceeds 65535 (grid (1, 65536, 1); the limits are "
                           "2^31-1, 65535, 65535)"),
    ({"shmem_size": -1}, "shmem_size must be a non-negative integer, got -1"),
    ({"shmem_size": 1.5}, "shmem_size must be a non-negative integer, got 1.5"),
    ({"shmem_size": True}, "shmem_size must be a non-negative integer, got True"),
    ({"grid": 32, "cluster": (32,)}, "cluster (32, 1, 1) has 32 CTAs; the limit is 16"),
    ({"grid": 3, "cluster": 2}, "grid (3, 1, 1) is not a whole number of clusters (2, 1, 1): each grid dimension "
                                "must be a multiple of the cluster's"),
    ({"cooperative": 1}, "cooperative must be True or False, got 1"),
])
def test_launch_config_errors(kwargs, message):
    with pytest.raises(pf.LaunchError) as e:
        LaunchConfig(**kwargs)
    assert str(e.value) == message


@pytest.mark.parametrize("kwargs, message", [
    ({"num_sms": 0}, "num_sms must be a whole number from 1 to 1024, not 0"),
    ({"num_sms": 2.5}, "num_sms must be a whole number from 1 to 1024, not 2.5"),
    ({"watchdog_s": math.nan}, "watchdog_s must be a positive number of seconds (inf: no limit), got nan"),
    ({"time_limit_s": -1}, "time_limit_s must be a positive number of seconds (inf: no limit), got -1"),
    ({"printf": 3}, "printf must be a callable taking each line of output, got 3"),
    ({"sanitize": "yes"}, "sanitize must be True, False or a Sanitizer, got 'yes'"),
])
def test_emulator_options_errors(kwargs, message):
    with pytest.raises(pf.LaunchError) as e:
        EmulatorOptions(**kwargs)
    assert str(e.value) == message


def test_emulator_options_name_what_a_gpu_cannot_do():
    from ptxforge.emu.sanitizer import Sanitizer

    assert EmulatorOptions().given() == []
    assert EmulatorOptions(watchdog_s=5).given() == []
    assert EmulatorOptions(sanitize=Sanitizer(), num_sms=4, time_limit_s=1, printf=print).given() == [
        "sanitize", "num_sms", "time_limit_s", "printf"]


def test_a_launch_takes_a_config_or_keywords(fill):
    by_keywords = np.zeros(64, np.uint32)
    res = fill.launch(grid=(2,), block=(32,), args=[by_keywords], device="emu")
    by_config = np.zeros(64, np.uint32)
    res2 = fill.launch(LaunchConfig(grid=2, block=32), [by_config], device="emu")
    res3 = fill.launch(LaunchConfig(grid=2, block=32), args=[by_config], device="emu",
                       options=EmulatorOptions(num_sms=1))
    assert (by_keywords == np.arange(64)).all() and (by_config == by_keywords).all()
    assert res.thread_instructions == res2.thread_instructions == res3.thread_instructions
    assert res3.per_sm.size == 1


def test_a_config_and_conflicting_keywords_are_refused(fill):
    cfg = LaunchConfig(grid=2, block=32)
    out = np.zeros(64, np.uint32)
    with pytest.raises(pf.LaunchError, match=r"^shared_mem, cooperative given beside a LaunchConfig: set them in "
                                             r"the LaunchConfig$"):
        fill.launch(cfg, [out], device="emu", shared_mem=16, cooperative=True)
    with pytest.raises(pf.LaunchError, match="block given beside a LaunchConfig"):
        fill.launch(cfg, (32,), [out], device="emu")
    with pytest.raises(pf.LaunchError, match=r"^num_sms given beside options=: set them in the EmulatorOptions$"):
        fill.launch(cfg, [out], device="emu", num_sms=2, options=EmulatorOptions())


def test_the_keyword_form_names_its_keywords(fill):
    with pytest.raises(pf.LaunchError, match=r"^shared_mem must be a non-negative integer, got -4$"):
        fill.launch(grid=1, block=32, args=[np.zeros(32, np.uint32)], device="emu", shared_mem=-4)


def test_emulate_returns_typed_stats_that_read_as_the_old_dict(fill):
    out = np.zeros(64, np.uint32)
    from ptxforge.emu.launch import emu_device

    dev = emu_device()
    a = dev.memory.alloc(out.nbytes)
    try:
        stats = emulate(fill.module, fill.function, grid=(2,), block=(32,), params=a.base.to_bytes(8, "little"),
                        device=dev, tier="interp")
    finally:
        dev.memory.free(a)
    assert isinstance(stats, EmulationStats)
    assert stats.thread_instructions == stats["thread_instructions"] == 64 * 9  # 9 instructions
    assert stats.waves == stats["waves"] == 1 and stats["per_sm"].sum() == 576
    assert sorted(stats) == ["level", "mode", "per_sm", "printf_truncated", "resident_blocks", "steps",
                             "thread_instructions", "tier", "tier_note", "wall_s", "waves"]
    assert stats.mode == "fast" and stats.tier == "interp" and stats.tier_note == "" and stats.level == ""
    assert "wall_s" in stats and stats.get("nope") is None and dict(stats)["steps"] == stats.steps
    with pytest.raises(KeyError):
        stats["nope"]


def test_a_dsl_kernel_takes_a_config_too():
    from ptxforge.dsl import ctaid, kernel, mad, ntid, ptr, st, tid, u32

    @kernel(arch="sm_80")
    def iota(out: ptr(u32)):
        st(out[mad(ctaid.x, ntid.x, tid.x)], mad(ctaid.x, ntid.x, tid.x))

    a, b = np.zeros(64, np.uint32), np.zeros(64, np.uint32)
    iota.launch(LaunchConfig(grid=2, block=32), [a], device="emu")
    iota.launch(grid=(2,), block=(32,), args=[b], device="emu")
    assert (a == np.arange(64)).all() and (b == a).all()
