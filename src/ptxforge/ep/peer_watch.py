"""`PeerWatch`: backend="kernels" notices a dead peer through the process group, as the torch backend does.

The communication kernels wait on peers' counters in shared memory, which says nothing when a peer's process
dies: each wait would run to `timeout_s`. So for the length of each kernels call every rank posts a receive
from every peer (gloo p2p, a tag per call) that the peer answers when its call ends. A peer whose process
dies fails that receive at once (gloo sees its connection close, as the torch backend's collectives do); a
helper thread per peer waits on it and keeps the loss, and `check()` raises it. On an emulated IPC GPU the
rank's launches call `check()` at every watchdog tick (`IpcMemory.peer_check`), so a kernel spinning on a
dead peer stops within milliseconds of the process group noticing. (gloo groups only: on an NCCL group the
kernels' own timeout_s bounds such a wait.)
"""

from __future__ import annotations

import threading
from datetime import timedelta
from typing import TYPE_CHECKING, Any

import torch
import torch.distributed as dist

from ptxforge.ep import peers

if TYPE_CHECKING:
    from ptxforge.ep.errors import EPPeerLostError
    from ptxforge.ep.transport import Transport

TAG_BASE = 1 << 20  # p2p tags of the watches (the group's collectives use tags of their own)
TAG_SPAN = 1 << 29


class PeerWatch:
    """One kernels call's watch on every peer of `transport`'s group (see the module docstring)."""

    def __init__(self, transport: Transport, call: str, serial: int) -> None:
        self.transport, self.call = transport, call
        self.tag = TAG_BASE + serial % TAG_SPAN
        self.lost: EPPeerLostError | None = None
        self._sends: list[Any] = []
        self._threads = []
        # gloo groups (CPU tensors) only: an NCCL group's p2p would need GPU tensors and its own error path
        self.active = transport.device.type == "cpu"
        for peer in range(transport.size):
            if peer != transport.rank and self.active:
                box = torch.zeros(1, dtype=torch.int64)
                work = dist.irecv(box, src=self._global(peer), group=transport.group, tag=self.tag)
                t = threading.Thread(target=self._wait, args=(work, box), daemon=True,
                                     name=f"ptxforge-ep-watch-{peer}")
                t.start()
                self._threads.append(t)

    def _global(self, peer: int) -> int:
        group = self.transport.group
        return peer if group is None else dist.get_global_rank(group, peer)

    def _wait(self, work, box) -> None:
        try:  # the peer answers when its call ends; a dead peer's connection fails this at once
            work.wait(timeout=timedelta(seconds=max(60.0, 4 * self.transport.timeout_s)))
        except RuntimeError as e:
            if peers.connection_lost(e) and self.lost is None:
                self.lost = self.transport.lost(self.call, "its communication kernels", e)

    def check(self) -> None:
        """Raise the loss of a peer, if the process group reported one."""
        if self.lost is not None:
            raise self.lost

    def finish(self) -> None:
        """This rank's call ended (well or not): answer every peer's watch. A dead peer's send fails; ignored."""
        done = torch.ones(1, dtype=torch.int64)
        for peer in range(self.transport.size):
            if peer != self.transport.rank and self.active:
                try:
                    self._sends.append(dist.isend(done, dst=self._global(peer), group=self.transport.group,
                                                  tag=self.tag))
                except RuntimeError:  # the peer is gone: nothing to answer
                    pass
