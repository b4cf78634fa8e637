"""The CUDA driver API through NVIDIA's cuda-bindings: loaded on first use, every call checked.

`driver()` gives `cuda.bindings.driver` after a successful `cuInit`, or raises `CudaUnavailable` saying
what is missing (the package, the driver library, a GPU). `check(result, call)` unpacks a call's return
tuple and turns a failure into a `CudaError` that names the call and the CUDA error.

A CudaError is a `ptxforge.KernelFault` (most are the kernel's fault surfacing at the launch or the next
synchronizing call), never an emulator error; CudaUnavailable is a `ptxforge.DeviceUnavailable`.
"""

from __future__ import annotations

import functools
from typing import Any

from ptxforge.errors import DeviceUnavailable, KernelFault

# What to try next, for the errors a user can act on.
_HINTS = {
    "CUDA_ERROR_ILLEGAL_ADDRESS": "find the access with device='emu', options=EmulatorOptions(sanitize=True) (it "
                                  "names the thread and PTX line)",
    "CUDA_ERROR_MISALIGNED_ADDRESS": "find the access with device='emu', options=EmulatorOptions(sanitize=True)",
    "CUDA_ERROR_ILLEGAL_INSTRUCTION": "run it on device='emu' to see which instruction the kernel reached",
    "CUDA_ERROR_LAUNCH_FAILED": "rerun with device='emu', options=EmulatorOptions(sanitize=True)",
    "CUDA_ERROR_ASSERT": "a trap or assertion fired; device='emu' names the PTX line",
    "CUDA_ERROR_LAUNCH_OUT_OF_RESOURCES": "too many registers for this block size: lower the block size or "
                                         "cap registers (.maxnreg / maxrregcount)",
    "CUDA_ERROR_LAUNCH_TIMEOUT": "the kernel ran past the display watchdog; shorten it",
    "CUDA_ERROR_NO_BINARY_FOR_GPU": "the code targets another GPU: retarget it (ptxforge retarget) or pass arch=",
    "CUDA_ERROR_UNSUPPORTED_PTX_VERSION": "the driver is older than the PTX ISA version; lower .version "
                                          "(ptxforge retarget --ptx-version) or update the driver",
    "CUDA_ERROR_OUT_OF_MEMORY": "free buffers (DeviceBuffer.free) or use smaller inputs",
}
# After these the context is unusable: every later call in the process fails.
STICKY = frozenset({"CUDA_ERROR_ILLEGAL_ADDRESS", "CUDA_ERROR_MISALIGNED_ADDRESS", "CUDA_ERROR_ILLEGAL_INSTRUCTION",
                    "CUDA_ERROR_LAUNCH_FAILED", "CUDA_ERROR_ASSERT", "CUDA_ERROR_HARDWARE_STACK_ERROR",
                    "CUDA_ERROR_INVALID_PC", "CUDA_ERROR_INVALID_ADDRESS_SPACE"})


_LOST: list = []  # the first sticky error of this process: after it every CUDA call fails


def lost_context() -> CudaError | None:
    """The error that left this process's CUDA context unusable, or None."""
    return _LOST[0] if _LOST else None


class CudaUnavailable(DeviceUnavailable):
    """device='cuda' cannot be used on this machine; the message says why."""


class CudaError(KernelFault):
    """A CUDA driver call failed. `code` is the error's name, e.g. 'CUDA_ERROR_ILLEGAL_ADDRESS'."""

    def __init__(self, call: str, code: str, description: str, context: str = ""):
        self.call, self.code, self.description, self.context = call, code, description, context
        msg = f"{call} failed: {code} ({description})"
        if context:
            msg += f" {context}"
        if code in _HINTS:
            msg += f"; {_HINTS[code]}"
        if code in STICKY:
            msg += ". The CUDA context is now unusable: later CUDA calls in this process will fail"
        super().__init__(msg)

    def __reduce__(self) -> tuple:  # pickled with its fields (a rank's error goes to its parent process)
        return type(self), (self.call, self.code, self.description, self.context)


class CudaContextLost(KernelFault):
    """A CUDA call failed because an earlier kernel fault left this process's CUDA context unusable;
    `first` is that fault's CudaError."""

    def __init__(self, call: str, first: CudaError):
        self.call, self.first = call, first
        super().__init__(f"{call} failed because an earlier kernel broke this process's CUDA context: "
                         f"{first.code} in {first.call} {first.context}. Restart the process to use the GPU again")

    def __reduce__(self) -> tuple:
        return type(self), (self.call, self.first)


@functools.lru_cache(maxsize=1)
def _load():
    try:
        from cuda.bindings import driver as d  # optional dependency: the `cuda` extra
    except ImportError as e:
        return None, (f"device='cuda' needs NVIDIA's cuda-bindings ({e}); install it with "
                      f"pip install 'ptxforge[cuda]', or use device='emu'")
    try:
        (err,) = d.cuInit(0)
    except Exception as e:  # cuda-pathfinder raises when libcuda.so.1 is absent
        what = "libcuda.so.1 not found" if type(e).__name__ == "DynamicLibNotFoundError" else f"{type(e).__name__}: {e}"
        return None, f"no CUDA driver on this machine ({what}); use device='emu'"
    if err != d.CUresult.CUDA_SUCCESS:
        name, desc = error_text(d, err)
        return None, f"the CUDA driver did not start: cuInit gave {name} ({desc}); use device='emu'"
    err, count = d.cuDeviceGetCount()
    if err != d.CUresult.CUDA_SUCCESS or count == 0:
        return None, "the CUDA driver sees no GPU; use device='emu'"
    return d, None


def driver() -> Any:
    """`cuda.bindings.driver`, initialised. Raises CudaUnavailable when CUDA cannot be used here."""
    d, why = _load()
    if d is None:
        raise CudaUnavailable(why)
    return d


def unavailable_reason() -> str | None:
    """Why device='cuda' cannot be used here, or None when it can."""
    return _load()[1]


def error_text(d: Any, err: Any) -> tuple[str, str]:
    """(name, description) of a CUresult."""
    try:
        e1, name = d.cuGetErrorName(err)
        e2, desc = d.cuGetErrorString(err)
    except Exception:  # an error code the driver itself does not know
        return str(err), "unknown error"
    name = name.decode() if e1 == d.CUresult.CUDA_SUCCESS and name else getattr(err, "name", str(err))
    desc = desc.decode() if e2 == d.CUresult.CUDA_SUCCESS and desc else "no description"
    return name, desc


def check(result: tuple, call: str, context: str = "") -> Any:
    """The value(s) a cuda-bindings call returned after its CUresult; CudaError when it failed."""
    err, *values = result
    if _LOST and int(getattr(err, "value", err)) != 0:  # the cause is the earlier kernel fault, not this call
        raise CudaContextLost(call, _LOST[0])
    d = driver()
    if err != d.CUresult.CUDA_SUCCESS:
        e = CudaError(call, *error_text(d, err), context)
        if e.code in STICKY:
            _LOST.append(e)
        raise e
    if not values:
        return None
    return values[0] if len(values) == 1 else tuple(values)
