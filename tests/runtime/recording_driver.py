"""A recording cuda.bindings.driver for the CUDA backend's tests on a machine without a GPU.

`RecordingDriver` stands where `ptxforge.runtime.cuda_driver.driver()` returns the bindings. Its types and
enums are the real module's. Each `cu*` call is first made on the real binding, which converts every
argument to its C type before it looks for libcuda.so.1 (absent here): a TypeError there fails the test,
so what is recorded is what would reach the driver. Then the call is recorded (name, arguments, the context
current at that moment) and answered the way a GPU (an H200 by default) would answer it. An unexpected call
fails the test; `fail={name: CUresult or exception}` makes a call fail; `missing` names symbols the bindings
lack. Use it only where no GPU is present (the real calls must not reach a driver).
"""

from __future__ import annotations

from typing import Any, NamedTuple

from cuda.bindings import driver as real

OK = real.CUresult.CUDA_SUCCESS
SM = real.CUdevResourceType.CU_DEV_RESOURCE_TYPE_SM
PRIMARY, GREEN_CTX, GREEN, DESC, STREAM = 0x1000, 0x4000, 0x3000, 0x2000, 0x5000


def sm_resource(count: int, min_size: int = 0, alignment: int = 0) -> Any:
    r = real.CUdevResource()
    r.type = SM
    r.sm.smCount, r.sm.minSmPartitionSize, r.sm.smCoscheduledAlignment = count, min_size, alignment
    return r


class Call(NamedTuple):
    name: str
    args: tuple
    current: int  # the context current when the call was made (0: none)
    result: Any  # what the call returned (None: it failed)


class RecordingDriver:
    def __init__(self, *, capability: tuple[int, int] = (9, 0), sms: int = 132, driver_version: int = 13000,
                 min_size: int = 8, alignment: int = 8, granted: int | None = None, missing: tuple = (),
                 fail: dict | None = None) -> None:
        self.capability, self.sms, self.driver_version = capability, sms, driver_version
        self.min_size, self.alignment, self.granted = min_size, alignment, granted
        self.missing, self.fail = set(missing), dict(fail or {})
        self.calls: list[Call] = []
        self.current = 0
        self._next = 0x10000
        self._split = 0

    def names(self, since: int = 0) -> list[str]:
        return [c.name for c in self.calls[since:]]

    def called(self, name: str) -> list[Call]:
        return [c for c in self.calls if c.name == name]

    def __getattr__(self, name: str) -> Any:
        if name in self.missing:
            raise AttributeError(name)
        target = getattr(real, name)
        if not name.startswith("cu") or not callable(target):
            return target  # types, enums
        if name in ("cuGetErrorName", "cuGetErrorString"):  # error text: not part of the recorded calls
            return lambda err: (OK, (err.name if name == "cuGetErrorName" else f"{err.name} text").encode())

        def call(*args: Any) -> tuple:
            try:
                target(*args)  # converts the arguments, then finds no driver library here
            except TypeError:
                raise
            except Exception as e:
                assert "cuda" in str(e).lower() or "driver" in str(e).lower(), e
            current = self.current
            if name in self.fail:
                self.calls.append(Call(name, args, current, None))
                f = self.fail[name]
                if isinstance(f, BaseException):
                    raise f
                return (f,)
            answer = getattr(self, f"_{name}", None)
            assert answer is not None, f"the recording driver has no answer for {name}{args}"
            result = answer(*args)
            self.calls.append(Call(name, args, current, result))
            return result
        return call

    def _handle(self, kind: Any) -> Any:
        self._next += 0x10
        return kind(self._next)

    # ------------------------------------------------------------------ the answers
    def _cuInit(self, flags): return (OK,)
    def _cuDeviceGetCount(self): return (OK, 1)
    def _cuDeviceGet(self, ordinal): return (OK, real.CUdevice(ordinal))
    def _cuDevicePrimaryCtxRetain(self, dev): return (OK, real.CUcontext(PRIMARY))
    def _cuDeviceGetName(self, n, dev): return (OK, b"NVIDIA H200".ljust(n, b"\0"))
    def _cuDriverGetVersion(self): return (OK, self.driver_version)

    def _cuCtxSetCurrent(self, ctx):
        self.current = int(ctx)
        return (OK,)

    def _cuDeviceGetAttribute(self, attr, dev):
        A = real.CUdevice_attribute
        return (OK, {A.CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR: self.capability[0],
                     A.CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR: self.capability[1],
                     A.CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT: self.sms,
                     A.CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK_OPTIN: 232448}[attr])

    def _cuDeviceGetDevResource(self, dev, kind):
        return (OK, sm_resource(self.sms, self.min_size, self.alignment))

    def _cuDevSmResourceSplitByCount(self, nb, res, flags, min_count):
        self._split = int(min_count)
        return (OK, [sm_resource(self._split, self.min_size, self.alignment)], 1,
                sm_resource(self.sms - self._split, self.min_size, self.alignment))

    def _cuDevResourceGenerateDesc(self, resources, n): return (OK, real.CUdevResourceDesc(DESC))
    def _cuGreenCtxCreate(self, desc, dev, flags): return (OK, real.CUgreenCtx(GREEN))
    def _cuCtxFromGreenCtx(self, green): return (OK, real.CUcontext(GREEN_CTX))
    def _cuGreenCtxStreamCreate(self, green, flags, priority): return (OK, real.CUstream(STREAM))

    def _cuGreenCtxGetDevResource(self, green, kind):
        return (OK, sm_resource(self.granted or self._split, self.min_size, self.alignment))

    def _cuStreamDestroy(self, stream): return (OK,)
    def _cuGreenCtxDestroy(self, green): return (OK,)
    # memory, modules, launches
    def _cuMemAlloc(self, size): return (OK, self._handle(real.CUdeviceptr))
    def _cuMemsetD8(self, ptr, value, size): return (OK,)
    def _cuMemFree(self, ptr): return (OK,)
    def _cuMemcpyHtoD(self, dst, src, size): return (OK,)
    def _cuMemcpyDtoH(self, dst, src, size): return (OK,)
    def _cuModuleLoadData(self, image): return (OK, self._handle(real.CUmodule))
    def _cuModuleUnload(self, module): return (OK,)
    def _cuModuleGetFunction(self, module, name): return (OK, self._handle(real.CUfunction))

    def _cuFuncGetAttribute(self, attr, f):
        FA = real.CUfunction_attribute
        return (OK, 1024 if attr == FA.CU_FUNC_ATTRIBUTE_MAX_THREADS_PER_BLOCK else 16)

    def _cuEventCreate(self, flags): return (OK, self._handle(real.CUevent))
    def _cuEventRecord(self, event, stream): return (OK,)
    def _cuEventSynchronize(self, event): return (OK,)
    def _cuEventElapsedTime(self, start, end): return (OK, 0.25)
    def _cuEventDestroy(self, event): return (OK,)
    def _cuLaunchKernelEx(self, cfg, f, params, extra): return (OK,)
