"""The sanitizer's check of each access `LaneMemory.resolve` lets through or refuses: bounds and
alignment, shadow memory (initialization, pending async-copy bytes), races per byte and barrier interval
(`AccessCheck`, part of `Sanitizer`)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace
from typing import TYPE_CHECKING, Any

import numpy as np

from ptxforge.emu import memory as M
from ptxforge.emu import ramps as R
from ptxforge.emu.sanitizer import bounds
from ptxforge.emu.sanitizer.global_shadow import granule_part
from ptxforge.emu.sanitizer.shadow import INIT, PENDING, POISON, Shadow
from ptxforge.emu.sanitizer.sites import SiteInfo


class _Excluded(Exception):  # noqa: N818 - internal control flow, never escapes an op
    """Bad lanes of an access (already reported); the op is run again without them."""

    def __init__(self, lanes):
        super().__init__("excluded lanes")
        self.lanes = lanes


class AccessCheck:
    """The sanitizer's access check (a part of `Sanitizer`, kept apart for its size)."""

    # a launch's and a wave's state, set by `instrument` and `on_wave` (`release` drops it)
    machine: Any
    global_sh: Any  # GlobalShadow
    shared_sh: Any  # Shadow of the wave's shared memory, made at its first access
    local_sh: Any
    _local_buf: Any
    shared_granular: Any
    all_lanes: Any
    ep_warp: Any
    _ep_lane: Any
    _shared_maps: Any
    shared_valid_full: Any
    _deferred: list

    if TYPE_CHECKING:  # the rest of `Sanitizer`, for the type checker
        def __getattr__(self, name: str) -> Any: ...

    def on_fault(self, mem: M.LaneMemory, space: str, addr: Any, nbytes: int, lanes: np.ndarray | None,
                 write: bool) -> None:
        """Report the bad lanes of a refused access and run the op again without them."""
        self._defer_mark = len(self._deferred)
        self._in_write = write
        self._bad_access(space, addr, nbytes, lanes, write)

    def on_resolved(self, mem: M.LaneMemory, space: str, addr: Any, nbytes: int, lanes: np.ndarray | None,
                    write: bool, found: Any) -> None:
        """Check the access against the shadow memory and record it."""
        self._defer_mark = len(self._deferred)
        self._in_write = write
        if isinstance(found, list):
            for sel, buf, idx in found:
                sub = np.flatnonzero(sel) if lanes is None else np.asarray(lanes)[sel]
                self._track(buf, idx, nbytes, sub, write, space)
        else:
            self._track(found[0], found[1], nbytes, lanes, write, space)

    def _bad_access(self, space, addr, nbytes, lanes, write) -> None:
        mem = self.mem
        L = self.all_lanes if lanes is None else np.asarray(lanes, np.int64)
        kind, spaces, a = bounds.classify(mem, space, addr, nbytes, L.size, write)
        bad = kind != bounds.OK
        if not bad.any():
            return  # not a lane problem: let the emulator's error stand
        access = self._access_name(write)
        for code in np.unique(kind[bad]).tolist():
            sel = np.flatnonzero(kind == code)
            j = int(sel[0])
            sp = spaces[j]
            site = (bounds.KIND_NAMES[code], access, sp, self.pc)
            if self._bump(site, sel.size):
                continue
            addr_j = int(a[j])
            rep = self._report(bounds.KIND_NAMES[code], int(L[j]), access=access, space=sp, size=nbytes,
                               address=addr_j, count=int(sel.size))
            self._place(rep, sp, addr_j, int(L[j]), generic=space == "generic")
            if code == bounds.MISALIGNED:
                rep.message = f"the address is not a multiple of the access size ({nbytes} bytes)"
            elif code == bounds.READONLY:
                rep.message = "the memory is read-only"
            self._add(site, rep)
        raise _Excluded(L[bad])

    def _same_warpgroup(self, pw: np.ndarray, L: np.ndarray, nb: int) -> np.ndarray:
        """Per byte: the earlier access `pw` was by a thread of the accessing warpgroup (same block). A
        wgmma.mma_async reads its operands once every warp of the warpgroup issued it (.sync.aligned), so
        what each warp did before it is ordered before those reads (docs/sanitizer-rulings.md)."""
        who = self.who[L].astype(np.int64)
        if nb > 1:
            who = np.repeat(who, nb)
        p = pw.astype(np.int64)
        lpb = self.lpb
        return (p >= 0) & (p // lpb == who // lpb) & ((p % lpb) // 128 == (who % lpb) // 128)

    def _access_name(self, write: bool) -> str:
        if self.site is not None and self.site.atomic:
            return "atomic"
        return "write" if write else "read"

    def _track(self, buf, idx, nb, lanes, write, space) -> None:
        mem = self.mem
        if buf is mem.shared:
            sh, region = self.shared_sh, "shared"
        elif buf is mem.device.arena:
            sh, region = self.global_sh, "global"
        elif buf is mem.local:
            if self.local_sh is None or mem.local is not self._local_buf:
                self._regrow_local()
            sh, region = self.local_sh, "local"
        else:
            return
        L = self.all_lanes if lanes is None else np.asarray(lanes, np.int64)
        k = L.size
        if k == 0:
            return
        if type(idx) is not R.Ramp:  # (a run at a ramp's addresses, memory.py: kept as the rule)
            idx = np.asarray(idx)
            idx = np.full(k, int(idx), np.int64) if idx.ndim == 0 else idx.astype(np.int64, copy=False)
        if region == "shared" and self.shared_valid_full is not None:
            self._check_shared_variables(idx, nb, L)
        site = self.site
        sync_ = bool(site is not None and site.sync)
        if site is not None and site.mbarrier and nb == 8 and not sync_ and site.opcode != "mbarrier":
            site = self._mbar_word_site(site)  # the mbarrier update inside a bulk copy / arrive
            sync_ = True
        pc = self.pc
        t = self.clock if self.order.stamping else None
        init_check = self.check_init  # global: bytes that existed at launch count as initialized
        atomic = site is not None and site.atomic
        if region == "shared" and self.shared_granular and site is not None and site.async_copy:
            sh = self._shared_shadow(1)  # the wave's first async copy: per byte from now on
            sh.pending = True
            self.shared_granular = False
        parts = None
        if region == "global":  # per allocation and granule; byte arrays only where something is found
            parts, hb = self.global_sh.split(idx, nb), self.hb_global
        elif region == "shared" and self.shared_granular:
            parts, hb = self._shared_parts(idx, nb), self.hb_shared
        if parts is not None:
            found = self._granular_access(parts, nb, L, write, atomic, sync_, pc, t, hb)
            if found is None:
                if write and self.undef is not None and self.undef.store_vals:
                    self.undef.on_store_bytes(L, self._bytes(idx, nb), nb, region)
                return
            B = self._bytes(idx, nb)
            uninit, pending, race, pw, ppc, ww, dup = found
        else:
            B = self._bytes(idx, nb)
            if region == "local":
                poison = None
                if write and self.undef is not None and self.undef.store_vals:
                    poison = self.undef.on_store_bytes(L, B, nb, region)
                self._track_init_only(sh, B, nb, L, write, poison)
                return
            S = B  # the shadow index of each byte
            if self.shared_cmap is not None:
                S = self.shared_cmap[B]
            who = self.who[L]
            ep = self.ep_warp[L >> 5]
            if nb > 1:
                who = np.repeat(who, nb)
                ep = np.repeat(ep, nb)
            hb = self.hb_shared
            self._acc_lanes, self._acc_nb, self._narrow = L, nb, None
            ww = dup = None
            if write and not atomic:
                uninit, pending, race, pw, ppc, ww, dup = sh.write(S, who, ep, pc, sync_, hb, t=t)
            elif write:  # atomics read and write
                uninit, pending, race, pw, ppc, ww, dup = sh.write(S, who, ep, pc, True, hb, init_check, t=t)
            else:
                uninit, pending, race, pw, ppc = sh.read(S, who, ep, pc, sync_, init_check, hb, t=t)
        if region == "shared" and site is not None and site.async_copy and write:
            self.async_used = True
            self.pend_lane[S] = np.repeat(L, nb) if nb > 1 else L
            self.pend_group[S] = np.repeat(self.async_committed[L], nb) if nb > 1 else \
                self.async_committed[L]
            sh.flags[S] |= PENDING
            if site.bulk:
                self.mbar_tied[L] = self.async_committed[L] + 1
            return
        if region == "shared" and self.async_used and pending.any():
            self._check_pending(sh, S, B, nb, L, write, pending)
        if uninit is not None and uninit.any():
            self._uninitialized(uninit, B, nb, L, region, write, site)
        if write and self.undef is not None and self.undef.store_vals:
            self.undef.on_store_bytes(L, B, nb, region)
        if race is not None and site is not None and site.warpgroup and pw is not None:
            race = race & ~self._same_warpgroup(pw, L, nb)
        if race is None or not self.check_races or not race.any():
            return
        prev_read = None if ww is None else ~ww
        if ww is not None and site is not None and site.opcode == "st" and ww.any():
            # a write-write race where both store the same value is benign: decide once `store` shows
            # the values (`on_store`), after the op (`_flush_deferred`)
            now = race & ~ww
            if now.any():
                self._report_race(now, B, nb, L, region, write, pw, ppc, prev_read)
            self._deferred.append({"buf": buf, "B": B, "nb": nb, "L": L, "region": region, "ww": ww, "dup": dup,
                                   "old": buf[B], "pw": pw, "ppc": ppc, "values": None,
                                   "narrow": self._narrow})
            return
        self._report_race(race, B, nb, L, region, write, pw, ppc, prev_read)

    def _bytes(self, idx, nb):
        """The byte index of every element (lane-major: nb bytes per lane)."""
        return idx if nb == 1 else (idx[:, None] + self._arange(nb)).ravel()

    def _arange(self, n: int):
        ar = self._ar.get(n)
        if ar is None:
            ar = self._ar[n] = np.arange(n, dtype=np.int64)
        return ar

    def _shared_shadow(self, granule: int) -> Shadow:
        """The wave's shared-memory shadow (over the compact index of the kernel's shared bytes), made on the
        first access with granules of `granule` bytes, or refined to them."""
        sh = self.shared_sh
        if sh is None:
            sh = self.shared_sh = Shadow(-(-self.shared_size // granule), init=False, races=self.check_races,
                                         granule=granule, pending=False)
            sh.exact = self.shared_exact
        elif granule < sh.granule:
            sh.refine(granule)
        return sh

    def _shared_parts(self, idx, nb):
        """The access as one part of the wave's shared shadow (see `_granular_access`)."""
        cmap = self.shared_cmap
        c = idx if cmap is None else cmap[idx]
        if nb > 1 and cmap is not None and not bool((cmap[idx + (nb - 1)] - c == nb - 1).all()):
            # the bytes of an access are not consecutive in the compact index (it spans a gap): per byte
            sh = self._shared_shadow(1)
            return [(sh, None, cmap[self._bytes(idx, nb)], nb)]
        return [granule_part(self._shared_shadow, None, c, nb)]

    def _granular_access(self, parts, nb, L, write, atomic, sync_, pc, t, hb):
        """Check and record an access of nb bytes per lane by lanes L in granular shadows: `parts` are
        (shadow, positions of the lanes or None, granule indices, granules per lane) from
        `GlobalShadow.split` or `_shared_parts`. None when nothing is found (the common case); else the
        per-byte arrays (uninit, pending, race, prev_who, prev_pc, ww, dup) a byte-granular shadow gives."""
        who_l = self.who if L is self.all_lanes else self.who[L]
        ep_l = self.ep_of(L)
        n = L.size * nb
        full = None
        narrow = None
        for sh, pos, S, per in parts:
            Lp, who, ep = (L, who_l, ep_l) if pos is None else (L[pos], who_l[pos], ep_l[pos])
            if per > 1:
                who = np.repeat(who, per)
                ep = np.repeat(ep, per)
            self._acc_lanes, self._acc_nb, self._narrow = Lp, per, None
            distinct = isinstance(S, slice)
            ww = dup = None
            if write and not atomic:
                uninit, _, race, pw, ppc, ww, dup = sh.write(S, who, ep, pc, sync_, hb, t=t, distinct=distinct)
            elif write:  # atomics read and write
                uninit, _, race, pw, ppc, ww, dup = sh.write(S, who, ep, pc, True, hb, self.check_init, t=t,
                                                             distinct=distinct)
            else:
                uninit, _, race, pw, ppc = sh.read(S, who, ep, pc, sync_, self.check_init, hb, t=t,
                                                   distinct=distinct)
            hot_u = uninit is not None and uninit.any()
            hot_r = race is not None and race.any()
            if not (hot_u or hot_r):
                continue
            if full is None:
                full = {"uninit": np.zeros(n, bool), "race": np.zeros(n, bool), "pw": np.full(n, -1, np.int64),
                        "ppc": np.zeros(n, np.int64), "ww": np.zeros(n, bool) if write else None,
                        "dup": None}
            g = sh.granule
            at = slice(None) if pos is None else (pos[:, None] * nb + self._arange(nb)).ravel()
            if hot_u:
                full["uninit"][at] = np.repeat(uninit, g)
            if hot_r:
                full["race"][at] = np.repeat(race, g)
                full["pw"][at] = np.repeat(pw, g)
                full["ppc"][at] = np.repeat(ppc, g)
                if ww is not None:
                    full["ww"][at] = np.repeat(ww, g)
                if dup is not None:
                    if full["dup"] is None:
                        full["dup"] = np.zeros(n, bool)
                    full["dup"][at] = np.repeat(dup, g)
                if self._narrow is not None:
                    if narrow is None:
                        narrow = np.full(n, -1, np.int8)
                    narrow[at] = np.repeat(self._narrow, g)
        self._acc_lanes, self._acc_nb, self._narrow = L, nb, narrow
        if full is None:
            return None
        has_u = full["uninit"].any()
        return (full["uninit"] if has_u else None, None, full["race"], full["pw"], full["ppc"], full["ww"],
                full["dup"])

    def _uninitialized(self, uninit, B, nb, L, region, write, site) -> None:
        """Bytes no thread initialized were read: mark the loaded registers undefined (reported where the
        value is used), or report now: eagerly, for loads whose bytes do not land in one lane's register,
        and for arithmetic atomics (an undefined counter, such as a histogram nobody zeroed). Bitwise and
        exchange atomics read nothing that matters by themselves: bit-level protocols (cooperative groups'
        tile barriers reset their bits with red.and) start from undefined words; atom's old value is
        still marked undefined."""
        if site is not None and site.atomic and site.opcode in ("atom", "red", "cp"):
            sx = set(self.layout.placed[self.pc].ins.suffixes)
            if sx & {"and", "or", "xor", "exch"}:
                if site.opcode == "atom" and self.undef is not None:
                    self.undef.on_load(L, uninit, B, nb, region)
                return
        elif self.undef is not None and self.undef.on_load(L, uninit, B, nb, region):
            return
        self._report_lanes("uninitialized", uninit, B, nb, L, region, write)

    def on_store(self, mem: M.LaneMemory, dtype: Any, values: Sequence[Any]) -> None:
        """`memory.store` shows the values of the store whose resolve just ran."""
        new = self._deferred[self._defer_mark:]
        if len(new) != 1 or any(v is None for v in values):
            return
        d = new[0]
        k = d["L"].size
        cols = [np.broadcast_to(np.asarray(v).astype(dtype, copy=False), (k,)) for v in values]
        V = np.ascontiguousarray(np.stack(cols, axis=1)).view(np.uint8).reshape(-1)
        if V.size == d["B"].size:
            d["values"] = V

    def _flush_deferred(self) -> None:
        """Report the deferred write-write races, leaving out the stores of a value already there."""
        todo, self._deferred = self._deferred, []
        for d in todo:
            ww, dup, V, B = d["ww"], d["dup"], d["values"], d["B"]
            real = ww
            if V is not None:
                cross = ww if dup is None else ww & ~dup
                real = cross & (V != d["old"])
                if dup is not None and dup.any():  # threads of this instruction: do their values differ?
                    order = np.argsort(B, kind="stable")
                    Bs, Vs = B[order], V[order]
                    start = np.ones(Bs.size, bool)
                    start[1:] = Bs[1:] != Bs[:-1]
                    gid = np.cumsum(start) - 1
                    differs = np.bincount(gid, weights=Vs != Vs[start][gid]) > 0
                    dreal = np.empty(B.size, bool)
                    dreal[order] = differs[gid]
                    real = real | (dup & dreal)
            if real.any():
                self._narrow = d["narrow"]
                self._report_race(real, B, d["nb"], d["L"], d["region"], True, d["pw"], d["ppc"], ~ww)

    def _mbar_word_site(self, site: SiteInfo) -> SiteInfo:
        return replace(site, sync=True, atomic=True, async_copy=False)

    def _check_shared_variables(self, idx, nb, L) -> None:
        v = self.shared_valid_full
        bad = ~(v[idx] & v[idx + (nb - 1)])
        if not bad.any():
            return
        write = self._in_write
        self._report_lanes("out-of-bounds", np.repeat(bad, nb), (idx[:, None] + self._ar[nb]).ravel(), nb, L,
                           "shared", write)
        raise _Excluded(L[bad])

    def _track_init_only(self, sh, B, nb, L, write, poison) -> None:
        """Local memory: initialization only. An undefined value stored to the stack (as -G code spills
        every register) poisons its bytes instead of reporting, and a load of them is undefined again."""
        if write:
            sh.flags[B] = INIT if poison is None else np.where(poison, np.uint8(POISON), np.uint8(INIT))
            return
        f = sh.flags[B]
        undefined = (f & INIT) == 0 if self.check_init_local else (f & POISON) != 0
        if not undefined.any():
            return
        if self.undef is not None and self.undef.on_load(L, undefined, B, nb, "local"):
            return
        if self.check_init_local:
            self._report_lanes("uninitialized", undefined, B, nb, L, "local", False)

    def _regrow_local(self) -> None:
        mem = self.mem
        old = None if self.local_sh is None else self.local_sh.flags
        n = mem.nlanes
        new = Shadow(mem.local.size, init=False, races=False)
        if old is not None and old.size:
            os_ = old.size // n
            new.flags.reshape(n, -1)[:, :os_] = old.reshape(n, os_)
        self.local_sh = new
        self._local_buf = mem.local

    def _check_pending(self, sh, S, B, nb, L, write, pending) -> None:
        pb = np.flatnonzero(pending)
        owners = self.pend_lane[S[pb]]
        done = self.async_done[owners] > self.pend_group[S[pb]]
        sh.flags[S[pb[done]]] &= np.uint8(~PENDING & 0xFF)
        if done.all():
            return
        bad = np.zeros(B.size, bool)
        bad[pb[~done]] = True
        self._report_lanes("async-before-wait", bad, B, nb, L, "shared", write)
