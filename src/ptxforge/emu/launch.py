"""Load a module into an emulated device and launch kernels on it.

`EmuDevice` owns global memory (a `DeviceMemory`) and the loaded module images; a `ModuleImage` holds
the addresses of the module's .global/.const variables and the compiled kernels (compiled once). A device
keeps at most `MAX_IMAGES` modules loaded in a `ptxforge.module_cache.ModuleCache` (least recently launched
first out: its variables are freed, and a later launch loads the module afresh; a queued stream launch pins its
module). `emulate` returns a launch's `EmulationStats`.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Any, Literal, overload

import numpy as np

from ptxforge.emu.compiler import compile_layout
from ptxforge.emu.device_heap import MALLOC_HEAP_SIZE, checked_limit, heap_of, set_heap_size
from ptxforge.emu.device_printf import PRINTF_FIFO_SIZE
from ptxforge.emu.errors import EmulatorError, LaunchError  # noqa: F401 (imported from here by callers)
from ptxforge.emu.launch_checks import EMU_MAX_SHARED, MAX_CLUSTER, check_launch, dims  # noqa: F401
from ptxforge.emu.launch_checks import cluster_shape as _cluster_shape
from ptxforge.emu.launch_stats import EmulationStats
from ptxforge.emu.machine import Machine
from ptxforge.emu.memory import PAD, DeviceMemory
from ptxforge.emu.native.plan import requested_tier
from ptxforge.emu.native.select import Choice, account_interp, choose_tier, run_native
from ptxforge.emu.operands import FUNC_BASE
from ptxforge.emu.program import Layout
from ptxforge.emu.progress import check_time_options
from ptxforge.emu.variable_limits import check_module_variables
from ptxforge.environment import emu_reference
from ptxforge.module_cache import MAX_MODULES, ModuleCache
from ptxforge.ptx import ir

if TYPE_CHECKING:
    from collections.abc import Iterable, Sequence

    from ptxforge.emu.hooks import Check
    from ptxforge.emu.memory import Allocation
    from ptxforge.emu.node import Node, Stream
    from ptxforge.emu.node_memory import GpuMemory
    from ptxforge.emu.op import Op

_U = {8: np.uint8, 16: np.uint16, 32: np.uint32, 64: np.uint64}


def parse_initializer(var: ir.Variable, resolve: Callable[[str], int | None] | None = None) -> bytes:
    """Bytes of a variable's `= {...}` initializer (numbers, 0f/0d floats; nested braces flattened)."""
    if var.init is None:
        return b""
    init = var.init
    text = init.text if isinstance(init, ir.Expr) else " ".join(map(str, init))
    if isinstance(init, tuple):
        items = [str(x) for x in init]
    else:
        items = [t for t in re.split(r"[{},\s]+", text) if t]
    bits = max(8, ir.type_bits(var.type))
    dt = _U[bits]
    out = []
    for t in items:
        low = t.lower()
        if low.startswith("0f"):
            v = int(low[2:], 16)
        elif low.startswith("0d"):
            v = int(low[2:], 16)
        elif var.type in (".f32", ".f64") and re.fullmatch(r"[-+]?[\d.]+(e[-+]?\d+)?", low) and (
                "." in low or "e" in low):
            v = int(np.asarray(float(t), np.float32 if bits == 32 else np.float64).view(dt))
        else:
            try:
                v = int(t, 0)
            except ValueError:
                v = _symbol_value(t, resolve)
            if v is None:
                raise EmulatorError(f"initializer of {var.name}: cannot evaluate {t!r}") from None
        out.append(v & ((1 << bits) - 1))
    return np.asarray(out, dt).tobytes()


def _symbol_value(t: str, resolve):
    m = re.fullmatch(r"(?:generic\()?([\w$.]+)\)?(?:\+(\d+))?", t)
    if not m or resolve is None:
        return None
    base = resolve(m.group(1))
    return None if base is None else base + int(m.group(2) or 0)


