"""Device-runtime functions PTX calls as externs: vprintf, malloc, free, __assertfail.

Each reads its arguments from the caller's .param variables (per lane) and writes the result back.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np

from ptxforge.emu import memory as M
from ptxforge.emu import nvshmem
from ptxforge.emu.device_heap import heap_of
from ptxforge.emu.device_printf import format_printf
from ptxforge.emu.errors import KernelTrap
from ptxforge.ptx import ir

if TYPE_CHECKING:
    from collections.abc import Callable
    from typing import Any, NoReturn

    import numpy.typing as npt

    from ptxforge.emu.machine import LaneState
    from ptxforge.emu.op import OpFn
    from ptxforge.emu.operands import Ctx

    # builtin(st, lanes, the caller's argument pvars, its return pvars) -> the return value per lane, or None
    Builtin = Callable[[LaneState, npt.NDArray[np.intp], list[int], list[int]], npt.NDArray[Any] | None]

def _arg64(st, pvar: int, lanes) -> np.ndarray:
    return np.ascontiguousarray(st.pvars[pvar][lanes, :8]).view(np.uint64)[:, 0]


def _read_cstring(st, addr: int, lane: int, limit: int = 4096) -> str:
    out = bytearray()
    for k in range(limit):
        got = M.load(st.mem, "generic", np.uint64(addr + k), np.uint8, 1, np.array([lane]))[0]
        b = int(np.asarray(got).reshape(-1)[0])
        if b == 0:
            break
        out.append(b)
    return out.decode("utf-8", "replace")


def _read(st, addr: int, lane: int, dt):
    return np.asarray(M.load(st.mem, "generic", np.uint64(addr), dt, 1, np.array([lane]))[0]).reshape(-1)[0]


def render_printf(st: LaneState, fmt: str, args_addr: int, lane: int) -> str:
    """Render a printf format with arguments packed as nvcc lays them out (each aligned to its size), at most
    about the room left in the launch's printf buffer (device_printf.py)."""
    off = 0

    def read_arg(size: int) -> int:
        nonlocal off
        off = (off + size - 1) // size * size
        raw = int(_read(st, args_addr + off, lane, np.uint64 if size == 8 else np.uint32)) if args_addr else 0
        off += size
        return raw
    return format_printf(fmt, read_arg, lambda addr: _read_cstring(st, addr, lane), st.printf_room())


def vprintf(st: LaneState, lanes: npt.NDArray[np.intp], args: list[int], rets: list[int]) -> npt.NDArray[np.uint32]:
    fmt_ptr = _arg64(st, args[0], lanes)
    arg_ptr = _arg64(st, args[1], lanes)
    cache: dict[int, str] = {}
    for lane, fp, ap in zip(lanes.tolist(), fmt_ptr.tolist(), arg_ptr.tolist(), strict=False):
        if fp not in cache:
            cache[fp] = _read_cstring(st, fp, lane)
        st.emit_printf(render_printf(st, cache[fp], ap, lane))
    return np.zeros(lanes.size, np.uint32)


def malloc(st: LaneState, lanes: npt.NDArray[np.intp], args: list[int], rets: list[int]) -> npt.NDArray[np.uint64]:
    """Each lane's block from the device's malloc heap, or NULL (0) past its limit (device_heap.py)."""
    heap, memory = heap_of(st.mem.device), st.mem.device
    return np.array([heap.malloc(memory, n) for n in _arg64(st, args[0], lanes).tolist()], np.uint64)


def free(st: LaneState, lanes: npt.NDArray[np.intp], args: list[int], rets: list[int]) -> None:
    heap, memory = heap_of(st.mem.device), st.mem.device
    for p in _arg64(st, args[0], lanes).tolist():
        heap.free(memory, p)
    return None


def assertfail(st: LaneState, lanes: npt.NDArray[np.intp], args: list[int], rets: list[int]) -> NoReturn:
    lane = int(lanes[0])
    msg = _read_cstring(st, int(_arg64(st, args[0], lanes)[0]), lane)
    file = _read_cstring(st, int(_arg64(st, args[1], lanes)[0]), lane)
    line = int(np.ascontiguousarray(st.pvars[args[2]][lane, :4]).view(np.uint32)[0])
    raise KernelTrap(f"device assertion failed: {msg} at {file}:{line} ({st.describe_lane(lane)})")


_BUILTINS: dict[str, Builtin] = {"vprintf": vprintf, "malloc": malloc, "free": free, "__assertfail": assertfail}


def lookup(name: str) -> Builtin | None:
    fn = _BUILTINS.get(name)
    return fn if fn is not None else nvshmem.lookup(name)  # NVSHMEM's device API (a Cluster's GPUs)


def bind(fn: Builtin, ctx: Ctx, arg_pvars: list[int], ret_pvars: list[int]) -> OpFn:
    """An op running builtin `fn` for the active lanes."""
    ins = ctx.ins
    target = next((o for o in ins.operands if not isinstance(o, ir.ParenList)), None)
    site = (ins.span.file, ins.span.line, f"call {getattr(target, 'name', target)}")

    def op(st, m):
        lanes = np.flatnonzero(st.live_mask() if m is None else m)
        if lanes.size == 0:
            return
        st.call_site = site  # where the call is, for builtins that record it (nvshmem.py)
        r = fn(st, lanes, arg_pvars, ret_pvars)
        if r is not None and ret_pvars:
            buf = st.pvars[ret_pvars[0]]
            raw = np.ascontiguousarray(r).view(np.uint8).reshape(lanes.size, -1)
            n = min(raw.shape[1], buf.shape[1])
            buf[lanes, :n] = raw[:, :n]
    return op
