"""The sanitizer across a cluster's NICs: what NVSHMEM's ordering rules leave unordered.

`RemoteOrder` watches the `Fabric` (issue, fence, quiet, delivery of every NIC operation) and each launch of
a sanitized `Cluster` (its global reads and writes, with the instruction). Two findings:

- unfenced signal: PE A puts data to PE B (a plain put), then signals B (nvshmemx_signal_op,
  nvshmem_uint64_atomic_add or a put-with-signal) with no nvshmem_fence or nvshmem_quiet in between. The
  signal may overtake the data, so once it is delivered a read of the data on B is a race: reported with the
  reading line, thread and GPU, and the put's and the signal's lines, GPUs and nodes. (A put-with-signal's
  own data is ordered before its own signal, which its reader waits for: no finding.)
- send buffer reused before quiet: a non-blocking put reads its source until nvshmem_quiet completes it; a
  store by the source PE to those bytes before that is reported with both lines.
"""

from __future__ import annotations

import copy
from collections import defaultdict
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np

from ptxforge.emu.hooks import Check
from ptxforge.emu.memory import GLOBAL_BASE, WINDOW_BITS
from ptxforge.emu.op import NORMAL
from ptxforge.emu.sanitizer.report import SanitizerReport

if TYPE_CHECKING:
    from ptxforge.emu.nic import Fabric, NicOp


@dataclass(eq=False)
class _Hazard:
    """Data `put` whose later `signal` to the same PE no fence ordered after it."""

    put: NicOp
    signal: NicOp
    armed: bool = False  # the signal was delivered: a reader may have taken it as the data's arrival


class RemoteOrder:
    """The fabric's watcher and the per-launch checks of a sanitized cluster (see the module docstring)."""

    def __init__(self, fabric: Fabric):
        self.fabric = fabric
        fabric.watchers.append(self)
        self.reset()

    def reset(self) -> None:
        # (source, target) -> its puts no fence or quiet ordered yet, each with the threads that fenced since
        self.unfenced: dict[tuple[int, int], list[tuple[NicOp, set[int]]]] = defaultdict(list)
        self.outstanding: dict[int, list[NicOp]] = defaultdict(list)
        self.hazards: dict[int, list[_Hazard]] = defaultdict(list)  # target PE -> hazards

    # ------------------------------------------------------------------ fabric events
    def issued(self, op: NicOp) -> None:
        key = (op.src, op.dst)
        if op.signals:  # ordered after a put only by a fence of a thread that issued both
            self.hazards[op.dst] += [_Hazard(p, op) for p, fenced in self.unfenced[key] if not fenced & op.issuers]
        if op.nbytes:
            for hs in self.hazards.values():  # a newer put of the same bytes supersedes an older one's hazard
                hs[:] = [h for h in hs if not (h.put.dst == op.dst and op.dst_addr <= h.put.dst_addr
                                                and h.put.dst_addr + h.put.nbytes <= op.dst_addr + op.nbytes)]
            if op.kind == "put":  # a put-with-signal's data is ordered before its own signal, which its reader awaits
                self.unfenced[key].append((op, set()))
            self.outstanding[op.src].append(op)

    def fenced(self, pe: int, threads: frozenset[int] | None = None) -> None:
        for key in [k for k in self.unfenced if k[0] == pe]:
            if threads is None:
                del self.unfenced[key]
                continue
            for p, fenced in self.unfenced[key]:
                fenced |= p.issuers & threads

    def quieted(self, pe: int, threads: frozenset[int] | None = None) -> None:
        if threads is None:
            self.fenced(pe)
            self.outstanding.pop(pe, None)
            return
        for key in [k for k in self.unfenced if k[0] == pe]:  # completed: ordered before everything later
            self.unfenced[key] = [(p, f) for p, f in self.unfenced[key] if not p.issuers & threads]
        self.outstanding[pe] = [p for p in self.outstanding.get(pe, []) if not p.issuers & threads]

    def delivered(self, op: NicOp) -> None:
        if op.signals:
            for h in self.hazards.get(op.dst, ()):
                if h.signal is op:
                    h.armed = True

    # ------------------------------------------------------------------ launches
    def attach(self, machine: Any, sanitizer: Any, gpu: int, label: str) -> None:
        machine.add_check(_RemoteLaunch(self, machine, sanitizer, gpu, label))