@dataclass
class ModuleImage:
    """A module loaded on an emulated device: variable addresses and compiled kernels."""

    module: ir.Module
    device: EmuDevice
    symbols: dict[str, int] = field(default_factory=dict)
    allocations: list[Allocation] = field(default_factory=list)
    # kernel name (or (name, "reference"): its plain forms) -> its layout and ops
    kernels: dict[str | tuple[str, str], tuple[Layout, list[Op]]] = field(default_factory=dict)
    # (kernel name, launch shape and limits) -> the Machine its native launches read (`native_machine`)
    machines: dict[tuple, Machine] = field(default_factory=dict)

    def load(self) -> None:
        variables = [v for v in self.module.variables
                     if v.space in (".global", ".const") and v.linkage != ".extern"]
        for f in self.module.functions:  # function-scope .global/.const variables
            variables += [s for s in f.body or () if isinstance(s, ir.Variable)
                          and s.space in (".global", ".const")]
        check_module_variables(variables)  # before anything is allocated
        placed = []
        for v in variables:
            a = self.device.memory.alloc(max(v.size, 1), name=v.name, align=v.align or 256,
                                         readonly=v.space == ".const")
            self.symbols[v.name] = a.base
            self.allocations.append(a)
            placed.append((v, a))
        funcs = {f.name: FUNC_BASE + i for i, f in enumerate(self.module.functions)}

        def resolve(name):
            return self.symbols.get(name, funcs.get(name))
        for v, a in placed:
            self.device.memory.write(a, parse_initializer(v, resolve))

    def unload(self) -> None:
        """Free the module's variables: the image is gone from its device."""
        for a in self.allocations:
            self.device.memory.free(a)
        self.allocations = []
        self.symbols = {}
        self.kernels = {}  # a new dict: a Node's GPUs may share the old one
        self.machines = {}

    def native_machine(self, func: ir.Function, layout: Layout, ops: list[Op], grid: tuple[int, int, int],
                       block: tuple[int, int, int], cluster: tuple[int, int, int] | None, shared_mem: int,
                       num_sms: int, watchdog_s: float, time_limit_s: float | None) -> Machine:
        """The Machine of a plain launch of `func` (no checks, no node, no cooperative grid, every SM) with this
        shape, made once and kept: the native tier only reads a machine's shape, limits and ops (its
        parameters come with each launch), so its repeated launches skip making one. The interpreter never
        runs it (an interpreted launch gets a fresh Machine)."""
        key = (func.name, grid, block, cluster, shared_mem, num_sms, watchdog_s, time_limit_s)
        m = self.machines.get(key)
        if m is None or m.layout is not layout or m.ops is not ops:
            m = Machine(layout, ops, grid=grid, block=block, params=_NO_PARAMS, device=self.device.memory,
                        dynamic_shared=shared_mem, num_sms=num_sms, watchdog_s=watchdog_s, time_limit_s=time_limit_s,
                        cluster=cluster, gpu=self.device.gpu, printf_fifo_size=self.device.printf_fifo_size)
            if len(self.machines) >= MAX_MACHINES:
                self.machines.clear()
            self.machines[key] = m
        return m

    def compiled(self, func: ir.Function, reference: bool = False) -> tuple[Layout, list[Op]]:
        key = (func.name, "reference") if reference else func.name
        hit = self.kernels.get(key)
        if hit is None:
            layout = Layout(self.module, func, self.symbols)
            ops = compile_layout(layout, {}, reference)
            hit = self.kernels[key] = (layout, ops)
        return hit


MAX_MACHINES = 64  # launch shapes a module image keeps a native Machine for
_NO_PARAMS = np.zeros(PAD, np.uint8)  # (a kept Machine's own parameters: never read, each launch brings its own)


def _unload(key: int, img: ModuleImage) -> None:
    img.unload()


def precompile(module: ir.Module) -> None:
    """Compile `module`'s kernels into this process's table (see `EmuDevice.compiled`; a module without variables):
    a parent that forks ranks does it once for all of them."""
    img = EmuDevice(num_sms=1).image(module)
    for f in module.functions:
        if f.is_kernel and f.body is not None:
            img.compiled(f)


# Modules an emulated device keeps loaded. Past it the least recently launched one is unloaded (its
# .global/.const variables freed); launching it again loads it afresh, with its variables' initial values.
MAX_IMAGES = MAX_MODULES
COMPILED: ModuleCache[int, tuple[ir.Module, dict]] = ModuleCache(MAX_IMAGES)  # see EmuDevice.compiled


