"""Telling a dead peer from a slow one: gloo's errors, the ranks' processes, the segments they leave.

Every agreement message carries its rank's (host, pid) (`this_process`), so after a lost connection a
survivor can say which rank's process on its own machine is gone (`which_gone`) and remove the emulator IPC
segments such processes left in /dev/shm (`reclaim_segments`).
"""

from __future__ import annotations

import os
import socket
import sys
import zlib

from ptxforge.processes import connection_lost, exited

__all__ = ["connection_lost", "reclaim_segments", "this_process", "which_gone"]

def this_process() -> tuple[int, int]:
    """(host id, pid): the host id a CRC of the host name (the same on every rank of one machine)."""
    return zlib.crc32(socket.gethostname().encode()), os.getpid()


def which_gone(processes: list[tuple[int, int]], me: int) -> str:
    """'rank 2 (pid 123) has exited' for the ranks on this machine whose process no longer runs; what is known
    otherwise."""
    if not processes:
        return "which one is unknown: no agreement has run yet"
    host = this_process()[0]
    local = {pid: r for r, (h, pid) in enumerate(processes) if r != me and h == host}
    gone = [f"rank {local[pid]} (pid {pid})" for pid in sorted(exited(list(local)), key=local.__getitem__)]
    if gone:
        return f"{', '.join(gone)} {'has' if len(gone) == 1 else 'have'} exited"
    if all(h == host for h, _ in processes):
        return "every rank's process still runs: one closed the group"
    return "a rank on another machine: this one's ranks all run"


def reclaim_segments() -> list[str]:
    """Remove the emulator IPC segments of processes that no longer run, unmapping those this process mapped
    (only when this process has IPC devices: the emulator is not imported for it)."""
    ipc = sys.modules.get("ptxforge.emu.ipc")
    if ipc is None:
        return []
    return ipc.reclaim_dead_peers()
