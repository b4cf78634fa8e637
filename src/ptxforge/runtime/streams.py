"""Launches on the streams of an emulated node's GPUs (`Kernel.launch(..., stream=s)`).

A stream launch is checked and packed at once (host arrays are copied in then), queued on its stream
and returned as a `ptxforge.emu.PendingLaunch`; `node.synchronize()` runs it beside everything else
pending on the node, and at its end the host arrays are copied back and its `LaunchResult` is made.
"""

from __future__ import annotations

import copy
from typing import Any

from ptxforge.emu import sanitizer as san
from ptxforge.emu.launch import emulate
from ptxforge.emu.node import PendingLaunch, Stream
from ptxforge.errors import LaunchError
from ptxforge.runtime.buffers import resolve_device
from ptxforge.runtime.copies import as_tuple, copy_back, free_quietly
from ptxforge.runtime.device import Device
from ptxforge.runtime.result import LaunchResult


def stream_device(stream: Any, device: Any) -> Any:
    """The device a launch on `stream` runs on; `device`, when given, must be the stream's."""
    if not isinstance(stream, Stream):
        raise LaunchError(f"stream= takes a stream of an emulated node's GPU (node.devices[r].stream(sms=...)), "
                          f"got {type(stream).__name__}")
    if device is None or device == "auto" or resolve_device(device) is stream.device:
        return stream.device
    raise LaunchError(f"{stream.name} belongs to GPU {stream.device.gpu}, but the launch names device={device!r}")


def node_sanitize(dev: Device) -> Any:
    """The `sanitize` of `dev`'s node (True, or a Sanitizer whose options every launch there takes),
    False for a device outside a node."""
    node = dev.node
    return node.sanitize if node is not None and node.sanitize else False


def peer_reachable(dev: Device, other: Device) -> bool:
    """Whether a kernel on `dev` may take a buffer of `other`: a peer of the same node with access on."""
    node, a, b = dev.node, dev.gpu, other.gpu
    if node is None or other.node is not node or a is None or b is None:  # a node's GPUs all have an index
        return False
    return node.can_access_peer(a, b)


def label_reports(sanitizer: Any, dev: Device) -> None:
    """Name the GPU in the sanitizer's reports of a launch on an emulated GPU that has an index (a node's GPU,
    an IPC rank's)."""
    gpu = dev.gpu
    if gpu is not None:
        for r in sanitizer.reports:
            if r.gpu is None:
                r.gpu = gpu


def launch_on_stream(kernel: Any, stream: Any, dev: Any, packed: bytes, copies: list, temps: list, grid: Any,
                     block: Any, shared_mem: int, sanitize: Any, num_sms: int | None, watchdog_s: float,
                     printf: Any, cluster: Any, checks: tuple = (),
                     reference: bool = False) -> PendingLaunch[LaunchResult]:
    """Queue a packed launch of `kernel` on `stream`; returns its `PendingLaunch`. The kernel's module stays
    loaded on `dev` until the launch finishes or is aborted (see `ptxforge.module_cache`)."""
    if num_sms is not None:
        free_quietly(dev, temps)
        raise LaunchError(f"num_sms does not apply to a stream launch: {stream.name} runs on its own SMs "
                          f"(make the stream with device.stream(sms=...))")

    sanitizer = None
    if sanitize:
        sanitizer = sanitize if isinstance(sanitize, san.Sanitizer) else san.Sanitizer()
        if sanitize is dev.node.sanitize and isinstance(sanitize, san.Sanitizer):
            sanitizer = copy.copy(sanitize)  # the node's options, a report log of this launch's own
            sanitizer.log = type(sanitize.log)(sanitize.log.max_reports)
    lines: list[str] = []

    def sink(text: str) -> None:
        lines.append(text)
        (printf or (lambda t: print(t, end="")))(text)
    try:
        machine = emulate(kernel.module, kernel.function, grid=grid, block=block, params=packed,
                          shared_mem=shared_mem, device=dev, watchdog_s=watchdog_s, printf=sink,
                          checks=(sanitizer, *checks) if sanitizer is not None else checks, cluster=cluster,
                          sm_ids=stream.sms, run=False, reference=reference)
    except BaseException:
        free_quietly(dev, temps)
        raise
    release = dev.pin_module(kernel.module)  # its variables and compiled kernel until the launch ends
    if sanitizer is not None:  # the node-wide checks: races with other launches (and across a cluster's NICs)
        dev.node.watch_launch(machine, sanitizer, dev.gpu, f"{kernel.name} on {stream.name}", stream)

    def finish(stats: dict[str, Any]) -> LaunchResult:
        try:
            copy_back(dev, copies)
        finally:
            free_quietly(dev, temps)
            release()
        if sanitizer is not None:
            label_reports(sanitizer, dev)
            sanitizer.finish()
        return LaunchResult(kernel.name, "emu", as_tuple(grid), as_tuple(block), stats["thread_instructions"],
                            stats["wall_s"], stats["per_sm"], stats["waves"], lines,
                            gpu=f"GPU {dev.gpu}, {stream.name}", printf_truncated=stats.get("printf_truncated", 0),
                            mode=stats.get("mode", "fast"))

    def abort(error: BaseException) -> BaseException | None:
        free_quietly(dev, temps)
        release()
        if sanitizer is not None:  # keep what the sanitizer found before the node stopped
            label_reports(sanitizer, dev)
            try:
                sanitizer.finish(stopped=error)
            except Exception as found:
                return found
        return None

    pending = PendingLaunch(stream, machine, kernel.name, finish, abort)
    stream.queue.append(pending)
    return pending