class EmuDevice:
    """The emulated GPU: global memory plus loaded modules; `emu_device()` gives the shared one.

    A `ptxforge.runtime.device.Device`: `kind` "emu" sends launches to the emulator."""

    kind = "emu"
    node: Node | None = None  # the `ptxforge.emu.Node` a NodeGpu belongs to; None for a lone device
    gpu: int | None = None  # the GPU's index in a `ptxforge.emu.Node` (an IpcDevice: its rank); None for a lone one
    streams_supported = False  # a NodeGpu's are; a lone device runs each launch to its end at once
    max_shared_per_block = EMU_MAX_SHARED

    def __init__(self, num_sms: int = 132, memory: DeviceMemory | GpuMemory | None = None,
                 max_images: int = MAX_IMAGES, *, malloc_heap_size: int = MALLOC_HEAP_SIZE,
                 printf_fifo_size: int = PRINTF_FIFO_SIZE):
        self.memory = DeviceMemory() if memory is None else memory
        self.num_sms = num_sms
        self.malloc_heap_size = malloc_heap_size
        self.printf_fifo_size = printf_fifo_size
        if max_images < 1:
            raise LaunchError(f"max_images must be at least 1, got {max_images!r}")
        self.images: ModuleCache[int, ModuleImage] = ModuleCache(int(max_images), on_evict=_unload)  # id(module)

    @property
    def max_images(self) -> int:
        return self.images.bound

    @property
    def malloc_heap_size(self) -> int:
        """Bytes device-side `malloc` may hold at once; past them it returns NULL (CUDA's
        cudaLimitMallocHeapSize, 8 MiB by default). Settable; blocks already allocated stay."""
        return heap_of(self.memory).size

    @malloc_heap_size.setter
    def malloc_heap_size(self, size: int) -> None:
        set_heap_size(self.memory, size)

    @property
    def printf_fifo_size(self) -> int:
        """Bytes of printf output one launch keeps; the rest is dropped and counted (CUDA's
        cudaLimitPrintfFifoSize, 1 MiB by default). Settable."""
        return self._printf_fifo_size

    @printf_fifo_size.setter
    def printf_fifo_size(self, size: int) -> None:
        self._printf_fifo_size = checked_limit("printf_fifo_size", size)

    @property
    def name(self) -> str:
        return "the emulator"

    @property
    def description(self) -> str:
        return self.name

    def owns_address(self, address: int) -> bool:
        """Whether `address` lies inside a live allocation of this device's global memory."""
        return self.memory.find(address) is not None

    def address_note(self, address: int) -> str:
        """Nothing more to say of an address outside this device's allocations (an IpcDevice says more)."""
        return ""

    def stream(self, sms: Iterable[int] | None = None, priority: int = 0) -> Stream:
        """A lone emulated device has no streams (`streams_supported` is False): a LaunchError."""
        raise LaunchError(f"{self.description} has no streams: a launch here runs to its end before it returns; "
                          f"streams are on the GPUs of a ptxforge.emu.Node (node.devices[r].stream(sms=...))")

    def synchronize(self) -> None:
        """Nothing to wait for: a launch on a lone emulated device runs to its end before it returns."""

    def image(self, module: ir.Module) -> ModuleImage:
        """The module as loaded on this device (loaded now if it is not; see MAX_IMAGES)."""
        key = id(module)
        img = self.images.get(key)
        if img is not None and img.module is module:
            return img
        if img is not None:  # a dead module's id, reused
            self.images.pop(key)
            img.unload()
        img = ModuleImage(module, self)
        img.load()
        if not img.symbols:  # no .global/.const variables: one compiled kernel serves every device sharing the table
            shared = self.compiled.get(id(module))
            if shared is None or shared[0] is not module:
                shared = (module, img.kernels)
                self.compiled.put(id(module), shared)
            img.kernels = shared[1]
        self.images.put(key, img)
        return img

    @property
    def compiled(self) -> ModuleCache[int, tuple[ir.Module, dict]]:
        """id(module) -> (module, kernels compiled once), for modules without variables: the process's table
        (a forked rank inherits what its parent compiled); a Node's GPUs share their node's."""
        return COMPILED

    def pin_module(self, module: ir.Module) -> Callable[[], None]:
        """Keep `module` loaded (loading it now if it is not) until the returned release is called: a queued
        launch uses its variables and compiled kernels."""
        key = id(self.image(module).module)
        self.images.pin(key)
        released = False

        def release() -> None:
            nonlocal released
            if not released:
                released = True
                self.images.unpin(key)
        return release

    def loaded_modules(self) -> int:
        """How many modules are loaded on this device now (at most `max_images`, unless pinned ones keep more)."""
        return len(self.images)

    def write_global(self, module: ir.Module, name: str, raw: np.ndarray, offset: int = 0) -> None:
        """Copy bytes into the module-scope variable `name` of `module` as loaded here."""
        img = self.image(module)
        base = img.symbols.get(name)
        alloc = next((a for a in img.allocations if a.base == base), None)
        if alloc is None:
            raise LaunchError(f"{name} is not a .global or .const variable of {module.filename or 'the module'}")
        if offset + raw.nbytes > alloc.size:
            raise LaunchError(f"{name}: {raw.nbytes} bytes at offset {offset} do not fit its {alloc.size} bytes")
        self.memory.view(alloc)[offset: offset + raw.nbytes] = raw.reshape(-1).view(np.uint8)


