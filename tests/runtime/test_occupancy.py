"""Theoretical occupancy, checked against cases worked out by hand.

Rules used (see ptxforge.runtime.occupancy): warps = ceil(threads/32); registers per warp = regs*32 rounded
up to 256; each of 4 sub-partitions holds 65536/4 = 16384 registers, so floor(16384/regs_per_warp) warps
each; shared per block = static + dynamic + 1024 reserved, rounded up to 128.
"""

from dataclasses import replace

import pytest

from ptxforge.runtime.occupancy import occupancy, sm_limits

KB = 1024


def test_sm90_256_threads_64_registers_is_register_limited():
    # 8 warps/block; 64*32 = 2048 regs/warp; 16384 // 2048 = 8 warps per sub-partition -> 32 warps/SM
    # -> 32 // 8 = 4 blocks. Warps alone: 64 // 8 = 8; smem: (228*1024) // 1024 = 228; blocks cap 32.
    o = occupancy("sm_90", 256, 64)
    assert (o.blocks_per_sm, o.warps_per_sm, o.occupancy) == (4, 32, 0.5)
    assert o.limited_by == ("registers",) and o.limiting_factor == "registers"
    assert o.block_limits == {"warps": 8, "registers": 4, "shared memory": 228, "blocks": 32}
    assert o.registers_per_block == 8 * 2048 and o.shared_per_block == 1024


def test_sm80_128_threads_32_registers_reaches_full_occupancy():
    # 4 warps; 32*32 = 1024 regs/warp; 16384 // 1024 = 16 per sub-partition -> 64 warps -> 16 blocks;
    # warps: 64 // 4 = 16. Both give 16 blocks = 64 warps = 100%.
    o = occupancy("sm_80", 128, 32)
    assert (o.blocks_per_sm, o.warps_per_sm, o.occupancy) == (16, 64, 1.0)
    assert o.limited_by == ("warps", "registers")


def test_sub_partition_rounding_costs_a_block():
    # 2 warps; 40*32 = 1280 regs/warp (already a multiple of 256); 16384 // 1280 = 12 per sub-partition
    # -> 48 warps -> 24 blocks (a flat 65536 // 1280 = 51 warps would have given 25). 48/64 = 75%.
    o = occupancy("sm_80", 64, 40)
    assert (o.blocks_per_sm, o.warps_per_sm, o.occupancy) == (24, 48, 0.75)
    assert o.limited_by == ("registers",)


def test_register_rounding_to_256():
    # 33 regs: 33*32 = 1056 -> rounded up to 1280; same as 40 registers.
    assert occupancy("sm_80", 64, 33).blocks_per_sm == occupancy("sm_80", 64, 40).blocks_per_sm == 24


def test_shared_memory_limited_sm80():
    # 48 KB static + 1 KB reserved = 50176 bytes (392 * 128); 164 KB = 167936; 167936 // 50176 = 3 blocks;
    # 3 blocks * 4 warps = 12 warps = 12/64 = 18.75%.
    o = occupancy("sm_80", 128, 16, shared_per_block=48 * KB)
    assert (o.blocks_per_sm, o.warps_per_sm, o.occupancy) == (3, 12, 0.1875)
    assert o.limited_by == ("shared memory",) and o.shared_per_block == 50176


def test_dynamic_shared_counts_and_rounds_to_128():
    # sm_90: 100 B static + 100 KB dynamic + 1 KB = 103524 -> rounded to 103552 (809 * 128);
    # 233472 // 103552 = 2 blocks.
    o = occupancy("sm_90", 128, 32, shared_per_block=100, dynamic_shared=100 * KB)
    assert o.shared_per_block == 103552 and o.blocks_per_sm == 2 and o.limited_by == ("shared memory",)


def test_block_count_cap():
    # 1 warp, 8 regs: warps would allow 64 blocks, registers 4*(16384//256) = 256; the cap is 32 -> 50%.
    o = occupancy("sm_80", 32, 8)
    assert (o.blocks_per_sm, o.occupancy, o.limited_by) == (32, 0.5, ("blocks",))


def test_sm89_has_48_warps_and_24_blocks():
    # 8 warps, 40 regs: 12 warps per sub-partition -> 48 -> 6 blocks; warps 48 // 8 = 6 -> 100% of 48.
    o = occupancy("sm_89", 256, 40)
    assert (o.blocks_per_sm, o.warps_per_sm, o.occupancy) == (6, 48, 1.0)
    assert occupancy("sm_89", 32, 8).blocks_per_sm == 24
    with pytest.raises(ValueError, match="99 KB"):
        occupancy("sm_89", 128, 32, shared_per_block=100 * KB)


def test_arch_variants_share_figures():
    assert occupancy("sm_90a", 256, 64) == replace(occupancy("sm_90", 256, 64), arch="sm_90a")
    assert sm_limits("sm_90a").sms == 132 and sm_limits("sm_80").sms == 108
    with pytest.raises(KeyError, match="no occupancy figures for sm_75"):
        sm_limits("sm_75")


def test_blocks_that_cannot_launch():
    with pytest.raises(ValueError, match="1..1024"):
        occupancy("sm_80", 1025, 32)
    with pytest.raises(ValueError, match="0..255"):
        occupancy("sm_80", 32, 256)
    # 1024 threads (32 warps) x 65 regs: 65*32 = 2080 -> 2304 per warp; 32 * 2304 = 73728 > 65536.
    with pytest.raises(ValueError, match="do not fit one block"):
        occupancy("sm_80", 1024, 65)
    # 1024 x 64 = exactly 65536 registers: fits, 1 block.
    assert occupancy("sm_80", 1024, 64).blocks_per_sm == 1
    with pytest.raises(ValueError, match="227 KB"):
        occupancy("sm_90", 128, 32, shared_per_block=227 * KB + 1)
    assert occupancy("sm_90", 128, 32, shared_per_block=227 * KB).blocks_per_sm == 1
