"""Make the emulator's speed independent of the C allocator's history (glibc only).

A wave allocates and frees lane arrays of a few hundred KB to tens of MB on every launch. glibc serves
blocks above its mmap threshold with a fresh mmap (zero-filled pages faulted in one by one) and raises
that threshold only after such a block is freed, so a fresh process ran 64K-lane launches 2-3x slower
than one that had done a large launch before. Fixing both thresholds once, at import, serves those
arrays from the heap from the first launch on. Environment settings (MALLOC_MMAP_THRESHOLD_,
MALLOC_TRIM_THRESHOLD_) win; other C libraries are left alone.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import platform

from ptxforge import environment

M_TRIM_THRESHOLD = -1
M_MMAP_THRESHOLD = -3
MMAP_THRESHOLD = 32 << 20  # glibc's own ceiling for its dynamic threshold (64-bit)
TRIM_THRESHOLD = 128 << 20  # free heap kept for the next wave before it is returned to the system

_done = False


def tune_malloc() -> bool:
    """Set glibc's mmap and trim thresholds once; True when they were set by this call or before."""
    global _done
    if _done:
        return True
    if platform.system() != "Linux" or platform.libc_ver()[0] != "glibc":
        return False
    if environment.malloc_tuned_by_user():
        return False
    try:
        libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6")
        ok = libc.mallopt(M_MMAP_THRESHOLD, MMAP_THRESHOLD) == 1
        ok = libc.mallopt(M_TRIM_THRESHOLD, TRIM_THRESHOLD) == 1 and ok
    except (OSError, AttributeError):
        return False
    _done = ok
    return ok
