"""`Kernel`: a kernel of a module, launchable on the emulator or a CUDA GPU with one API.

Arguments are checked against the kernel's parameter list before anything runs (see `params` and
`arguments`): numpy arrays, torch tensors, DLPack / array-interface objects, `DeviceBuffer`s, None (a null
pointer) or live device addresses for 64-bit pointer parameters, numbers for scalars, bytes for by-value
aggregates. Host arrays are copied to the device before and back after the launch; device memory on the
launch's GPU is passed as it is.
"""

from __future__ import annotations

import os
import sys
import types
import warnings
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, TypeAlias, overload

import numpy as np

from ptxforge.emu import sanitizer as san
from ptxforge.emu.errors import EmulatorError
from ptxforge.emu.launch import EmuDevice, emulate
from ptxforge.emu.launch_checks import check_launch
from ptxforge.errors import KernelFault, LaunchError
from ptxforge.ptx import ir
from ptxforge.runtime import params as P
from ptxforge.runtime.arguments import DevicePointer, is_live_address, torch_copy_to_host
from ptxforge.runtime.buffers import DeviceBuffer, default_device, resolve_device
from ptxforge.runtime.copies import as_tuple, copy_back, copy_back_quietly, free_quietly
from ptxforge.runtime.cuda_driver import unavailable_reason
from ptxforge.runtime.cuda_green import GreenStream
from ptxforge.runtime.cuda_launch import launch_on_gpu
from ptxforge.runtime.device import Device, is_emulated
from ptxforge.runtime.launch_config import EmulatorOptions, LaunchConfig
from ptxforge.runtime.launch_plan import MAX_PLANS, RepeatPlan, repeatable, signature
from ptxforge.runtime.register_limit import check_register_limit
from ptxforge.runtime.result import LaunchResult
from ptxforge.runtime.streams import label_reports, launch_on_stream, node_sanitize, peer_reachable, stream_device
from ptxforge.runtime.validation import check_before_launch

if TYPE_CHECKING:
    from ptxforge.emu.node import PendingLaunch, Stream

# What `launch` returns: a LaunchResult on every device; a stream launch's PendingLaunch gives one from result()
LaunchOutcome: TypeAlias = "LaunchResult | PendingLaunch[LaunchResult]"


def cuda_available() -> bool:
    """True when a CUDA driver, cuda-bindings and a GPU can be used here."""
    return unavailable_reason() is None


_UNSET: Any = object()  # `block` not given: with a LaunchConfig in place of the grid, the second argument is args


def _config(grid: Any, block: Any, args: Any, shared_mem: Any, cluster: Any,
            cooperative: Any) -> tuple[LaunchConfig, Any]:
    """The launch's LaunchConfig (given, or made from the keywords) and its arguments."""
    if not isinstance(grid, LaunchConfig):
        return LaunchConfig.from_keywords(grid, (1,) if block is _UNSET else block, shared_mem, cluster,
                                          cooperative), args
    given = [name for name, v, default in (("shared_mem", shared_mem, 0), ("cluster", cluster, None),
                                           ("cooperative", cooperative, False)) if v is not default and v != default]
    if given:
        raise LaunchError(f"{', '.join(given)} given beside a LaunchConfig: set them in the LaunchConfig")
    if block is not _UNSET:
        if len(args):
            raise LaunchError("block given beside a LaunchConfig: launch(config, args) takes the shape from the "
                              "config")
        args = block  # launch(config, args)
    return grid, args


# the loose emulator options `launch` still takes (deprecated: options=EmulatorOptions(...) replaces them)
DEPRECATED_LAUNCH_KEYWORDS = ("sanitize", "num_sms", "watchdog_s", "time_limit_s", "printf")


def _user_level() -> int:
    """The `stacklevel` that points a warning raised in our caller at the first frame outside ptxforge (the
    user's call, also through the DSL's or CuPy-style launch)."""
    package = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    frame: types.FrameType | None = sys._getframe(1)
    level = 1
    while frame is not None and os.path.abspath(frame.f_code.co_filename).startswith(package + os.sep):
        frame, level = frame.f_back, level + 1
    return level


