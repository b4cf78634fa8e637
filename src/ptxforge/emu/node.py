"""`Node`: several emulated GPUs in one process, with peer memory and streams on SM partitions.

    node = Node(gpus=4, sms=132)
    buf = ptxforge.runtime.empty(256, np.uint32, device=node.devices[1])  # an address valid on every GPU
    s = node.devices[0].stream(sms=range(0, 20))                          # an SM partition
    p = kernel.launch(grid, block, args, device=node.devices[0], stream=s)  # returns at once
    node.synchronize()                                                    # runs everything pending
    p.result().per_sm

Memory (node_memory.py): one address space for the node, each allocation owned by one GPU; a kernel
reaches another GPU's memory through a plain pointer while peer access is on (the default).
Concurrency (schedule.py): `synchronize` runs the head launch of every stream of every GPU together,
each for a quantum of steps in turn, so a kernel spinning on a flag lets the kernel that sets it run.
"""

from __future__ import annotations

import time
from collections import deque
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, Generic, TypeVar, cast

import numpy as np

from ptxforge.emu.errors import LaunchError
from ptxforge.emu.launch import MAX_IMAGES, EmuDevice
from ptxforge.emu.memory import DeviceMemory
from ptxforge.emu.node_memory import GpuMemory
from ptxforge.emu.progress import check_time_options
from ptxforge.emu.sanitizer.node_races import NodeRaces
from ptxforge.emu.schedule import run_node
from ptxforge.module_cache import ModuleCache
from ptxforge.ptx import ir

if TYPE_CHECKING:
    from collections.abc import Iterable

    from ptxforge.emu.machine import Machine
    from ptxforge.emu.sanitizer import Sanitizer

MAX_GPUS = 64
R = TypeVar("R")  # what a PendingLaunch's result() gives


class NodeClock:
    """Steps run by every launch of the node so far: `%clock64` and the SM map's time axis."""

    def __init__(self):
        self.total = 0
        self.machine = None
        self.mark = 0

    def now(self) -> int:
        m = self.machine
        return self.total if m is None else self.total + m.steps + m.wave_steps() - self.mark

    def resume(self, machine: Machine) -> None:
        self.machine = machine
        self.mark = machine.steps + machine.wave_steps()

    def pause(self) -> None:
        m = self.machine
        if m is not None:
            self.total += m.steps + m.wave_steps() - self.mark
            self.machine = None


class Stream:
    """An ordered queue of launches on one GPU, whose blocks run only on the SMs `sms`."""

    def __init__(self, device: NodeGpu, index: int, sms: Iterable[int] | None, priority: int):
        self.device = device
        self.index = index
        self.sms = _sm_list(sms, device)
        self.priority = int(priority)
        self.queue: deque = deque()

    @property
    def name(self) -> str:
        lo, hi = self.sms[0], self.sms[-1]
        span = f"SM {lo}" if lo == hi else (f"SMs {lo}-{hi}" if hi - lo + 1 == len(self.sms) else
                                             f"{len(self.sms)} SMs")
        return f"{self.device.label} stream {self.index} ({span})"

    def synchronize(self) -> None:
        """Run everything pending on the node (launches on other streams may be what this one waits for)."""
        self.device.node.synchronize()

    def __repr__(self) -> str:
        return f"Stream({self.name}, priority={self.priority}, {len(self.queue)} pending)"


def _sm_list(sms, device) -> tuple[int, ...]:
    n = device.num_sms
    if sms is None:
        return tuple(range(n))
    try:
        out = tuple(int(s) for s in sms)
    except TypeError:
        raise LaunchError(f"sms must be a range or a list of SM indices, got {sms!r}") from None
    if not out:
        raise LaunchError("sms is empty: a stream needs at least one SM")
    bad = [s for s in out if not 0 <= s < n]
    if bad:
        raise LaunchError(f"SM {bad[0]} does not exist: GPU {device.gpu} has SMs 0-{n - 1}")
    if len(set(out)) != len(out):
        raise LaunchError(f"sms lists an SM twice: {list(out)}")
    return out


