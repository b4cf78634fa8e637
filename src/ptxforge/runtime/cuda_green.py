"""A CUDA stream whose kernels run on at most `n` SMs of a GPU: a green context (CUDA driver 12.4+).

    gs = green_stream(cuda_device(0), 20)      # GreenStream, or GreenContextsUnavailable saying why not
    gs, why = green_stream_or_none(dev, 20)    # (GreenStream, "") or (None, why): the caller falls back
    kernel.launch(grid, block, args, stream=gs)   # runs on gs.sms SMs (gs.sms >= 20: the driver's granularity)
    gs.close()                                 # stream, modules, green context: destroyed in that order

The driver calls, in order (CUDA Driver API, "Green Contexts" module; docs.nvidia.com/cuda/cuda-driver-api/
group__CUDA__GREEN__CONTEXTS.html, and the cuda-bindings 13.5 docstrings of the same functions):
1. cuDeviceGetDevResource(dev, CU_DEV_RESOURCE_TYPE_SM): the GPU's SMs (`smCount`), and since CUDA 13.0 the
   split's granularity, `minSmPartitionSize` and `smCoscheduledAlignment` (CUdevSmResource struct reference).
2. cuDevSmResourceSplitByCount(1, sm, 0, minCount): one group of at least minCount SMs. The driver rounds
   minCount up to its minimum and alignment. The CUDA 12.4 driver docs give the guideline the 13.0 docs still
   print next to the fields: compute capability 6.x at least 1 SM; 7.x at least 2, a multiple of 2; 8.x at
   least 4, a multiple of 2; 9.0 and later at least 8, a multiple of 8. `sm_group_size` rounds the same way
   first (from the fields when the driver fills them, else from that table), so what is asked is what the
   driver can give; what it did give is read back in step 6.
3. cuDevResourceGenerateDesc([group], 1): the descriptor.
4. cuGreenCtxCreate(desc, dev, CU_GREEN_CTX_DEFAULT_STREAM): the green context. The 12.4 to 13.1 driver
   API references call that flag required ("CU_GREEN_CTX_DEFAULT_STREAM is required"); the 13.5 bindings
   list it as a supported flag. The call retains the primary context (released at cuGreenCtxDestroy), and
   the docs advise making the primary context active first: `CudaDevice` does at its creation.
5. cuCtxFromGreenCtx(green): its CUcontext ("a normal primary context but with the resources of the
   specified green context" in the 12.x docs; "treated as if it were a primary context, while still
   honoring the resources" in 13.x); the docs' way to make a green context current is this handle and
   cuCtxSetCurrent.
6. cuGreenCtxStreamCreate(green, CU_STREAM_NON_BLOCKING, 0): the stream (the flag "must be specified"), and
   cuGreenCtxGetDevResource(green, SM): the SMs the green context really has (`GreenStream.sms`).

Modules for launches on the stream are loaded with the green context current, so the CUfunction belongs to
the stream's context (cuLaunchKernelEx: "The CUDA context associated with this stream must match that
associated with function f"); memory of the primary context is used as it is (the CUcontext of a green
context acts as the primary context for every API whose semantics do not depend on the green context's
resources). `close` destroys the stream first (cuGreenCtxDestroy "does not destroy streams created via
cuGreenCtxStreamCreate"; they must be destroyed with cuStreamDestroy), unloads the modules in the green
context, then destroys it. A failure part way destroys what was made, in the same order.

Where the driver has no green contexts (a driver older than 12.4, the symbol missing from libcuda or from
cuda-bindings, or CUDA_ERROR_NOT_SUPPORTED from any step), `green_stream` raises GreenContextsUnavailable
and `green_stream_or_none` returns (None, why); the caller then confines its kernels the old way, by
launching a grid of only that many persistent blocks. Work outside the green context (the primary
context's own launches) may still use every SM: a green context confines what is launched into it.
"""

from __future__ import annotations

from typing import Any

from ptxforge.module_cache import ModuleCache
from ptxforge.runtime.cuda_device import CudaDevice
from ptxforge.runtime.cuda_driver import CudaError, CudaUnavailable, check, driver

FIRST_DRIVER = 12040  # cuDriverGetVersion of CUDA 12.4, the first driver with green contexts
CALLS = ("cuDeviceGetDevResource", "cuDevSmResourceSplitByCount", "cuDevResourceGenerateDesc", "cuGreenCtxCreate",
         "cuCtxFromGreenCtx", "cuGreenCtxStreamCreate", "cuGreenCtxGetDevResource", "cuGreenCtxDestroy",
         "cuStreamDestroy")
# (minimum SMs, alignment) of a split by compute capability major, for drivers that do not report them
# (CUDA 12.4 driver API docs, Green Contexts; "a guideline ... and may be subject to change")
_GUIDELINE = {6: (1, 1), 7: (2, 2), 8: (4, 2)}
_GUIDELINE_SM90_ON = (8, 8)


