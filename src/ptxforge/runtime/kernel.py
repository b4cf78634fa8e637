"""`Kernel`: a kernel of a module, launchable on the emulator or a CUDA GPU with one API.

Arguments are checked against the kernel's parameter list before anything runs (see `params`): numpy
arrays and `DeviceBuffer`s (or None for a null pointer) for 64-bit pointer parameters, numbers for
scalars, bytes for by-value aggregates. Arrays are copied to the device before and back after the launch.
"""

from __future__ import annotations

import numpy as np

from ptxforge.emu.errors import EmulatorError, LaunchError
from ptxforge.emu.launch import EmuDevice, emulate
from ptxforge.ptx import ir
from ptxforge.runtime import params as P
from ptxforge.runtime.buffers import DeviceBuffer, default_device, resolve_device
from ptxforge.runtime.result import LaunchResult


def cuda_available() -> bool:
    """True when a CUDA driver, cuda-bindings and a GPU can be used here."""
    from ptxforge.runtime.cuda_driver import unavailable_reason

    return unavailable_reason() is None


class Kernel:
    """A kernel of `module`; `launch` runs it."""

    def __init__(self, module: ir.Module, function: ir.Function):
        if not function.is_kernel:
            raise ValueError(f"{function.name} is a .func, not a kernel (.entry)")
        self.module = module
        self.function = function

    @property
    def name(self) -> str:
        return self.function.name

    @property
    def params(self) -> tuple[ir.Param, ...]:
        return self.function.params

    def __repr__(self) -> str:
        sig = ", ".join(f"{p.type} {p.name}" for p in self.params)
        return f"Kernel({self.name}({sig}))"

    def launch(self, grid=(1,), block=(1,), args=(), *, device=None, shared_mem: int = 0,
               sanitize=False, num_sms: int | None = None, watchdog_s: float = 60.0,
               printf=None, emu_device_: EmuDevice | None = None, cluster=None) -> LaunchResult:
        """Run the kernel on `device`: "emu", "cuda" or "cuda:N"; or "auto": where its DeviceBuffer arguments
        live, else the emulator when an emulator-only option is given, else a GPU when one can be used, else the
        emulator. None is like "auto" with $PTXFORGE_DEVICE (when set) in place of the GPU-or-emulator choice.
        See the module docstring for arguments.

        `sanitize` is False, True (every check) or a `ptxforge.emu.sanitizer.Sanitizer` with options; it runs
        on the emulator, as do `num_sms`, `watchdog_s`, `printf` capture and `emu_device_`.
        `cluster` is the thread-block cluster shape (x, y, z) for kernels without `.reqnctapercluster`.
        """
        if device is None or device == "auto":  # a preference ($PTXFORGE_DEVICE or auto), not an order
            preferred = device or default_device()
            buffers = [a.device for a in args if isinstance(a, DeviceBuffer)]
            if buffers and emu_device_ is None:
                device = buffers[0]  # run where the data is
            elif sanitize or num_sms is not None or printf is not None or emu_device_ is not None:
                device = "emu"  # options only the emulator has
            else:
                device = preferred
        dev = emu_device_ if emu_device_ is not None and device in ("auto", "emu") else resolve_device(device)
        if not isinstance(shared_mem, int | np.integer) or shared_mem < 0:
            raise LaunchError(f"shared_mem must be a non-negative integer, got {shared_mem!r}")
        on_gpu = not isinstance(dev, EmuDevice)
        if on_gpu:
            emu_only = [name for name, given in (("sanitize", sanitize), ("num_sms", num_sms is not None),
                                                 ("printf", printf is not None), ("emu_device_", emu_device_))
                        if given]
            if emu_only:
                raise LaunchError(f"{', '.join(emu_only)} work on the emulator only: launch with device='emu' "
                                  f"(on a GPU, device printf output goes to the process's stdout)")
        plan = P.check_args(self.name, self.params, list(args), lambda a: isinstance(a, DeviceBuffer))
        packed, offsets, copies, temps = self._pack(plan, dev)
        sanitizer = None
        try:
            if on_gpu:
                result = self._run_gpu(dev, packed, offsets, grid, block, int(shared_mem), cluster)
            else:
                result, sanitizer = self._run_emu(dev, packed, grid, block, int(shared_mem), sanitize, num_sms,
                                                  watchdog_s, printf, cluster)
            for arr, alloc in copies:
                data = dev.memory.read(alloc)[: arr.nbytes]
                if arr.flags.c_contiguous:
                    arr.reshape(-1).view(np.uint8)[:] = data
                else:
                    arr[...] = data.view(arr.dtype).reshape(arr.shape)
        except EmulatorError:  # a fault stops the launch: what completed (in bounds) still comes back
            _copy_back_quietly(dev, copies)
            raise
        finally:
            _free_quietly(dev, temps)
        if sanitizer is not None:  # raises SanitizerError after the in-bounds results were copied back
            sanitizer.finish()
        return result

    def _run_emu(self, dev, packed, grid, block, shared_mem, sanitize, num_sms, watchdog_s, printf, cluster):
        sanitizer = None
        if sanitize:
            from ptxforge.emu import sanitizer as san

            sanitizer = sanitize if isinstance(sanitize, san.Sanitizer) else san.Sanitizer()
        lines: list[str] = []

        def sink(text: str) -> None:
            lines.append(text)
            if printf is None:
                print(text, end="")
            else:
                printf(text)
        try:
            stats = emulate(self.module, self.function, grid=grid, block=block, params=packed,
                            shared_mem=shared_mem, device=dev, num_sms=num_sms, watchdog_s=watchdog_s,
                            printf=sink, observers=[], sanitizer=sanitizer, cluster=cluster)
        except EmulatorError as e:
            if sanitizer is not None:  # keep what the sanitizer found before the launch stopped
                sanitizer.finish(stopped=e)
            raise
        return LaunchResult(self.name, "emu", _as_tuple(grid), _as_tuple(block), stats["thread_instructions"],
                            stats["wall_s"], stats["per_sm"], stats["waves"], lines), sanitizer

    def _run_gpu(self, dev, packed, offsets, grid, block, shared_mem, cluster):
        from ptxforge.runtime.cuda_launch import launch_on_gpu

        seconds = launch_on_gpu(dev, self.module, self.function, packed, offsets, grid=grid, block=block,
                                shared_mem=shared_mem, cluster=cluster)
        return LaunchResult(self.name, "cuda", _as_tuple(grid), _as_tuple(block), 0, seconds,
                            np.zeros(0, np.int64), 0, [], gpu=dev.name)

    def _pack(self, plan, dev):
        """The packed parameters and their offsets, with arrays copied into temporary device memory."""
        copies, temps = [], []

        def pointer(p: ir.Param, a) -> int:
            if a is None:
                return 0
            if isinstance(a, DeviceBuffer):
                if a.device is not dev:
                    raise LaunchError(f"{self.name} argument {p.name}: the buffer lives on {_device_name(a.device)}"
                                      f" but this launch runs on {_device_name(dev)}; create it with "
                                      f"to_device(array, device=...) on the launch's device")
                return a.address
            alloc = dev.memory.alloc(a.nbytes, name=f"argument {p.name}")
            temps.append(alloc)
            dev.memory.write(alloc, np.ascontiguousarray(a))
            if a.flags.writeable:
                copies.append((a, alloc))
            return alloc.base
        try:
            packed, offsets = P.pack(plan, pointer)
        except BaseException:
            _free_quietly(dev, temps)
            raise
        return packed, offsets, copies, temps


