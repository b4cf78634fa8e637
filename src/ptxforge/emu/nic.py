"""The NICs of an emulated `Cluster`: one-sided puts, signals and remote atomics delivered asynchronously.

Every NVSHMEM operation a kernel issues (nvshmem.py) becomes a `NicOp` queued on its GPU's `Nic`. The
`Fabric` delivers them between the scheduler's rounds (each round gives every running launch one quantum),
so the warps keep running while data is in flight. What NVSHMEM permits, and so what the fabric may do:

- operations of one PE to one target PE are delivered in any order, unless an `nvshmem_fence` between them
  orders them. Fence and quiet act for the calling thread's operations (NVSHMEM's rule for multithreaded
  PEs): each op records the threads that issued it (one, or a warp's or block's for the collective forms)
  and, per thread, its fence epoch; an op waits for every op of an earlier epoch of one of its threads to
  the same target;
- a put-with-signal writes its data, then its signal (one unit here);
- `nvshmem_quiet` completes the calling thread's operations: here it delivers them at once, in a permitted
  order (`nvshmem_barrier_all` and the host complete every thread's);
- the source of a non-blocking put is read when it is delivered (the latest NVSHMEM allows: before quiet).

Default mode: an op becomes deliverable one round after it is issued plus one round per 8 KiB, so large puts
arrive after small signals issued later (not issue order). `adversarial=seed`: data puts wait 4-47 rounds
and signals and atomics 0-3 (a seeded random draw), within the same rules, so a missing fence or quiet
shows up on every run instead of once in thousands.

Traffic: bytes and messages per (source GPU, target GPU) link, NVLink inside a node and the GPUs' NICs
(RDMA) between nodes, with a modeled time per link from a link model (bandwidth and latency; the planner's
`Params` carries them).
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import numpy as np

from ptxforge.emu.errors import MemoryFault

if TYPE_CHECKING:
    from ptxforge.emu.memory import Allocation, DeviceMemory

SIGNAL_SET, SIGNAL_ADD = 9, 10  # NVSHMEM_SIGNAL_SET / NVSHMEM_SIGNAL_ADD (nvshmem's device headers)
AMO_ADD = -1  # nvshmem_uint64_atomic_add: an add, kept apart from signal ops in messages
BYTES_PER_ROUND = 8192  # default mode: an op waits one more round per this many bytes
SIGNAL_BYTES = 8
MASK64 = (1 << 64) - 1
HOST = -1  # the issuer of an op no kernel thread issued (made on the host, in tests)


@dataclass(frozen=True)
class Site:
    """Where an operation was issued: the PTX instruction and the thread."""

    file: str
    line: int
    text: str
    gpu: int
    node: int
    block: tuple[int, int, int]
    thread: tuple[int, int, int]

    def describe(self) -> str:
        return (f"{self.file}:{self.line} ({self.text.rstrip(';')}) by thread {self.thread} block {self.block} "
                f"on node {self.node} GPU {self.gpu}")


@dataclass(eq=False)
class NicOp:
    """One operation in flight: a put (`nbytes` from `src_addr` on the source to `dst_addr` on the target),
    with or without a signal, or a signal/atomic alone (`nbytes` 0)."""

    kind: str  # "put" | "put_signal" | "signal" | "atomic_add"
    src: int  # source PE (global GPU index)
    dst: int  # target PE
    dst_addr: int
    src_addr: int
    nbytes: int
    sig_addr: int = 0  # the signal word on the target (put_signal, signal, atomic_add)
    sig_value: int = 0
    sig_op: int = SIGNAL_SET
    site: Site | None = None
    issuers: frozenset[int] = frozenset({HOST})  # the issuing threads (block * 1024 + thread, per PE)
    epochs: dict[int, int] = field(default_factory=dict)  # each issuer's fence epoch when it issued
    seq: int = 0
    due: int = 0
    delivered: bool = False

    @property
    def signals(self) -> bool:
        return self.kind != "put"


@dataclass
class LinkModel:
    """Bandwidth (GB/s) and latency (us) of NVLink and of the scale-out network (the NICs)."""

    nvlink_gbs: float
    scaleout_gbs: float
    nvlink_latency_us: float
    scaleout_latency_us: float

    @classmethod
    def from_params(cls, params: Any) -> LinkModel:
        """The link figures of a planner preset (`ptxforge.plan.params.Params` or anything with its fields)."""
        return cls(float(params.nvlink_gbs), float(params.scaleout_gbs), float(params.nvlink_latency_us),
                   float(params.scaleout_latency_us))


@dataclass
class LinkTraffic:
    """What one link (source GPU -> target GPU) carried: bytes, messages and the modeled time."""

    src: int
    dst: int
    kind: str  # "nvlink" | "rdma" | "local"
    bytes: int = 0
    messages: int = 0
    modeled_us: float | None = None


def modeled_us(links: LinkModel | None, kind: str, nbytes: int) -> float | None:
    """The modeled time of `nbytes` over one link of `kind` (latency + bytes / bandwidth); None without a
    model or for a GPU's puts to itself."""
    if links is None or kind == "local":
        return None
    gbs, lat = ((links.nvlink_gbs, links.nvlink_latency_us) if kind == "nvlink" else
                (links.scaleout_gbs, links.scaleout_latency_us))
    return lat + nbytes / (gbs * 1e3)  # GB/s = 1e3 bytes per us