class GreenContextsUnavailable(CudaUnavailable):
    """This driver (or cuda-bindings) has no green contexts; the message says why. Fall back to a grid of
    as many persistent blocks as the SM budget."""


def split_granularity(capability: tuple[int, int], min_size: int = 0, alignment: int = 0) -> tuple[int, int]:
    """(minimum SMs, alignment) of a split: the driver's own figures when it reports them (CUDA 13.0+
    fills `minSmPartitionSize` / `smCoscheduledAlignment`), else the 12.4 docs' guideline for the arch."""
    if min_size > 0 and alignment > 0:
        return int(min_size), int(alignment)
    guess = _GUIDELINE.get(capability[0], _GUIDELINE_SM90_ON if capability[0] >= 9 else (1, 1))
    return (int(min_size) if min_size > 0 else guess[0]), (int(alignment) if alignment > 0 else guess[1])


def sm_group_size(n: int, capability: tuple[int, int], min_size: int = 0, alignment: int = 0) -> int:
    """The SMs a green context of at least `n` SMs gets: `n` raised to the minimum, then rounded up to the
    alignment (e.g. 20 -> 24 and 2 -> 8 on sm_90; 5 -> 6 on sm_80)."""
    if isinstance(n, bool) or not isinstance(n, int) or n < 1:
        raise ValueError(f"a green context needs a whole number of SMs of at least 1, got {n!r}")
    lo, align = split_granularity(capability, min_size, alignment)
    size = max(n, lo)
    return -(-size // align) * align


class _GreenContextDevice(CudaDevice):
    """The GPU seen through a green context: the same device, memory and IPC mappings as `parent`, but its
    `context` is the green context's CUcontext, so modules load (and kernels launch) there. Made by
    GreenStream only; it keeps its own module cache (unloaded at `GreenStream.close`)."""

    def __init__(self, parent: CudaDevice, context: Any, sms: int) -> None:  # no super().__init__: no new context
        self.parent = parent
        self.ordinal, self.handle, self.name = parent.ordinal, parent.handle, parent.name
        self.capability, self.arch, self.num_sms = parent.capability, parent.arch, sms
        self.max_shared_per_block, self.driver_version = parent.max_shared_per_block, parent.driver_version
        self.memory = parent.memory
        self.ipc_opened = parent.ipc_opened
        self.context = context
        self.modules = ModuleCache(parent.modules.bound, on_evict=self._unload)
        self._seen = ModuleCache(parent.modules.bound)
        self._ptxas_newest = None
        self._events = None
        self.last_build = {}

    @property
    def description(self) -> str:
        return f"GPU {self.ordinal} ({self.name}), green context of {self.num_sms} SMs"

    def owns_address(self, address: int) -> bool:
        return self.parent.owns_address(address)

    def unload_all(self) -> None:
        """Unload every module this green context loaded and destroy its timing events."""
        d = driver()
        self.make_current()
        for key in list(self.modules):
            loaded = self.modules.pop(key)
            if loaded is not None:
                check(d.cuModuleUnload(loaded.handle), "cuModuleUnload", "(green context)")
        self._seen.clear()
        if self._events is not None:
            for ev in self._events:
                check(d.cuEventDestroy(ev), "cuEventDestroy", "(green context)")
            self._events = None


class GreenStream:
    """A non-blocking stream of a green context of `sms` SMs on `device` (`requested` were asked for).
    Pass it as `Kernel.launch(..., stream=gs)`; launches on it run synchronously, as every GPU launch here."""

    def __init__(self, device: CudaDevice, requested: int, green: Any, context: Any, handle: Any, sms: int):
        self.device, self.requested, self.sms = device, requested, sms
        self.green, self.context, self.handle = green, context, handle
        self.view = _GreenContextDevice(device, context, sms)
        self.closed = False

    def __repr__(self) -> str:
        state = "closed" if self.closed else f"{self.sms} SMs"
        return f"GreenStream({self.device.description}: {state}, {self.requested} asked for)"

    def close(self) -> None:
        """Destroy the stream, unload the modules loaded in the green context, destroy the green context;
        the primary context is current again afterwards. Closing twice does nothing."""
        if self.closed:
            return
        self.closed = True
        _destroy(self.device, self.green, self.handle, self.view)

    def __enter__(self) -> GreenStream:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def _destroy(device: CudaDevice, green: Any, stream: Any, view: _GreenContextDevice | None) -> None:
    """Tear down what `green_stream` made (any of them may be None), the first error raised after all ran."""
    d = driver()
    first: BaseException | None = None
    steps = []
    if stream is not None:
        steps.append(lambda: check(d.cuStreamDestroy(stream), "cuStreamDestroy", "(green context stream)"))
    if view is not None:
        steps.append(view.unload_all)
    if green is not None:
        steps.append(lambda: check(d.cuGreenCtxDestroy(green), "cuGreenCtxDestroy"))
    steps.append(device.make_current)
    for step in steps:
        try:
            step()
        except (CudaError, RuntimeError) as e:  # RuntimeError: cuda-bindings' missing-symbol error
            first = first or e
    if first is not None:
        raise first


def _unsupported(why: str) -> GreenContextsUnavailable:
    return GreenContextsUnavailable(f"no green contexts on this GPU: {why}; the kernels are confined to the "
                                    f"SM budget by their grid (that many persistent blocks) instead")


def green_stream(device: CudaDevice, n: int, priority: int = 0) -> GreenStream:
    """A stream of a new green context of at least `n` SMs of `device` (see the module docstring for the
    calls and the rounding). Raises GreenContextsUnavailable where the driver has none, ValueError when `n`
    is not a positive whole number or the rounded count exceeds the GPU's SMs, CudaError for other driver
    failures (after destroying what was made)."""
    sm_group_size(n, device.capability)  # a bad `n` is the caller's error, on every driver
    d = driver()
    if int(device.driver_version) < FIRST_DRIVER:
        v = int(device.driver_version)
        raise _unsupported(f"the CUDA driver is {v // 1000}.{v % 1000 // 10}, green contexts need 12.4")
    missing = [c for c in CALLS if not hasattr(d, c)]
    if missing:
        raise _unsupported(f"cuda-bindings has no {', '.join(missing)}")
    green = stream = None
    try:
        device.make_current()  # the primary context active first, as cuGreenCtxCreate advises
        SM = d.CUdevResourceType.CU_DEV_RESOURCE_TYPE_SM
        res = check(d.cuDeviceGetDevResource(device.handle, SM), "cuDeviceGetDevResource", "(SMs)")
        total = int(res.sm.smCount)
        want = sm_group_size(n, device.capability, int(res.sm.minSmPartitionSize),
                             int(res.sm.smCoscheduledAlignment))
        if want > total:
            raise ValueError(f"a green context of {n} SMs needs {want} (the driver's granularity) but "
                             f"{device.description} has {total}")
        groups, made, _rest = check(d.cuDevSmResourceSplitByCount(1, res, 0, want), "cuDevSmResourceSplitByCount",
                                    f"(one group of {want} of {total} SMs)")
        if int(made) < 1:
            raise ValueError(f"the driver split no group of {want} SMs off {device.description}'s {total}")
        desc = check(d.cuDevResourceGenerateDesc([groups[0]], 1), "cuDevResourceGenerateDesc")
        green = check(d.cuGreenCtxCreate(desc, device.handle,
                                         int(d.CUgreenCtxCreate_flags.CU_GREEN_CTX_DEFAULT_STREAM)),
                      "cuGreenCtxCreate", f"({want} SMs)")
        context = check(d.cuCtxFromGreenCtx(green), "cuCtxFromGreenCtx")
        stream = check(d.cuGreenCtxStreamCreate(green, int(d.CUstream_flags.CU_STREAM_NON_BLOCKING), int(priority)),
                       "cuGreenCtxStreamCreate")
        got = check(d.cuGreenCtxGetDevResource(green, SM), "cuGreenCtxGetDevResource", "(SMs)")
        gs = GreenStream(device, n, green, context, stream, int(got.sm.smCount))
        device.make_current()
        return gs
    except BaseException as e:
        try:
            _destroy(device, green, stream, None)
        except (CudaError, RuntimeError):
            pass  # the first failure is the one to see
        if isinstance(e, CudaError) and e.code == "CUDA_ERROR_NOT_SUPPORTED":
            raise _unsupported(f"{e.call} gave CUDA_ERROR_NOT_SUPPORTED") from None
        if isinstance(e, RuntimeError) and not isinstance(e, CudaUnavailable) and "not found" in str(e).lower():
            raise _unsupported(f"the driver library lacks a green-context call ({e})") from None
        raise


def green_stream_or_none(device: CudaDevice, n: int) -> tuple[GreenStream | None, str]:
    """(green_stream(device, n), "") or, where green contexts are unavailable or `n` SMs cannot be split off
    (more than the GPU has), (None, why): the caller runs its grid of `n` persistent blocks instead."""
    sm_group_size(n, device.capability)  # a bad `n` raises, it is no reason to fall back
    try:
        return green_stream(device, n), ""
    except (GreenContextsUnavailable, ValueError) as e:
        return None, str(e)


__all__ = ["FIRST_DRIVER", "GreenContextsUnavailable", "GreenStream", "green_stream", "green_stream_or_none",
           "sm_group_size", "split_granularity"]
