"""`ClusterRank`: one GPU of an emulated cluster per process of a torch.distributed (gloo) world.

    rank = ClusterRank(group, num_ranks_per_node=2)     # in every process; PE = the rank in `group`
    buf = rank.malloc((4, 256), np.uint32, "recv")      # collective, as nvshmem_malloc: the same order everywhere
    rank.launch(kernel, grid, block, [buf.address, ...])
    result = rank.synchronize()                          # every rank's puts applied; bytes per link, all ranks
    rank.close()

The kernels are the single-process `Cluster`'s: NVSHMEM's device API (nvshmem.py) on the rank's emulated GPU,
an `IpcDevice` (emulator IPC) whose NIC is a `RankFabric` (nic_procs.py). Ranks `num_ranks_per_node` apart
form a node: their symmetric objects are mapped into each other's processes through IPC handles, so
`nvshmem_ptr` gives plain pointers and NVLink puts write directly; between nodes the NIC sends (object index,
offset, data, signal) over the transport (nic_transport.py: shared memory, or torch.distributed
point-to-point). Errors end on every rank: a rank whose launch fails tells the others, who raise its message.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import fields
from datetime import timedelta
from typing import TYPE_CHECKING, Any

import numpy as np

from ptxforge.emu.cluster import ClusterResult
from ptxforge.emu.errors import LaunchError, MemoryFault, WatchdogTimeout
from ptxforge.emu.ipc import IpcDevice, ipc_get_mem_handle, ipc_open_mem_handle
from ptxforge.emu.ipc.memory import ProgressBoard
from ptxforge.emu.launch import precompile
from ptxforge.emu.nic import LinkModel, LinkTraffic, modeled_us
from ptxforge.emu.nic_procs import PeerStopped, RankFabric
from ptxforge.emu.nic_transport import make_transport, torch_distributed
from ptxforge.emu.nvshmem_library import link
from ptxforge.module_cache import ModuleCache

if TYPE_CHECKING:
    from ptxforge.emu.ipc.memory import IpcMemory
    from ptxforge.emu.launch import ModuleImage
    from ptxforge.emu.memory import Allocation, LaneMemory
    from ptxforge.ptx import ir

# the emulator options a launch still takes as loose keywords (the runtime's DEPRECATED_LAUNCH_KEYWORDS, a layer
# above): given one, the watchdog goes beside it, as a loose keyword too
_LOOSE_OPTIONS = {"sanitize", "num_sms", "watchdog_s", "time_limit_s", "printf"}
DEFAULT_CAPACITY = 1 << 28  # each rank's IPC segment (sparse: pages exist once touched)


class RankBuffer:
    """One symmetric object as rank `me` sees it: its own copy (`address`, `read`, `write`) and every PE's
    base address (`bases`; another node's is not mapped here, the NIC names it by object and offset)."""

    def __init__(self, index: int, name: str, shape: tuple[int, ...], dtype: np.dtype, memory: IpcMemory,
                 own: Allocation, bases: list[int]):
        self.index, self.name, self.shape, self.dtype = index, name, shape, dtype
        self.nbytes = int(np.prod(shape, dtype=np.int64)) * dtype.itemsize
        self._memory, self.own = memory, own
        self.bases = bases

    @property
    def address(self) -> int:
        """The address of this rank's copy (what a kernel on this rank passes)."""
        return self.own.base

    def read(self) -> np.ndarray:
        """This rank's copy, as an array of `shape` x `dtype`."""
        raw = self._memory.read(self.own)[: self.nbytes]
        return raw.view(self.dtype).reshape(self.shape).copy()

    def write(self, array: Any) -> None:
        """Overwrite this rank's copy with `array` (broadcast to `shape`)."""
        a = np.ascontiguousarray(np.broadcast_to(np.asarray(array, self.dtype), self.shape))
        self._memory.write(self.own, a)

    def __repr__(self) -> str:
        return f"RankBuffer({self.name!r}, shape={self.shape}, dtype={self.dtype}, index={self.index})"


class RankHeap:
    """The symmetric objects of one rank, and address translation between PEs (as symmetric_heap.py)."""

    def __init__(self, me: int):
        self.me = me
        self.objects: list[RankBuffer] = []

    def _in(self, addr: int, pe: int) -> tuple[RankBuffer, int] | None:
        for buf in self.objects:
            base = buf.bases[pe]
            if base <= addr < base + max(1, buf.nbytes):
                return buf, addr - base
        return None

    def translate(self, addr: int, pe: int, target: int, what: str, nbytes: int = 0) -> int:
        hit = self._in(addr, pe)
        if hit is None:
            raise MemoryFault(f"{what}: address {addr:#x} is not PE {pe}'s copy of a symmetric object: NVSHMEM "
                              f"takes the calling PE's address of a symmetric object (ClusterRank.malloc, as "
                              f"nvshmem_malloc)", kind="invalid", address=addr, size=nbytes)
        buf, off = hit
        if nbytes and off + nbytes > buf.nbytes:
            raise MemoryFault(f"{what}: {nbytes} bytes at offset {off} run past the end of {buf.name} "
                              f"({buf.nbytes} bytes)", address=addr, size=nbytes)
        return buf.bases[target] + off

    def locate(self, addr: int, pe: int) -> tuple[int, int]:
        """(object index, offset) of an address in PE `pe`'s copy (checked when the op was issued)."""
        hit = self._in(addr, pe)
        assert hit is not None
        return hit[0].index, hit[1]

    def remote(self, addr: int) -> tuple[RankBuffer, int] | None:
        """(object, PE) of an address in another PE's copy."""
        for pe in range(len(self.objects[0].bases) if self.objects else 0):
            hit = self._in(addr, pe)
            if hit is not None:
                return hit[0], pe
        return None

    def base(self, index: int) -> int:
        return self.objects[index].bases[self.me]

    def describe(self, addr: int, pe: int) -> str:
        hit = self._in(addr, pe)
        return f"{addr:#x}" if hit is None else f"{hit[0].name} byte {hit[1]} ({addr:#x})"


class RankBoard(ProgressBoard):
    """The IPC progress board of a cluster rank: each watchdog tick of a launch (not a host write, which
    must not step the lockstep rounds) is also a round of the rank's NIC."""

    def __init__(self, memory: IpcMemory, network: RankFabric):
        super().__init__(memory)
        self.network = network

    def publish(self, lane_memory: LaneMemory | None = None) -> None:
        if lane_memory is not None:
            self.network.tick()
        super().publish(lane_memory)


class RankDevice(IpcDevice):
    """Rank `rank`'s emulated GPU: an IPC device that loads modules with NVSHMEM's blocking calls linked in."""

    def __init__(self, rank: int, world: int, gpus_per_node: int, num_sms: int, capacity: int):
        super().__init__(rank, world, num_sms=num_sms, capacity=capacity)
        self.gpus_per_node = gpus_per_node
        self.memory.unmapped_note = self._other_node

    def _other_node(self, rank: int) -> str | None:
        g = self.gpus_per_node
        if rank // g == self.rank // g:
            return None
        return (f"an address in the memory of node {rank // g} GPU {rank}, and GPU {self.rank} is on node "
                f"{self.rank // g}: another node's memory is reached through the NIC (nvshmem_putmem_nbi, "
                f"nvshmemx_signal_op, ...), not a pointer")

    @property
    def name(self) -> str:
        g = self.gpus_per_node
        return (f"GPU {self.rank} of the emulated cluster (node {self.rank // g}, local GPU {self.rank % g}, "
                f"PE {self.rank}; one process per GPU)")

    @property
    def label(self) -> str:
        return f"node {self.rank // self.gpus_per_node} GPU {self.rank}"

    def image(self, module: ir.Module) -> ModuleImage:
        return super().image(linked(module))

    def __repr__(self) -> str:
        return f"RankDevice(pe={self.rank}, node={self.rank // self.gpus_per_node}, sms={self.num_sms})"


_LINKED: ModuleCache[int, tuple[ir.Module, ir.Module]] = ModuleCache(64)  # id(module) -> (module, linked)


def linked(module: ir.Module) -> ir.Module:
    """`module` linked with the emulator's NVSHMEM library, once per process (a forked rank inherits it)."""
    hit = _LINKED.get(id(module))
    if hit is None or hit[0] is not module:
        hit = (module, link(module))
        _LINKED.put(id(module), hit)
    return hit[1]


def prepare(module: ir.Module) -> None:
    """Link and compile `module` as a rank's launch would, in this process: a parent that forks the ranks does
    it once for all of them (`ptxforge.runtime.validation.problems_of` remembers the validation the same way)."""
    precompile(linked(module))


class ClusterRank:
    """This process's GPU of an emulated cluster of `group`'s size (see the module docstring).

    `num_ranks_per_node`: GPUs per node (default: the whole group is one node); it divides the group's size.
    `transport`: "shm" or "dist" (None: PTXFORGE_NIC_TRANSPORT, else "shm"); "dist" needs every process of the
    default group to make its ClusterRank (it creates a process group). `adversarial`: a seed (each rank draws
    from (seed, rank)); `links`: a `LinkModel` or the planner's `Params`; `watchdog_s`: each launch's watchdog
    and the bound on every wait for another rank."""

    def __init__(self, group: Any = None, num_ranks_per_node: int | None = None, sms: int = 8,
                 transport: str | None = None, adversarial: int | None = None, links: Any = None,
                 watchdog_s: float = 60.0, capacity: int = DEFAULT_CAPACITY):
        _, dist = torch_distributed()
        self.group = group
        self.pe, self.npes = dist.get_rank(group), dist.get_world_size(group)
        g = self.npes if num_ranks_per_node is None else num_ranks_per_node
        self._agree((g, sms, transport, adversarial, watchdog_s), "num_ranks_per_node, sms, transport, "
                    "adversarial and watchdog_s")
        if isinstance(g, bool) or not isinstance(g, int) or g < 1 or self.npes % g:
            raise LaunchError(f"num_ranks_per_node must be a whole number that divides the group's {self.npes} "
                              f"ranks, not {g!r}")
        if adversarial is not None and (isinstance(adversarial, bool) or not isinstance(adversarial, int)):
            raise LaunchError(f"adversarial is a seed (an int) or None, not {adversarial!r}")
        if links is not None and not isinstance(links, LinkModel):
            links = LinkModel.from_params(links)
        self.gpus_per_node = g
        self.watchdog_s = float(watchdog_s)
        self.device = RankDevice(self.pe, self.npes, g, int(sms), int(capacity))
        self.heap = RankHeap(self.pe)
        self.network = RankFabric(self.device.memory, g, self.npes, self.pe, self.heap, adversarial, links,
                                  self.watchdog_s)
        try:
            self.network.transport = make_transport(
                transport, self.pe, self.npes, [p for p in range(self.npes) if p != self.pe], group, self._gather,
                self.network.describe_pe, timedelta(seconds=max(60.0, 4 * self.watchdog_s)))
        except BaseException:
            self.device.close()
            raise
        self.device.memory.network = self.network
        self.device.memory.progress_board = RankBoard(self.device.memory, self.network)
        self._generation = 0
        self._counted: dict[tuple[int, int], tuple[int, int]] = {}
        self.closed = False

    @property
    def node(self) -> int:
        return self.pe // self.gpus_per_node

    @property
    def transport(self) -> str:
        assert self.network.transport is not None
        return self.network.transport.kind

    def _gather(self, obj: Any) -> list[Any]:
        _, dist = torch_distributed()
        out: list[Any] = [None] * self.npes
        dist.all_gather_object(out, obj, group=self.group)
        return out

    def _agree(self, value: Any, what: str) -> None:
        """Every rank passed the same `value`, or every rank raises naming the ones that differ."""
        values = self._gather(repr(value))
        if any(v != values[0] for v in values):
            differ = [r for r, v in enumerate(values) if v != values[0]]
            raise LaunchError(f"the ranks disagree on {what}: rank 0 passed {values[0]}, "
                              + ", ".join(f"rank {r} {values[r]}" for r in differ))

    def malloc(self, shape: Any, dtype: Any, name: str = "") -> RankBuffer:
        """A symmetric object, zero-filled, one copy per PE (nvshmem_malloc): a collective, in the same order on
        every rank. Same-node peers' copies are mapped here (nvshmem_ptr, NVLink puts)."""
        shape = tuple(int(s) for s in np.atleast_1d(shape))
        dt = np.dtype(dtype)
        name = name or f"symmetric object {len(self.heap.objects)}"
        self._agree((shape, dt.str, name), f"symmetric allocation {len(self.heap.objects)} (shape, dtype, name)")
        if any(s < 0 for s in shape):
            raise LaunchError(f"symmetric allocation {name}: negative shape {shape}")
        nbytes = max(1, int(np.prod(shape, dtype=np.int64)) * dt.itemsize)
        mem = self.device.memory
        own = mem.alloc(nbytes, name=f"{name} (symmetric) on GPU {self.pe}")
        mem.write(own, bytes(nbytes))
        handles = self._gather(ipc_get_mem_handle(own.base, device=self.device))
        g = self.gpus_per_node
        bases = [own.base if p == self.pe else
                 ipc_open_mem_handle(h, device=self.device) if p // g == self.node else h.address
                 for p, h in enumerate(handles)]
        buf = RankBuffer(len(self.heap.objects), name, shape, dt, mem, own, bases)
        self.heap.objects.append(buf)
        self._gather(None)  # nobody goes on (and perhaps ends, unlinking its memory) before every rank mapped it
        return buf

    def launch(self, kernel: Any, grid: Any, block: Any, args: Any,
               explain: Callable[[Exception], Exception | None] | None = None, **options: Any) -> Any:
        """`kernel.launch(grid, block, args, device=this rank's GPU, watchdog_s=..., **options)`; when it fails,
        every other rank is told (and raises this rank's message); a WatchdogTimeout here also names what
        each warp waiting in NVSHMEM's calls waits for. `explain(error)` may give the error to raise and tell
        instead (say, what a trapping kernel's status words say it waited for)."""
        given = options.get("options")
        if given is None or set(options) & _LOOSE_OPTIONS:
            options.setdefault("watchdog_s", self.watchdog_s)
        else:  # the rank's watchdog in the options= given (say, with checks), unless they set one
            given = dict(given) if isinstance(given, dict) else {f.name: getattr(given, f.name) for f in fields(given)}
            options["options"] = {"watchdog_s": self.watchdog_s, **given}
        try:
            return kernel.launch(grid, block, args, device=self.device, **options)
        except PeerStopped as e:  # another rank's error; what this rank's warps waited for, too
            notes = self.network.stuck_notes()
            self.network.abandon()
            raise (PeerStopped(f"{e}; meanwhile here: " + "; ".join(notes)) if notes else e) from None
        except Exception as e:  # this rank's error (a fault, its watchdog, a bad argument): every rank hears it
            notes = self.network.stuck_notes()
            if notes and isinstance(e, WatchdogTimeout):
                e = WatchdogTimeout(f"{e}; NVSHMEM waits: " + "; ".join(notes))
            if explain is not None:
                e = explain(e) or e
            self.network.abort(f"{type(e).__name__}: {e}")
            self.network.abandon()
            raise e from None

    def synchronize(self, gather: bool = True) -> ClusterResult:
        """Complete every NIC operation of every rank (every rank calls it, in the same order), then what each
        link carried since the last synchronize, the same on every rank. `gather=False`: only the links from
        this rank, and no collective on the process group (the NIC transport alone: safe on a thread other
        than the one that runs the group's collectives)."""
        self._generation += 1
        try:
            self.network.finish(self._generation)
        except PeerStopped:
            raise
        except Exception as e:
            self.network.abort(f"{type(e).__name__}: {e}")
            raise
        mine = {k: (t.bytes, t.messages) for k, t in self.network.traffic.items()}
        new = {k: (b - self._counted.get(k, (0, 0))[0], m - self._counted.get(k, (0, 0))[1])
               for k, (b, m) in mine.items()}
        self._counted = mine
        out = []
        for part in (self._gather(new) if gather else [new]):
            for (src, dst), (b, m) in part.items():
                if b or m:
                    kind = self.network.link_kind(src, dst)
                    out.append(LinkTraffic(src, dst, kind, b, m, modeled_us(self.network.links, kind, b)))
        return ClusterResult(sorted(out, key=lambda t: (t.src, t.dst)))

    def close(self) -> None:
        """Close the transport and the device (its /dev/shm segment goes)."""
        if self.closed:
            return
        self.closed = True
        try:
            if self.network.transport is not None:
                self.network.transport.close()
        finally:
            self.device.close()

    def __enter__(self) -> ClusterRank:
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    def __repr__(self) -> str:
        return (f"ClusterRank(pe={self.pe} of {self.npes}, node={self.node}, gpus_per_node={self.gpus_per_node}, "
                f"transport={self.transport})")
