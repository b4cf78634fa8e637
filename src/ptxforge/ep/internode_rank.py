"""`RankGroup`: the internode communication kernels for this process's rank alone, on its GPU of an emulated
cluster (`ptxforge.emu.cluster_procs.ClusterRank`: one GPU a process, emulator IPC inside a node, the NIC model
between nodes). The same calls, arguments and results as the one-process `ClusterGroup`, whose code it runs,
with one rank's inputs:

    side = RankGroup(cluster_rank, timeout_s=60)
    side.ensure(side.dispatch_layouts(x_bytes, scale_words, k, True, num_experts, num_sms))   # a collective
    [out] = side.dispatch([x], [scales], [topk_idx], [topk_w], num_experts, num_sms)

Each launch runs at once on the calling thread (the other ranks' processes run theirs meanwhile); each phase
ends with the NIC completing every put (`ClusterRank.synchronize(gather=False)`: no collective on the process
group, so a device worker thread may run the calls). Growing the symmetric buffers is a collective
(`ensure`): the caller's thread does it, at the same call on every rank.

A wait that passes `timeout_s` traps the kernel; this rank raises the `CommTimeout` its timeout record
explains, and every other rank hears it (`ClusterRank.launch`) and raises it too.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import numpy as np

from ptxforge.emu.peer_writes import PeerWrites
from ptxforge.ep.errors import CommTimeout
from ptxforge.ep.internode_cluster import ClusterGroup, _Call
from ptxforge.errors import KernelFault
from ptxforge.kernels import internode_layout as L

if TYPE_CHECKING:
    from ptxforge.dsl.kernel import Kernel
    from ptxforge.emu.cluster_procs import ClusterRank, RankBuffer

Layouts = tuple[L.Topology, L.RdmaLayout, L.NvlLayout]


class RankGroup(ClusterGroup):
    """This process's rank (`cluster.pe`) of the internode kernels (see the module docstring)."""

    def __init__(self, cluster: ClusterRank, timeout_s: float = L.DEFAULT_TIMEOUT_S, rdma_ring: int = 8,
                 nvl_ring: int = 8, chunk: int = 4) -> None:
        self.rank_cluster = cluster
        self.me = cluster.pe
        self._configure(cluster.gpus_per_node, [cluster.pe], cluster.npes, timeout_s, rdma_ring, nvl_ring, chunk)
        self.nvlink_writes: dict[int, int] = {}  # bytes the last call's kernels stored into each peer's memory

    @property
    def device(self) -> Any:
        return self.rank_cluster.device

    def grows(self, layouts: Layouts) -> bool:
        """Whether a call of these layouts needs larger symmetric buffers (then `ensure`, on every rank)."""
        return self._grows(layouts[1], layouts[2])

    def ensure(self, layouts: Layouts) -> None:
        """Symmetric buffers for a call of these layouts: a collective (every rank, the same call, the caller's
        thread), after this rank's earlier calls have ended."""
        self._ensure(layouts[1], layouts[2])

    # ------------------------------------------------------------------ plumbing of one rank a process
    def _device(self, r: int) -> Any:
        return self.rank_cluster.device

    def _address(self, buf: RankBuffer, r: int) -> int:
        return int(buf.address if r == self.me else buf.bases[r])

    def _own(self, buf: RankBuffer, r: int) -> np.ndarray:
        return buf.read()

    def _malloc(self, nbytes: int, name: str) -> Any:
        return self.rank_cluster.malloc(nbytes, np.uint8, name)

    def _start(self, call: str) -> dict[int, _Call]:
        self.nvlink_writes = {}
        return super()._start(call)

    def _kernel_launch(self, r: int, kern: Kernel, grid: int, block: int, args: list, num_sms: int) -> Any:
        """Run the launch now (num_sms persistent blocks: the grid is the SM budget), counting the bytes its
        kernels store into same-node peers' memory (`nvlink_writes`)."""
        count = PeerWrites(self.me)
        try:
            return self.rank_cluster.launch(kern, (grid,), (block,), args, explain=self._explain,
                                            options={"checks": (count,)})
        finally:
            for peer, n in count.bytes.items():
                self.nvlink_writes[peer] = self.nvlink_writes.get(peer, 0) + n

    def link_bytes(self) -> dict[str, dict[int, int]]:
        """What this rank sent each peer during the last call, measured: "rdma" and "nvlink" by the NIC model
        (its puts), "nvlink" also the kernels' stores into same-node peers' memory."""
        out: dict[str, dict[int, int]] = {"rdma": {}, "nvlink": {}}
        for result in self.traffic:
            for t in result.links:
                if t.src == self.me and t.kind in out:
                    out[t.kind][t.dst] = out[t.kind].get(t.dst, 0) + t.bytes
        for peer, n in self.nvlink_writes.items():
            out["nvlink"][peer] = out["nvlink"].get(peer, 0) + n
        return out

    def _explain(self, e: Exception) -> Exception:
        """A trap that this rank's timed-out wait caused, as the `CommTimeout` naming it (told to every rank)."""
        if isinstance(e, KernelFault) and not isinstance(e, CommTimeout):
            found = self.timeouts()
            if found:
                return CommTimeout("; ".join(found) + f"; each wait is bounded by timeout_s = {self.timeout_s:g} s")
        return e

    def _run(self) -> None:
        """The phase's launches have run: the NIC completes every rank's puts (bounded by the watchdog)."""
        self.traffic.append(self.rank_cluster.synchronize(gather=False))
