"""A CUDA GPU as a ptxforge device: its primary context, memory and loaded modules.

`CudaMemory` has the emulator memory's interface (alloc/free/write/read), so `DeviceBuffer` works on
either device. Modules are built once per PTX text (see cuda_modules); a GPU keeps at most `MAX_MODULES`
loaded (a `ptxforge.module_cache.ModuleCache`: the least recently used one is unloaded with cuModuleUnload,
never one a launch has pinned).
"""

from __future__ import annotations

import functools
import hashlib
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import numpy as np

from ptxforge.errors import LaunchError
from ptxforge.module_cache import MAX_MODULES, ModuleCache
from ptxforge.ptx import ir
from ptxforge.runtime import cuda_modules
from ptxforge.runtime.cuda_driver import CudaError, check, driver
from ptxforge.runtime.gpu import arch_for_capability
from ptxforge.runtime.resources import ptxas_failure
from ptxforge.toolchain import ToolNotFound, assemble, find_tool, ptxas_max_ptx_version

if TYPE_CHECKING:
    from collections.abc import Iterable

    from ptxforge.emu.node import Node, Stream

# The driver refuses a cubin with these when it is older than the ptxas that built it.
_CUBIN_REFUSED = frozenset({"CUDA_ERROR_INVALID_IMAGE", "CUDA_ERROR_NO_BINARY_FOR_GPU",
                            "CUDA_ERROR_UNSUPPORTED_PTX_VERSION", "CUDA_ERROR_INVALID_PTX",
                            "CUDA_ERROR_NOT_SUPPORTED"})


@dataclass
class CudaAllocation:
    """Device memory from cuMemAlloc: `base` is its device address."""

    base: int
    size: int
    name: str
    handle: object


@dataclass
class CudaModule:
    """A module loaded on a GPU: its CUmodule, and the CUfunctions (with their attributes) asked of it."""

    handle: Any
    functions: dict[str, Any] = field(default_factory=dict)
    attributes: dict[str, dict[str, int]] = field(default_factory=dict)


class CudaMemory:
    """Global memory of one GPU, with the interface of the emulator's DeviceMemory."""

    def __init__(self, device: CudaDevice):
        self.device = device

    def alloc(self, size: int, name: str = "", align: int = 256, readonly: bool = False) -> CudaAllocation:
        self.device.make_current()
        d = driver()
        ptr = check(d.cuMemAlloc(max(int(size), 1)), "cuMemAlloc", f"({size} bytes for {name or 'a buffer'})")
        check(d.cuMemsetD8(ptr, 0, max(int(size), 1)), "cuMemsetD8")  # zero-filled, as on the emulator
        return CudaAllocation(int(ptr), int(size), name, ptr)

    def free(self, alloc: CudaAllocation) -> None:
        self.device.make_current()
        check(driver().cuMemFree(alloc.handle), "cuMemFree")

    def write(self, alloc: CudaAllocation, data: Any) -> None:
        host = np.ascontiguousarray(np.frombuffer(data, np.uint8) if isinstance(data, bytes | bytearray) else data)
        if host.nbytes > alloc.size:
            raise ValueError(f"{host.nbytes} bytes do not fit the {alloc.size}-byte allocation {alloc.name!r}")
        self.device.make_current()
        if host.nbytes:
            check(driver().cuMemcpyHtoD(alloc.handle, host.ctypes.data, host.nbytes), "cuMemcpyHtoD")

    def read(self, alloc: CudaAllocation) -> np.ndarray:
        out = np.empty(alloc.size, np.uint8)
        self.device.make_current()
        if alloc.size:
            check(driver().cuMemcpyDtoH(out.ctypes.data, alloc.handle, alloc.size), "cuMemcpyDtoH")
        return out

    def view(self, alloc: CudaAllocation) -> np.ndarray:
        """The allocation's bytes: a copy (`read`), GPU memory not being host memory."""
        return self.read(alloc)


