"""`Cluster`: several emulated nodes in one process, joined by NICs that PTX drives through NVSHMEM's device API.

    cluster = Cluster(nodes=2, gpus_per_node=2, sms=8)
    buf = cluster.malloc((4, 256), np.uint32, name="recv")     # symmetric: one copy per PE (nvshmem_malloc)
    for pe, dev in enumerate(cluster.devices):                  # PE = node * gpus_per_node + local GPU
        kernel.launch(grid, block, [buf.address(pe), ...], device=dev, stream=dev.stream())
    result = cluster.synchronize()                              # runs every launch of every node together
    result.links                                                # bytes, messages, modeled time per link

A Cluster is a `Node` spanning all its GPUs (one address space, one scheduler, one race check), with peer
access only inside each node: a kernel reaches another node's memory only through its NIC (nic.py) with
nvshmem_putmem_nbi and friends (nvshmem.py); `nvshmem_ptr` gives plain pointers to NVLink peers.
`cluster.nodes[n]` are node n's GPUs. `adversarial=seed` delays and reorders NIC deliveries within what NVSHMEM
allows; `links` (a `LinkModel`, or the planner's `Params`) gives each link's modeled time. With
`sanitize=True` the launches run under the sanitizer, the node-wide race check, and the checks across NICs
(sanitizer/remote_order.py). A wait that never completes stops within `watchdog_s` and names, per waiting warp,
its node, GPU, block, warp, the signal and the value it wants and sees.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np

from ptxforge.emu.errors import LaunchError
from ptxforge.emu.nic import Fabric, LinkModel, LinkTraffic, modeled_us
from ptxforge.emu.node import MAX_GPUS, Node, NodeGpu
from ptxforge.emu.node_memory import GpuMemory
from ptxforge.emu.nvshmem_library import link
from ptxforge.emu.sanitizer.remote_order import RemoteOrder
from ptxforge.emu.symmetric_heap import SymmetricBuffer, SymmetricHeap
from ptxforge.module_cache import ModuleCache
from ptxforge.ptx import ir

if TYPE_CHECKING:
    import numpy.typing as npt

    from ptxforge.emu.launch import ModuleImage
    from ptxforge.emu.sanitizer import Sanitizer


class ClusterGpuMemory(GpuMemory):
    """A cluster GPU's memory: its NIC (`network`) and a fault note that points across nodes to NVSHMEM."""

    gpus_per_node = 1

    def peer_blocked(self, indices: npt.ArrayLike) -> tuple[np.ndarray, str] | None:
        hit = super().peer_blocked(indices)
        if hit is None:
            return None
        mask, note = hit
        owners = np.asarray([a.gpu for a in self.shared.allocations], np.int64)[np.asarray(indices)]
        other = int(owners.reshape(-1)[int(np.flatnonzero(mask.reshape(-1))[0])])
        g = self.gpus_per_node
        if other // g != self.gpu // g:
            note = (f"{note.split(', and peer access')[0]}, on node {other // g}, and GPU {self.gpu} is on node "
                    f"{self.gpu // g}: another node's memory is reached through the NIC "
                    f"(nvshmem_putmem_nbi, nvshmemx_signal_op, ...), not a pointer")
        return mask, note


class ClusterGpu(NodeGpu):
    """One GPU of a cluster: a NodeGpu that loads modules with NVSHMEM's blocking calls linked in."""

    node: Cluster

    def __init__(self, node: Cluster, gpu: int, num_sms: int):
        super().__init__(node, gpu, num_sms)
        mem = ClusterGpuMemory(node.memory, gpu, node.peers)
        mem.gpus_per_node = node.gpus_per_node
        self.memory = mem

    @property
    def name(self) -> str:
        g = self.node.gpus_per_node
        return f"GPU {self.gpu} of the emulated cluster (node {self.gpu // g}, local GPU {self.gpu % g}, PE {self.gpu})"

    @property
    def label(self) -> str:
        return f"node {self.gpu // self.node.gpus_per_node} GPU {self.gpu}"

    def image(self, module: ir.Module) -> ModuleImage:
        return super().image(self.node.linked(module))

    def __repr__(self) -> str:
        return f"ClusterGpu(pe={self.gpu}, node={self.gpu // self.node.gpus_per_node}, sms={self.num_sms})"


@dataclass
class ClusterResult:
    """What a `Cluster.synchronize` moved: per link (source GPU -> target GPU) bytes, messages, modeled time."""

    links: list[LinkTraffic]

    def bytes(self, kind: str | None = None) -> int:
        return sum(t.bytes for t in self.links if kind is None or t.kind == kind)

    def table(self) -> str:
        rows = ["link                 kind     bytes  messages  modeled us"]
        for t in self.links:
            us = "-" if t.modeled_us is None else f"{t.modeled_us:.3f}"
            rows.append(f"PE {t.src:>2} -> PE {t.dst:>2}       {t.kind:<6} {t.bytes:>9} {t.messages:>9} {us:>11}")
        return "\n".join(rows)