def _options(options: EmulatorOptions | dict[str, Any] | None, loose: dict[str, Any]) -> EmulatorOptions:
    """The launch's EmulatorOptions: `options=` as given, or made from the deprecated loose keywords (`loose`:
    each of DEPRECATED_LAUNCH_KEYWORDS, _UNSET where not given), with a DeprecationWarning naming the replacement."""
    given = {k: v for k, v in loose.items() if v is not _UNSET}
    if given:
        kws = ", ".join(f"{k}=..." for k in given)
        warnings.warn(f"Kernel.launch({kws}) is deprecated: pass options=EmulatorOptions({kws}) "
                      f"(ptxforge.runtime.EmulatorOptions), or options={{...}} with the same names; the loose emulator "
                      f"keywords will be removed in a later release", DeprecationWarning, stacklevel=_user_level())
    if options is None:
        return EmulatorOptions(**given) if given else _DEFAULT_OPTIONS
    if given:
        clash = [k for k, v in given.items()
                 if v is not getattr(_DEFAULT_OPTIONS, k) and v != getattr(_DEFAULT_OPTIONS, k)]
        if clash:
            raise LaunchError(f"{', '.join(clash)} given beside options=: set them in the EmulatorOptions")
    return EmulatorOptions.from_mapping(options)


_DEFAULT_OPTIONS = EmulatorOptions()  # (frozen: one instance serves every launch that gives no options)