class _RemoteLaunch(Check):
    """One launch of a sanitized cluster: its global accesses, checked against the fabric's state."""

    def __init__(self, order: RemoteOrder, machine: Any, sanitizer: Any, gpu: int, label: str):
        self.order, self.machine, self.sanitizer, self.gpu, self.label = order, machine, sanitizer, gpu, label
        self.pc = 0

    def instrument(self, layout: Any, ops: list) -> list:
        out = []
        for pc, op in enumerate(ops):
            if op.kind == NORMAL and op.fn is not None:
                new = copy.copy(op)
                new.fn = self._wrap(op.fn, pc)
                out.append(new)
            else:
                out.append(op)
        return out

    def _wrap(self, fn: Any, pc: int) -> Any:
        def run(st, m):
            self.pc = pc
            fn(st, m)
        return run

    def on_access(self, mem: Any, space: str, addr: Any, nbytes: int, lanes: np.ndarray | None,
                  write: bool) -> None:
        if space not in ("global", "generic"):
            return
        a = np.asarray(addr, np.uint64).reshape(-1).astype(np.int64, copy=False)
        if not a.size or int(a[0]) >> WINDOW_BITS != GLOBAL_BASE >> WINDOW_BITS:
            return
        if write:
            for put in self.order.outstanding.get(self.gpu, ()):
                hit = _overlap(a, nbytes, put.src_addr, put.nbytes)
                if hit is not None:
                    self._reused(put, a, hit, lanes, nbytes)
        else:
            for h in self.order.hazards.get(self.gpu, ()):
                if h.armed:
                    hit = _overlap(a, nbytes, h.put.dst_addr, h.put.nbytes)
                    if hit is not None:
                        self._unfenced(h, a, hit, lanes, nbytes)

    def _lane(self, lanes: np.ndarray | None, i: int) -> int:
        if lanes is None:
            return i
        lanes = np.asarray(lanes).reshape(-1)
        return int(lanes[min(i, lanes.size - 1)])

    def _report(self, kind: str, a: np.ndarray, i: int, lanes: Any, nbytes: int, access: str, message: str,
                other: NicOp, extra: dict) -> None:
        op = self.machine.ops[self.pc]
        site = (kind, self.gpu, self.pc, id(other.site))
        log = self.sanitizer.log
        if log.bump(site, 1):
            return
        thread, block = self.machine.lane_coords(self._lane(lanes, i))
        s = other.site
        assert s is not None  # every op the NIC carries was issued by a kernel (nvshmem.py gives its site)
        rep = SanitizerReport(kind=kind, message=message, thread=thread, block=block, ptx_line=op.line,
                              ptx_file=op.file, instruction=op.text, address=int(a[i]), size=nbytes,
                              space="global", access=access, gpu=self.gpu)
        alloc = self.machine.device.owner(int(a[i]))
        if alloc is not None:
            rep.allocation, rep.offset, rep.allocation_size = alloc.name, int(a[i]) - alloc.base, alloc.size
        rep.other = {"access": "NIC put", "thread": s.thread, "block": s.block, "ptx_line": s.line,
                     "ptx_file": s.file, "instruction": s.text, "gpu": s.gpu, "node": s.node, **extra}
        log.add(rep, site)

    def _unfenced(self, h: _Hazard, a: np.ndarray, i: int, lanes: Any, nbytes: int) -> None:
        p, s = h.put.site, h.signal.site
        assert p is not None and s is not None
        node = self.gpu // self.order.fabric.gpus_per_node
        msg = (f"read on node {node} GPU {self.gpu} ({self.label}) of data that node {p.node} GPU {p.gpu} put at "
               f"{p.file}:{p.line} and then signalled at {s.file}:{s.line} ({s.text.rstrip(';')}) with no "
               f"nvshmem_fence or nvshmem_quiet between them: the signal may arrive before the data (call "
               f"nvshmem_fence() after the data put)")
        self._report("unfenced-signal", a, i, lanes, nbytes, "read", msg, h.put,
                     {"race": "put-read", "signal_line": s.line, "signal_gpu": s.gpu})

    def _reused(self, put: NicOp, a: np.ndarray, i: int, lanes: Any, nbytes: int) -> None:
        p = put.site
        assert p is not None
        g = self.order.fabric.gpus_per_node
        msg = (f"node {p.node} GPU {p.gpu} writes the source of its non-blocking put issued at {p.file}:{p.line} "
               f"(to node {put.dst // g} GPU {put.dst}) before nvshmem_quiet completed it: the NIC may still be "
               f"reading it (call nvshmem_quiet() before reusing a send buffer)")
        self._report("send-before-quiet", a, i, lanes, nbytes, "write", msg, put,
                     {"race": "put-write", "target_gpu": put.dst, "target_node": put.dst // g})


def _overlap(a: np.ndarray, nbytes: int, lo: int, n: int) -> int | None:
    """The first access of `a` (each `nbytes` long) that touches [lo, lo + n), or None."""
    hit = (a < lo + n) & (a + nbytes > lo)
    if not hit.any():
        return None
    return int(np.flatnonzero(hit)[0])