def _copy_back_quietly(dev, copies) -> None:
    """Copy device memory back into the host arrays after a failed emulated launch."""
    for host, alloc in copies:
        arr = getattr(host, "array", host)
        try:
            data = dev.memory.read(alloc)[: arr.nbytes]
            if arr.flags.c_contiguous:
                arr.reshape(-1).view(np.uint8)[:] = data
            else:
                arr[...] = data.view(arr.dtype).reshape(arr.shape)
            after = getattr(host, "after", None)
            if after is not None:
                after()
        except Exception:  # noqa: BLE001 - the launch's own error is the one to report
            pass


def _free_quietly(dev, temps) -> None:
    for a in temps:
        try:
            dev.memory.free(a)
        except LaunchError:  # a GPU context broken by the kernel refuses frees; the kernel's error is the one to see
            pass


def _device_name(dev) -> str:
    return "the emulator" if isinstance(dev, EmuDevice) else f"GPU {dev.ordinal} ({dev.name})"


def _as_tuple(d) -> tuple:
    return (int(d),) if isinstance(d, int | np.integer) else tuple(d)


def launch(kernel: Kernel, grid, block, args=(), **kwargs) -> LaunchResult:
    """Function form of `Kernel.launch`."""
    return kernel.launch(grid, block, args, **kwargs)
