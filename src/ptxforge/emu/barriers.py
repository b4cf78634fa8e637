"""Exits, barriers (bar/barrier, barrier.cluster) and warp-synchronous waits of a wave: who arrives,
who waits (a flag bit in the lane's pc) and when they are released (`Barriers`, part of `Machine`)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import numpy as np

from ptxforge.emu.errors import EmulatorError
from ptxforge.emu.op import EXITED, WAIT_BAR, WAIT_WARP
from ptxforge.emu.ops_warp import warp_bits

NBARRIERS = 16


class Barriers:
    """The machine's barrier and exit handling (a part of `Machine`, kept apart for its size)."""

    nlive: int  # live lanes of the wave
    nonexited: np.ndarray  # per slot: threads that have not exited
    c_arrivals: np.ndarray  # per cluster of the wave: threads arrived at barrier.cluster

    if TYPE_CHECKING:  # the rest of `Machine`, for the type checker
        def __getattr__(self, name: str) -> Any: ...

    def _exit(self, sel) -> None:
        n = int(np.count_nonzero(sel))
        if not n:
            return
        self.pcs[sel] = EXITED
        st = self.st
        live = st.live_mask().copy()
        live[sel] = False
        st.live = live
        self.nlive -= n
        self.nonexited -= np.bincount(self.slot[sel], minlength=self.nslots)
        if self.csize > 1:
            self._cluster_release()
        for bid in np.flatnonzero(self.arrivals.any(0)):
            self._try_release(int(bid))

    def _check_bar_ids(self, op) -> None:
        live = self.st.live_mask()
        ids = np.broadcast_to(np.asarray(op.extra.bar_id(self.st)).astype(np.int64), live.shape)
        bad = live & ((ids < 0) | (ids >= NBARRIERS))
        if bad.any():
            lane = int(np.argmax(bad))
            raise EmulatorError(f"{op.where}: barrier id {int(ids[lane])} is out of range 0..15 "
                                f"({self.describe_lane(lane)})")

    def _barrier(self, op, ex, P) -> None:
        info = op.extra
        st = self.st
        pcs = self.pcs
        sel = self._guard(op, ex)
        np.copyto(pcs, P + 1, where=ex & ~sel)
        if info.mode in ("carrive", "cwait"):
            self._cluster_barrier(info.mode, sel, P)
            return
        ids = info.bar_id(st)
        ids = np.broadcast_to(np.asarray(ids).astype(np.int64), (st.N,))
        uniq = np.unique(ids[sel]) if np.ndim(info.bar_id(st)) else [int(ids[0])]
        cnt_v = None if info.count is None else np.broadcast_to(np.asarray(info.count(st), np.int64), (st.N,))
        for bid in uniq:
            bid = int(bid)
            if not 0 <= bid < NBARRIERS:
                lane = int(np.argmax(sel & (ids == bid)))
                raise EmulatorError(f"{op.where}: barrier id {bid} is out of range 0..15 ({self.describe_lane(lane)})")
            lanes = sel & (ids == bid) if np.ndim(info.bar_id(st)) else sel
            slots = self.slot[lanes]
            cnt = np.bincount(slots, minlength=self.nslots)
            self.arrivals[:, bid] += cnt
            if cnt_v is not None:
                first = np.full(self.nslots, -1, np.int64)
                idx = np.flatnonzero(lanes)
                first[self.slot[idx[::-1]]] = cnt_v[idx[::-1]]
                has = first >= 0
                self.expected[has, bid] = first[has]
            if info.mode == "red":
                pv = np.broadcast_to(np.asarray(info.red_src(st), bool), (st.N,))
                self.redtrue[:, bid] += np.bincount(slots, weights=pv[lanes], minlength=self.nslots).astype(
                    np.int64)
            if info.mode == "arrive":
                np.copyto(pcs, P + 1, where=lanes)
            else:
                np.copyto(pcs, (P + 1) | WAIT_BAR, where=lanes)
                self.lane_bar[lanes] = bid
                self._pending_red = getattr(self, "_pending_red", {})
                if info.mode == "red":
                    self._pending_red[bid] = info
            self._try_release(bid)

    def _cluster_barrier(self, mode: str, sel, P) -> None:
        """barrier.cluster.arrive counts the lanes toward their cluster's phase; .wait blocks lanes
        until the phase they arrived in has completed (every non-exited thread of the cluster arrived)."""
        pcs = self.pcs
        if self.csize == 1:
            np.copyto(pcs, P + 1, where=sel)
            return
        ccl = self.slot // self.csize
        if mode == "carrive":
            np.copyto(pcs, P + 1, where=sel)
            self.c_arrivals += np.bincount(ccl[sel], minlength=self.c_arrivals.size)
            self.lane_cphase[sel] = self.c_phase[ccl[sel]]
            self._cluster_release()
            return
        done = self.c_phase[ccl] > self.lane_cphase
        np.copyto(pcs, P + 1, where=sel & done)
        wait = sel & ~done
        np.copyto(pcs, (P + 1) | WAIT_BAR, where=wait)
        self.lane_bar[wait] = NBARRIERS

    def _cluster_release(self) -> None:
        exp = self.nonexited.reshape(-1, self.csize).sum(1)
        done = (self.c_arrivals > 0) & (self.c_arrivals >= exp)
        if not done.any():
            return
        self.c_phase[done] += 1
        self.c_arrivals[done] = 0
        pcs = self.pcs
        rel = (pcs >= WAIT_BAR) & (pcs < WAIT_WARP) & (self.lane_bar == NBARRIERS) & \
            done[self.slot // self.csize]
        pcs[rel] -= WAIT_BAR
        for f in self.hooks.on_cluster_release:
            f(self, np.flatnonzero(np.repeat(done, self.csize)))

    def _try_release(self, bid: int) -> None:
        arr = self.arrivals[:, bid]
        exp = np.where(self.expected[:, bid] > 0, self.expected[:, bid], self.nonexited)
        done = (arr > 0) & (arr >= exp)
        if not done.any():
            return
        pcs = self.pcs
        rel = (pcs >= WAIT_BAR) & (pcs < WAIT_WARP) & done[self.slot] & (self.lane_bar == bid)
        red = getattr(self, "_pending_red", {}).pop(bid, None)
        if red is not None:
            rt, ar = self.redtrue[:, bid], arr
            val = {"popc": rt.astype(np.uint32), "and": rt == ar, "or": rt > 0}[red.red_op]
            red.red_dst(self.st, val[self.slot], rel)
        for f in self.hooks.on_release:
            f(self, bid, done, rel)
        pcs[rel] -= WAIT_BAR
        self.arrivals[done, bid] = 0
        self.expected[done, bid] = 0
        self.redtrue[done, bid] = 0

    def _warp_ready(self, ex, P, op):
        """Lanes of `ex` whose warp (member mask) has fully arrived; the rest wait at P."""
        pcs = self.pcs
        elsewhere = ~ex & (pcs != EXITED)
        if not elsewhere.any():
            np.copyto(pcs, P, where=ex)
            return ex
        eb = np.repeat(warp_bits(elsewhere), 32)
        mm = np.uint32(0xFFFFFFFF) if op.membermask is None else np.asarray(op.membermask(self.st), np.uint32)
        bad = ex & ((mm & eb) != 0)
        if self.hooks.on_warp_wait and bad.any():
            for f in self.hooks.on_warp_wait:
                f(self, P, bad, elsewhere, mm)
        ready = ex & ~bad
        np.copyto(pcs, P | WAIT_WARP, where=bad)
        np.copyto(pcs, P, where=ready)
        return ready if ready.any() else None

    def _wake_warp_waiters(self) -> bool:
        """All lanes wait: let lanes waiting at one warp-synchronous op run it when the rest of their
        warp has exited (exited lanes named in a member mask need not take part)."""
        pcs = self.pcs
        wait = ((pcs & WAIT_WARP) != 0) & (pcs != EXITED)
        blocked = (pcs != EXITED) & ~wait
        w = wait.reshape(-1, 32)
        p = pcs.reshape(-1, 32)
        hi = np.where(w, p, -1).max(1)
        lo = np.where(w, p, np.iinfo(np.int32).max).min(1)
        ok = w.any(1) & ~blocked.reshape(-1, 32).any(1) & (hi == lo)
        if not ok.any():
            return False
        wake = wait & np.repeat(ok, 32)
        pcs[wake] &= ~np.int32(WAIT_WARP)
        return True
