"""How the NICs of a `ClusterRank` job reach other processes: FIFO message links between ranks.

A message is a header of `HEADER_WORDS` u64 words (its kind first) and a payload of bytes. Each transport
gives every ordered pair of ranks a first-in first-out link, which is all the NIC model needs to keep
NVSHMEM's ordering rules: the source NIC decides the delivery order (fence epochs, the adversarial draw) and
the target applies messages in the order they arrive.

- `ShmTransport` (one machine): each rank creates a /dev/shm file of single-producer single-consumer rings,
  one per source rank; every rank maps its peers' files and the owner unlinks its file as soon as all have
  mapped it, so nothing is left in /dev/shm even if a process is killed later. A producer writes the record,
  then advances the ring's head (x86-64's store order publishes them in that order, as emulator IPC relies
  on); the consumer reads up to the head, then advances the tail. A dead peer is noticed by its pid.
- `DistTransport` (between machines): torch.distributed point-to-point on a gloo group of its own; a thread
  per peer receives (header, then payload) into a queue the NIC drains. A dead peer's closed connection fails
  that receive at once.

`make_transport(kind, ...)`: kind "shm" or "dist" (None: PTXFORGE_NIC_TRANSPORT, else "shm").
"""

from __future__ import annotations

import mmap
import os
import queue
import secrets
import threading
import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import numpy as np

from ptxforge import _optional, environment
from ptxforge.emu.errors import EmulatorError
from ptxforge.emu.ipc import segment as S
from ptxforge.processes import process_exists

if TYPE_CHECKING:
    from datetime import timedelta

HEADER_WORDS = 10  # kind, 8 words of the kind's fields, payload bytes
RING_BYTES = 4 << 20  # per link (a sparse file: pages exist once written)
CHUNK_BYTES = 1 << 20  # the largest payload of one message (a put is split into chunks of this size)
RECORD_WORDS = 1 + HEADER_WORDS  # a record: its length in bytes, the header, then the payload (8-byte aligned)
HEAD, TAIL, DATA = 0, 8, 128  # ring layout: producer's word, consumer's word (another cache line), the data
LIVENESS_S = 0.05  # how often the shared-memory transport looks whether its peers' processes still run
TAG_HEADER, TAG_PAYLOAD = 0x5A00, 0x5A01


def torch_distributed() -> tuple[Any, Any]:
    """(torch, torch.distributed), imported when a process-based cluster first needs them."""
    torch = _optional.torch()  # the torch extra: only ClusterRank needs it, not the emulator
    return torch, torch.distributed


class TransportError(EmulatorError):
    """The NIC transport cannot go on: a peer's process is gone, or the transport is misused."""


Message = tuple[int, np.ndarray, np.ndarray]  # (source rank, header u64 words, payload u8)
Exchange = Callable[[Any], list[Any]]  # all_gather_object over the job: this rank's object -> every rank's


