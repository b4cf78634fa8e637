"""DSL helpers the internode kernels share: bounded waits on NVLink (u32) and RDMA (u64) counters, and the
timeout record that names node, GPU, channel, peer, block, warp, the counter, wanted and seen.

The waits are `ptxforge.kernels.comm`'s (one poll in place, the retry loop after the kernel's last
instruction, %globaltimer read only when the first poll fails); a wait past `timeout_ns` claims the GPU's
record at ERROR_OFF of its NVLink buffer (atom.cas), fills it, prints it with vprintf and traps.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from ptxforge.dsl import atom_cas, ctaid, cvt, guard, if_, ld, reg, ret, shfl_idx, st, tid, trap, u32, vprintf
from ptxforge.kernels import comm
from ptxforge.kernels.internode_layout import ERROR_OFF, FORMAT_OFFSETS, KERNELS, ROLES, TIMEOUT_ARGS

if TYPE_CHECKING:
    from ptxforge.dsl.memory import Pointer
    from ptxforge.dsl.values import Index, Reg, Value

gptr = comm._gptr
copy_row = comm._copy_row
syncwarp = comm._syncwarp
late_waits = comm._late_waits


def bound_waits(kernel: str, timeout_ns: Reg, nvl_peers: Pointer, local: Index, formats: Pointer, node: Index,
                gpu: Index) -> None:
    """Declare the kernel's wait bound and its timeout record (first thing in each kernel's body)."""

    def timed_out(role: str, seen: Value, wanted: Value, channel: Value = 0, peer: Value = 0) -> None:
        base = ld(nvl_peers[local]) + ERROR_OFF
        slot = gptr(base).cast(u32)
        values = {"node": node, "gpu": gpu, "channel": channel, "peer": peer, "block": ctaid.x,
                  "warp": tid.x >> 5, "wanted": wanted, "seen": seen}
        with if_(atom_cas(slot[0], 0, KERNELS.index(kernel) + 1) == 0):
            st(slot[1], ROLES.index(role))
            for i, name in enumerate(TIMEOUT_ARGS, start=2):
                st(slot[i], values[name])
            comm_format = formats.value() + FORMAT_OFFSETS[kernel, role]
            vprintf(comm_format, base + 8)
            trap()
        ret()

    comm._bound_waits(timeout_ns, nvl_peers, local, formats, kernel, on_timeout=timed_out)


def wait_until_ge(counter: Pointer, want: Value, lane: Reg | None, role: str, channel: Value, peer: Value,
                  wide: bool = False) -> Reg:
    """Poll *counter (ld.acquire.sys; a u64 RDMA counter when `wide`) until it reaches `want` (u32 compare).
    With `lane`, lane 0 polls and the warp gets the value (the warp must be converged); without, the
    calling thread alone polls. Returns the value seen (u32)."""
    seen = reg.u32(0)
    wide_seen = reg.u64(0) if wide else None

    def poll() -> None:
        def one() -> None:
            if wide_seen is not None:
                ld(counter, sem="acquire", scope="sys", out=wide_seen)
                cvt(wide_seen, u32, out=seen)
            else:
                ld(counter, sem="acquire", scope="sys", out=seen)
        if lane is None:
            one()
            return
        with guard(lane == 0):
            one()
        shfl_idx(seen, 0, out=seen)

    comm._wait(poll, lambda: seen < want, lambda: (role, seen, want, channel, peer))
    if lane is not None:
        syncwarp()
    return seen


