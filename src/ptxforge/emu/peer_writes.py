"""`PeerWrites`: a check that counts the bytes a launch on an emulated IPC GPU writes into other ranks' memory
(the NVLink traffic of its stores, reductions and atomics to peer addresses), per peer rank.

    count = PeerWrites(me=rank)
    kernel.launch(grid, block, args, device=ipc_gpu, options={"checks": (count,)})
    count.bytes          # {peer rank: bytes written there}

Every rank's memory lies at its own 4 GiB range of the global window (`ptxforge.emu.ipc.memory`), so the
target of each lane's write is its address's range. Lanes of one instruction writing the same address count
once (the GPU coalesces them into one write). A watched launch runs without the whole-wave memory fast paths.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import numpy as np

from ptxforge.emu.hooks import Check
from ptxforge.emu.ipc.memory import STRIDE_BITS
from ptxforge.emu.memory import GLOBAL_BASE, WINDOW_BITS
from ptxforge.emu.ramps import Ramp

if TYPE_CHECKING:
    from ptxforge.emu.memory import LaneMemory

_WINDOW = GLOBAL_BASE >> WINDOW_BITS


class PeerWrites(Check):
    """Bytes written into each other rank's memory by the launches it watches (see the module docstring)."""

    def __init__(self, me: int) -> None:
        self.me = int(me)
        self.bytes: dict[int, int] = {}

    def on_access(self, mem: LaneMemory, space: str, addr: Any, nbytes: int, lanes: np.ndarray | None,
                  write: bool) -> None:
        if not write or space not in ("global", "generic"):
            return
        a = addr.array() if isinstance(addr, Ramp) else np.asarray(addr)
        a = np.unique(a.astype(np.uint64, copy=False).ravel())
        a = a[(a >> np.uint64(WINDOW_BITS)) == np.uint64(_WINDOW)]  # generic shared/local addresses are not
        owner = ((a - np.uint64(GLOBAL_BASE)) >> np.uint64(STRIDE_BITS)).astype(np.int64)
        peers = owner[owner != self.me]
        if peers.size:
            for r, n in zip(*np.unique(peers, return_counts=True), strict=True):
                self.bytes[int(r)] = self.bytes.get(int(r), 0) + int(n) * nbytes
