"""The launch-configuration checks the CUDA driver makes, made the same way on both devices.

`check_launch` is called by `Kernel.launch` before any argument is copied or allocated, by the emulator's
`emulate` and by the CUDA backend: a block that breaks `.reqntid`, a cluster that breaks `.reqnctapercluster`,
too much shared memory or an oversized grid is refused with the directive and its PTX line, where the driver
would refuse the launch (CUDA_ERROR_INVALID_VALUE) instead of running it with half the threads.

`.maxnreg` is not checked here: it caps registers, and the driver's limit comes from the count ptxas actually
used (the CUDA backend checks the block size against CU_FUNC_ATTRIBUTE_MAX_THREADS_PER_BLOCK; an emulator
launch asks ptxas, in `ptxforge.runtime.register_limit`).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

import numpy as np

from ptxforge.emu.errors import LaunchError
from ptxforge.ptx import ir

MAX_BLOCK_THREADS = 1024
MAX_BLOCK = (1024, 1024, 64)
MAX_GRID = (2**31 - 1, 65535, 65535)
MAX_CLUSTER = 16  # CTAs (8 is the portable limit, 16 with the non-portable opt-in on sm_90/sm_100)

EMU_MAX_SHARED = 227 * 1024  # shared memory (static + dynamic) a block may use on the emulated H200-class GPU


@dataclass(frozen=True)
class LaunchShape:
    grid: tuple[int, int, int]
    block: tuple[int, int, int]
    cluster: tuple[int, int, int] | None


def dims(d: Any, what: str) -> tuple[int, int, int]:
    """A grid/block/cluster shape (any value, checked) as a 3-tuple of positive integers."""
    if type(d) is tuple and len(d) == 3 and type(d[0]) is type(d[1]) is type(d[2]) is int \
            and d[0] >= 1 and d[1] >= 1 and d[2] >= 1:
        return d  # already one (each launch checks its shape several times: LaunchConfig, the launch, emulate)
    if isinstance(d, int | np.integer):
        d = (int(d),)
    try:
        d = tuple(int(x) for x in d)
    except (TypeError, ValueError):
        raise LaunchError(f"{what} must be 1 to 3 positive integers, got {d!r}") from None
    if not 1 <= len(d) <= 3 or any(x < 1 for x in d):
        raise LaunchError(f"{what} must be 1 to 3 positive integers, got {d}")
    return d + (1,) * (3 - len(d))


def directive_where(module: ir.Module | None, func: ir.Function, name: str) -> str:
    """'FILE:LINE' of directive `name` in `func`'s header (the function's own line when not found)."""
    filename = getattr(module, "filename", None) or "<ptx>"
    line = func.span.line if func.span else 0
    source = getattr(module, "source", None)
    if source and line:
        lines = source.splitlines()
        for i in range(line - 1, min(len(lines), line + 200)):
            if re.search(re.escape(name) + r"\b", lines[i]):
                return f"{filename}:{i + 1}"
            if "{" in lines[i] and i >= line:
                break
    return f"{filename}:{line}" if line else filename


_STATIC_SHARED: dict = {}  # id(func) -> (module, func, bytes): every launch checks it, twice
_STATIC_SHARED_MAX = 256


def static_shared_bytes(module: ir.Module, func: ir.Function) -> int:
    """Static shared memory of `func` from its IR: its own .shared variables plus the module's it names."""
    hit = _STATIC_SHARED.get(id(func))
    if hit is not None and hit[0] is module and hit[1] is func:
        return hit[2]
    total = _static_shared_bytes(module, func)
    if len(_STATIC_SHARED) >= _STATIC_SHARED_MAX:
        _STATIC_SHARED.pop(next(iter(_STATIC_SHARED)))
    _STATIC_SHARED[id(func)] = (module, func, total)
    return total