class Cluster(Node):
    """`nodes` x `gpus_per_node` emulated GPUs of `sms` SMs; PE p is GPU p % gpus_per_node of node
    p // gpus_per_node (`devices[p]`). See the module docstring."""

    gpu_class: type[NodeGpu] = ClusterGpu

    def __init__(self, nodes: int = 2, gpus_per_node: int = 8, sms: int = 132, sanitize: bool | Sanitizer = False,
                 watchdog_s: float = 60.0, adversarial: int | None = None, links: LinkModel | Any = None):
        if int(nodes) < 1 or int(gpus_per_node) < 1 or int(nodes) * int(gpus_per_node) > MAX_GPUS:
            raise LaunchError(f"a cluster has at least 1 node of at least 1 GPU and at most {MAX_GPUS} GPUs in all, "
                              f"got {nodes} x {gpus_per_node}")
        if adversarial is not None and (isinstance(adversarial, bool) or not isinstance(adversarial, int)):
            raise LaunchError(f"adversarial is a seed (an int) or None, not {adversarial!r}")
        self.gpus_per_node = int(gpus_per_node)
        super().__init__(gpus=int(nodes) * self.gpus_per_node, sms=sms, sanitize=sanitize, watchdog_s=watchdog_s)
        npes = len(self.devices)
        node_of = np.arange(npes) // self.gpus_per_node
        self.peers[:] = node_of[:, None] == node_of[None, :]  # plain pointers only inside a node
        if links is not None and not isinstance(links, LinkModel):
            links = LinkModel.from_params(links)
        self.network = Fabric(self.memory, self.gpus_per_node, npes, adversarial, links)
        self.heap = SymmetricHeap([d.memory for d in self.devices])
        self.network.heap = self.heap
        for d in self.devices:
            assert isinstance(d.memory, ClusterGpuMemory)  # (ClusterGpu makes one)
            d.memory.network = self.network
        self.remote_order = RemoteOrder(self.network) if sanitize else None
        self._linked: ModuleCache[int, tuple[ir.Module, ir.Module]] = ModuleCache(64)

    @property
    def nodes(self) -> tuple[tuple[NodeGpu, ...], ...]:
        """Node n's GPUs (ClusterGpus), n = 0 .. nodes-1."""
        g = self.gpus_per_node
        return tuple(tuple(self.devices[n * g:(n + 1) * g]) for n in range(len(self.devices) // g))

    def malloc(self, shape: Any, dtype: Any, name: str = "") -> SymmetricBuffer:
        """A symmetric object, zero-filled, one copy on every PE (nvshmem_malloc's host-side counterpart)."""
        return self.heap.malloc(shape, dtype, name)

    def linked(self, module: ir.Module) -> ir.Module:
        """`module` with NVSHMEM's blocking calls linked in (cached: the same object for the same module)."""
        hit = self._linked.get(id(module))
        if hit is None or hit[0] is not module:
            hit = (module, link(module))
            self._linked.put(id(module), hit)
        return hit[1]

    def enable_peer_access(self, a: int | NodeGpu, b: int | NodeGpu) -> None:
        a, b = self._gpu(a), self._gpu(b)
        g = self.gpus_per_node
        if a // g != b // g:
            raise LaunchError(f"GPU {a} (node {a // g}) cannot access GPU {b} (node {b // g}) by pointer: they are "
                              f"on different nodes; use NVSHMEM's puts")
        super().enable_peer_access(a, b)

    def watch_launch(self, machine: Any, sanitizer: Any, gpu: int, label: str, stream: Any) -> None:
        super().watch_launch(machine, sanitizer, gpu, label, stream)
        if self.remote_order is not None and sanitizer is not None:
            self.remote_order.attach(machine, sanitizer, gpu, label)

    def synchronize(self) -> ClusterResult:  # type: ignore[override]
        """Run every pending launch of every node concurrently until all end (the NICs deliver meanwhile and
        everything in flight at the end); raises the first error. Returns what each link carried."""
        before = {k: (t.bytes, t.messages) for k, t in self.network.traffic.items()}
        try:
            super().synchronize()
        finally:
            if self.remote_order is not None:  # the next synchronize starts after all of this (host order)
                self.remote_order.reset()
        out = []
        for t in self.network.link_report():
            b, m = before.get((t.src, t.dst), (0, 0))
            if t.bytes - b or t.messages - m:
                out.append(LinkTraffic(t.src, t.dst, t.kind, t.bytes - b, t.messages - m))
        for t in out:
            t.modeled_us = modeled_us(self.network.links, t.kind, t.bytes)
        return ClusterResult(out)

    def traffic(self) -> ClusterResult:
        """Everything each link carried since the cluster was made."""
        return ClusterResult(self.network.link_report())

    def __repr__(self) -> str:
        return (f"Cluster(nodes={len(self.devices) // self.gpus_per_node}, gpus_per_node={self.gpus_per_node}, "
                f"sms={self.devices[0].num_sms})")