MAX_SMS = 1024  # far above any GPU (an H200 has 132); the emulator keeps per-SM state


def sm_count(num_sms: Any) -> int:
    """`num_sms` checked: a whole number of SMs, 1 to MAX_SMS."""
    if isinstance(num_sms, bool) or not isinstance(num_sms, int | np.integer) or not 1 <= num_sms <= MAX_SMS:
        raise LaunchError(f"num_sms must be a whole number from 1 to {MAX_SMS}, not {num_sms!r}")
    return int(num_sms)


_DEVICE: EmuDevice | None = None


def emu_device() -> EmuDevice:
    global _DEVICE
    if _DEVICE is None:
        _DEVICE = EmuDevice()
    return _DEVICE


@overload
def emulate(module: ir.Module, func: ir.Function, *, grid: Any, block: Any, params: bytes, shared_mem: int = 0,
            device: EmuDevice | None = None, num_sms: int | None = None, watchdog_s: float = 60.0,
            time_limit_s: float | None = None, printf: Callable[[str], Any] | None = None,
            checks: Sequence[Check] = (), cluster: Any = None, sm_ids: Any = None,
            run: Literal[True] = True, cooperative: bool = False,
            reference: bool = False, tier: str | None = None,
            threads: int | None = None, level: str | None = None) -> EmulationStats: ...
@overload
def emulate(module: ir.Module, func: ir.Function, *, grid: Any, block: Any, params: bytes, shared_mem: int = 0,
            device: EmuDevice | None = None, num_sms: int | None = None, watchdog_s: float = 60.0,
            time_limit_s: float | None = None, printf: Callable[[str], Any] | None = None,
            checks: Sequence[Check] = (), cluster: Any = None, sm_ids: Any = None,
            run: Literal[False], cooperative: bool = False,
            reference: bool = False, tier: str | None = None,
            threads: int | None = None, level: str | None = None) -> Machine: ...