def _static_shared_bytes(module: ir.Module, func: ir.Function) -> int:
    total = 0

    def add(v: ir.Variable) -> None:
        nonlocal total
        if v.space == ".shared" and v.linkage != ".extern":
            total += (-total) % (v.align or 1) + v.size
    names = set()
    for ins in func.instructions():
        for o in ins.operands:
            base = o.base if isinstance(o, ir.Address) else o
            if isinstance(base, ir.Symbol):
                names.add(base.name)
    for v in module.variables:
        if v.name in names:
            add(v)
    for s in _variables(func.body or ()):
        add(s)
    return total


def _variables(stmts):
    for s in stmts:
        if isinstance(s, ir.Variable):
            yield s
        elif isinstance(s, ir.Block):
            yield from _variables(s.body)


_SHAPES: dict[tuple, tuple[tuple[int, int, int], tuple[int, int, int]]] = {}  # (grid, block) -> checked


def grid_and_block(grid: Any, block: Any) -> tuple[tuple[int, int, int], tuple[int, int, int]]:
    """`grid` and `block` as 3-tuples within the driver's limits (any kernel's); LaunchError otherwise.

    Shapes that passed are remembered (a launch checks its shape several times, and launches repeat theirs):
    equal shapes pass or fail alike, so a hashable shape seen before is not checked again."""
    try:
        hit = _SHAPES.get((grid, block))
    except TypeError:  # (a list)
        return _grid_and_block(grid, block)
    if hit is None:
        hit = _grid_and_block(grid, block)
        if len(_SHAPES) >= 1024:
            _SHAPES.clear()
        _SHAPES[(grid, block)] = hit
    return hit


def _grid_and_block(grid: Any, block: Any) -> tuple[tuple[int, int, int], tuple[int, int, int]]:
    grid, block = dims(grid, "grid"), dims(block, "block")
    threads = block[0] * block[1] * block[2]
    if threads > MAX_BLOCK_THREADS:
        raise LaunchError(f"block {block} has {threads} threads; the limit is {MAX_BLOCK_THREADS}")
    for axis, n, lim in zip("xyz", block, MAX_BLOCK, strict=True):
        if n > lim:
            raise LaunchError(f"block {axis} dimension {n} exceeds {lim} (block {block})")
    for axis, n, lim in zip("xyz", grid, MAX_GRID, strict=True):
        if n > lim:
            raise LaunchError(f"grid {axis} dimension {n} exceeds {lim} (grid {grid}; the limits are "
                              f"2^31-1, 65535, 65535)")
    return grid, block


def shared_bytes(value: Any, what: str = "shared_mem") -> int:
    """Dynamic shared memory bytes, checked to be a non-negative integer."""
    if not isinstance(value, int | np.integer) or isinstance(value, bool) or value < 0:
        raise LaunchError(f"{what} must be a non-negative integer, got {value!r}")
    return int(value)


def check_launch(module: ir.Module | None, func: ir.Function, grid: Any, block: Any, cluster: Any = None, *,
                 shared_mem: int = 0,
                 static_shared: int | None = None, max_shared: int | None = None) -> LaunchShape:
    """The launch's shape after every check the driver makes on it; LaunchError naming what it breaks.

    A launch that passed is remembered by its kernel and its exact arguments (plain ints and tuples of them:
    equal ones pass alike), so a kernel launched again with the same shape is not checked again."""
    key = None
    if _plain(grid) and _plain(block) and (cluster is None or _plain(cluster)) and type(shared_mem) is int \
            and type(static_shared) in _INT_OR_NONE and type(max_shared) in _INT_OR_NONE:
        key = (id(func), id(module), grid, block, cluster, shared_mem, static_shared, max_shared)
        hit = _PASSED.get(key)
        if hit is not None and hit[0] is func and hit[1] is module:
            return hit[2]
    shape = _check_launch(module, func, grid, block, cluster, shared_mem, static_shared, max_shared)
    if key is not None:
        if len(_PASSED) >= 1024:
            _PASSED.clear()
        _PASSED[key] = (func, module, shape)
    return shape


