"""The CPU SIMT emulator: executes the PTX IR with numpy, all threads of the resident blocks as lanes.

Most users launch through `ptxforge.runtime` (`mod.kernel(name).launch(..., device="emu")`);
`emulate` is the low-level entry that takes a packed parameter buffer.

Pipeline: `program.Layout` (flatten bodies, register slots, labels, shared/local/param layout) ->
`compiler.compile_layout` (one op per instruction; builders per family in ops_alu, ops_float,
ops_memory, ops_atomic, ops_warp, ops_matrix, ops_wgmma, ops_async, ops_control; arithmetic from
`semantics`) ->
`machine.Machine` (lockstep lanes, divergence, barriers, calls; its watchdog in progress.py). Every memory access goes
through `memory.LaneMemory.resolve`.

Extension points: a new instruction family is a builder added to one ops module's BUILDERS under its ISA
table family name (registry.py binds it against ptx/isa and refuses other names; the families the emulator
does not run are registry.UNSUPPORTED, with reasons). Op and the op kinds live in op.py. TMA tensor
copies and reductions (ops_tma) slot into `ops_async._build_bulk` next to the non-tensor bulk copies and
their mbarrier transaction counts (they need a tensor-map encoding on the host side); .multicast::cluster
copies land in each CTA of the ctaMask as that CTA's thread (ops_tma.cluster_lane). Thread-block clusters: the
machine keeps a cluster's CTAs in one wave and runs barrier.cluster; shared::cluster addresses carry a
CTA rank in their high bits (memory.CLUSTER_RANK_SHIFT), resolved in `LaneMemory`.

A whole node: `Node(gpus=N)` (node.py) gives N devices sharing one address space (node_memory.py), with
streams on SM partitions whose launches `Node.synchronize` runs concurrently (schedule.py).
A cluster: `Cluster(nodes=N, gpus_per_node=G)` (cluster.py) joins nodes by NICs (nic.py) that PTX drives
through NVSHMEM's device API (nvshmem.py, nvshmem_library.py) on a symmetric heap (symmetric_heap.py);
`ClusterRank` (cluster_procs.py) runs one GPU of such a cluster per process (nic_procs.py, nic_transport.py).
"""

from ptxforge.emu.allocator import tune_malloc
from ptxforge.emu.cluster import Cluster, ClusterGpu, ClusterResult
from ptxforge.emu.cluster_procs import ClusterRank, RankBuffer
from ptxforge.emu.errors import (
    EmulatorError,
    KernelTrap,
    LaunchError,
    MemoryFault,
    TimeLimitExceeded,
    UnsupportedInstruction,
    WatchdogTimeout,
)
from ptxforge.emu.launch import EmuDevice, emu_device, emulate
from ptxforge.emu.nic import LinkModel
from ptxforge.emu.node import Node, NodeGpu, PendingLaunch, Stream
from ptxforge.emu.symmetric_heap import SymmetricBuffer

tune_malloc()  # before the first wave: lane arrays come from the heap, not fresh mmaps (see allocator.py)

__all__ = [
    "Cluster", "ClusterGpu", "ClusterRank", "ClusterResult", "RankBuffer", "EmuDevice", "emu_device", "LinkModel",
    "SymmetricBuffer",
    "emulate", "EmulatorError", "KernelTrap", "LaunchError", "MemoryFault", "Node",
    "NodeGpu", "PendingLaunch", "Stream", "TimeLimitExceeded", "UnsupportedInstruction",
    "WatchdogTimeout",
]
