"""Calls and returns of a wave: call stacks per lane, argument and result passing, recursion's saved
registers, indirect calls and brx.idx (`Calls`, part of `Machine`)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import numpy as np

from ptxforge.emu.errors import EmulatorError
from ptxforge.emu.op import EXITED
from ptxforge.emu.operands import FUNC_BASE
from ptxforge.emu.program import storage_dtype

# Calls nested deeper than this stop the launch with an error naming the call (CUDA's default 1 KiB stack
# holds far fewer frames; the emulator keeps a return address and saved registers per frame and lane).
MAX_CALL_DEPTH = 1024


class Calls:
    """The machine's calls and returns (a part of `Machine`, kept apart for its size)."""

    retstack: Any  # [call depth, lane] return addresses (None: the kernel makes no calls)

    if TYPE_CHECKING:  # the rest of `Machine`, for the type checker
        def __getattr__(self, name: str) -> Any: ...

    def _brx(self, op, ex, P) -> None:
        read, table = op.extra
        sel = self._guard(op, ex)
        np.copyto(self.pcs, P + 1, where=ex & ~sel)
        idx = np.broadcast_to(np.asarray(read(self.st), np.int64), (self.st.N,))[sel]
        if idx.size and (idx.min() < 0 or idx.max() >= table.size):
            lane = int(np.flatnonzero(sel)[int(np.argmax((idx < 0) | (idx >= table.size)))])
            raise EmulatorError(f"{op.where}: brx.idx index {int(idx.max())} outside its {table.size} targets "
                                f"({self.describe_lane(lane)})")
        self.pcs[sel] = table[idx]

    def _call(self, op, ex, P) -> None:
        info = op.extra
        st = self.st
        sel = self._guard(op, ex)
        np.copyto(self.pcs, P + 1, where=ex & ~sel)
        lanes_all = np.flatnonzero(sel)
        if lanes_all.size == 0:
            return
        if info.callee is None:  # indirect: group lanes by target
            addr = np.broadcast_to(np.asarray(info.indirect(st), np.uint64), (st.N,))[lanes_all]
            names = [f.name for f in self.layout.module.functions]
            for a in np.unique(addr):
                i = int(a) - FUNC_BASE
                by = self.describe_lane(int(lanes_all[int(np.argmax(addr == a))]))
                if 0 <= i < len(names) and names[i] in self.layout.other_kernels:
                    raise EmulatorError(f"{op.where}: indirect call to {int(a):#x}, kernel {names[i]} (.entry): "
                                        f"only a .func can be called ({by})")
                if not 0 <= i < len(names) or names[i] not in self.layout.functions:
                    raise EmulatorError(f"{op.where}: indirect call to {int(a):#x}, not a function ({by})")
                callee = self.layout.functions[names[i]]
                if callee.func.body is None:
                    raise EmulatorError(f"{op.where}: indirect call to extern {callee.name} is not supported ({by})")
                self._enter(callee, info, lanes_all[addr == a], P)
            return
        self._enter(info.callee, info, lanes_all, P)

    def _alloc_pvars(self, fl) -> None:
        """The wave's .param storage of function `fl` (zeroed), unless it has it already."""
        pvars, sizes, N = self.st.pvars, self.layout.pvar_sizes, self.st.N
        for i in (*fl.pvars, *fl.return_pvars):
            if pvars[i] is None:
                pvars[i] = np.zeros((N, sizes[i]), np.uint8)

    def _enter(self, callee, info, lanes, P) -> None:
        st = self.st
        self._alloc_pvars(callee)
        d = self.depth[lanes]
        if int(d.max()) + 1 >= self.retstack.shape[0]:
            self.retstack = np.concatenate([self.retstack, np.zeros_like(self.retstack)])
            for saves in self.saves.values():
                for key, arr in list(saves.items()):
                    saves[key] = np.concatenate([arr, np.zeros_like(arr)])
        if int(d.max()) + 1 >= MAX_CALL_DEPTH:
            lane = int(lanes[int(np.argmax(d))])
            raise EmulatorError(f"{self.ops[P].where}: call to {callee.name}: the call stack of "
                                f"{self.describe_lane(lane)} is {MAX_CALL_DEPTH} frames deep (unbounded recursion?)")
        if callee.recursive:
            saves = self.saves.setdefault(callee.name, {})
            D = self.retstack.shape[0]
            for s in callee.reg_slots:
                arr = saves.get(("r", s))
                if arr is None or arr.shape[0] < D:
                    arr = saves[("r", s)] = np.zeros((D, st.N), storage_dtype(self.layout.reg_types[s]))
                arr[d, lanes] = np.broadcast_to(st.regs[s], (st.N,))[lanes]
            for pv in callee.pvars:
                arr = saves.get(("p", pv))
                if arr is None or arr.shape[0] < D:
                    arr = saves[("p", pv)] = np.zeros((D, st.N, self.layout.pvar_sizes[pv]), np.uint8)
                arr[d, lanes] = st.pvars[pv][lanes]
        # arguments are read before any of the callee's registers change (a .reg formal may be the caller's
        # own register in a recursive call)
        values = [None if r is None else _arg_lanes(st, r, lanes) for r in (info.arg_readers or ())]
        for i, (src, dst) in enumerate(zip(info.arg_pvars, callee.param_pvars, strict=False)):
            slot = callee.param_regs[i] if i < len(callee.param_regs) else None
            if slot is not None and i < len(values) and values[i] is not None:
                _store_lanes(st, slot, lanes, values[i])
            elif src is not None:
                n = min(st.pvars[src].shape[1], st.pvars[dst].shape[1])
                st.pvars[dst][lanes, :n] = st.pvars[src][lanes, :n]
        self.retstack[d, lanes] = P + 1
        self.top_ret[lanes] = P + 1
        self.depth[lanes] = d + 1
        self.one_ctx = same_context(self.top_ret, self.pcs)
        st.fb[lanes] += info.caller.frame_size
        need = int(st.fb[lanes].max()) + callee.frame_size
        if need > st.mem.local_stride:
            st.mem.grow_local(need)
        self.pcs[lanes] = callee.entry

    def _ret(self, op, ex, P) -> None:
        st = self.st
        callee = op.extra
        sel = self._guard(op, ex)
        np.copyto(self.pcs, P + 1, where=ex & ~sel)
        lanes = np.flatnonzero(sel)
        if lanes.size == 0:
            return
        d = self.depth[lanes] - 1
        self.depth[lanes] = d
        rp = self.retstack[d, lanes]
        self.top_ret[lanes] = np.where(d > 0, self.retstack[np.maximum(d - 1, 0), lanes], -1)
        results = [None if r is None else tuple(np.broadcast_to(st.regs[e], (st.N,)).copy() for e in r)
                   if isinstance(r, tuple) else np.broadcast_to(st.regs[r], (st.N,)).copy() for r in callee.return_regs]
        if callee.recursive:
            saves = self.saves.get(callee.name, {})
            for (kind, s), arr in saves.items():
                if kind == "r":
                    full = np.broadcast_to(st.regs[s], (st.N,)).copy()
                    full[lanes] = arr[d, lanes]
                    st.regs[s] = full
                else:
                    st.pvars[s][lanes] = arr[d, lanes]
        for u in np.unique(rp):  # after the restore: results must survive it
            sub = lanes[rp == u]
            call = self.ops[int(u) - 1].extra
            writers = call.ret_writers or ()
            for i, (src, dst) in enumerate(zip(callee.return_pvars, call.ret_pvars, strict=False)):
                if results[i] is not None and i < len(writers) and writers[i] is not None:
                    mask = np.zeros(st.N, bool)
                    mask[sub] = True
                    wr, res = writers[i], results[i]
                    if isinstance(wr, tuple) and isinstance(res, tuple):  # a vector result, element by element
                        for w, v in zip(wr, res, strict=True):
                            w(st, v, mask)
                    elif callable(wr):
                        wr(st, res, mask)
                    continue
                if results[i] is not None:  # a .reg result into the caller's .param variable
                    raw = np.ascontiguousarray(results[i]).view(np.uint8).reshape(st.N, -1)
                    n = min(raw.shape[1], st.pvars[dst].shape[1])
                    st.pvars[dst][sub, :n] = raw[sub, :n]
                    continue
                n = min(st.pvars[src].shape[1], st.pvars[dst].shape[1])
                st.pvars[dst][sub, :n] = st.pvars[src][sub, :n]
            st.fb[sub] -= call.caller.frame_size
        self.pcs[lanes] = rp
        self.one_ctx = same_context(self.top_ret, self.pcs)


def same_context(top_ret: np.ndarray, pcs: np.ndarray) -> bool:
    """Whether every lane that has not exited has the same return address on top of its stack: then any set of
    running lanes is in one call context (lanes only leave that set, by exiting, until the next call or return)."""
    tr = top_ret[pcs != EXITED]
    return tr.size == 0 or int(tr.min()) == int(tr.max())


def _arg_lanes(st, reader, lanes):
    """A call argument's values on `lanes` (a tuple of them for a vector `.reg` formal)."""
    if isinstance(reader, tuple):
        return tuple(_arg_lanes(st, r, lanes) for r in reader)
    return np.broadcast_to(np.asarray(reader(st)), (st.N,))[lanes]


def _store_lanes(st, slot, lanes, values) -> None:
    """Set register `slot` to `values` on `lanes` (registers may be held as one uniform scalar); a tuple of
    slots (a vector register) takes a tuple of values."""
    if isinstance(slot, tuple):
        for s, v in zip(slot, values, strict=True):
            _store_lanes(st, s, lanes, v)
        return
    full = np.broadcast_to(st.regs[slot], (st.N,)).copy()
    full[lanes] = np.asarray(values).astype(full.dtype, copy=False)
    st.regs[slot] = full
