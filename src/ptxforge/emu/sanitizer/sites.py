"""What the sanitizer knows about each instruction (pc): its access class and where it came from.

`SiteInfo` is computed once per compiled kernel: whether an access is plain, strong (volatile/relaxed/
acquire/release) or atomic, whether it releases or acquires across blocks, whether it is an async copy
or a warp-synchronous op. `SourceMap` finds the CUDA source line of a pc from the nearest `.loc`.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

import numpy as np

from ptxforge.emu.sanitizer.order import GPU, SCOPES, SYS
from ptxforge.ptx import ir
from ptxforge.ptx.isa import Effects, effects, lookup
from ptxforge.ptx.isa.effects import STRONG_ORDERS

_INLINED = re.compile(r"inlined_at\s+(\d+)\s+(\d+)(?:\s+(\d+))?")
STRONG = STRONG_ORDERS  # memory orders that are no race (the ISA table's word for them)
_NONE = Effects()


@dataclass(frozen=True)
class SiteInfo:
    """Static facts about one instruction that the checks need."""

    pc: int
    opcode: str
    sync: bool = False  # atomic or strong: never races with another sync access
    atomic: bool = False
    acquire: bool = False  # acquires by itself: .acquire/.acq_rel ld/atom, and relaxed atomics (order.py)
    release: bool = False  # releases by itself: .release/.acq_rel st/atom/red
    fence: bool = False  # fence.sc/acq_rel, membar: with a strong access of the thread, a release/acquire
    strong_read: bool = False  # .relaxed/.volatile loads and atomics: an acquire when a fence follows
    strong_write: bool = False  # .relaxed/.volatile stores, atom, red: a release when a fence precedes
    scope: int = 2  # order.CTA .. order.SYS
    async_copy: bool = False  # cp.async(.bulk): the destination is pending until its wait
    async_wait: str = ""  # "group" | "all" for cp.async.wait_group / wait_all
    async_commit: bool = False
    warp_sync: bool = False  # bar.warp.sync / __syncwarp: orders memory among the named lanes
    mbarrier: bool = False  # the op updates an mbarrier word (8-byte accesses are atomic on it)
    bulk: bool = False  # cp.async.bulk: completes through its mbarrier (complete_tx)
    mbar_wait: int | None = None  # test_wait/try_wait: register slot of the "phase complete" predicate
    async_via_mbarrier: bool = False  # cp.async.mbarrier.arrive: the lane's copies complete with the phase
    guard: tuple | None = None  # (register slot, negated) of a guard predicate
    warpgroup: bool = False  # wgmma.mma_async: one operation of the whole warpgroup, issued by all its warps


def site_info(pc: int, ins: ir.Instruction, guard_slot: Any, wait_slot: int | None = None) -> SiteInfo:
    """The access class of one instruction from the ISA table's effects: memory kind, order, scope, and its part
    in asynchronous work (async copies, their groups and waits, mbarrier operations and phase waits)."""
    op = ins.opcode
    sx = set(ins.suffixes)
    e = effects(ins) or _NONE
    family = spec.family if (spec := lookup(ins)) is not None else op
    part = e.async_part
    barrier_word = part in ("mbarrier", "mbarrier_wait")  # an mbarrier operation (order.py models its phases)
    # the op updates an mbarrier word: an mbarrier operation, or one completing on an mbarrier (.mbarrier::...)
    mbar = barrier_word or any(s.startswith("mbarrier") for s in sx)
    atomic = e.memory == "atomic"
    strong = e.order in STRONG
    returns = bool(e.writes) and not barrier_word  # an access whose value the lane gets back
    # a proxy fence (fence.proxy.*, fence.mbarrier_init) orders one proxy's accesses, not threads'
    proxy = e.memory == "fence" and ("mbarrier_init" in sx or any(s.startswith("proxy") for s in sx))
    fence = e.memory == "fence" and e.lanes == "lane" and not proxy
    release = e.memory in ("store", "atomic") and not barrier_word and e.order in ("release", "acq_rel")
    acquire = (atomic and returns) or (e.memory == "load" and e.order in ("acquire", "acq_rel"))
    strong_read = (atomic and returns) or (e.memory == "load" and strong)
    bulk = part == "bulk"
    strong_write = (atomic and not barrier_word and not bulk) or (e.memory == "store" and strong)
    is_async = e.memory == "async" and part in ("copy", "bulk")
    wait = {"wait_group": "group", "wait_all": "all"}.get(part, "")
    return SiteInfo(pc, op, sync=atomic or strong, atomic=atomic, acquire=acquire, release=release,
                    fence=fence, strong_read=strong_read, strong_write=strong_write, scope=_scope(e),
                    async_copy=is_async, async_wait=wait,
                    async_commit=part == "commit",
                    warp_sync=e.memory == "fence" and e.lanes == "warp", guard=guard_slot, mbarrier=mbar,
                    mbar_wait=wait_slot if part == "mbarrier_wait" else None,
                    async_via_mbarrier=part == "arrive",
                    bulk=bulk, warpgroup=family == "wgmma.mma_async")


def _scope(e: Effects) -> int:
    """The scope level of an access (order.CTA .. order.SYS); .volatile is .relaxed.sys, no scope is .gpu."""
    if e.scope:
        return SCOPES[e.scope]
    return SYS if e.order == "volatile" else GPU


class SourceMap:
    """pc -> where in the source: the nearest `.loc` before each instruction (where the PTX has them), with
    the chain of `inlined_at` call sites when it was inlined (nvcc's -lineinfo writes one `inlined_at` per
    `.loc`; the call site's own `.loc`, met earlier, carries the next one out)."""

    def __init__(self, layout: Any):
        self.layout = layout
        self._by_ins: dict | None = None

    def _build(self) -> dict:
        module = self.layout.module
        files = {i.index: i.path for i in module.items if isinstance(i, ir.FileDirective)}
        names = _debug_names(module)
        out: dict = {}
        for f in module.functions:
            if f.body is None:
                continue
            state: list = [None]
            outer: dict = {}  # (file, line, col) of a .loc -> its inlined_at (file, line, col), or None

            def walk(body, state=state, outer=outer, func=f.name):
                for s in body:
                    if isinstance(s, ir.Loc):
                        state[0] = _frames(s, outer, files, names, func)
                    elif isinstance(s, ir.Instruction) and state[0] is not None:
                        out[id(s)] = state[0]
                    elif isinstance(s, ir.Block):
                        walk(s.body)
            walk(f.body)
        return out

    def stack(self, pc: int) -> list[str]:
        """The source frames of instruction `pc`, innermost first ("file:line in name"); [] without .loc."""
        if self._by_ins is None:
            self._by_ins = self._build()
        if not 0 <= pc < len(self.layout.placed):
            return []
        return list(self._by_ins.get(id(self.layout.placed[pc].ins), ()))

    def source(self, pc: int) -> str | None:
        """`file:line`; for inlined code the outermost call site, then the inlined lines down to the
        innermost: `k.cu:13 (inlined from k.cu:8, util.hpp:215)`."""
        frames = [f.split(" in ", 1)[0] for f in self.stack(pc)]
        if not frames:
            return None
        if len(frames) == 1:
            return frames[0]
        return f"{frames[-1]} (inlined from {', '.join(reversed(frames[:-1]))})"


def _frames(loc: Any, outer: dict, files: dict, names: dict, func: str) -> tuple[str, ...]:
    """The frames (innermost first) of code at `loc`; records `loc` as a call site for later .locs."""
    m = _INLINED.search(loc.extra or "")
    here = (loc.file, loc.line, loc.col)
    at = (int(m.group(1)), int(m.group(2)), int(m.group(3) or 0)) if m else None
    fn = _FUNCTION.search(loc.extra or "")
    if at is not None or here not in outer:
        outer[here] = at
        if fn:
            outer[("name", *here)] = fn.group(1)
    if at is None:
        return (_frame(here, None, files),)
    frames = [_frame(here, names.get(fn.group(1)) if fn else None, files)]
    seen = {here}
    while at is not None and at not in seen and len(frames) < 64:
        seen.add(at)
        nxt = outer.get(at)
        frames.append(_frame(at, None if nxt is None else _called_name(at, outer, names), files))
        at = nxt
    frames[-1] += f" in {func}"
    return tuple(frames)


def _called_name(at: tuple, outer: dict, names: dict) -> str | None:
    """The inlined function whose code holds call site `at` (from that site's own .loc)."""
    label = outer.get(("name", *at))
    return names.get(label) if label else None


def _frame(where: tuple, name: str | None, files: dict) -> str:
    text = f"{files.get(where[0], f'file{where[0]}')}:{where[1]}"
    return f"{text} in {name}" if name else text


_FUNCTION = re.compile(r"function_name\s+([$\w.]+)")


def _debug_names(module: Any) -> dict[str, str]:
    """`$L__info_stringN` -> the (shortened) function name the .debug_str section holds for it."""
    out: dict[str, str] = {}
    for item in module.items:
        if not isinstance(item, ir.Section) or item.name != ".debug_str":
            continue
        label, data = None, bytearray()
        for line in (*item.lines, "$end:"):
            line = line.strip()
            if line.endswith(":"):
                if label is not None:
                    out[label] = _short_name(bytes(data).split(b"\0", 1)[0].decode("latin-1"))
                label, data = line[:-1], bytearray()
            elif line.startswith(".b8") and label is not None:
                data.extend(int(x) for x in line[3:].split(",") if x.strip().isdigit())
    return out


def _short_name(mangled: str) -> str:
    """`_Z4leafPfif` -> leaf, `_ZN4cute4copyE...` -> cute::copy; other names as they are."""
    nested = mangled.startswith("_ZN")
    rest = mangled[3:] if nested else mangled[2:] if mangled.startswith("_Z") else ""
    parts = []
    while rest:
        d = re.match(r"(\d+)", rest)
        if not d:
            break
        n = int(d.group(1))
        parts.append(rest[d.end(): d.end() + n])
        rest = rest[d.end() + n:]
        if not nested:
            break
    return "::".join(parts) or mangled


def _names(ops, out: set) -> None:
    for o in ops:
        if isinstance(o, ir.Symbol):
            out.add(o.name)
        elif isinstance(o, ir.Address) and isinstance(o.base, ir.Symbol):
            out.add(o.base.name)
        elif isinstance(o, ir.Vector | ir.ParenList | ir.AddressList):
            _names(getattr(o, "elements", None) or getattr(o, "items", ()), out)
        elif isinstance(o, ir.Expr):
            out.update(re.findall(r"[A-Za-z_$%][\w$]*", o.text))


def kernel_symbols(layout: Any) -> set[str]:
    """Names the kernel and the functions it can reach mention (all functions when a .global table holds
    function addresses), plus the shared variables those functions declare."""
    module = layout.module
    funcs = {f.name: f for f in module.functions if f.body is not None}
    tables = any(v.init is not None and any(n in str(v.init) for n in funcs) for v in module.variables)
    todo = list(funcs.values()) if tables else [layout.kernel_func]
    seen = {f.name for f in todo}
    names: set[str] = set()

    def walk(body, f_names):
        for st in body:
            if isinstance(st, ir.Instruction):
                _names(st.operands, f_names)
            elif isinstance(st, ir.Variable) and st.space == ".shared":
                f_names.add(st.name)
            elif isinstance(st, ir.Block):
                walk(st.body, f_names)
    while todo:
        f = todo.pop()
        mine: set[str] = set()
        walk(f.body, mine)
        names |= mine
        for n in mine:
            g = funcs.get(n)
            if g is not None and n not in seen:
                seen.add(n)
                todo.append(g)
    return names


def shared_variables(layout: Any, dynamic_shared: int) -> list[tuple[str, int, int]]:
    """(name, offset, size) of the shared variables the kernel uses (extern ones: the dynamic size).

    The emulator lays out every shared variable of the module; a kernel owns only those it names, so
    bytes of other kernels' variables count as outside its shared memory.
    """
    sizes: dict[str, int] = {}
    extern: set[str] = set()

    def visit(v):
        if isinstance(v, ir.Variable) and v.space == ".shared":
            if v.linkage == ".extern" or (v.array and v.array[-1] is None):
                extern.add(v.name)
            else:
                sizes[v.name] = v.size

    def walk(body):
        for s in body:
            visit(s)
            if isinstance(s, ir.Block):
                walk(s.body)
    for item in layout.module.items:
        visit(item)
        if isinstance(item, ir.Function) and item.body is not None:
            walk(item.body)
    used = kernel_symbols(layout)
    out = []
    for name, off in layout.shared.items():
        if name not in used:
            continue
        size = dynamic_shared if name in extern else sizes.get(name, 0)
        out.append((name, off, size))
    return out


def shared_valid_mask(variables: list[tuple[str, int, int]], dynamic_offset: int, dynamic_shared: int,
                      size: int) -> np.ndarray:
    """Per byte of a block's shared window: does it belong to a variable the kernel uses?"""
    valid = np.zeros(max(size, 1), bool)
    for _, off, n in variables:
        valid[off: off + n] = True
    if dynamic_shared:
        valid[dynamic_offset: dynamic_offset + dynamic_shared] = True
    valid[dynamic_offset + dynamic_shared:] = True  # space the emulator appends (the reserved region)
    return valid
