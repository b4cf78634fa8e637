"""A rank's emulated GPU memory as a file in /dev/shm: header, export table, heap.

Layout (byte offsets in the file; the file is sparse, pages exist once touched):
  0      header words (u64): magic, version, rank, world, capacity, closed flag, owner pid
  512    progress board: u64 per writer rank (MAX_RANKS), slot w written only by rank w's process
  4096   export table: MAX_EXPORTS entries of (export id, offset, size) u64, id 0 = free
  HEADER the heap: the device's allocations

The file is named ptxforge-emu-<owner pid>-r<rank>-<random>; the owner unlinks it when its device closes
and at interpreter exit. A process that dies without either (SIGKILL, os._exit) leaves it behind: `sweep`
removes segments whose owner process no longer exists (a zombie counts as gone); every device sweeps when it
is created and when it closes, and ptxforge.ep's kernels backend when it finds a peer lost.
"""

from __future__ import annotations

import fcntl
import os
import secrets

import numpy as np

from ptxforge.processes import process_exists

SHM_DIR = "/dev/shm"
PREFIX = "ptxforge-emu-"
MAGIC = 0x3143_5049_4658_5450  # "PTXFIPC1", little-endian
VERSION = 1
MAX_RANKS = 256
MAX_EXPORTS = 1024
HEADER = 64 << 10  # bytes before the heap (a multiple of every allocation alignment up to 64 KiB)
W_MAGIC, W_VERSION, W_RANK, W_WORLD, W_CAPACITY, W_CLOSED, W_PID = range(7)
BOARD = 512 // 8  # first word of the progress board
EXPORTS = 4096 // 8  # first word of the export table
EXPORT_WORDS = 3


def path_of(name: str) -> str:
    return os.path.join(SHM_DIR, name)


def new_name(rank: int) -> str:
    return f"{PREFIX}{os.getpid()}-r{rank}-{secrets.token_hex(6)}"


def owner_pid(name: str) -> int | None:
    try:
        return int(name[len(PREFIX):].split("-", 1)[0])
    except ValueError:
        return None


def sweep() -> list[str]:
    """Remove the segments of processes that no longer exist; returns their names."""
    gone: list[str] = []
    try:
        names = os.listdir(SHM_DIR)
    except OSError:
        return gone
    for name in names:
        if not name.startswith(PREFIX):
            continue
        pid = owner_pid(name)
        if pid is None or pid == os.getpid() or process_exists(pid):
            continue
        try:
            os.unlink(path_of(name))
            gone.append(name)
        except OSError:
            pass
    return gone


def live_segments() -> list[str]:
    """The names of every emulator IPC segment on the machine (for leak checks)."""
    try:
        return sorted(n for n in os.listdir(SHM_DIR) if n.startswith(PREFIX))
    except OSError:
        return []


def create(name: str, capacity: int) -> int:
    """A new segment file of `capacity` bytes (sparse); returns its descriptor."""
    fd = os.open(path_of(name), os.O_RDWR | os.O_CREAT | os.O_EXCL, 0o600)
    try:
        os.ftruncate(fd, capacity)
    except OSError:
        os.close(fd)
        os.unlink(path_of(name))
        raise
    return fd


def open_existing(name: str) -> tuple[int, int]:
    """(descriptor, size) of an existing segment; FileNotFoundError when it is gone."""
    if "/" in name or not name.startswith(PREFIX):
        raise FileNotFoundError(name)
    fd = os.open(path_of(name), os.O_RDWR)
    return fd, os.fstat(fd).st_size


def init_header(words: np.ndarray, rank: int, world: int, capacity: int) -> None:
    words[W_VERSION], words[W_RANK], words[W_WORLD] = VERSION, rank, world
    words[W_CAPACITY], words[W_CLOSED], words[W_PID] = capacity, 0, os.getpid()
    words[W_MAGIC] = MAGIC  # last: a segment with its magic is complete


def exports(words: np.ndarray) -> np.ndarray:
    """The export table as an (entries, 3) view: id, offset, size."""
    return words[EXPORTS: EXPORTS + MAX_EXPORTS * EXPORT_WORDS].reshape(MAX_EXPORTS, EXPORT_WORDS)


def lock(fd: int) -> None:
    fcntl.flock(fd, fcntl.LOCK_EX)


def unlock(fd: int) -> None:
    fcntl.flock(fd, fcntl.LOCK_UN)
