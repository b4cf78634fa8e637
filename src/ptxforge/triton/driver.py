"""A Triton driver whose "GPU" is ptxforge's emulator: Triton compiles as for a real GPU, the emulator runs the PTX.

Triton reaches its driver through `triton.runtime.driver.active` (set by `ptxforge.triton.emulate`). What it
asks of one: the target to compile for (`GPUTarget("cuda", 90, 32)` for sm_90a: Triton's own compiler and
bundled ptxas then run as usual, no driver call), device properties, `load_binary` and a launcher class. The
launcher takes the arguments the CUDA launcher takes, reads the kernel's PTX from Triton's cache, and runs it
with block = num_warps * 32, the kernel's shared memory and the two hidden scratch pointers (global and
profile scratch) that Triton appends to every kernel's parameters.

Tensors are passed by storage: each distinct torch storage among the arguments is copied once to emulated
device memory (so two views of one tensor alias there as on a GPU) and back after the launch.
"""

from __future__ import annotations

import re
import struct
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np

from ptxforge import _optional
from ptxforge.errors import LaunchError
from ptxforge.ptx.parser import parse
from ptxforge.runtime.buffers import DeviceBuffer, resolve_device
from ptxforge.runtime.kernel import Kernel
from ptxforge.runtime.launch_config import EmulatorOptions
from ptxforge.runtime.occupancy import sm_limits
from ptxforge.toolchain import elf_sections


@dataclass
class Settings:
    """What `emulate(...)` chose: `sanitize` (False, True or a Sanitizer), the `arch` compiled for."""

    sanitize: Any = False
    arch: str = "sm_90a"
    num_sms: int | None = None


def capability(arch: str) -> int:
    """90 for sm_90a, 80 for sm_80 (what Triton's GPUTarget takes)."""
    digits = arch.removeprefix("sm_").rstrip("af")
    if not arch.startswith("sm_") or not digits.isdigit():
        raise ValueError(f"arch {arch!r}: expected a target such as sm_80 or sm_90a")
    return int(digits)


class EmulatorUtils:
    """`driver.utils`: device properties and module loading (the PTX is read by the launcher)."""

    def __init__(self, settings: Callable[[], Settings]) -> None:
        self._settings = settings

    def get_device_properties(self, device: int) -> dict[str, int]:
        arch = self._settings().arch
        try:
            lim = sm_limits(arch)
            shared, sms = lim.smem_per_block, lim.sms
        except KeyError:  # an arch without occupancy figures: Hopper's
            shared, sms = 227 * 1024, 132
        return {"max_shared_mem": shared, "multiprocessor_count": sms, "max_num_regs": 65536, "warpSize": 32,
                "sm_clock_rate": 1_980_000, "mem_clock_rate": 2_619_000, "mem_bus_width": 5120}

    def load_binary(self, name: str, kernel: bytes, shared: int, device: int) -> tuple[Any, str, int, int, int]:
        """(module, function, registers, spills, max threads per block) of Triton's cubin (registers as ptxas
        allocated them: tutorials size their grids by occupancy); the launcher finds the PTX itself."""
        return None, name, cubin_registers(kernel), 0, 1024

    def unload_module(self, module: Any) -> None:
        return None

    def set_printf_fifo_size(self, size: int) -> None:
        return None


EIATTR_REGCOUNT = 0x2F  # a .nv.info attribute: (symbol index, registers) of one function
EIFMT_SVAL = 0x04  # an attribute with a 16-bit size and that many bytes of value


def cubin_registers(cubin: bytes) -> int:
    """The registers per thread ptxas gave the (first) function of a cubin; 0 if the cubin does not say."""
    try:
        info = elf_sections(cubin).get(".nv.info", b"")
    except (struct.error, ValueError, IndexError):
        return 0
    i = 0
    while i + 4 <= len(info):
        fmt, attr = info[i], info[i + 1]
        size = struct.unpack_from("<H", info, i + 2)[0] if fmt == EIFMT_SVAL else 0
        if fmt == EIFMT_SVAL and attr == EIATTR_REGCOUNT and size >= 8:
            return int(struct.unpack_from("<I", info, i + 8)[0])
        i += 4 + size
    return 0


