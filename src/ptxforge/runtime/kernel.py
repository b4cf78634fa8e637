"""`Kernel`: a kernel of a module, launchable on the emulator (and later on CUDA devices).

Arguments are checked against the kernel's parameter list before anything runs: numpy arrays and
`DeviceBuffer`s (or None for a null pointer) for 64-bit pointer parameters, numbers for scalars,
bytes for by-value aggregates. Arrays are copied to the device before and back after the launch.
"""

from __future__ import annotations

import numpy as np

from ptxforge.emu.errors import EmulatorError, LaunchError
from ptxforge.emu.launch import EmuDevice, emu_device, emulate
from ptxforge.ptx import ir
from ptxforge.runtime.buffers import DeviceBuffer
from ptxforge.runtime.result import LaunchResult

_INT_RANGE = {
    ".u8": (0, 2**8 - 1), ".u16": (0, 2**16 - 1), ".u32": (0, 2**32 - 1), ".u64": (0, 2**64 - 1),
    ".s8": (-(2**7), 2**7 - 1), ".s16": (-(2**15), 2**15 - 1), ".s32": (-(2**31), 2**31 - 1),
    ".s64": (-(2**63), 2**63 - 1), ".b8": (-(2**7), 2**8 - 1), ".b16": (-(2**15), 2**16 - 1),
    ".b32": (-(2**31), 2**32 - 1), ".b64": (-(2**63), 2**64 - 1),
}
_FLOAT = {".f16": np.float16, ".f32": np.float32, ".f64": np.float64}