class ShmTransport:
    """Shared-memory rings between the processes of one machine (see the module docstring)."""

    kind = "shm"

    def __init__(self, rank: int, world: int, peers: list[int], exchange: Exchange, describe: Callable[[int], str],
                 ring_bytes: int = RING_BYTES):
        self.rank, self.world, self.peers = rank, world, sorted(peers)
        self.ring_bytes = ring_bytes
        self.describe = describe
        slot = ring_bytes + DATA
        name = f"{S.PREFIX}{os.getpid()}-nic{rank}-{secrets.token_hex(6)}"  # swept like IPC segments
        fd = S.create(name, max(1, len(self.peers)) * slot)
        try:
            self._own = mmap.mmap(fd, max(1, len(self.peers)) * slot)
        finally:
            os.close(fd)
        try:
            names = exchange((name, os.getpid(), self.peers))
            self.pids = {r: names[r][1] for r in range(world)}
            self._maps = {p: self._map(names[p][0]) for p in self.peers}
            where = {p: names[p][2].index(rank) for p in self.peers}  # my ring's slot in each target's file
            exchange(None)  # every rank mapped every file it needs
        finally:
            try:
                os.unlink(S.path_of(name))
            except FileNotFoundError:
                pass
        own = np.frombuffer(self._own, np.uint8)
        # rings into this rank: one per source, in the order of `peers`; out of it: in each target's file
        self.inbox = {p: own[i * slot: (i + 1) * slot] for i, p in enumerate(self.peers)}
        self.outbox = {p: np.frombuffer(self._maps[p], np.uint8)[where[p] * slot: (where[p] + 1) * slot]
                       for p in self.peers}
        self._checked = 0.0

    def _map(self, name: str) -> mmap.mmap:
        fd, size = S.open_existing(name)
        try:
            return mmap.mmap(fd, size)
        finally:
            os.close(fd)

    def send(self, dst: int, header: np.ndarray, payload: np.ndarray, idle: Callable[[], None]) -> None:
        """Append one message to the link to `dst`; while its ring is full, `idle()` runs (the NIC polls)."""
        ring = self.outbox[dst]
        words = ring[:DATA].view(np.uint64)
        n = payload.size
        size = RECORD_WORDS * 8 + (n + 7) // 8 * 8
        if size > self.ring_bytes:
            raise TransportError(f"a message of {n} bytes does not fit a NIC ring of {self.ring_bytes} bytes")
        head = int(words[HEAD // 8])
        while self.ring_bytes - (head - int(words[TAIL // 8])) < size:
            idle()
        record = np.zeros(size, np.uint8)
        record[:8].view(np.uint64)[0] = size
        record[8: RECORD_WORDS * 8].view(np.uint64)[:] = header
        record[RECORD_WORDS * 8: RECORD_WORDS * 8 + n] = payload
        self._copy_in(ring, head, record)
        words[HEAD // 8] = np.uint64(head + size)  # after the record: the consumer sees it whole

    def _copy_in(self, ring: np.ndarray, pos: int, record: np.ndarray) -> None:
        at = pos % self.ring_bytes
        first = min(record.size, self.ring_bytes - at)
        ring[DATA + at: DATA + at + first] = record[:first]
        if first < record.size:
            ring[DATA: DATA + record.size - first] = record[first:]

    def _copy_out(self, ring: np.ndarray, pos: int, n: int) -> np.ndarray:
        at = pos % self.ring_bytes
        first = min(n, self.ring_bytes - at)
        out = ring[DATA + at: DATA + at + first].copy()
        if first < n:
            out = np.concatenate([out, ring[DATA: DATA + n - first]])
        return out

    def poll(self) -> list[Message]:
        """Every message that arrived, per source in arrival order."""
        out: list[Message] = []
        for src, ring in self.inbox.items():
            words = ring[:DATA].view(np.uint64)
            head, tail = int(words[HEAD // 8]), int(words[TAIL // 8])
            while tail < head:
                size = int(self._copy_out(ring, tail, 8).view(np.uint64)[0])
                record = self._copy_out(ring, tail, size)
                header = record[8: RECORD_WORDS * 8].view(np.uint64).copy()
                n = int(header[-1])
                out.append((src, header, record[RECORD_WORDS * 8: RECORD_WORDS * 8 + n]))
                tail += size
            words[TAIL // 8] = np.uint64(tail)
        return out

    def check(self) -> None:
        """Raise when a peer's process no longer runs (looked at every LIVENESS_S seconds)."""
        now = time.monotonic()
        if now - self._checked < LIVENESS_S:
            return
        self._checked = now
        for p in self.peers:
            if not process_exists(self.pids[p]):
                raise TransportError(f"{self.describe(p)} is gone: its process (pid {self.pids[p]}) no longer runs")

    def close(self) -> None:
        for m in [self._own, *self._maps.values()]:
            try:
                m.close()
            except BufferError:  # a view still exported (an exception's traceback): unmapped at exit
                pass
        self.inbox, self.outbox, self._maps = {}, {}, {}


class DistTransport:
    """torch.distributed point-to-point on a gloo group of its own (see the module docstring)."""

    kind = "dist"

    def __init__(self, rank: int, world: int, peers: list[int], group: Any, describe: Callable[[int], str],
                 timeout: timedelta):
        _, dist = torch_distributed()
        self.rank, self.world, self.peers = rank, world, sorted(peers)
        self.describe = describe
        ranks = dist.get_process_group_ranks(group) if group is not None else list(range(dist.get_world_size()))
        self.group = dist.new_group(ranks=ranks, backend="gloo", timeout=timeout)  # its own connections and tags
        self.global_rank = {r: dist.get_global_rank(self.group, r) for r in range(world)}
        self.inbox: queue.Queue = queue.Queue()
        self.sends: list[tuple[Any, Any]] = []
        self.lost: TransportError | None = None
        self.closed = False
        self.threads = [threading.Thread(target=self._receive, args=(p,), daemon=True, name=f"ptxforge-nic-recv-{p}")
                        for p in self.peers]
        for t in self.threads:
            t.start()

    def _receive(self, src: int) -> None:
        torch, dist = torch_distributed()
        while True:
            header = torch.zeros(HEADER_WORDS, dtype=torch.int64)
            try:
                dist.recv(header, src=self.global_rank[src], group=self.group, tag=TAG_HEADER)
                words = header.numpy().view(np.uint64).copy()
                payload = torch.zeros(int(words[-1]), dtype=torch.uint8)
                if payload.numel():
                    dist.recv(payload, src=self.global_rank[src], group=self.group, tag=TAG_PAYLOAD)
            except RuntimeError as e:
                if not self.closed:
                    self.inbox.put((src, None, TransportError(f"{self.describe(src)} is gone: its connection "
                                                              f"closed ({str(e).splitlines()[0][:160]})")))
                return
            self.inbox.put((src, words, payload.numpy()))
            if words[0] == CLOSE:
                return

    def send(self, dst: int, header: np.ndarray, payload: np.ndarray, idle: Callable[[], None]) -> None:
        torch, dist = torch_distributed()
        self.sends = [(w, t) for w, t in self.sends if not w.is_completed()]
        h = torch.from_numpy(np.ascontiguousarray(header, np.uint64).view(np.int64).copy())
        try:
            self.sends.append((dist.isend(h, dst=self.global_rank[dst], group=self.group, tag=TAG_HEADER), h))
            if payload.size:
                p = torch.from_numpy(np.ascontiguousarray(payload).copy())
                self.sends.append((dist.isend(p, dst=self.global_rank[dst], group=self.group, tag=TAG_PAYLOAD), p))
        except RuntimeError as e:
            raise TransportError(f"{self.describe(dst)} is gone: a send failed ({str(e).splitlines()[0][:160]})") \
                from None

    def poll(self) -> list[Message]:
        out: list[Message] = []
        while True:
            try:
                src, words, payload = self.inbox.get_nowait()
            except queue.Empty:
                return out
            if words is None:
                self.lost = self.lost or payload
                continue
            out.append((src, words, payload))

    def check(self) -> None:
        if self.lost is not None:
            raise self.lost

    def close(self) -> None:
        """Tell every peer's receiving thread to end, then let ours end (bounded: a dead peer sends nothing)."""
        if self.closed:
            return
        header = np.zeros(HEADER_WORDS, np.uint64)
        header[0] = CLOSE
        for p in self.peers:
            try:
                self.send(p, header, np.zeros(0, np.uint8), lambda: None)
            except TransportError:
                pass
        for t in self.threads:
            t.join(timeout=2.0)
        self.closed = True
        for w, _ in self.sends:
            try:
                w.wait()
            except RuntimeError:
                pass
        self.sends = []


CLOSE = 6  # the message kind that ends a DistTransport link (the NIC's kinds are below it: cluster_procs.py)

Transport = ShmTransport | DistTransport


def make_transport(kind: str | None, rank: int, world: int, peers: list[int], group: Any, exchange: Exchange,
                   describe: Callable[[int], str], timeout: timedelta) -> Transport:
    """The transport `kind` ("shm", "dist"; None: PTXFORGE_NIC_TRANSPORT, else "shm") between `rank` and `peers`."""
    kind = kind if kind is not None else (environment.nic_transport() or "shm")
    if kind == "shm":
        return ShmTransport(rank, world, peers, exchange, describe)
    if kind == "dist":
        return DistTransport(rank, world, peers, group, describe, timeout)
    raise TransportError(f"transport must be 'shm' (shared memory, one machine) or 'dist' (torch.distributed "
                         f"point-to-point), not {kind!r}")
