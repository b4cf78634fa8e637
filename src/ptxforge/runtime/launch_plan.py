"""A kernel's repeated emulator launches: the checks a launch's signature decides are made once per signature.

A launch's signature is its shape, its options, the device it names ($PTXFORGE_DEVICE's value with it), whether
it validates, and its arguments as far as the checks look at them: the type of each scalar, each DeviceBuffer
itself (its device and element type are its own for life). Every check that depends only on these (the
driver's shape checks, the argument types against the parameters, pointee types, the buffers' devices) gave
the same answer the last time, so a repeat launch (`RepeatPlan`) makes only the checks its values decide: each
scalar against its parameter's type and range, each buffer still live. Its parameters are packed into a copy of
the kept buffer. Launches with host arrays (copied in and out), tensors, raw addresses, streams, a sanitizer or
a Node's GPUs take the full path every time.
"""

from __future__ import annotations

import weakref
from typing import Any

import numpy as np

from ptxforge.runtime import params as P
from ptxforge.runtime.buffers import DeviceBuffer

# scalar argument types a signature records (their values are checked at every launch)
SCALAR_TYPES = frozenset({int, float, bool, np.bool_, np.int8, np.int16, np.int32, np.int64, np.uint8, np.uint16,
                          np.uint32, np.uint64, np.float16, np.float32, np.float64})
MAX_PLANS = 32  # signatures a kernel keeps (all dropped when full: a loop over fresh buffers starts again)


def _plain(d: Any) -> bool:
    return type(d) is int or (type(d) is tuple and all(type(x) is int for x in d))


def signature(grid: Any, block: Any, shared_mem: Any, args: Any, device: Any, opts: Any, validate: Any,
              preferred: str | None) -> tuple | None:
    """The launch's signature, or None when it has none (an argument other than a scalar, None or a
    DeviceBuffer; a shape other than ints)."""
    if not (_plain(grid) and _plain(block)) or type(shared_mem) is not int or type(args) not in (list, tuple):
        return None
    kinds: list[Any] = []
    for a in args:
        t = type(a)
        if t is DeviceBuffer:
            kinds.append(id(a))  # (the plan keeps a weak reference to check it is the same buffer)
        elif t in SCALAR_TYPES or a is None:
            kinds.append(t)
        else:
            return None
    dev = device if device is None or type(device) is str else id(device)
    return (grid, block, shared_mem, validate is True, dev, id(opts), preferred, tuple(kinds))


class RepeatPlan:
    """What a launch of one signature checked and packed, for its repeats; `packed` re-checks an argument list's
    values and packs it."""

    __slots__ = ("buffers", "dev", "device", "opts", "scalars", "shape", "template")
    shape: tuple[tuple[int, int, int], tuple[int, int, int], int]  # the checked grid, block and shared memory

    def __init__(self, plan: list, packed: bytes, offsets: list[int], names: tuple[str, ...], args: Any, dev: Any,
                 device: Any, opts: Any, shape: tuple[tuple[int, int, int], tuple[int, int, int], int]) -> None:
        self.template = packed
        self.dev, self.device, self.opts, self.shape = dev, device, opts, shape
        self.buffers = [(i, weakref.ref(a)) for i, a in enumerate(args) if type(a) is DeviceBuffer]
        self.scalars = [(i, off, max(p.size, 1), p.type, names[i])
                        for i, ((kind, p, _), off) in enumerate(zip(plan, offsets, strict=True)) if kind == "scalar"]

    def packed(self, args: Any, opts: Any, device: Any) -> bytes | None:
        """The parameter buffer of a launch with this signature (its scalars checked: LaunchError as the full
        path raises; its buffers live: ValueError); None when it is not the launch planned (another buffer
        under a reused id, other options or device objects)."""
        if opts is not self.opts or (device is not self.device and type(device) is not str and device is not None):
            return None
        for i, ref in self.buffers:
            if ref() is not args[i]:
                return None
        out = bytearray(self.template)
        for i, off, size, ty, where in self.scalars:
            P.place(out, off, size, P.scalar_bytes(args[i], ty, where))
        for i, _ in self.buffers:
            args[i].address  # noqa: B018 (a freed buffer raises, as packing it does)
        return bytes(out)


def repeatable(plan: list, args: Any, dev: Any, copies: list, temps: list) -> bool:
    """Whether a checked launch may be repeated from its plan: every pointer a buffer on the launch's device
    (or None), nothing copied in or out."""
    if copies or temps:
        return False
    for kind, _, value in plan:
        if kind == "bytes" or (kind == "ptr" and value is not None
                               and (type(value) is not DeviceBuffer or value.device is not dev)):
            return False
    return len(plan) == len(args)
