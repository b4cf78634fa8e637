"""Theoretical occupancy: how many blocks of a kernel fit on one SM, and what stops more from fitting.

A pure calculation from the per-SM limits of each architecture (REFERENCE.md "Hardware figures" and
NVIDIA's compute-capability table) following the rules of CUDA's occupancy calculator:

- a block occupies ceil(threads / 32) warps;
- registers are allocated per warp, regs x 32 rounded up to 256, inside each of the 4 SM sub-partitions
  (so at most floor(16384 / regs_per_warp) warps per sub-partition); a block whose warp count, rounded up
  to a multiple of 4, needs more than 65,536 registers cannot launch;
- shared memory per block is static + dynamic + 1 KB reserved by the system, rounded up to 128 bytes, and
  static + dynamic may not exceed the per-block limit; the SM's full shared memory is assumed (max carveout).
"""

from __future__ import annotations

from dataclasses import dataclass

WARP = 32
REG_ALLOC_UNIT = 256
SUB_PARTITIONS = 4
SMEM_ALLOC_UNIT = 128
SMEM_RESERVED_PER_BLOCK = 1024
MAX_REGS_PER_THREAD = 255
MAX_THREADS_PER_BLOCK = 1024


@dataclass(frozen=True)
class SMLimits:
    """Per-SM limits of one architecture."""

    sms: int  # SMs on the reference part (A100, H100/H200, RTX 4090)
    regs_per_sm: int
    max_threads_per_sm: int
    max_blocks_per_sm: int
    smem_per_sm: int  # bytes, at the largest carveout
    smem_per_block: int  # bytes a block may use (static + dynamic), excluding the reserved 1 KB

    @property
    def max_warps_per_sm(self) -> int:
        return self.max_threads_per_sm // WARP


KB = 1024
ARCHS: dict[str, SMLimits] = {
    "sm_80": SMLimits(108, 65536, 2048, 32, 164 * KB, 163 * KB),  # A100
    "sm_89": SMLimits(128, 65536, 1536, 24, 100 * KB, 99 * KB),  # Ada (RTX 4090: 128 SMs)
    "sm_90": SMLimits(132, 65536, 2048, 32, 228 * KB, 227 * KB),  # H100/H800/H200 SXM
}


@dataclass(frozen=True)
class Occupancy:
    """Resident blocks and warps per SM; `limited_by` names every limit that equals `blocks_per_sm`."""

    arch: str
    threads_per_block: int
    blocks_per_sm: int
    warps_per_sm: int
    occupancy: float  # warps_per_sm / max warps per SM
    limited_by: tuple[str, ...]  # of 'warps', 'registers', 'shared memory', 'blocks'
    block_limits: dict[str, int]  # each limit's own blocks-per-SM figure
    registers_per_block: int  # as allocated (per-warp rounding)
    shared_per_block: int  # as allocated (with the reserved 1 KB and rounding)

    @property
    def limiting_factor(self) -> str:
        return self.limited_by[0]


def sm_limits(arch: str) -> SMLimits:
    """Limits for `arch`; sm_90a and the like share sm_90's figures. KeyError names the known ones."""
    base = arch.rstrip("af") if arch.startswith("sm_") else arch
    try:
        return ARCHS[base]
    except KeyError:
        raise KeyError(f"no occupancy figures for {arch}; known: {', '.join(ARCHS)}") from None


def _round_up(n: int, unit: int) -> int:
    return -(-n // unit) * unit


def occupancy(arch: str, threads_per_block: int, registers_per_thread: int, shared_per_block: int = 0,
              dynamic_shared: int = 0) -> Occupancy:
    """Theoretical occupancy of a kernel using `registers_per_thread` and `shared_per_block` static
    (+ `dynamic_shared`) bytes, launched with `threads_per_block` threads per block on `arch`.

    A block that cannot launch at all (too many threads, registers or shared memory) raises ValueError.
    """
    lim = sm_limits(arch)
    if not 1 <= threads_per_block <= MAX_THREADS_PER_BLOCK:
        raise ValueError(f"threads_per_block={threads_per_block}: must be 1..{MAX_THREADS_PER_BLOCK}")
    if not 0 <= registers_per_thread <= MAX_REGS_PER_THREAD:
        raise ValueError(f"registers_per_thread={registers_per_thread}: must be 0..{MAX_REGS_PER_THREAD}")
    smem = shared_per_block + dynamic_shared
    if shared_per_block < 0 or dynamic_shared < 0:
        raise ValueError("shared memory sizes must be >= 0")
    if smem > lim.smem_per_block:
        raise ValueError(f"{smem} bytes of shared memory per block exceed {arch}'s limit of "
                         f"{lim.smem_per_block} bytes ({lim.smem_per_block // KB} KB)")

    warps = -(-threads_per_block // WARP)
    regs_per_warp = _round_up(registers_per_thread * WARP, REG_ALLOC_UNIT)
    regs_per_block = regs_per_warp * warps
    if regs_per_warp * _round_up(warps, SUB_PARTITIONS) > lim.regs_per_sm:
        raise ValueError(f"{threads_per_block} threads x {registers_per_thread} registers do not fit one block "
                         f"on {arch} (65536 registers per block); use fewer threads or registers")

    if regs_per_warp:
        warps_per_sub = lim.regs_per_sm // SUB_PARTITIONS // regs_per_warp
        by_regs = warps_per_sub * SUB_PARTITIONS // warps
    else:
        by_regs = lim.max_blocks_per_sm
    smem_alloc = _round_up(smem + SMEM_RESERVED_PER_BLOCK, SMEM_ALLOC_UNIT)
    limits = {
        "warps": lim.max_warps_per_sm // warps,
        "registers": by_regs,
        "shared memory": lim.smem_per_sm // smem_alloc,
        "blocks": lim.max_blocks_per_sm,
    }
    blocks = min(limits.values())
    return Occupancy(
        arch=arch, threads_per_block=threads_per_block, blocks_per_sm=blocks, warps_per_sm=blocks * warps,
        occupancy=blocks * warps / lim.max_warps_per_sm,
        limited_by=tuple(k for k, v in limits.items() if v == blocks), block_limits=limits,
        registers_per_block=regs_per_block, shared_per_block=smem_alloc)