class EmulatorDriver:
    """Plugged in with `triton.runtime.driver.set_active(EmulatorDriver(...))` (see `ptxforge.triton.emulate`)."""

    def __init__(self, settings: Callable[[], Settings]) -> None:
        self._settings = settings
        self.utils = EmulatorUtils(settings)
        self.launcher_cls = lambda src, metadata: TritonLauncher(src, metadata, settings)
        self._devices: dict[str, int] = {}

    @staticmethod
    def is_active() -> bool:
        return False  # never chosen by Triton's discovery: `emulate()` sets it

    def get_current_target(self) -> Any:
        return _optional.triton().backends.compiler.GPUTarget("cuda", capability(self._settings().arch), 32)

    def get_current_device(self) -> int:
        # one device number per arch: Triton caches compiled kernels per device, so a kernel compiled for
        # sm_90a is not reused under emulate(arch="sm_80")
        return self._devices.setdefault(self._settings().arch, len(self._devices))

    def set_current_device(self, device: int) -> None:
        return None

    def get_current_stream(self, device: int | None = None) -> int:
        return 0

    def get_device_capability(self, device: int | None = None) -> tuple[int, int]:
        cc = capability(self._settings().arch)
        return cc // 10, cc % 10

    def get_active_torch_device(self) -> Any:
        return _optional.torch().device("cpu")

    def get_device_interface(self) -> Any:
        return _optional.torch().cpu

    def map_python_to_cpp_type(self, ty: str) -> str:
        return str(_optional.triton().backends.nvidia.driver.ty_to_cpp(ty))

    def get_benchmarker(self) -> Callable[..., Any]:
        return _benchmark

    def get_empty_cache_for_benchmark(self) -> Any:
        torch = _optional.torch()
        return torch.empty(1, dtype=torch.int8)

    def clear_cache(self, cache: Any) -> None:
        cache.zero_()

    def allocate_default_profile_scratch(self, size: int, alignment: int, stream: Any) -> None:
        return None  # the launcher allocates scratch in emulated memory


def _benchmark(fn: Callable[[], Any], *, quantiles: Any = None, **_: Any) -> Any:
    """Wall time of one call in ms (the emulator's time, not a GPU's): what `do_bench` returns in shape."""
    start = time.perf_counter()
    fn()
    ms = (time.perf_counter() - start) * 1e3
    return [ms] * len(quantiles) if quantiles else ms