class NodeGpu(EmuDevice):
    """One GPU of a node: its memory, its loaded modules, its streams."""

    node: Node
    gpu: int
    memory: GpuMemory
    streams_supported = True

    def __init__(self, node: Node, gpu: int, num_sms: int):
        super().__init__(num_sms, memory=GpuMemory(node.memory, gpu, node.peers))
        self.node = node
        self.gpu = gpu
        self.streams: list[Stream] = []

    @property
    def name(self) -> str:
        return f"GPU {self.gpu} of the emulated node"

    @property
    def label(self) -> str:
        """How messages name this GPU among the others (`GPU 3`; a cluster's: `node 1 GPU 3`)."""
        return f"GPU {self.gpu}"

    def owns_address(self, address: int) -> bool:
        """Whether `address` lies inside a live allocation of any GPU of the node: a kernel here takes it as it
        is (a peer whose access is disabled included: the kernel's access to it faults, naming both GPUs)."""
        return self.memory.owner(address) is not None

    @property
    def compiled(self) -> ModuleCache[int, tuple[ir.Module, dict]]:
        """The node's table: one compiled kernel serves every GPU of the node."""
        return self.node.compiled

    def stream(self, sms: Iterable[int] | None = None, priority: int = 0) -> Stream:
        """A new stream whose launches run on the SMs `sms` (a range or list; default all), in order."""
        s = Stream(self, len(self.streams), sms, priority)
        self.streams.append(s)
        return s

    def synchronize(self) -> None:
        self.node.synchronize()

    def __repr__(self) -> str:
        return f"NodeGpu({self.gpu}, sms={self.num_sms})"


class PendingLaunch(Generic[R]):
    """A launch queued on a stream; `result()` runs the node (if needed) and gives its result (an `R`: the
    runtime's stream launches give a `ptxforge.runtime.LaunchResult`).

    `finish(stats)` turns the machine's stats into the result (and may raise the launch's own error,
    e.g. the sanitizer's); `abort(error)` cleans up after a launch that did not complete and returns the
    error to report for it."""

    def __init__(self, stream: Stream, machine: Any, kernel: str, finish: Callable[[dict[str, Any]], R],
                 abort: Callable[[BaseException], BaseException | None]) -> None:
        self.stream = stream
        self.machine = machine
        self.kernel = kernel
        self._finish = finish
        self._abort = abort
        self.state = "pending"  # pending | running | done | failed
        self._result: R | None = None
        self.error: BaseException | None = None

    @property
    def done(self) -> bool:
        return self.state in ("done", "failed")

    def result(self) -> R:
        """This launch's result (running the node first if it is pending), or its own error."""
        if not self.done:
            try:
                self.stream.device.node.synchronize()
            except Exception:
                if not self.done:
                    raise
        if self.error is not None:
            raise self.error
        return cast(R, self._result)  # done without an error: complete() set it

    def complete(self, stats: dict[str, Any]) -> None:
        try:
            self._result = self._finish(stats)
            self.state = "done"
        except Exception as e:  # the launch's own error (a sanitizer report): kept for result()
            self.error = e
            self.state = "failed"
            raise

    def fail(self, error: BaseException) -> None:
        self.error = self._abort(error) or error
        self.state = "failed"

    def __repr__(self) -> str:
        return f"PendingLaunch({self.kernel} on {self.stream.name}, {self.state})"


