"""Host arrays around a launch: copy them back from device memory after it, free its temporary allocations.

Used by both ways a launch finishes: at once (`Kernel.launch`) and at a node's synchronize (`streams`).
"""

from __future__ import annotations

from typing import Any

import numpy as np

from ptxforge.errors import DeviceUnavailable, KernelFault, LaunchError
from ptxforge.runtime.device import Device


def copy_back(dev: Device, copies: list) -> None:
    """Copy each (HostArray, allocation) pair of a finished launch back to the host (and on to a torch
    tensor that was copied from a GPU)."""
    for host, alloc in copies:
        _copy_one(dev, host, alloc)


def copy_back_quietly(dev: Device, copies: list) -> None:
    """Copy device memory back into the host arrays after a failed emulated launch."""
    for host, alloc in copies:
        try:
            _copy_one(dev, host, alloc)
        except Exception:  # noqa: BLE001 - the launch's own error is the one to report
            pass


def _copy_one(dev: Device, host: Any, alloc: Any) -> None:
    arr = host.array
    data = dev.memory.view(alloc)[: arr.nbytes]  # the emulator's: a view (copied once, into the host array)
    if arr.flags.c_contiguous:
        arr.reshape(-1).view(np.uint8)[:] = data
    else:
        arr[...] = data.view(arr.dtype).reshape(arr.shape)
    if host.after is not None:
        host.after()


def free_quietly(dev: Device, temps: list) -> None:
    for a in temps:
        try:
            dev.memory.free(a)
        except (LaunchError, KernelFault, DeviceUnavailable):  # a GPU context broken by the kernel refuses frees;
            pass  # the kernel's error is the one to see


def as_tuple(d: Any) -> tuple:
    return (int(d),) if isinstance(d, int | np.integer) else tuple(d)
