"""`RankFabric`: the NIC of one rank's GPU when every GPU of the cluster runs in its own process.

The same NIC model as one process's `Fabric` (nic.py: fence epochs, due rounds, the adversarial draw, traffic
per link), with three differences:

- Only the own PE's queue lives here. A round passes at every watchdog tick of the rank's launch (its IPC
  progress board's publish, every 256 steps; host writes do not count) and whenever the NIC waits. A tick
  is 16 of a single-process cluster's rounds for a spinning launch, so the default mode's size term is one
  round per 128 KiB here; the adversarial mode keeps its draws in rounds (and runs the ranks in lockstep
  rounds: see `receive`).
- Delivery: to itself or a same-node peer (NVLink) the NIC writes the target's memory directly (emulator IPC
  maps the peers' symmetric objects; the signal word under the segment's lock, as atomics). To another node it
  never writes: it sends the op as (symmetric object index, offset, data, signal) over the transport
  (nic_transport.py), and the target's NIC applies it when it polls and acknowledges it. `nvshmem_quiet` waits
  for those acknowledgements.
- Waits (quiet, nvshmem_barrier_all, the end of `ClusterRank.synchronize`) poll the transport and are bounded:
  no message from anyone for `watchdog_s` is an error naming what the wait misses. A rank that fails tells the
  others (ABORT), and they raise its message; a peer whose process is gone is noticed by the transport.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import numpy as np

from ptxforge.emu.errors import EmulatorError, MemoryFault, WatchdogTimeout
from ptxforge.emu.ipc import segment as S
from ptxforge.emu.memory import Allocation
from ptxforge.emu.nic import BYTES_PER_ROUND, SIGNAL_SET, Fabric, LinkModel, NicOp
from ptxforge.emu.nic_transport import CHUNK_BYTES, HEADER_WORDS, TransportError

if TYPE_CHECKING:
    from ptxforge.emu.ipc.memory import IpcMemory
    from ptxforge.emu.nic_transport import Transport

PUT, ACK, DONE, ABORT, ALIVE, BARRIER, ROUND = 1, 2, 3, 4, 5, 7, 8  # message kinds (6: the transport's CLOSE)
TICK_ROUNDS = 16  # node rounds (schedule.SPIN_QUANTUM steps each) per watchdog tick (progress.TICK_MASK + 1 steps)
ALIVE_S = 1.0  # a rank running a launch tells the others it lives at least this often (capped by watchdog_s / 4)


class PeerStopped(EmulatorError):
    """Another rank of the cluster stopped (its error, a lost process): this rank cannot complete."""


class RankFabric(Fabric):
    """PE `me`'s NIC in a cluster of one process per GPU (see the module docstring). `heap` is the rank's
    `RankHeap` (cluster_procs.py); `transport` is set once every rank has made its NIC."""

    def __init__(self, memory: IpcMemory, gpus_per_node: int, npes: int, me: int, heap: Any,
                 adversarial: int | None, links: LinkModel | None, watchdog_s: float):
        super().__init__(memory, gpus_per_node, npes, None, links)
        self.ipc = memory
        self.me = me
        self.adversarial = adversarial
        self.rng = np.random.default_rng([adversarial, me]) if adversarial is not None else None  # per rank
        self.heap = heap
        self.watchdog_s = watchdog_s
        self.transport: Transport | None = None
        self.sent = [0] * npes  # messages sent to each PE over the transport, and acknowledged
        self.acked = [0] * npes
        self.done = [0] * npes  # the last synchronize generation each PE finished
        self.barriers = [0] * npes  # nvshmem_barrier_all arrivals of each PE
        self.stopped: EmulatorError | None = None
        self.heard = time.monotonic()  # when a message last came in (a wait's progress)
        self.backlog: list[list] = [[] for _ in range(npes)]  # per source: taken from the transport, not applied
        # the adversarial mode runs the ranks in lockstep rounds, so a seed gives one outcome (see the docstring)
        self.lockstep = adversarial is not None
        self._done_next = 0
        self._told = 0.0

    def describe_pe(self, pe: int) -> str:
        return f"node {pe // self.gpus_per_node} GPU {pe} (rank {pe})"

    # ------------------------------------------------------------------ rounds
    def tick(self) -> None:
        """A watchdog tick of the rank's launch: one round of the NIC, and tell the others this rank lives."""
        self.advance()
        now = time.monotonic()
        if not self.lockstep and now - self._told > min(ALIVE_S, self.watchdog_s / 4):
            self._told = now
            self.broadcast(ALIVE)

    def _delay(self, op: NicOp) -> int:
        if self.rng is None:  # a round here is a watchdog tick, 256 steps: 16 of a spinning launch's node rounds
            return 1 + op.nbytes // (BYTES_PER_ROUND * TICK_ROUNDS)
        return super()._delay(op)

    def advance(self) -> bool:
        self.round += 1
        moved = self._deliver(self.nics[self.me], everything=False)
        return self.receive() or moved

    def drain(self) -> None:
        """Deliver everything the own NIC holds and wait for the other nodes' acknowledgements."""
        self._deliver(self.nics[self.me], everything=True)
        self.wait(self._acked, lambda: f"the acknowledgements of its puts to {self._unacked()}")

    def push(self) -> None:
        """Hand everything the own NIC holds to its targets (written, or sent over the transport), without
        waiting for the acknowledgements: the data is on its way once a launch that put it has ended."""
        self._deliver(self.nics[self.me], everything=True)

    def quiet(self, pe: int, threads: frozenset[int] | None = None) -> None:
        super().quiet(pe, threads)  # then every acknowledgement: more than the threads' own, which is allowed
        self.wait(self._acked, lambda: f"nvshmem_quiet: the acknowledgements of its puts to {self._unacked()}")

    def pending(self) -> int:
        return len(self.nics[self.me].queue) + sum(s - a for s, a in zip(self.sent, self.acked, strict=True))

    def _acked(self) -> bool:
        return self.sent == self.acked

    def _unacked(self) -> str:
        return ", ".join(f"{self.describe_pe(p)} ({s - a} outstanding)"
                         for p, (s, a) in enumerate(zip(self.sent, self.acked, strict=True)) if s != a)

    # ------------------------------------------------------------------ delivery
    def _write(self, op: NicOp, data: np.ndarray) -> None:
        other_node = op.dst // self.gpus_per_node != self.me // self.gpus_per_node
        if other_node or (self.lockstep and op.dst != self.me):  # lockstep: the target applies it at a round
            self._send_op(op, data)
            return
        if op.signals:  # the word may be a peer's, and its kernels' atomics hold the segment's lock
            with self.ipc.atomic_lock(np.asarray([op.sig_addr], np.uint64)):
                super()._write(op, data)
        else:
            super()._write(op, data)

    def _send_op(self, op: NicOp, data: np.ndarray) -> None:
        obj, off = self.heap.locate(op.dst_addr, op.dst) if op.nbytes else (0, 0)
        sig_obj, sig_off = self.heap.locate(op.sig_addr, op.dst) if op.signals else (0, 0)
        chunks = [data[i: i + CHUNK_BYTES] for i in range(0, data.size, CHUNK_BYTES)] or [data]
        for i, chunk in enumerate(chunks):
            last = i == len(chunks) - 1
            signals = op.signals and last  # the signal travels with the last chunk: after all the data
            self._send(op.dst, [PUT, obj, off + i * CHUNK_BYTES, int(signals), sig_obj, sig_off, op.sig_value,
                                op.sig_op], chunk)
            self.sent[op.dst] += 1

    def _send(self, dst: int, fields: list[int], payload: np.ndarray | None = None) -> None:
        payload = np.zeros(0, np.uint8) if payload is None else np.ascontiguousarray(payload, np.uint8)
        header = np.zeros(HEADER_WORDS, np.uint64)
        header[: len(fields)] = np.asarray([f & ((1 << 64) - 1) for f in fields], np.uint64)
        header[-1] = payload.size
        assert self.transport is not None  # (set by ClusterRank before any launch)
        since = time.monotonic()

        def idle() -> None:  # the link is full: keep taking in what others send, within the bound
            self._collect()
            if time.monotonic() - max(since, self.heard) > self.watchdog_s:
                raise WatchdogTimeout(f"{self.describe_pe(self.me)}: the NIC's link to {self.describe_pe(dst)} "
                                      f"stayed full for {self.watchdog_s:g} s (watchdog_s): that rank takes in "
                                      f"nothing")
            time.sleep(0.0002)
        self.transport.send(dst, header, payload, idle)

    def broadcast(self, kind: int, value: int = 0, payload: np.ndarray | None = None) -> None:
        """Send a control message to every other rank (the transport links every pair; only data to another
        node travels on it, NVLink peers' data is written directly)."""
        for p in range(len(self.nics)):
            if p != self.me:
                self._send(p, [kind, value], payload)

    # ------------------------------------------------------------------ what comes in
    def _collect(self) -> None:
        """Take what the transport holds into the per-source backlog (nothing applied yet); a peer's ABORT or
        loss raises at once."""
        if self.stopped is not None:
            raise self.stopped
        assert self.transport is not None
        try:
            self.transport.check()
            msgs = self.transport.poll()
        except TransportError as e:
            self.stopped = PeerStopped(f"{self.describe_pe(self.me)} cannot go on: {e}")
            raise self.stopped from None
        if msgs:
            self.heard = time.monotonic()
        for src, h, payload in msgs:
            if int(h[0]) == ABORT:
                text = payload.tobytes().decode("utf-8", "replace")
                self.stopped = PeerStopped(f"{self.describe_pe(src)} stopped: {text}")
                raise self.stopped
            self.backlog[src].append((src, h, payload))

    def receive(self) -> bool:
        """Apply what the other ranks sent (in lockstep: what they sent before the round's marker); True when
        data or a signal arrived. Raises a peer's stop."""
        if self.lockstep:
            return self._round()
        self._collect()
        msgs = [m for q in self.backlog for m in q]
        for q in self.backlog:
            q.clear()
        return self._handle(msgs)

    def _round(self) -> bool:
        """One lockstep round: tell every rank this one reached round r, take in each rank's messages up to its
        own round-r marker, apply them in rank order."""
        r = self.round
        self.broadcast(ROUND, r)
        got: list[list] = [[] for _ in self.nics]
        missing = {p for p in range(len(self.nics)) if p != self.me}
        pause, polls = 0.0001, 0
        while missing:
            self._collect()
            for p in sorted(missing):
                q = self.backlog[p]
                while q:
                    m = q.pop(0)
                    if int(m[1][0]) == ROUND:
                        missing.discard(p)
                        break
                    got[p].append(m)
            if missing:
                if time.monotonic() - self.heard > self.watchdog_s:
                    raise WatchdogTimeout(f"{self.describe_pe(self.me)} waited {self.watchdog_s:g} s (watchdog_s) "
                                          f"in lockstep round {r} (adversarial mode) for "
                                          f"{', '.join(self.describe_pe(p) for p in sorted(missing))}")
                polls += 1
                if polls < 200:
                    os.sched_yield()  # the others run sooner than after a sleep's timer (4 ranks on few cores)
                else:
                    time.sleep(pause)
                    pause = min(0.001, pause * 2)
        self.done[self.me] = max(self.done[self.me], self._done_next)
        return self._handle([m for q in got for m in q])

    def _handle(self, msgs: list) -> bool:
        acks: dict[int, int] = {}
        moved = False
        for src, h, payload in msgs:
            kind = int(h[0])
            if kind == PUT:
                self._apply_incoming(src, h, payload)
                acks[src] = acks.get(src, 0) + 1
                moved = True
            elif kind == ACK:
                self.acked[src] += int(h[1])
            elif kind == DONE:
                self.done[src] = max(self.done[src], int(h[1]))
            elif kind == BARRIER:
                self.barriers[src] += 1
        for src, n in acks.items():
            self._send(src, [ACK, n])
        return moved

    def _apply_incoming(self, src: int, h: np.ndarray, payload: np.ndarray) -> None:
        obj, off, signals, sig_obj, sig_off, value, sig_op = (int(x) for x in h[1:8])
        n = payload.size
        op = NicOp("put_signal" if n and signals else ("put" if n else "signal"), src, self.me,
                   self.heap.base(obj) + off if n else 0, 0, n, sig_addr=self.heap.base(sig_obj) + sig_off if signals
                   else 0, sig_value=value, sig_op=sig_op if signals else SIGNAL_SET)
        if signals:
            self._locked_write(op, payload)
        else:
            Fabric._write(self, op, payload)
        self.ipc.own.words[S.BOARD + src] += np.uint64(1)  # the source's progress, for this rank's watchdog

    def _locked_write(self, op: NicOp, data: np.ndarray) -> None:
        with self.ipc.atomic_lock(np.asarray([op.sig_addr], np.uint64)):
            Fabric._write(self, op, data)

    # ------------------------------------------------------------------ waits
    def wait(self, done: Callable[[], bool], missing: Callable[[], str]) -> None:
        """Poll until `done()`; no message from any rank for watchdog_s is a WatchdogTimeout naming `missing()`."""
        pause = 0.0001
        while not done():
            if not self.advance() and not self.lockstep:  # (a lockstep round waits for the others itself)
                time.sleep(pause)
                pause = min(0.002, pause * 2)
            else:
                pause = 0.0001
            if done():
                return
            if time.monotonic() - self.heard > self.watchdog_s:
                raise WatchdogTimeout(f"{self.describe_pe(self.me)} waited {self.watchdog_s:g} s (watchdog_s) with "
                                      f"no word from any rank for {missing()}")

    def finish(self, generation: int) -> None:
        """The end of a `ClusterRank.synchronize`: everything this rank sent is applied, and every rank
        says the same of itself (so everything sent to this rank is applied too)."""
        self.heard = time.monotonic()
        self.drain()
        self.broadcast(DONE, generation)
        if self.lockstep:  # its own DONE counts at the round in which the others apply it: all leave together
            self._done_next = generation
        else:
            self.done[self.me] = generation
        self.wait(lambda: min(self.done) >= generation,
                  lambda: "the end of synchronize on " + ", ".join(
                      self.describe_pe(p) for p, g in enumerate(self.done) if g < generation))

    def abort(self, text: str) -> None:
        """Tell every other rank this one stopped, with `text` (best effort: a dead link is skipped)."""
        payload = np.frombuffer(text.encode("utf-8")[:60000], np.uint8)
        for p in range(len(self.nics)):
            if p != self.me:
                try:
                    self._send(p, [ABORT, 0], payload)
                except EmulatorError:
                    pass

    # ------------------------------------------------------------------ nvshmem_barrier_all
    def barrier_arrive(self, pe: int) -> int | None:
        if pe in self.barrier_arrived:
            return None
        self.quiet(pe)  # the barrier completes this PE's operations first
        self.barrier_arrived.add(pe)
        self.barriers[self.me] += 1
        for p in range(len(self.nics)):
            if p != self.me:
                self._send(p, [BARRIER, self.barriers[self.me]])
        return self.barriers[self.me]

    def barrier_reached(self, generation: int) -> bool:
        self.advance()
        if min(self.barriers) >= generation:
            self.barrier_arrived.discard(self.me)
            return True
        return False

    def barrier_missing(self) -> list[int]:
        want = self.barriers[self.me]
        return [p for p, n in enumerate(self.barriers) if n < want]

    # ------------------------------------------------------------------ addresses
    def check_range(self, addr: int, nbytes: int, what: str) -> Allocation:
        """As `Fabric.check_range`, also for another node's copy of a symmetric object (not mapped here)."""
        if self.memory.find(addr) is not None:
            return super().check_range(addr, nbytes, what)
        hit = self.heap.remote(addr)
        if hit is None:
            return super().check_range(addr, nbytes, what)
        buf, pe = hit
        base = buf.bases[pe]
        if addr + nbytes > base + buf.nbytes:
            raise MemoryFault(f"{what}: {nbytes} bytes at {addr:#x} run {addr + nbytes - base - buf.nbytes} bytes "
                              f"past the end of {buf.name} on PE {pe}", address=addr, size=nbytes)
        return Allocation(base, buf.nbytes, -1, f"{buf.name} on PE {pe}", gpu=pe)

    def abandon(self) -> None:
        self.nics[self.me].queue.clear()
        self.waiting.clear()
        self.barrier_arrived.clear()