class Kernel:
    """A kernel of `module`; `launch` runs it."""

    def __init__(self, module: ir.Module, function: ir.Function, pointee: Any = None) -> None:
        if not function.is_kernel:
            raise ValueError(f"{function.name} is a .func, not a kernel (.entry)")
        self.module = module
        self.function = function
        self.pointee = tuple(pointee) if pointee is not None else None  # a PointeeType (or None) per parameter
        self._plans: dict[tuple, RepeatPlan] = {}  # launch signature -> what its first launch checked (launch_plan)

    @property
    def name(self) -> str:
        return self.function.name

    @property
    def params(self) -> tuple[ir.Param, ...]:
        return self.function.params

    def __repr__(self) -> str:
        sig = ", ".join(f"{p.type} {p.name}" for p in self.params)
        return f"Kernel({self.name}({sig}))"

    @overload
    def launch(self, grid: Any = ..., block: Any = ..., args: Any = ..., *, device: Any = ...,
               shared_mem: int = ..., sanitize: Any = ..., num_sms: int | None = ..., watchdog_s: float = ...,
               time_limit_s: float | None = ..., printf: Callable[[str], Any] | None = ...,
               emu_device_: EmuDevice | None = ..., cluster: Any = ..., stream: None = ...,
               cooperative: bool = ..., options: EmulatorOptions | dict[str, Any] | None = ...,
               validate: bool = ...) -> LaunchResult: ...

    @overload
    def launch(self, grid: Any = ..., block: Any = ..., args: Any = ..., *, device: Any = ...,
               shared_mem: int = ..., sanitize: Any = ..., num_sms: int | None = ..., watchdog_s: float = ...,
               time_limit_s: float | None = ..., printf: Callable[[str], Any] | None = ...,
               emu_device_: EmuDevice | None = ..., cluster: Any = ..., stream: Stream,
               cooperative: bool = ..., options: EmulatorOptions | dict[str, Any] | None = ...,
               validate: bool = ...) -> PendingLaunch[LaunchResult]: ...

    @overload
    def launch(self, grid: Any = ..., block: Any = ..., args: Any = ..., *, device: Any = ...,
               shared_mem: int = ..., sanitize: Any = ..., num_sms: int | None = ..., watchdog_s: float = ...,
               time_limit_s: float | None = ..., printf: Callable[[str], Any] | None = ...,
               emu_device_: EmuDevice | None = ..., cluster: Any = ..., stream: GreenStream,
               cooperative: bool = ..., options: EmulatorOptions | dict[str, Any] | None = ...,
               validate: bool = ...) -> LaunchResult: ...

    def launch(self, grid: Any = (1,), block: Any = _UNSET, args: Any = (), *, device: Any = None,
               shared_mem: int = 0, sanitize: Any = _UNSET, num_sms: int | None = _UNSET,
               watchdog_s: float = _UNSET, time_limit_s: float | None = _UNSET,
               printf: Callable[[str], Any] | None = _UNSET,
               emu_device_: EmuDevice | None = None, cluster: Any = None,
               stream: Stream | GreenStream | None = None, cooperative: bool = False,
               options: EmulatorOptions | dict[str, Any] | None = None, validate: bool = True) -> LaunchOutcome:
        """Run the kernel on `device`: "emu", "cuda" or "cuda:N"; or "auto": where its DeviceBuffer arguments
        live, else the emulator when an emulator-only option is given, else a GPU when one can be used, else the
        emulator. None is like "auto" with $PTXFORGE_DEVICE (when set) in place of the GPU-or-emulator choice.
        See the module docstring for arguments.

        The shape comes as keywords (`grid`, `block`, `shared_mem`, `cluster`, `cooperative`) or as a
        `LaunchConfig` in place of the grid: `launch(LaunchConfig(grid, block, shmem_size), args)`.
        `cluster` is the thread-block cluster shape (x, y, z) for kernels without `.reqnctapercluster`;
        `cooperative`: a cooperative launch (all blocks resident at once, refused otherwise, and the grid
        workspace cooperative groups' `grid.sync()` needs), as cuLaunchCooperativeKernel makes it.

        The emulator's own options come as `options=EmulatorOptions(...)` (or a dict of its fields,
        `options={"sanitize": True}`): `sanitize` is False, True (every check) or a
        `ptxforge.emu.sanitizer.Sanitizer` with options; `num_sms`; `watchdog_s`: seconds the launch may go
        without progress (its state repeating) before it is stopped; `time_limit_s`: a plain wall-clock limit on
        the launch (None: none); `printf` capture; `checks`: your own `ptxforge.emu.hooks.Check`s watching the
        launch; `reference`, `tier`, `threads`. The same names as loose keywords (`sanitize=True`, `num_sms=`,
        `watchdog_s=`, `time_limit_s=`, `printf=`) still work but are deprecated (a DeprecationWarning names the
        replacement). `emu_device_`: the emulated device to run on (for tests).
        `stream`: a stream of a `ptxforge.emu.Node` GPU; the launch is queued there and a `PendingLaunch` is
        returned at once (`node.synchronize()` runs it; its `result()` is the `LaunchResult`; see
        `ptxforge.runtime.streams`). Or a `ptxforge.runtime.cuda_green.GreenStream` of a GPU: the kernel runs
        on the green context's SMs only, now, and its `LaunchResult` is returned. Without one, a launch runs
        now and returns its `LaunchResult`, on every device (typed so: the overloads above say which a call
        gets).

        The module is validated before its first launch (`ptxforge check`'s rules, the verdict kept with the
        module): PTX the validator refuses raises `PTXValidationError` before anything runs. `validate=False`
        (or PTXFORGE_VALIDATE=0 in the environment) skips that, for PTX you know ptxas takes.
        """
        check_before_launch(self.module, validate)
        key, opts, device_arg = None, None, device
        if (stream is None and emu_device_ is None and cluster is None and cooperative is False and block is not _UNSET
                and sanitize is _UNSET and num_sms is _UNSET and watchdog_s is _UNSET and time_limit_s is _UNSET
                and printf is _UNSET):  # a launch a signature may describe (launch_plan.py)
            try:
                o = _DEFAULT_OPTIONS if options is None else EmulatorOptions.from_mapping(options)
                key = signature(grid, block, shared_mem, args, device, o, validate,
                                default_device() if device is None else None)
                hit = self._plans.get(key) if key is not None else None
                packed = hit.packed(args, o, device) if hit is not None else None
            except (LaunchError, ValueError):  # the full path below raises it, after the checks that come first
                key = hit = packed = None
            else:
                opts = o
            if hit is not None and packed is not None:
                grid3, block3, shared3 = hit.shape
                return self._run_emu(hit.dev, packed, grid3, block3, shared3, False, o.num_sms,
                                     (o.watchdog_s, o.time_limit_s), o.printf, None, False, o.checks, o.reference,
                                     (o.tier, o.threads, o.level))[0]
        config, args = _config(grid, block, args, shared_mem, cluster, cooperative)
        if opts is None:
            opts = _options(options, {"sanitize": sanitize, "num_sms": num_sms, "watchdog_s": watchdog_s,
                                      "time_limit_s": time_limit_s, "printf": printf})
        gpu_stream = None
        if isinstance(stream, GreenStream):  # a GPU launch on the green context's SMs
            gpu_stream, stream = stream, None
            if device not in (None, "auto", "cuda") and device is not gpu_stream.device:
                raise LaunchError(f"stream= is a stream of {gpu_stream.device.description}; this launch names "
                                  f"device={device!r}")
            device = gpu_stream.device
        if stream is not None and config.cooperative:
            raise LaunchError("cooperative launches on a stream are not supported yet: launch without stream=")
        if stream is not None:
            if opts.time_limit_s is not None:
                raise LaunchError("time_limit_s does not apply to a stream launch: the node's watchdog_s governs "
                                  "its launches (Node(watchdog_s=...))")
            device = stream_device(stream, device)
        emu_only = opts.given() + (["emu_device_"] if emu_device_ is not None else [])
        if device is None or device == "auto":  # a preference ($PTXFORGE_DEVICE or auto), not an order
            preferred = device or default_device()  # (read even when unused: a bad $PTXFORGE_DEVICE is refused)
            buffer = next((a for a in args if isinstance(a, DeviceBuffer)), None)
            if buffer is not None and emu_device_ is None:
                device = buffer.device  # run where the data is
            elif emu_only:
                device = "emu"  # options only the emulator has
            else:
                device = preferred
        dev = emu_device_ if emu_device_ is not None and device in ("auto", "emu") else resolve_device(device)
        sanitize = opts.sanitize or node_sanitize(dev)
        on_gpu = not is_emulated(dev)
        if on_gpu and emu_only:
            raise LaunchError(f"{', '.join(emu_only)} work on the emulator only: launch with device='emu' "
                              f"(on a GPU, device printf output goes to the process's stdout)")
        # the driver's launch checks, before any argument is copied or allocated
        grid, block, cluster, shared = config.grid, config.block, config.cluster, config.shmem_size
        shape = check_launch(self.module, self.function, grid, block, cluster, shared_mem=shared,
                             static_shared=0 if on_gpu else None,
                             max_shared=dev.max_shared_per_block if on_gpu else None)
        if not on_gpu:  # a GPU launch checks the driver's own register-limited block size
            check_register_limit(self.module, self.function, shape.block)
        plan = P.check_args(self.name, self.params, list(args), lambda a: isinstance(a, DeviceBuffer),
                            pointee=self.pointee, pointers=P.pointer_params(self.function))
        packed, offsets, copies, temps = self._pack(plan, dev)
        if (key is not None and not on_gpu and not sanitize and dev.node is None and gpu_stream is None
                and repeatable(plan, args, dev, copies, temps)):
            if len(self._plans) >= MAX_PLANS:
                self._plans.clear()
            self._plans[key] = RepeatPlan(plan, packed, offsets, P.argument_names(self.name, self.params), args, dev,
                                          device_arg, opts, (grid, block, shared))
        if stream is not None:
            return launch_on_stream(self, stream, dev, packed, copies, temps, grid, block, shared,
                                    sanitize, opts.num_sms, opts.watchdog_s, opts.printf, cluster, opts.checks,
                                    opts.reference)
        sanitizer = None
        try:
            if on_gpu:
                result = self._run_gpu(dev, packed, offsets, grid, block, shared, cluster, config.cooperative,
                                       gpu_stream)
            else:
                result, sanitizer = self._run_emu(dev, packed, grid, block, shared, sanitize, opts.num_sms,
                                                  (opts.watchdog_s, opts.time_limit_s), opts.printf, cluster,
                                                  config.cooperative, opts.checks, opts.reference,
                                                  (opts.tier, opts.threads, opts.level))
            copy_back(dev, copies)
        except (EmulatorError, LaunchError, KernelFault):  # a fault stops the launch: what completed still comes back
            copy_back_quietly(dev, copies)
            raise
        finally:
            free_quietly(dev, temps)
        if sanitizer is not None:  # raises SanitizerError after the in-bounds results were copied back
            label_reports(sanitizer, dev)
            sanitizer.finish()
        return result

    def __call__(self, grid: Any, block: Any, args: Any, *, shared_mem: int = 0, stream: Any = None,
                 enable_cooperative_groups: bool = False, **options: Any) -> LaunchOutcome:
        """CuPy's RawKernel spelling: `kernel(grid, block, args, shared_mem=0)` is
        `launch(grid, block, args, shared_mem=..., cooperative=enable_cooperative_groups)`; other keywords
        (`device`, `options` ...) are `launch`'s."""
        return self.launch(grid, block, tuple(args), shared_mem=shared_mem, stream=stream,
                           cooperative=enable_cooperative_groups, **options)

    def _run_emu(self, dev: Any, packed: bytes, grid: Any, block: Any, shared_mem: int, sanitize: Any,
                 num_sms: int | None, limits: tuple[float, float | None], printf: Callable[[str], Any] | None,
                 cluster: Any, cooperative: bool = False,
                 checks: tuple = (), reference: bool = False,
                 tier: tuple[str | None, int | None, str | None] = (None, None, None)
                 ) -> tuple[LaunchResult, Any]:
        watchdog_s, time_limit_s = limits
        sanitizer = None
        if sanitize:
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
                            time_limit_s=time_limit_s,
                            printf=sink, checks=(sanitizer, *checks) if sanitizer is not None else checks,
                            cluster=cluster,
                            cooperative=cooperative, reference=reference, tier=tier[0], threads=tier[1],
                            level=tier[2])
        except (EmulatorError, LaunchError) as e:
            if sanitizer is not None:  # keep what the sanitizer found before the launch stopped
                sanitizer.finish(stopped=e)
            raise
        return LaunchResult(self.name, "emu", as_tuple(grid), as_tuple(block), stats.thread_instructions,
                            stats.wall_s, stats.per_sm, stats.waves, lines,
                            printf_truncated=stats.printf_truncated, mode=stats.mode, tier=stats.tier,
                            tier_note=stats.tier_note, level=stats.level), sanitizer

    def _run_gpu(self, dev: Any, packed: bytes, offsets: list[int], grid: Any, block: Any, shared_mem: int,
                 cluster: Any, cooperative: bool = False, stream: GreenStream | None = None) -> LaunchResult:
        seconds = launch_on_gpu(dev, self.module, self.function, packed, offsets, grid=grid, block=block,
                                shared_mem=shared_mem, cluster=cluster, cooperative=cooperative, stream=stream)
        return LaunchResult(self.name, "cuda", as_tuple(grid), as_tuple(block), 0, seconds,
                            np.zeros(0, np.int64), 0, [], gpu=dev.name)

    def _pack(self, plan, dev):
        """The packed parameters and their offsets, with arrays copied into temporary device memory."""
        copies, temps = [], []
        on_gpu = not is_emulated(dev)

        def pointer(p: ir.Param, a) -> int:
            if a is None:
                return 0
            if isinstance(a, DeviceBuffer):
                if a.device is not dev and not peer_reachable(dev, a.device):
                    raise LaunchError(f"{self.name} argument {p.name}: the buffer lives on {_device_name(a.device)}"
                                      f" but this launch runs on {_device_name(dev)}; create it with "
                                      f"to_device(array, device=...) on the launch's device")
                return a.address
            if isinstance(a, int):
                if not is_live_address(dev, a):
                    note = dev.address_note(a)  # an IPC device: a peer's memory
                    raise LaunchError(f"{self.name} argument {p.name}: {a:#x} is not inside a live allocation of "
                                      f"{_device_name(dev)}{note}; pass an array, a tensor or a DeviceBuffer")
                return a
            if isinstance(a, DevicePointer):
                if is_live_address(dev, a.address):
                    return a.address  # zero copy: the memory is on this device
                if a.kind == "torch tensor" and not on_gpu:
                    a = torch_copy_to_host(a)
                else:
                    where = f"GPU {a.ordinal}" if a.ordinal is not None else "a GPU"
                    raise LaunchError(f"{self.name} argument {p.name}: the {a.kind} lives on {where} but this "
                                      f"launch runs on {_device_name(dev)}; move it there first")
            host = a.array
            alloc = dev.memory.alloc(host.nbytes, name=f"argument {p.name}")
            temps.append(alloc)
            dev.memory.write(alloc, np.ascontiguousarray(host))
            if a.writeback:
                copies.append((a, alloc))
            return alloc.base
        try:
            packed, offsets = P.pack(plan, pointer)
        except BaseException:
            free_quietly(dev, temps)
            raise
        return packed, offsets, copies, temps