@dataclass
class Nic:
    """The NIC of one GPU: the operations it issued that are not delivered yet, its fence epoch."""

    pe: int
    node: int
    queue: list[NicOp] = field(default_factory=list)
    epochs: dict[int, int] = field(default_factory=dict)  # per issuing thread: its fence epoch


class Fabric:
    """The cluster's network: every GPU's NIC, delivery between rounds, traffic, and what the sanitizer
    needs to know about ordering (`watchers` get `issued`, `fenced`, `quieted` and `delivered` events)."""

    def __init__(self, memory: DeviceMemory, gpus_per_node: int, npes: int, adversarial: int | None = None,
                 links: LinkModel | None = None):
        self.memory = memory
        self.gpus_per_node = gpus_per_node
        self.nics = [Nic(pe, pe // gpus_per_node) for pe in range(npes)]
        self.adversarial = adversarial
        self.rng = np.random.default_rng(adversarial) if adversarial is not None else None
        self.links = links
        self.round = 0
        self._seq = itertools.count()
        self.traffic: dict[tuple[int, int], LinkTraffic] = {}
        self.watchers: list[Any] = []
        self.waiting: dict[tuple[int, int, int], str] = {}  # (gpu, block, warp) -> what it waits for
        self.barrier_gen = 0
        self.barrier_arrived: set[int] = set()  # PEs at nvshmem_barrier_all now
        self.heap: Any = None  # the cluster's SymmetricHeap (symmetric_heap.py), set by the Cluster

    # ------------------------------------------------------------------ issue
    def link_kind(self, src: int, dst: int) -> str:
        if src == dst:
            return "local"
        return "nvlink" if src // self.gpus_per_node == dst // self.gpus_per_node else "rdma"

    def issue(self, op: NicOp) -> None:
        """Queue `op` on its source NIC (its addresses already checked)."""
        nic = self.nics[op.src]
        op.epochs, op.seq = {t: nic.epochs.get(t, 0) for t in op.issuers}, next(self._seq)
        op.due = self.round + self._delay(op)
        nic.queue.append(op)
        for w in self.watchers:
            w.issued(op)

    def _delay(self, op: NicOp) -> int:
        if self.rng is None:
            return 1 + op.nbytes // BYTES_PER_ROUND
        if op.kind == "put":
            return int(self.rng.integers(4, 48))
        return int(self.rng.integers(0, 4))

    def fence(self, pe: int, threads: frozenset[int] | None = None) -> None:
        """nvshmem_fence by `threads` of PE `pe` (None: every thread): their later operations to each target
        follow their earlier ones."""
        self._next_epoch(self.nics[pe], threads)
        for w in self.watchers:
            w.fenced(pe, threads)

    def quiet(self, pe: int, threads: frozenset[int] | None = None) -> None:
        """nvshmem_quiet by `threads` of PE `pe` (None: every thread): their operations are delivered now."""
        nic = self.nics[pe]
        self._deliver(nic, everything=True, only=threads)
        self._next_epoch(nic, threads)
        for w in self.watchers:
            w.quieted(pe, threads)

    def _next_epoch(self, nic: Nic, threads: frozenset[int] | None) -> None:
        known = set(nic.epochs) | {t for op in nic.queue for t in op.issuers}
        for t in known if threads is None else threads:
            nic.epochs[t] = nic.epochs.get(t, 0) + 1

    # ------------------------------------------------------------------ nvshmem_barrier_all
    def barrier_arrive(self, pe: int) -> int | None:
        """PE `pe`'s calling thread arrives; returns the generation to wait for (None: it waits already)."""
        if pe in self.barrier_arrived:
            return None
        self.barrier_arrived.add(pe)
        target = self.barrier_gen + 1
        if len(self.barrier_arrived) == len(self.nics):
            self.drain()
            self.barrier_arrived.clear()
            self.barrier_gen = target
        return target

    def barrier_reached(self, generation: int) -> bool:
        return self.barrier_gen >= generation

    def barrier_missing(self) -> list[int]:
        """The PEs that have not arrived at the barrier now under way."""
        return [p for p in range(len(self.nics)) if p not in self.barrier_arrived]

    # ------------------------------------------------------------------ delivery
    def advance(self) -> bool:
        """One scheduler round: deliver what is due; True when something was delivered (progress)."""
        self.round += 1
        moved = False
        for nic in self.nics:
            moved |= self._deliver(nic, everything=False)
        return moved

    def drain(self) -> None:
        """Deliver everything still in flight (the launches that issued it have ended)."""
        for nic in self.nics:
            self._deliver(nic, everything=True)

    def pending(self) -> int:
        return sum(len(n.queue) for n in self.nics)

    def _deliver(self, nic: Nic, everything: bool, only: frozenset[int] | None = None) -> bool:
        """Deliver what is due (`everything`: all of it; `only`: the ops of these threads), within the fences."""
        moved = False
        while nic.queue:
            oldest: dict[tuple[int, int], int] = {}  # (target, thread) -> its lowest epoch still queued
            for op in nic.queue:
                for t, e in op.epochs.items():
                    oldest[(op.dst, t)] = min(oldest.get((op.dst, t), e), e)
            ready = [op for op in nic.queue if all(e == oldest[(op.dst, t)] for t, e in op.epochs.items())
                     and (everything or op.due <= self.round) and (only is None or op.issuers & only)]
            if not ready:
                break
            ready.sort(key=lambda o: (o.due, o.seq))
            for op in ready:
                nic.queue.remove(op)
                self._apply(op)
                moved = True
        return moved

    def _apply(self, op: NicOp) -> None:
        self._write(op, self._source_bytes(op))
        op.delivered = True
        self._count(op)
        for w in self.watchers:
            w.delivered(op)

    def _source_bytes(self, op: NicOp) -> np.ndarray:
        """What a put carries, read from its source now (NVSHMEM lets the NIC read it until quiet)."""
        if not op.nbytes:
            return np.zeros(0, np.uint8)
        s = self._offset(op.src_addr)
        return self.memory.arena[s: s + op.nbytes].copy()

    def _write(self, op: NicOp, data: np.ndarray) -> None:
        """The one place that writes a target's memory: the data, then the signal."""
        arena = self.memory.arena
        if op.nbytes:
            d = self._offset(op.dst_addr)
            arena[d: d + op.nbytes] = data
        if op.signals:
            o = self._offset(op.sig_addr)
            old = int(arena[o: o + 8].view(np.uint64)[0])
            new = op.sig_value if op.sig_op == SIGNAL_SET else old + op.sig_value
            arena[o: o + 8].view(np.uint64)[0] = np.uint64(new & MASK64)

    def _count(self, op: NicOp) -> None:
        link = self.traffic.get((op.src, op.dst))
        if link is None:
            link = self.traffic[(op.src, op.dst)] = LinkTraffic(op.src, op.dst, self.link_kind(op.src, op.dst))
        link.bytes += op.nbytes + (SIGNAL_BYTES if op.signals else 0)
        link.messages += 1

    def _offset(self, addr: int) -> int:
        a = self.memory.find(addr)
        assert a is not None  # checked when the op was issued (`check_range`); host frees wait for synchronize
        return a.offset + addr - a.base

    def check_range(self, addr: int, nbytes: int, what: str) -> Allocation:
        """The allocation holding [addr, addr + nbytes), or a MemoryFault naming `what`."""
        a = self.memory.find(addr)
        if a is None or addr + nbytes > a.base + a.size:
            where = "is not in any allocation" if a is None else (
                f"runs {addr + nbytes - a.base - a.size} bytes past the end of {a.name} "
                f"[{a.base:#x}, {a.base + a.size:#x})")
            raise MemoryFault(f"{what}: {nbytes} bytes at {addr:#x} {where}", address=addr, size=nbytes)
        return a

    # ------------------------------------------------------------------ traffic
    def link_report(self) -> list[LinkTraffic]:
        """Bytes, messages and (with a link model) the modeled time of every link that carried something."""
        out = []
        for key in sorted(self.traffic):
            t = self.traffic[key]
            t.modeled_us = modeled_us(self.links, t.kind, t.bytes)
            out.append(t)
        return out

    def abandon(self) -> None:
        """A synchronize that failed: what was in flight is dropped, nobody waits any more."""
        for nic in self.nics:
            nic.queue.clear()
        self.waiting.clear()
        self.barrier_arrived.clear()

    # ------------------------------------------------------------------ waits (the watchdog's notes)
    def stuck_notes(self) -> list[str]:
        """What each warp waiting in nvshmem_signal_wait_until or nvshmem_barrier_all waits for."""
        notes = [self.waiting[k] for k in sorted(self.waiting)]
        if self.pending():
            notes.append(f"{self.pending()} NIC operation(s) still in flight")
        return notes