class CudaDevice:
    """GPU `ordinal` through its primary context. Get one with `cuda_device()`.

    A `ptxforge.runtime.device.Device`: `kind` "cuda" sends launches to the driver. The members that only
    emulated GPUs give a value are constants here (no driver call): no node, no emulated GPU index, no streams."""

    kind = "cuda"
    node: Node | None = None  # a GPU is no emulated node's
    gpu: int | None = None  # the emulated GPU index; a CUDA GPU is named by `ordinal` (see `description`)
    streams_supported = False
    ordinal: int
    name: str  # the GPU's own name, e.g. "NVIDIA H200"
    arch: str
    num_sms: int
    max_shared_per_block: int
    memory: CudaMemory

    def __init__(self, ordinal: int = 0, max_modules: int = MAX_MODULES):
        d = driver()
        self.ordinal = ordinal
        self.handle = check(d.cuDeviceGet(ordinal), "cuDeviceGet", f"(GPU {ordinal})")
        self.context = check(d.cuDevicePrimaryCtxRetain(self.handle), "cuDevicePrimaryCtxRetain")
        self.make_current()
        raw = check(d.cuDeviceGetName(256, self.handle), "cuDeviceGetName")
        self.name = raw.split(b"\0", 1)[0].decode(errors="replace")
        A = d.CUdevice_attribute
        self.capability = (self.attribute(A.CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR),
                           self.attribute(A.CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR))
        self.arch = arch_for_capability(*self.capability)
        self.num_sms = self.attribute(A.CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT)
        self.max_shared_per_block = self.attribute(A.CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK_OPTIN)
        self.driver_version = int(check(d.cuDriverGetVersion(), "cuDriverGetVersion"))
        self.memory = CudaMemory(self)
        # sha256 of the PTX text -> its CUmodule; id(module) -> (module, its key), so that a module object seen
        # before skips printing and hashing its text
        self.modules: ModuleCache[str, CudaModule] = ModuleCache(max_modules, on_evict=self._unload)
        self._seen: ModuleCache[int, tuple[ir.Module, str]] = ModuleCache(max_modules)
        self._ptxas_newest: tuple[int, int] | None = None
        self._events: tuple[Any, Any] | None = None
        self.ipc_opened: dict[int, tuple[int, int]] = {}  # peers' memory opened by CUDA IPC: address -> (bytes, opens)
        self.last_build: dict[str, str] = {}

    def __repr__(self) -> str:
        return f"CudaDevice({self.ordinal}: {self.name}, {self.arch}, {self.num_sms} SMs)"

    @property
    def description(self) -> str:
        return f"GPU {self.ordinal} ({self.name})"

    def attribute(self, attr: Any) -> int:
        return int(check(driver().cuDeviceGetAttribute(attr, self.handle), "cuDeviceGetAttribute"))

    def owns_address(self, address: int) -> bool:
        """Whether `address` is device memory of this GPU (any allocator's: ours, torch's, CuPy's), or inside
        another process's allocation opened here through CUDA IPC (`ptxforge.runtime.cuda_ipc`)."""
        address = int(address)
        if any(base <= address < base + max(n, 1) for base, (n, _) in self.ipc_opened.items()):
            return True
        d = driver()
        PA = d.CUpointer_attribute
        try:
            err, ordinal = d.cuPointerGetAttribute(PA.CU_POINTER_ATTRIBUTE_DEVICE_ORDINAL, int(address))
        except Exception:  # an address the bindings cannot take is no allocation of ours
            return False
        return err == d.CUresult.CUDA_SUCCESS and int(ordinal) == self.ordinal

    def address_note(self, address: int) -> str:
        """Nothing to add to "not a live allocation" (`owns_address` asked the driver already)."""
        return ""

    def stream(self, sms: Iterable[int] | None = None, priority: int = 0) -> Stream:
        """Streams are not supported on a CUDA GPU yet (`streams_supported` is False): a LaunchError."""
        raise LaunchError(f"streams on {self.description} are not supported yet: a launch on a GPU returns once "
                          f"its kernel has finished; stream= takes a stream of an emulated node's GPU")

    def make_current(self) -> None:
        check(driver().cuCtxSetCurrent(self.context), "cuCtxSetCurrent")

    def timing_events(self) -> tuple[Any, Any]:
        """The two CUDA events every launch records around its kernel (made once, reused)."""
        if self._events is None:
            self.make_current()
            self._events = (check(driver().cuEventCreate(0), "cuEventCreate"),
                            check(driver().cuEventCreate(0), "cuEventCreate"))
        return self._events

    def synchronize(self) -> None:
        self.make_current()
        check(driver().cuCtxSynchronize(), "cuCtxSynchronize")

    # ------------------------------------------------------------------ kernels
    def kernel_attributes(self, module: ir.Module, name: str) -> dict[str, int]:
        """What the driver reports of a loaded kernel: registers, local/shared/constant bytes, max threads
        per block (asked once per kernel: launches check their block size against it)."""
        f = self.function(module, name)
        loaded = self._loaded(module)  # the function's module: loaded and the most recently used
        attrs = loaded.attributes.get(name)
        if attrs is None:
            d = driver()
            FA = d.CUfunction_attribute
            names = {"registers": FA.CU_FUNC_ATTRIBUTE_NUM_REGS,
                     "local_bytes": FA.CU_FUNC_ATTRIBUTE_LOCAL_SIZE_BYTES,
                     "shared_bytes": FA.CU_FUNC_ATTRIBUTE_SHARED_SIZE_BYTES,
                     "const_bytes": FA.CU_FUNC_ATTRIBUTE_CONST_SIZE_BYTES,
                     "max_threads_per_block": FA.CU_FUNC_ATTRIBUTE_MAX_THREADS_PER_BLOCK}
            attrs = loaded.attributes[name] = {
                k: int(check(d.cuFuncGetAttribute(a, f), "cuFuncGetAttribute")) for k, a in names.items()}
        return dict(attrs)

    def max_active_blocks(self, module: ir.Module, name: str, block_threads: int, dynamic_shared: int = 0) -> int:
        """Blocks of `block_threads` threads one SM holds at once, as the driver computes it."""
        d = driver()
        f = self.function(module, name)
        return int(check(d.cuOccupancyMaxActiveBlocksPerMultiprocessor(f, int(block_threads), int(dynamic_shared)),
                         "cuOccupancyMaxActiveBlocksPerMultiprocessor"))

    # ------------------------------------------------------------------ modules
    def function(self, module: ir.Module, name: str) -> Any:
        """The CUfunction `name` of `module`, building and loading the module on first use."""
        loaded = self._loaded(module)
        f = loaded.functions.get(name)
        if f is None:
            f = loaded.functions[name] = check(driver().cuModuleGetFunction(loaded.handle, name.encode()),
                                               "cuModuleGetFunction", f"(kernel {name})")
        return f

    def write_global(self, module: ir.Module, name: str, raw: np.ndarray, offset: int = 0) -> None:
        """Copy bytes into the module-scope variable `name` of `module` on this GPU (cuModuleGetGlobal)."""
        d = driver()
        mod = self.load(module)
        ptr, size = check(d.cuModuleGetGlobal(mod, name.encode()), "cuModuleGetGlobal", f"(variable {name})")
        if offset + raw.nbytes > int(size):
            raise LaunchError(f"{name}: {raw.nbytes} bytes at offset {offset} do not fit its {int(size)} bytes")
        self.make_current()
        if raw.nbytes:
            check(d.cuMemcpyHtoD(*global_copy_arguments(d, int(ptr), offset, raw)), "cuMemcpyHtoD",
                  f"(variable {name})")

    def load(self, module: ir.Module) -> Any:
        """The CUmodule of `module` on this GPU; built with ptxas when it can be, else by the driver.

        Modules are kept by PTX text, so equal modules share one build; a module object seen before skips
        printing and hashing its text (launches in a loop cost no more than the driver's own work). At most
        `modules.bound` stay loaded (see the module docstring)."""
        return self._loaded(module).handle

    def pin_module(self, module: ir.Module) -> Callable[[], None]:
        """Keep `module` loaded (loading it now if it is not) until the returned release is called: a launch
        still uses it. Every launch holds its module so until the kernel has ended."""
        key = self._key(module)
        self.modules.pin(key)
        released = False

        def release() -> None:
            nonlocal released
            if not released:
                released = True
                self.modules.unpin(key)
        return release

    def _key(self, module: ir.Module) -> str:
        """The cache key of `module` (the sha256 of its text), loading it if it is not loaded."""
        return self._entry(module)[0]

    def _loaded(self, module: ir.Module) -> CudaModule:
        return self._entry(module)[1]

    def _entry(self, module: ir.Module) -> tuple[str, CudaModule]:
        """(key, loaded module) of `module`, loading it now if it is not (a use: the most recent one)."""
        seen = self._seen.get(id(module))
        if seen is not None and seen[0] is module:
            loaded = self.modules.get(seen[1])
            if loaded is not None:
                return seen[1], loaded
        text = module.to_ptx()
        key = hashlib.sha256(text.encode("utf-8", "surrogateescape")).hexdigest()
        loaded = self.modules.get(key)
        if loaded is None:
            self.make_current()
            loaded = CudaModule(self._build(module, text))
            self.modules.put(key, loaded)
        self._seen.put(id(module), (module, key))  # holding the module keeps its id from being reused
        return key, loaded

    def _unload(self, key: str, loaded: CudaModule) -> None:
        """Unload an evicted module (its CUfunctions go with it); no launch has it pinned."""
        self.make_current()
        check(driver().cuModuleUnload(loaded.handle), "cuModuleUnload")

    def _build(self, module: ir.Module, text: str):
        d = driver()
        arch = cuda_modules.cubin_arch(module.target.targets[0], self.arch)
        refused = None
        try:
            ptxas = find_tool("ptxas")
        except ToolNotFound:
            result = None
        else:
            if self._ptxas_newest is None:
                self._ptxas_newest = ptxas_max_ptx_version(ptxas) or (99, 0)
            text = cuda_modules.lowered_text(module, self._ptxas_newest, f"ptxas ({ptxas})")
            result = assemble(text, arch, cuda_modules.ptxas_flags(module), ptxas=str(ptxas))
        if result is not None:
            if not result.ok:
                raise ptxas_failure(result, text, module.filename or "<ptx>")
            try:
                mod = check(d.cuModuleLoadData(result.cubin), "cuModuleLoadData", f"(cubin for {arch})")
                self.last_build = {"how": "ptxas", "arch": arch}
                return mod
            except CudaError as e:
                if e.code not in _CUBIN_REFUSED:
                    raise
                refused = e
        return self._jit(module, refused)

    def _jit(self, module: ir.Module, refused: CudaError | None):
        d = driver()
        text = cuda_modules.jit_text(module, self.driver_version)
        log = bytearray(16384)
        opts = [d.CUjit_option.CU_JIT_ERROR_LOG_BUFFER, d.CUjit_option.CU_JIT_ERROR_LOG_BUFFER_SIZE_BYTES]
        err, mod = d.cuModuleLoadDataEx(text.encode("utf-8", "surrogateescape") + b"\0", len(opts), opts,
                                        [log, len(log)])
        if err != d.CUresult.CUDA_SUCCESS:
            why = log.split(b"\0", 1)[0].decode(errors="replace").strip()
            before = f" (the ptxas cubin was refused first: {refused})" if refused else ""
            raise LaunchError(f"the CUDA driver could not compile the PTX{before}:\n{why or err}")
        self.last_build = {"how": "driver JIT", "arch": self.arch}
        return mod


@functools.cache
def cuda_device(ordinal: int = 0) -> CudaDevice:
    """The CudaDevice for GPU `ordinal` (one per process). Raises CudaUnavailable when there is none."""
    count = check(driver().cuDeviceGetCount(), "cuDeviceGetCount")
    if not 0 <= ordinal < count:
        raise LaunchError(f"there is no GPU {ordinal}; this machine has {count}")
    return CudaDevice(ordinal)


def global_copy_arguments(d: Any, pointer: int, offset: int, raw: np.ndarray) -> tuple[Any, int, int]:
    """The cuMemcpyHtoD arguments that copy `raw` to a module global at `pointer` + `offset`."""
    return d.CUdeviceptr(int(pointer) + int(offset)), raw.ctypes.data, int(raw.nbytes)