def emulate(module: ir.Module, func: ir.Function, *, grid: Any, block: Any, params: bytes, shared_mem: int = 0,
            device: EmuDevice | None = None, num_sms: int | None = None, watchdog_s: float = 60.0,
            time_limit_s: float | None = None, printf: Callable[[str], Any] | None = None,
            checks: Sequence[Check] = (), cluster: Any = None, sm_ids: Any = None,
            run: bool = True, cooperative: bool = False,
            reference: bool = False, tier: str | None = None,
            threads: int | None = None, level: str | None = None) -> EmulationStats | Machine:
    """Run one launch; `params` is the packed kernel parameter buffer. Returns its `EmulationStats`.

    `cooperative`: a cooperative launch (cuLaunchCooperativeKernel): every block must be resident at once, and
    the grid-barrier workspace cooperative groups' `grid.sync()` reads from %envreg1:%envreg2 is provided.

    `checks`: what watches the launch (`ptxforge.emu.hooks.Check`s: a `Sanitizer`, your own).
    `cluster`: the thread-block cluster shape (x, y, z) for a kernel without `.reqnctapercluster`.
    `sm_ids`: the SMs the launch may use (a stream's partition; default all of the device's).
    `run=False` checks the launch and returns its `Machine` without running it (a Node's stream launch).
    `watchdog_s`: seconds the launch's state may keep repeating (no progress) before it is stopped;
    `time_limit_s`: a plain wall-clock limit on the launch (None: none). See `progress`.
    `reference`: run every instruction through its semantics function with no fast path (also
    PTXFORGE_EMU_REFERENCE=1); slower, for checking the fast paths (docs/emulator.md, "Reference mode");
    `tier`: "auto", "native" or "interp" (None: $PTXFORGE_EMU_TIER, else "auto"; see `ptxforge.emu.native`);
    `threads`: worker threads of the native tier (None: every core); `level`: its compile level, "auto",
    "quick" or "opt" (None: $PTXFORGE_NATIVE_LEVEL, else "auto": by the kernel's heat, native/select.py). The
    stats say which tier and level ran, and why the interpreter ran where it did."""
    watchdog_s, time_limit_s = check_time_options(watchdog_s, time_limit_s)
    reference = bool(reference) or emu_reference()
    device = device or emu_device()
    shape = check_launch(module, func, grid, block, cluster, shared_mem=shared_mem)
    grid, block, cluster = shape.grid, shape.block, shape.cluster
    img = device.image(module)
    layout, ops = img.compiled(func, reference)
    if layout.shared_bytes + shared_mem > EMU_MAX_SHARED:
        check_launch(module, func, grid, block, cluster, shared_mem=shared_mem, static_shared=layout.shared_bytes)
    num_sms = sm_count(device.num_sms if num_sms is None else num_sms)
    choice = None
    if (run and not reference and not checks and not cooperative and sm_ids is None and device.node is None
            and requested_tier(tier) != "interp"):
        # a plain launch: when it runs natively, the kept Machine of its shape serves (no Machine made)
        kept = img.native_machine(func, layout, ops, grid, block, cluster, shared_mem, num_sms, watchdog_s,
                                  time_limit_s)
        choice = choose_tier(kept, tier, checks=False, cooperative=False, node=None, level=level)
        if choice.plan is not None:
            return EmulationStats.native(run_native(kept, choice, threads, params))
    buf = np.zeros(max(PAD, (len(params) + PAD - 1) // PAD * PAD), np.uint8)
    buf[: len(params)] = np.frombuffer(params, np.uint8)
    workspace = None
    if cooperative:
        if not run:
            raise LaunchError("cooperative launches on a stream are not supported yet: launch without stream=")
        workspace = device.memory.alloc(COOP_WORKSPACE_BYTES, name="the cooperative launch's grid workspace")
        device.memory.write(workspace, bytes(COOP_WORKSPACE_BYTES))  # the barrier word starts at 0
    envregs = {} if workspace is None else {1: workspace.base >> 32, 2: workspace.base & 0xFFFFFFFF}
    try:
        m = Machine(layout, ops, grid=grid, block=block, params=buf, device=device.memory,
                    dynamic_shared=shared_mem, num_sms=num_sms or device.num_sms, watchdog_s=watchdog_s,
                    time_limit_s=time_limit_s,
                    printf=printf, checks=checks, cluster=cluster, sm_ids=sm_ids,
                    gpu=device.gpu, envregs=envregs, printf_fifo_size=device.printf_fifo_size,
                    reference=reference)
        if cooperative and m.nblocks > m.resident:
            raise LaunchError(f"{func.name}: a cooperative launch needs every block resident at once, but "
                              f"{m.nblocks} blocks of {m.threads} threads exceed the {m.resident} that fit on "
                              f"{len(m.sm_ids)} SMs ({m.blocks_per_sm} per SM); the driver refuses it "
                              f"(CUDA_ERROR_COOPERATIVE_LAUNCH_TOO_LARGE)")
        node = device.node
        if node is not None:  # one clock and one timer for the whole node
            m.node_clock, m.t0_ns = node.clock, node.t0_ns
        if not run:
            return m
        if reference:  # the reference path is the interpreter's semantics functions
            choice = Choice(None, note="" if requested_tier(tier) == "interp" else
                            "reference mode runs on the interpreter")
        elif choice is None:  # (else chosen above: the interpreter, for a plain launch)
            choice = choose_tier(m, tier, checks=bool(checks), cooperative=cooperative, node=node, level=level)
        if choice.plan is not None:
            return EmulationStats.native(run_native(m, choice, threads, params))
        stats = m.run()
        account_interp(m, stats)
        return replace(EmulationStats.from_dict(stats), tier="interp", tier_note=choice.note)
    finally:
        if workspace is not None:
            device.memory.free(workspace)


# cooperative groups' grid workspace: {u32 size, u32 barrier}; grid.sync() counts arrivals in the second word
COOP_WORKSPACE_BYTES = 8


def cluster_shape(func: ir.Function, grid: tuple[int, int, int], option: Any) -> tuple[int, int, int] | None:
    """The cluster shape of a launch (see `launch_checks.cluster_shape`)."""
    return _cluster_shape(None, func, grid, option)


_dims = dims