_INT_OR_NONE = (int, type(None))
# (id(func), id(module), the shape arguments) -> (func, module, their LaunchShape): launches that passed
_PASSED: dict[tuple, tuple[ir.Function, ir.Module | None, LaunchShape]] = {}


def _plain(d: Any) -> bool:
    """An int or a tuple of ints (not bools, floats or numpy numbers: equal to ints, not always accepted)."""
    return type(d) is int or (type(d) is tuple and all(type(x) is int for x in d))


def _check_launch(module: ir.Module | None, func: ir.Function, grid: Any, block: Any, cluster: Any,
                  shared_mem: int, static_shared: int | None, max_shared: int | None) -> LaunchShape:
    grid, block = grid_and_block(grid, block)
    threads = block[0] * block[1] * block[2]
    dirs = dict(func.directives)
    req = dirs.get(".reqntid")
    if req:
        want = tuple(int(x) for x in req) + (1,) * (3 - len(req))
        if block != want:
            raise LaunchError(f"{directive_where(module, func, '.reqntid')}: {func.name} declares .reqntid "
                              f"{', '.join(map(str, req))}; the launch's block is {block} (the driver refuses it)")
    mx = dirs.get(".maxntid")
    if mx:
        limit = int(np.prod([int(x) for x in mx]))
        if threads > limit:
            raise LaunchError(f"{directive_where(module, func, '.maxntid')}: {func.name} declares .maxntid "
                              f"{', '.join(map(str, mx))} ({limit} threads); the launch's block {block} has "
                              f"{threads} (the driver refuses it)")
    shared_mem = shared_bytes(shared_mem)
    limit = max_shared if max_shared is not None else EMU_MAX_SHARED
    static = static_shared if static_shared is not None else (
        static_shared_bytes(module, func) if module is not None else 0)
    if static + int(shared_mem) > limit:
        raise LaunchError(f"{func.name}: {static} bytes of static plus {int(shared_mem)} of dynamic shared memory "
                          f"exceed the {limit} bytes ({limit // 1024} KiB) a block may use")
    return LaunchShape(grid, block, cluster_shape(module, func, grid, cluster))


def cluster_shape(module: ir.Module | None, func: ir.Function, grid: tuple[int, int, int],
                  option: Any) -> tuple[int, int, int] | None:
    """The cluster shape of a launch: `.reqnctapercluster` or the launch option; None for no cluster.

    Checks that the grid is a whole number of clusters and that an `.explicitcluster` kernel has one."""
    dirs = dict(func.directives)
    req = dirs.get(".reqnctapercluster")
    want = dims(option, "cluster") if option is not None else None
    if req is not None:
        req = tuple(int(x) for x in req) + (1,) * (3 - len(req))
        if want is not None and want != req:
            raise LaunchError(f"{directive_where(module, func, '.reqnctapercluster')}: {func.name} declares "
                              f".reqnctapercluster {req}; the launch asked for cluster {want}")
        want = req  # type: ignore[assignment]  # padded to 3
    if want is None:
        if ".explicitcluster" in dirs:
            raise LaunchError(f"{directive_where(module, func, '.explicitcluster')}: {func.name} is "
                              f".explicitcluster: launch it with a cluster shape, e.g. cluster=(2, 1, 1)")
        return None
    n = want[0] * want[1] * want[2]
    if n > MAX_CLUSTER:
        raise LaunchError(f"cluster {want} has {n} CTAs; the limit is {MAX_CLUSTER}")
    maxrank = dirs.get(".maxclusterrank")
    if maxrank and n > int(maxrank[0]):
        raise LaunchError(f"{directive_where(module, func, '.maxclusterrank')}: cluster {want} has {n} CTAs; "
                          f"{func.name} allows .maxclusterrank {int(maxrank[0])}")
    if any(g % c for g, c in zip(grid, want, strict=True)):
        where = directive_where(module, func, ".reqnctapercluster") + ": " if req is not None else ""
        raise LaunchError(f"{where}grid {grid} is not a whole number of clusters {want}: each grid dimension "
                          f"must be a multiple of the cluster's")
    return want