class TritonLauncher:
    """Runs one compiled Triton kernel on the emulator; called as Triton calls its CUDA launcher."""

    def __init__(self, src: Any, metadata: Any, settings: Callable[[], Settings]) -> None:
        self.name = metadata.name
        self.settings = settings
        self.block = metadata.num_warps * metadata.warp_size
        self.shared = metadata.shared
        self.num_ctas = getattr(metadata, "num_ctas", 1)
        self.scratch = ((metadata.global_scratch_size, "global scratch"),
                        (metadata.profile_scratch_size, "profile scratch"))
        self.arg_names = list(src.signature)
        self.arg_types = list(src.signature.values())
        for name, ty in zip(self.arg_names, self.arg_types, strict=True):
            if not isinstance(ty, str) or ty.startswith("tensordesc"):
                raise LaunchError(f"{self.name}: argument {name} is a {ty}: tuples and tensor descriptors are not "
                                  f"supported on the emulator yet")
        own = getattr(getattr(getattr(src, "fn", None), "fn", None), "__code__", None)
        ptx = _ptx_of(metadata)
        self.module = parse(_own_file(ptx, own.co_filename) if own else ptx, filename=f"{self.name}.ptx")
        self.kernel = Kernel(self.module, self.module.function(self.name))

    def __call__(self, grid_x: int, grid_y: int, grid_z: int, stream: Any, function: Any, packed_metadata: Any,
                 launch_metadata: Any, enter_hook: Any, exit_hook: Any, *args: Any) -> None:
        grid = (grid_x, grid_y, grid_z)
        if min(grid) <= 0:
            return  # an empty grid launches nothing, as on a GPU
        if enter_hook is not None:
            enter_hook(launch_metadata)
        settings = self.settings()
        dev = resolve_device("emu")
        storages: dict[int, tuple[Any, DeviceBuffer]] = {}
        try:
            values = [self._argument(name, ty, a, dev, storages)
                      for name, ty, a in zip(self.arg_names, self.arg_types, args, strict=True) if ty != "constexpr"]
            values += self._scratch(len(values), grid, dev, storages)
            cluster = (self.num_ctas, 1, 1) if self.num_ctas > 1 else None
            self.kernel.launch(grid, (self.block,), values, device="emu", shared_mem=self.shared, cluster=cluster,
                               options=EmulatorOptions(sanitize=settings.sanitize, num_sms=settings.num_sms))
        finally:
            for host, buf in storages.values():  # what the kernel wrote (in bounds) comes back, also after a fault
                if host is not None:
                    host[:] = buf.to_host()
                buf.free()
        if exit_hook is not None:
            exit_hook(launch_metadata)

    def _argument(self, name: str, ty: str, a: Any, dev: Any, storages: dict) -> Any:
        if not ty.startswith("*"):
            return a.item() if hasattr(a, "item") else a
        if a is None:
            return None
        if not hasattr(a, "untyped_storage"):
            raise LaunchError(f"{self.name}: argument {name} ({ty}) is a {type(a).__name__}; pass a torch tensor")
        if a.device.type != "cpu":
            raise LaunchError(f"{self.name}: argument {name} is on {a.device}; the emulator takes CPU tensors")
        storage = a.untyped_storage()
        base = storage.data_ptr()
        if base not in storages:
            torch = _optional.torch()
            host = torch.empty(0, dtype=torch.uint8).set_(storage, 0, (storage.nbytes(),), (1,)).numpy()
            storages[base] = (host, DeviceBuffer.from_array(host.copy() if host.size else np.zeros(1, np.uint8),
                                                            device=dev, name=f"{name} ({ty[1:]} tensor)"))
        return storages[base][1].address + (a.data_ptr() - base)

    def _scratch(self, given: int, grid: tuple[int, int, int], dev: Any, storages: dict) -> list[Any]:
        """The hidden trailing pointer parameters: each a buffer of size x blocks, or null when unused."""
        extra = len(self.kernel.params) - given
        out: list[Any] = []
        for size, what in self.scratch[:extra]:
            if not size:
                out.append(None)
                continue
            nbytes = size * grid[0] * grid[1] * grid[2] * self.num_ctas
            buf = DeviceBuffer(nbytes, np.uint8, device=dev, name=what)
            storages[-len(storages) - 1] = (None, buf)
            out.append(buf.address)
        if len(out) != extra:
            raise LaunchError(f"{self.name}: the PTX has {len(self.kernel.params)} parameters, {given} for arguments "
                              f"and {extra} more than the 2 hidden scratch pointers Triton adds")
        return out


def _own_file(ptx: str, path: str) -> str:
    """The PTX with the kernel's own `.file` naming `path`, where it is now. Triton's cache is keyed by the
    source text, not its file: a kernel moved to another file keeps its old path in the cached PTX's line
    information. The kernel's first `.loc` is in its own file."""
    files = dict(re.findall(r'^\s*\.file\s+(\d+)\s+"([^"]*)"', ptx, re.M))
    first = re.search(r"^\s*\.loc\s+(\d+)\s", ptx, re.M)
    if first is None or path in files.values() or first.group(1) not in files:
        return ptx
    n = first.group(1)
    return re.sub(rf'^(\s*\.file\s+{n}\s+)"[^"]*"', lambda m: f'{m.group(1)}"{path}"', ptx, flags=re.M)


def _ptx_of(metadata: Any) -> str:
    """The PTX Triton compiled for this kernel, from Triton's cache (where `compile` put it)."""
    path = _optional.triton().runtime.cache.get_cache_manager(metadata.hash).get_file(f"{metadata.name}.ptx")
    if path is None:
        raise LaunchError(f"{metadata.name}: Triton's cache holds no PTX for it (hash {metadata.hash}); is "
                          f"TRITON_CACHE_DIR writable?")
    with open(path, encoding="utf-8") as f:
        return f.read()


__all__ = ["EmulatorDriver", "Settings", "TritonLauncher", "capability"]