def _device_name(dev: Device) -> str:
    return dev.description


@overload
def launch(kernel: Kernel, grid: Any, block: Any = ..., args: Any = ..., *, stream: None = ...,
           **kwargs: Any) -> LaunchResult: ...


@overload
def launch(kernel: Kernel, grid: Any, block: Any = ..., args: Any = ..., *, stream: Stream,
           **kwargs: Any) -> PendingLaunch[LaunchResult]: ...


@overload
def launch(kernel: Kernel, grid: Any, block: Any = ..., args: Any = ..., *, stream: GreenStream,
           **kwargs: Any) -> LaunchResult: ...


def launch(kernel: Kernel, grid: Any, block: Any = _UNSET, args: Any = (), *,
           stream: Stream | GreenStream | None = None, **kwargs: Any) -> LaunchOutcome:
    """Function form of `Kernel.launch`."""
    return kernel.launch(grid, block, args, stream=stream, **kwargs)


if TYPE_CHECKING:  # checked by mypy (`make lint`): which result each form of launch gives
    def _typed_results(k: Kernel, s: Stream) -> tuple[LaunchResult, PendingLaunch[LaunchResult], LaunchResult]:
        return k.launch((1,), (32,), [], device="cuda"), k.launch((1,), (32,), [], stream=s), \
            launch(k, (1,), (32,), [], device="emu")

    def _typed_green(k: Kernel, g: GreenStream) -> tuple[LaunchResult, LaunchResult]:
        return k.launch((1,), (32,), [], stream=g), launch(k, (1,), (32,), [], stream=g)
