"""Synchronization checks: barrier divergence and warp member masks.

Barriers: when a block's barrier releases, the threads of each warp leaving it must have waited at the
same (aligned) barrier instruction; different warps may have arrived from different instructions (named
barriers between producer and consumer warpgroups, docs/sanitizer-rulings.md). Whole warps that exited
do not count: the hardware expects only the threads still running, so `if (i >= n) return; ...
__syncthreads();` is fine for warp-aligned n. A warp split between threads waiting at an aligned barrier
and threads that exited instead (`if (threadIdx.x < 16) __syncthreads();` with the rest leaving) is
divergence: reported.

Member masks (shfl/vote/match/redux/elect .sync, bar.warp.sync): the executing thread must be in its
mask, all threads of a warp must pass the same mask, and every lane the mask names must execute the
instruction with it, unless it leaves the kernel instead (an early return: PTX waits only for non-exited
threads since sm_70).
"""

from __future__ import annotations

from typing import Any

import numpy as np

from ptxforge.emu.op import BAR, BRA, EXIT, EXITED, NOP, NORMAL, PC_MASK, WARPSYNC
from ptxforge.emu.ops_warp import warp_bits

FULL = np.uint32(0xFFFFFFFF)


def _lanes_text(bits: int) -> str:
    lanes = [i for i in range(32) if bits >> i & 1]
    runs, start = [], None
    for i, x in enumerate(lanes):
        if start is None:
            start = x
        if i + 1 == len(lanes) or lanes[i + 1] != x + 1:
            runs.append(f"{start}" if start == x else f"{start}-{x}")
            start = None
    return ",".join(runs)


def check_member_mask(san: Any, st: Any, m: np.ndarray | None, mm_reader: Any, info: Any) -> None:
    act = san._executing(st, m, info)
    if not act.any():
        return
    N = st.N
    mm = FULL if mm_reader is None else mm_reader(st)
    mm = np.broadcast_to(np.asarray(mm, np.uint32), (N,))
    W = N // 32
    A = act.reshape(W, 32)
    has = A.any(1)
    first = A.argmax(1)
    M = mm.reshape(W, 32)
    w_mm = np.bitwise_or.reduce(np.where(A, M, np.uint32(0)), axis=1)  # union of the executing lanes' masks
    own = ((mm >> st.laneid) & np.uint32(1)).astype(bool)
    op = san.machine.ops[info.pc]
    name = op.text.split()[0] if op.text else info.opcode
    not_in = act & ~own
    if not_in.any():
        sel = np.flatnonzero(not_in)
        lane = int(sel[0])
        msg = (f"lane {lane % 32} executes {name} with member mask {int(mm[lane]):#010x}, "
               f"which does not include the lane itself")
        _add(san, ("invalid-member-mask", "self", info.pc), lane, info.pc, msg, sel.size)
    mixed = has & (np.where(A, M, w_mm[:, None]) != w_mm[:, None]).any(1)
    if mixed.any():  # lanes may pass different masks (tiles of a warp), but a mask's lanes must agree
        ws = np.flatnonzero(mixed)
        Mw, Aw = M[ws], A[ws]
        named = ((Mw[:, :, None] >> np.arange(32, dtype=np.uint32)) & np.uint32(1)).astype(bool)
        clash = named & Aw[:, None, :] & Aw[:, :, None] & (Mw[:, :, None] != Mw[:, None, :])
        bad = clash.any(2)
        if bad.any():
            i, l_ = np.argwhere(bad)[0]
            j = int(np.argmax(clash[i, l_]))
            lane = int(ws[i]) * 32 + int(l_)
            msg = (f"lane {int(l_)} passes member mask {int(Mw[i, l_]):#010x} to {name}, but lane {j}, which "
                   f"that mask names, passes {int(Mw[i, j]):#010x}")
            _add(san, ("invalid-member-mask", "differ", info.pc), lane, info.pc, msg, int(bad.any(1).sum()))
    rec = san.awaited.get(info.pc)
    if rec is not None:  # lanes this op waited for, which left (exited) without executing it
        gone = rec & ~warp_bits(act) & np.where(has, FULL, np.uint32(0))
        rec[has] = 0
        if gone.any():
            ws = np.flatnonzero(gone)
            w = int(ws[0])
            _absent(san, info.pc, w * 32 + int(first[w]), int(w_mm[w]), int(gone[w]), name, ws.size)
    live_bits = warp_bits(san.machine.real & st.live_mask())
    missing = w_mm & live_bits & ~warp_bits(act)  # named, not exited, not executing (guarded off)
    missing = np.where(has, missing, np.uint32(0))
    if missing.any():
        ws = np.flatnonzero(missing)
        w = int(ws[0])
        lane = w * 32 + int(first[w])
        _absent(san, info.pc, lane, int(w_mm[w]), int(missing[w]), name, ws.size)


