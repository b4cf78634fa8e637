"""Launching a kernel on a GPU with cuLaunchKernelEx, with the same checks the emulator makes first.

The packed parameter buffer is the emulator's; the driver receives one pointer per parameter into it.
Kernel time is measured with CUDA events around the launch.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from ptxforge.emu.launch_checks import check_launch, dims
from ptxforge.errors import DeviceUnavailable, KernelFault, LaunchError
from ptxforge.ptx import ir
from ptxforge.runtime.cuda_device import CudaDevice
from ptxforge.runtime.cuda_driver import CudaError, check, driver

PORTABLE_CLUSTER = 8  # CTAs; larger clusters need the non-portable opt-in


def param_pointers(params: bytes, offsets: list[int]) -> tuple[np.ndarray, np.ndarray]:
    """(storage, pointers): a host copy of the packed parameters and the void*[] array into it.

    The driver reads parameter i from pointers[i]; keep both arrays alive until the launch returns."""
    storage = np.frombuffer(params, np.uint8).copy() if params else np.zeros(1, np.uint8)
    base = storage.ctypes.data
    return storage, np.array([base + off for off in offsets], np.uint64)


def launch_config(d: Any, grid: Any, block: Any, shared_mem: int, cluster: Any, stream: Any = None,
                  cooperative: bool = False) -> Any:
    """The CUlaunchConfig of a launch; `cluster` (x, y, z) adds the cluster-dimension attribute and
    `cooperative` the cooperative attribute (the driver then gives grid.sync() its workspace)."""
    cfg = d.CUlaunchConfig()
    cfg.gridDimX, cfg.gridDimY, cfg.gridDimZ = grid
    cfg.blockDimX, cfg.blockDimY, cfg.blockDimZ = block
    cfg.sharedMemBytes = int(shared_mem)
    cfg.hStream = stream if stream is not None else d.CUstream(0)
    attrs = []
    if cluster is not None:
        attr = d.CUlaunchAttribute()
        attr.id = d.CUlaunchAttributeID.CU_LAUNCH_ATTRIBUTE_CLUSTER_DIMENSION
        attr.value.clusterDim.x, attr.value.clusterDim.y, attr.value.clusterDim.z = cluster
        attrs.append(attr)
    if cooperative:
        attr = d.CUlaunchAttribute()
        attr.id = d.CUlaunchAttributeID.CU_LAUNCH_ATTRIBUTE_COOPERATIVE
        attr.value.cooperative = 1
        attrs.append(attr)
    if attrs:
        cfg.attrs = attrs
        cfg.numAttrs = len(attrs)
    return cfg


def check_dims(grid: Any, block: Any) -> tuple[tuple[int, int, int], tuple[int, int, int]]:
    """Grid and block as 3-tuples within the limits of every CUDA GPU; LaunchError otherwise."""
    grid, block = dims(grid, "grid"), dims(block, "block")
    probe = ir.Function("entry", "kernel")
    shape = check_launch(None, probe, grid, block)
    return shape.grid, shape.block


def launch_on_gpu(device: CudaDevice, module: ir.Module, func: ir.Function, params: bytes, offsets: list[int],
                  *, grid: Any, block: Any, shared_mem: int = 0, cluster: Any = None,
                  cooperative: bool = False, stream: Any = None) -> float:
    """Run `func` once on `device`; returns the kernel's time in seconds (CUDA events). Its module stays
    loaded (pinned in the device's module cache) until the kernel has ended.

    `stream`: a `ptxforge.runtime.cuda_green.GreenStream` of `device`: the kernel runs on its SMs, its module
    loaded in the green context (see that module); the primary context is current again afterwards (torch
    and the other users of the CUDA runtime on this thread keep running on the whole GPU). None: the
    primary context's null stream."""
    if stream is None:
        return _pinned_launch(device, module, func, params, offsets, grid, block, shared_mem, cluster, cooperative)
    if getattr(stream, "device", None) is not device:
        raise LaunchError(f"the stream {stream!r} is not one of {device.description}")
    if stream.closed:
        raise LaunchError(f"{stream!r} was closed: make a new one (ptxforge.runtime.cuda_green.green_stream)")
    try:  # stream.view: the green context's modules, events and current context
        return _pinned_launch(stream.view, module, func, params, offsets, grid, block, shared_mem, cluster,
                              cooperative, stream.handle)
    finally:
        try:
            device.make_current()
        except (KernelFault, DeviceUnavailable):
            pass  # a context the kernel broke refuses; the kernel's own error is the one to see


def _pinned_launch(device: CudaDevice, module: ir.Module, func: ir.Function, params: bytes, offsets: list[int],
                   grid: Any, block: Any, shared_mem: int, cluster: Any, cooperative: bool,
                   stream: Any = None) -> float:
    release = device.pin_module(module)
    try:
        seconds = _launch(device, module, func, params, offsets, grid, block, shared_mem, cluster, cooperative,
                          stream)
    except BaseException:
        try:
            release()  # may unload another module, which a context the kernel broke refuses
        except (LaunchError, KernelFault, DeviceUnavailable):
            pass  # the kernel's own error is the one to see
        raise
    release()
    return seconds


def _launch(device: CudaDevice, module: ir.Module, func: ir.Function, params: bytes, offsets: list[int],
            grid: Any, block: Any, shared_mem: int, cluster: Any, cooperative: bool, stream: Any = None) -> float:
    d = driver()
    attrs = device.kernel_attributes(module, func.name)
    shape = check_launch(module, func, grid, block, cluster, shared_mem=shared_mem,
                         static_shared=attrs["shared_bytes"], max_shared=device.max_shared_per_block)
    grid, block, cluster = shape.grid, shape.block, shape.cluster
    where = f"({func.name}<<<{grid}, {block}>>> on {device.name})"
    f = device.function(module, func.name)
    FA = d.CUfunction_attribute
    max_threads = attrs["max_threads_per_block"]
    threads = block[0] * block[1] * block[2]
    if threads > max_threads:
        regs = attrs["registers"]
        raise LaunchError(f"{func.name} uses {regs} registers per thread, so a block may have at most "
                          f"{max_threads} threads on {device.arch}; the launch asked for {threads}: lower the "
                          f"block size or cap registers (.maxnreg / .maxntid)")
    if shared_mem:
        check(d.cuFuncSetAttribute(f, FA.CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES, int(shared_mem)),
              "cuFuncSetAttribute", "(dynamic shared memory)")
    explicit = cluster if cluster is not None and ".reqnctapercluster" not in dict(func.directives) else None
    if cluster is not None and cluster[0] * cluster[1] * cluster[2] > PORTABLE_CLUSTER:
        check(d.cuFuncSetAttribute(f, FA.CU_FUNC_ATTRIBUTE_NON_PORTABLE_CLUSTER_SIZE_ALLOWED, 1),
              "cuFuncSetAttribute", "(non-portable cluster size)")
    storage, pointers = param_pointers(params, offsets)
    cfg = launch_config(d, grid, block, shared_mem, explicit, stream, cooperative=cooperative)
    device.make_current()
    start, end = device.timing_events()
    check(d.cuEventRecord(start, cfg.hStream), "cuEventRecord")
    check(d.cuLaunchKernelEx(cfg, f, int(pointers.ctypes.data) if len(offsets) else None, 0), "cuLaunchKernelEx",
          where)
    check(d.cuEventRecord(end, cfg.hStream), "cuEventRecord")
    check(d.cuEventSynchronize(end), "the kernel", where)
    ms = check(d.cuEventElapsedTime(start, end), "cuEventElapsedTime")
    del storage  # the driver copied the parameters at launch
    return float(ms) / 1e3


__all__ = ["CudaError", "check_dims", "launch_config", "launch_on_gpu", "param_pointers"]