class Node:
    """`gpus` emulated GPUs of `sms` SMs each, all peers of each other. `node.devices[r]` is a device
    wherever one is taken (`Kernel.launch(device=...)`, `runtime.empty/to_device`).

    `sanitize`: every launch on the node runs under the sanitizer (True, or a `Sanitizer` whose options
    each launch takes); the races between concurrent launches are checked node-wide.
    `watchdog_s`: how long `synchronize` may go without progress (no global store, no launch ending)
    before it stops and says where every warp waits; 10 times that bounds it in all."""

    gpu_class = NodeGpu  # a Cluster's GPUs are ClusterGpus (cluster.py)
    network: Any = None  # a Cluster's NICs (nic.Fabric): the scheduler delivers between rounds

    def __init__(self, gpus: int = 8, sms: int = 132, sanitize: bool | Sanitizer = False, watchdog_s: float = 60.0):
        if not 1 <= int(gpus) <= MAX_GPUS:
            raise LaunchError(f"a node has 1 to {MAX_GPUS} GPUs, got {gpus}")
        if int(sms) < 1:
            raise LaunchError(f"a GPU needs at least one SM, got {sms}")
        self.memory = DeviceMemory()
        self.peers = np.ones((int(gpus), int(gpus)), bool)
        self.clock = NodeClock()
        self.t0_ns = time.perf_counter_ns()
        self.sanitize = sanitize
        self.watchdog_s, _ = check_time_options(watchdog_s, None)  # > 0: nan or a negative is an error
        self.devices = tuple(self.gpu_class(self, r, int(sms)) for r in range(int(gpus)))
        self.rooms = [SmRoom(int(sms)) for _ in range(int(gpus))]  # SM occupancy of concurrent launches
        self.sm_map: list = []  # (gpu, stream, kernel, sm ids, clock at start, clock at end) per wave run
        # id(module) -> (module, kernels compiled once for all GPUs), for modules without variables
        self.compiled: ModuleCache[int, tuple[ir.Module, dict]] = ModuleCache(MAX_IMAGES)
        self.races = None  # the node-wide race check of concurrent launches (sanitize=True)
        if sanitize:
            self.races = NodeRaces(self.memory)

    def __len__(self) -> int:
        return len(self.devices)

    def _gpu(self, g) -> int:
        g = g.gpu if isinstance(g, NodeGpu) else int(g)
        if not 0 <= g < len(self.devices):
            raise LaunchError(f"GPU {g} is not in this node of {len(self.devices)} GPUs")
        return g

    def disable_peer_access(self, a: int | NodeGpu, b: int | NodeGpu) -> None:
        """GPU `a` may no longer access GPU `b`'s memory (one direction, as cudaDeviceDisablePeerAccess)."""
        a, b = self._gpu(a), self._gpu(b)
        if a == b:
            raise LaunchError(f"GPU {a} always accesses its own memory")
        self.peers[a, b] = False

    def enable_peer_access(self, a: int | NodeGpu, b: int | NodeGpu) -> None:
        a, b = self._gpu(a), self._gpu(b)
        self.peers[a, b] = True

    def can_access_peer(self, a: int | NodeGpu, b: int | NodeGpu) -> bool:
        return bool(self.peers[self._gpu(a), self._gpu(b)])

    def watch_launch(self, machine: Any, sanitizer: Any, gpu: int, label: str, stream: Stream) -> None:
        """Add the node-wide checks to a sanitized launch of GPU `gpu` before it runs."""
        if sanitizer.check_races and self.races is not None:  # with other launches
            self.races.attach(machine, sanitizer, gpu, label, stream)

    @property
    def pending(self) -> list[PendingLaunch]:
        return [p for d in self.devices for s in d.streams for p in s.queue]

    def synchronize(self) -> None:
        """Run every pending launch of every stream of every GPU concurrently until all end; raises the
        first error (the others' launches are then failed with it)."""
        run_node(self)

    def __repr__(self) -> str:
        return f"Node(gpus={len(self.devices)}, sms={self.devices[0].num_sms})"


class SmRoom:
    """The occupancy of one GPU's SMs, shared by the node's concurrent launches: a wave of blocks is
    placed only where threads, block slots and shared memory are left (the limits `Machine` uses)."""

    def __init__(self, num_sms: int):
        self.threads = np.zeros(num_sms, np.int64)
        self.blocks = np.zeros(num_sms, np.int64)
        self.shared = np.zeros(num_sms, np.int64)

    def _need(self, m) -> tuple[int, int]:
        return m.lanes_per_block, (m.shared_size + 1024 if m.shared_size else 0)

    def admit(self, m: Machine, n: int) -> np.ndarray:
        """The SMs (one per block, at most `n`) where `m`'s next wave fits now, reserved; may be empty."""
        max_threads, max_blocks, max_shared = m.sm_limits
        threads, smem = self._need(m)
        ids = m.sm_ids
        free = np.minimum((max_threads - self.threads[ids]) // threads, max_blocks - self.blocks[ids])
        if smem:
            free = np.minimum(free, (max_shared - self.shared[ids]) // smem)
        free = np.clip(np.minimum(free, m.blocks_per_sm), 0, None)
        # fill layer by layer (one block on each SM with room, then a second ...), as the machine's round robin
        layers = [ids[free > k] for k in range(int(free.max(initial=0)))]
        sms = np.concatenate(layers)[:n] if layers else np.zeros(0, np.int64)
        np.add.at(self.threads, sms, threads)
        np.add.at(self.blocks, sms, 1)
        if smem:
            np.add.at(self.shared, sms, smem)
        return sms

    def release(self, m: Machine, sms: np.ndarray) -> None:
        threads, smem = self._need(m)
        np.subtract.at(self.threads, sms, threads)
        np.subtract.at(self.blocks, sms, 1)
        if smem:
            np.subtract.at(self.shared, sms, smem)