def cuda_available() -> bool:
    """True when a CUDA driver and GPU can be used (the cuda runtime backend is not built yet)."""
    return False


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

    def launch(self, grid=(1,), block=(1,), args=(), *, device: str = "auto", shared_mem: int = 0,
               sanitize=False, num_sms: int | None = None, watchdog_s: float = 60.0,
               printf=None, emu_device_: EmuDevice | None = None, cluster=None) -> LaunchResult:
        """Run the kernel. See the module docstring for how arguments are passed.

        `sanitize` is False, True (every check) or a `ptxforge.emu.sanitizer.Sanitizer` with options.
        `cluster` is the thread-block cluster shape (x, y, z) for kernels without `.reqnctapercluster`.
        """
        if device == "auto":
            device = "cuda" if cuda_available() else "emu"
        if device == "cuda":
            raise LaunchError("device='cuda' is not available here (no CUDA backend/GPU); use device='emu'")
        if device != "emu":
            raise LaunchError(f"unknown device {device!r}; use 'auto', 'emu' or 'cuda'")
        if not isinstance(shared_mem, int | np.integer) or shared_mem < 0:
            raise LaunchError(f"shared_mem must be a non-negative integer, got {shared_mem!r}")
        dev = emu_device_ or emu_device()
        args = list(args)
        plan = self._check_args(args)
        observers = []
        sanitizer = None
        if sanitize:
            from ptxforge.emu import sanitizer as san

            sanitizer = sanitize if isinstance(sanitize, san.Sanitizer) else san.Sanitizer()
        params, copies, temps = self._pack(plan, dev)
        lines: list[str] = []

        def sink(text: str) -> None:
            lines.append(text)
            if printf is None:
                print(text, end="")
            else:
                printf(text)
        try:
            try:
                stats = emulate(self.module, self.function, grid=grid, block=block, params=params,
                                shared_mem=int(shared_mem), device=dev, num_sms=num_sms, watchdog_s=watchdog_s,
                                printf=sink, observers=observers, sanitizer=sanitizer, cluster=cluster)
            except EmulatorError as e:
                if sanitizer is not None:  # keep what the sanitizer found before the launch stopped
                    sanitizer.finish(stopped=e)
                raise
            for arr, alloc in copies:
                data = dev.memory.read(alloc)[: arr.nbytes]
                if arr.flags.c_contiguous:
                    arr.reshape(-1).view(np.uint8)[:] = data
                else:
                    arr[...] = data.view(arr.dtype).reshape(arr.shape)
        finally:
            for a in temps:
                dev.memory.free(a)
        if sanitizer is not None:
            sanitizer.finish()
        g = tuple(grid) if not isinstance(grid, int | np.integer) else (int(grid),)
        b = tuple(block) if not isinstance(block, int | np.integer) else (int(block),)
        return LaunchResult(self.name, "emu", g, b, stats["thread_instructions"], stats["wall_s"],
                            stats["per_sm"], stats["waves"], lines)

    # ------------------------------------------------------------------ argument checking
    def _check_args(self, args: list) -> list:
        params = self.params
        if len(args) != len(params):
            sig = ", ".join(f"{p.type} {p.name}" for p in params)
            raise LaunchError(f"{self.name} takes {len(params)} argument(s) ({sig}), got {len(args)}")
        plan = []
        for i, (p, a) in enumerate(zip(params, args, strict=False)):
            where = f"{self.name} argument {i} ({p.name}, {p.type}{f'[{p.size}]' if p.array else ''})"
            if p.array:
                raw = _aggregate_bytes(a, p.size, where)
                plan.append(("bytes", p, raw))
            elif a is None or isinstance(a, np.ndarray | DeviceBuffer):
                if ir.type_bits(p.type) != 64 or p.type.startswith(".f"):
                    raise LaunchError(f"{where}: a pointer (array/buffer/None) needs a 64-bit integer "
                                      f"parameter")
                if isinstance(a, np.ndarray) and a.dtype == object:
                    raise LaunchError(f"{where}: object arrays cannot be copied to the device")
                plan.append(("ptr", p, a))
            else:
                plan.append(("scalar", p, _scalar_bytes(a, p.type, where)))
        return plan

    def _pack(self, plan, dev: EmuDevice):
        out = bytearray()
        copies, temps = [], []
        for kind, p, a in plan:
            size = max(p.size, 1)
            align = p.align or min(8, max(1, ir.type_bits(p.type) // 8))
            out.extend(b"\0" * ((-len(out)) % align))
            if kind == "ptr":
                if a is None:
                    val = 0
                elif isinstance(a, DeviceBuffer):
                    val = a.address
                else:
                    alloc = dev.memory.alloc(a.nbytes, name=f"argument {p.name}")
                    dev.memory.write(alloc, np.ascontiguousarray(a))
                    temps.append(alloc)
                    if a.flags.writeable:
                        copies.append((a, alloc))
                    val = alloc.base
                out.extend(int(val).to_bytes(8, "little"))
            else:
                out.extend(a[:size].ljust(size, b"\0"))
        return bytes(out), copies, temps


def _scalar_bytes(a, ty: str, where: str) -> bytes:
    bits = ir.type_bits(ty)
    if ty in _FLOAT:
        if isinstance(a, bool | np.bool_) or not isinstance(a, int | float | np.floating | np.integer):
            raise LaunchError(f"{where}: expected a number, got {type(a).__name__}")
        if isinstance(a, np.integer):
            raise LaunchError(f"{where}: expected a float for {ty}, got {np.asarray(a).dtype}")
        if isinstance(a, np.floating) and np.asarray(a).dtype.itemsize * 8 != bits:
            raise LaunchError(f"{where}: expected a {bits}-bit float, got {np.asarray(a).dtype}; "
                              f"pass {_FLOAT[ty].__name__}(...)")
        return np.asarray(a, _FLOAT[ty]).tobytes()
    if ty in _INT_RANGE:
        if isinstance(a, float | np.floating):
            raise LaunchError(f"{where}: expected an integer for {ty}, got {type(a).__name__} {a!r}")
        if isinstance(a, bool | np.bool_) or not isinstance(a, int | np.integer):
            raise LaunchError(f"{where}: expected an integer, got {type(a).__name__}")
        if isinstance(a, np.integer) and np.asarray(a).dtype.itemsize * 8 != bits:
            raise LaunchError(f"{where}: expected a {bits}-bit integer, got {np.asarray(a).dtype}")
        v = int(a)
        lo, hi = _INT_RANGE[ty]
        if not lo <= v <= hi:
            raise LaunchError(f"{where}: value {v} does not fit {ty} [{lo}, {hi}]")
        return (v & ((1 << bits) - 1)).to_bytes(bits // 8, "little")
    if ty == ".pred":
        return bytes([1 if a else 0])
    raise LaunchError(f"{where}: parameters of type {ty} are not supported")


def _aggregate_bytes(a, size: int, where: str) -> bytes:
    if isinstance(a, bytes | bytearray):
        raw = bytes(a)
    elif isinstance(a, np.ndarray | np.void | np.generic):
        raw = np.ascontiguousarray(a).tobytes()
    else:
        raise LaunchError(f"{where}: a by-value aggregate takes bytes or a numpy array/record, "
                          f"got {type(a).__name__}")
    if len(raw) != size:
        raise LaunchError(f"{where}: expected {size} bytes, got {len(raw)}")
    return raw


def launch(kernel: Kernel, grid, block, args=(), **kwargs) -> LaunchResult:
    """Function form of `Kernel.launch`."""
    return kernel.launch(grid, block, args, **kwargs)