def check_warp_wait(san: Any, machine: Any, P: int, bad: np.ndarray, elsewhere: np.ndarray, mm: Any) -> None:
    """Lanes `bad` wait at warp-synchronous op P for named lanes that are elsewhere. Remember those lanes
    (unless they are leaving the kernel without rejoining the waiting lanes' code, which PTX allows since
    sm_70: only non-exited threads must take part): if they exit without executing P, the mask named lanes
    that never took part (checked when P finally runs, in `check_member_mask`)."""
    pcs = machine.pcs
    mm = np.broadcast_to(np.asarray(mm, np.uint32), bad.shape)
    W = bad.size // 32
    lead = bad.reshape(W, 32).argmax(1)
    wmask = mm.reshape(W, 32)[np.arange(W), lead]
    named = ((wmask[:, None] >> np.arange(32, dtype=np.uint32)) & np.uint32(1)).astype(bool).reshape(-1)
    away = elsewhere & named & (pcs != EXITED) & np.repeat(bad.reshape(W, 32).any(1), 32)
    if not away.any():
        return
    idx = np.flatnonzero(away)
    after = _straight_path(machine.ops, P + 1, through_sync=True)[0]
    exiting = np.fromiter((_leaves_without_rejoining(machine.ops, int(pcs[i]) & PC_MASK, after,
                                                     _guard_passes(machine, int(i))) for i in idx), bool, idx.size)
    away[idx[exiting]] = False
    if not away.any():
        return
    rec = san.awaited.get(P)
    if rec is None:
        rec = san.awaited[P] = np.zeros(W, np.uint32)
    rec |= warp_bits(away)


_PATH_LIMIT = 256  # instructions a straight-line walk looks ahead


def _guard_passes(machine: Any, lane: int) -> bool:
    """Whether the guard of the op at `lane`'s pc lets the lane through (True for an unguarded op)."""
    op = machine.ops[int(machine.pcs[lane]) & PC_MASK]
    if op.guard is None:
        return True
    slot, negated = op.guard
    v = machine.st.regs[slot]
    return bool(np.broadcast_to(v, (machine.st.N,))[lane]) != negated


def _straight_path(ops: Any, pc: int, first_passes: bool = False,
                   through_sync: bool = False) -> tuple[set[int], bool]:
    """(the pcs a thread runs from `pc` on while its path is certain, except an exit; whether it exits):
    unconditional branches are followed (and the first op's guard when `first_passes` says it lets the
    thread through); a conditional branch, call or return ends the walk, and so does a barrier or
    warp-synchronous op unless `through_sync` (the thread's future is not certain, or it meets others there)."""
    seen: set[int] = set()
    for _ in range(_PATH_LIMIT):
        if pc in seen or not 0 <= pc < len(ops):
            return seen, False
        op = ops[pc]
        if op.kind == EXIT:
            return seen, op.guard is None or (first_passes and not seen)
        plain = (NORMAL, BRA, NOP, BAR, WARPSYNC) if through_sync else (NORMAL, BRA, NOP)
        if op.kind not in plain or (op.kind == BRA and op.guard is not None):
            return seen, False
        seen.add(pc)
        pc = op.target if op.kind == BRA else pc + 1
    return seen, False


