"""Run a `Node`'s pending launches concurrently: round robin over every stream's head launch.

Each running launch is a generator (`Machine.steps_iter` with `concurrent` set) that yields every
`machine.QUANTUM` steps (`SPIN_QUANTUM` after a quantum that stored nothing: a spinning receiver gives
its turn back sooner), always between two instructions, so an atomic or a vector store is never split
and every other launch sees it whole. One round gives each running launch one quantum (streams of
higher priority, i.e. a lower number as in CUDA, go first, so they also take SMs that free up first); a
launch that ends hands its stream to the next launch queued there. Spinning on a flag costs its quantum
and lets the writer run: progress is guaranteed for any kernel whose waits a real GPU would also get past.

SMs: the launches of one GPU share its SMs' occupancy (`node.SmRoom`): each wave of blocks is placed
where threads, block slots and shared memory are left on the launch's SMs, and waits (yielding) when
there is no room.

Errors: a fault, trap or deadlock stops the node at once (every unfinished launch fails with it); a
launch that ends with sanitizer reports lets the others run on, so each reports its own. `synchronize`
raises the first error either way; each `PendingLaunch` keeps its own.

The node's watchdog: when no launch stored to global memory or ended for `Node.watchdog_s` seconds (or
after 10 times that in all), `synchronize` stops every launch and says, for each GPU and stream, which
warps wait where, what their last load read, and which launches never started.
"""

from __future__ import annotations

import time
from typing import TYPE_CHECKING

import numpy as np

from ptxforge.emu.errors import EmulatorError, WatchdogTimeout
from ptxforge.emu.machine import QUANTUM

if TYPE_CHECKING:
    from ptxforge.emu.node import Node

SPIN_QUANTUM = 16  # steps for a launch whose last quantum stored nothing
LIMIT_FACTOR = 10  # synchronize stops after this many watchdog periods even while launches store


class NodeStopped(EmulatorError):
    """A launch that did not complete because another launch of the node failed first."""


def run_node(node: Node) -> None:
    """Run every pending launch of `node` until all end; raise the first error."""
    streams = sorted((s for d in node.devices for s in d.streams if s.queue),
                     key=lambda s: (s.priority, s.device.gpu, s.index))
    if not streams:
        return
    clock = node.clock
    running: list = []  # [stream, pending launch, generator]

    def start(stream) -> None:
        p = stream.queue[0]
        m = p.machine
        m.concurrent = True
        m.watchdog_s = float("inf")  # the node's watchdog governs
        m.node_clock = clock
        m.watch_loads()
        if m.csize == 1:  # (clusters keep whole-GPU waves of their own)
            m.sm_room = node.rooms[stream.device.gpu]
        p.state = "running"
        running.append([stream, p, m.steps_iter()])

    for s in streams:
        start(s)
    t_start = time.monotonic()
    deadline = t_start + node.watchdog_s
    current = None
    reported = None  # the first launch that completed with its own error (sanitizer reports)
    try:
        with np.errstate(all="ignore"):
            while running:
                progress = False
                running.sort(key=lambda e: e[0].priority)  # stable: higher priority first, then start order
                for entry in list(running):
                    stream, p, gen = entry
                    current = p
                    m = p.machine
                    stores = m.stores
                    clock.resume(m)
                    try:
                        next(gen)
                        # a quantum without a store is most likely a spin on a flag: run it shorter next time
                        stored = m.stores != stores
                        m.quantum = QUANTUM if stored else SPIN_QUANTUM
                        progress |= stored
                        continue
                    except StopIteration as stop:
                        stats = stop.value
                    finally:
                        clock.pause()
                    progress = True
                    running.remove(entry)
                    stream.queue.popleft()
                    _log_waves(node, stream, p)
                    try:
                        p.complete(stats)
                    except Exception:  # the launch ran to its end with reports: the others go on
                        reported = reported or p
                    if stream.queue:
                        start(stream)
                current = None
                if node.network is not None and node.network.advance():  # a cluster's NICs deliver
                    progress = True
                now = time.monotonic()
                if progress:  # a store or a finished launch: something moved
                    deadline = min(now + node.watchdog_s, t_start + LIMIT_FACTOR * node.watchdog_s)
                if now > deadline:
                    raise WatchdogTimeout(_stuck(node, running, now - t_start))
    except BaseException as e:
        if node.network is not None:
            node.network.abandon()
        if isinstance(e, WatchdogTimeout) and current is not None and not current.done:
            e = WatchdogTimeout(f"{current.stream.name}: {current.kernel}: {e}")  # a deadlock at its barriers
        _fail_all(node, running, current, e)
        first = reported or (current if current is not None and current.error is not None else None)
        raise (first.error if first is not None else e) from None
    else:
        if node.network is not None:  # what the finished launches left in flight arrives
            node.network.drain()
        if reported is not None:
            raise reported.error
    finally:
        if node.network is not None:
            node.network.abandon()  # (after a failure: in-flight operations are dropped)
        if node.races is not None:  # the next synchronize starts after all of this (host order)
            node.races.reset()


def _fail_all(node, running, culprit, error: BaseException) -> None:
    """Fail the launch that raised with its error and every other unfinished launch of the node."""
    for *_, gen in running:
        gen.close()
    if culprit is not None and not culprit.done:
        culprit.fail(error)
        for s in (s for d in node.devices for s in d.streams):
            if s.queue and s.queue[0] is culprit:
                s.queue.popleft()
    what = f"{culprit.kernel} on {culprit.stream.name}" if culprit is not None else "the node"
    for d in node.devices:
        for s in d.streams:
            while s.queue:
                p = s.queue.popleft()
                p.fail(error if isinstance(error, WatchdogTimeout) else
                       NodeStopped(f"{p.kernel} on {s.name} did not complete: {what} failed first: {error}"))


def _log_waves(node, stream, p) -> None:
    for _, _, t0, t1, sms in p.machine.wave_log:
        node.sm_map.append((stream.device.gpu, stream.index, p.kernel, tuple(sorted(set(sms))), t0, t1))


def _stuck(node, running, elapsed: float) -> str:
    """Where every unfinished launch of the node stands, GPU by GPU and stream by stream."""
    if elapsed < LIMIT_FACTOR * node.watchdog_s:
        what = "cluster" if node.network is not None else "node"
        head = f"the {what} made no progress (no global store, no launch ended) for {node.watchdog_s:g} s"
    else:
        head = f"the node's launches ran past {LIMIT_FACTOR * node.watchdog_s:g} s (10 x watchdog_s)"
    lines = [head + "; where each GPU's warps wait:"]
    started = {id(p) for _, p, _ in running}
    for d in node.devices:
        for s in d.streams:
            for i, p in enumerate(s.queue):
                if id(p) in started:
                    lines.append(f"  {s.name}: {p.kernel}: {p.machine.where(limit=4)}")
                else:
                    lines.append(f"  {s.name}: {p.kernel} has not started (launch {i} of the stream waits "
                                 f"for the one before it)")
    if node.network is not None:
        lines += ["  " + n for n in node.network.stuck_notes()]
    return "\n".join(lines)