def _leaves_without_rejoining(ops: Any, pc: int, after: set[int], first_passes: bool) -> bool:
    """True when a thread at `pc` exits without meeting anyone and without running the code the waiting
    threads run after their warp-synchronous op (`after`): it left the warp (an early return), so PTX
    waits for it no longer. A thread that skipped the op and rejoins their code took no part in it."""
    path, exits = _straight_path(ops, pc, first_passes)
    return exits and not (path & after)


def _absent(san, pc, lane, mask, bits, name, count) -> None:
    msg = (f"member mask {mask:#010x} names lanes {_lanes_text(bits)}, which do not execute this "
           f"{name} (they are on another path); every non-exited lane in the mask must execute it")
    _add(san, ("invalid-member-mask", "absent", pc), lane, pc, msg, count)


def check_barrier_release(san: Any, machine: Any, bid: int, done: np.ndarray, rel: np.ndarray) -> None:
    """The threads a barrier releases: those of one warp must have waited at the same aligned barrier
    instruction (different warps may arrive from different instructions: docs/sanitizer-rulings.md)."""
    rl = np.flatnonzero(rel)
    if rl.size == 0:
        return
    pcs = machine.pcs
    bpc = ((pcs[rl] & PC_MASK) - 1).astype(np.int64)
    warp = rl // 32
    key = (warp.astype(np.int64) << 32) | bpc
    u, first_idx, counts = np.unique(key, return_index=True, return_counts=True)
    uw = u >> 32
    multi = np.flatnonzero(np.diff(uw) == 0)
    if multi.size:
        w = int(uw[multi[0]])
        mine = np.flatnonzero(uw == w)
        aligned = all(getattr(machine.ops[int(u[i] & 0xFFFFFFFF)].extra, "aligned", True) for i in mine)
        if aligned:
            few = mine[np.argmin(counts[mine])]
            lane = int(rl[first_idx[few]])
            at = int(u[few] & 0xFFFFFFFF)
            others = [machine.ops[int(u[i] & 0xFFFFFFFF)] for i in mine if i != few]
            where = ", ".join(f"line {o.line}" for o in others)
            msg = (f"{int(counts[few])} thread(s) of a warp wait at this barrier (id {bid}) while "
                   f"{int(counts[mine].sum() - counts[few])} thread(s) of the same warp wait at another barrier "
                   f"instruction ({where}); the threads of a warp must reach an aligned bar.sync at the same "
                   f"instruction")
            nblocks = np.unique(machine.slot[uw[multi] * 32]).size
            _add(san, ("barrier-divergence", "mixed", at), lane, at, msg, nblocks)
    check_exited_in_warp(san, machine, bid, rl, bpc)


def check_exited_in_warp(san: Any, machine: Any, bid: int, rl: np.ndarray, bpc: Any) -> None:
    """Released lanes whose warp also holds threads that exited without reaching this aligned barrier."""
    lpb = machine.lanes_per_block
    warps = np.unique(rl // 32)
    lanes = warps[:, None] * 32 + np.arange(32)
    real = machine.lane_tid[lanes % lpb] < machine.threads  # padding lanes past the block's threads
    exited = (machine.pcs[lanes] == EXITED) & real
    split = np.flatnonzero(exited.any(1))
    if split.size == 0:
        return
    w = int(warps[split[0]])
    lane = int(rl[np.flatnonzero(rl // 32 == w)[0]])
    at = int(bpc[np.flatnonzero(rl == lane)[0]])
    if not getattr(machine.ops[at].extra, "aligned", True):
        return
    gone = int(exited[split[0]].sum())
    waited = int(np.count_nonzero(rl // 32 == w))
    msg = (f"{waited} thread(s) of a warp wait at this aligned barrier (id {bid}) while {gone} thread(s) of the "
           f"same warp exited without reaching it; bar.sync must be executed by every thread of the warp "
           f"or none (the hardware may hang or release the barrier early)")
    nblocks = np.unique(machine.slot[warps[split] * 32]).size
    _add(san, ("barrier-divergence", "exited", at), lane, at, msg, nblocks)


def _add(san, site, lane: int, pc: int, message: str, count: int) -> None:
    if san.log.bump(site, int(count)):
        return
    kind = site[0]
    rep = san.report_at(kind, lane, pc, message=message, count=int(count))
    san.log.add(rep, site)
