"""Races between the concurrent launches of a `Node` (other GPUs, other streams), by the PTX memory model.

Each launch of a `Node(sanitize=True)` keeps its own `Sanitizer` for what happens inside it. `NodeRaces`
sees the global-memory accesses of all of them together (one instance per node, reset by every
`synchronize`): for each byte it keeps the last write and the last read, with the launch, GPU, block,
thread, instruction, node time and strength of the access, and what the last write publishes. A
conflicting pair from two launches (one a write) is fine when
- both are strong (relaxed/acquire/release/volatile or atomic) with a scope that includes the other
  thread: `.sys` when the two run on different GPUs, at least `.gpu` on one GPU (a morally strong pair), or
- the later access's block is ordered after the earlier access's block by a chain of release patterns
  that synchronize with acquire patterns (A releases, B acquires and releases, C acquires).

Synchronizes-with, as the PTX ISA defines it. A release pattern on M is a release operation on M
(st/atom/red .release or .acq_rel), that followed by a strong write of M, or a fence (fence.acq_rel/.sc,
membar) followed by a strong write of M; an acquire pattern on M is an acquire operation on M (ld/atom
.acquire or .acq_rel), a strong read of M followed by an acquire operation on M, or a strong read of M
followed by a fence. A release pattern synchronizes with an acquire pattern when the acquire's read takes
its value from the release's write, or from an atomic read-modify-write later in the write's release
sequence (each RMW of M continues it; any other write of M ends it), and both patterns have a scope that
includes the other side (a pattern's scope is the narrower of its fence or release/acquire and its write
or read). So an acquire of an unrelated flag, or of a flag raised before the data was written, orders
nothing.

When the pair would be ordered, or morally strong, at `.gpu` scope but the two run on different GPUs,
the report says it is a scope error. Blocks are the unit of release (a bar.sync before the release carries
the order of the block's other threads' accesses), warps the unit of acquire: what a warp acquired orders
its own later accesses, and those of its block's other warps after the block's next barrier (any barrier
the block releases, named ones included). A warp that hands a flag it acquired to the others through
shared memory with no barrier (DeepEP's combine receiver) orders nothing for them.

Launches of one stream are ordered (the later starts after the earlier ends), and so are launches of
different `synchronize` calls. A write-write pair is a race even when both store the same value.

It checks only the last write and last read of each byte (about 54 bytes of state per byte of each
4 KiB page that a concurrent launch touched). What a write publishes is shared by all the bytes that
one instruction wrote, so the cost of a release is one record per block, not per byte.
"""

from __future__ import annotations

import copy
import itertools
from typing import Any

import numpy as np

from ptxforge.emu import memory as M
from ptxforge.emu.hooks import Check
from ptxforge.emu.op import NORMAL
from ptxforge.emu.sanitizer import bounds
from ptxforge.emu.sanitizer.report import SanitizerReport
from ptxforge.ptx.isa.effects import STRONG_ORDERS, effects

SCOPES = {"cta": 0, "cluster": 1, "gpu": 2, "sys": 3}
STRONG = STRONG_ORDERS  # the orders of a strong access (ptx/isa/effects.py)
GPU, SYS = 2, 3
WEAK = -1
NONE = -1  # w_sync of a byte whose last write publishes nothing
ALL = -1  # (launch, ALL): every block of a launch (stream order)
FOREVER = np.iinfo(np.int64).max
PAGE_BITS = 12  # shadow state is kept for the 4 KiB pages of the arena that launches touch
_SHADOW = ("w_launch", "w_who", "w_time", "w_pc", "w_strength", "w_sync", "r_launch", "r_who", "r_time", "r_pc",
           "r_strength")


def access_facts(ins: Any) -> tuple[int, int, int, bool]:
    """(strength, release, acquire, atomic) of an instruction: each a scope level 0-3 or WEAK (-1).

    Strength: the scope of a strong or atomic access (volatile counts as .sys, no scope as .gpu).
    A fence (fence.acq_rel/.sc, membar) has release and acquire at its level and no strength."""
    op = ins.opcode
    sx = set(ins.suffixes)
    scope = next((SCOPES[s] for s in ("sys", "gpu", "cluster", "cta") if s in sx), GPU)
    if op in ("membar", "fence"):
        level = {"cta": 0, "gl": GPU, "sys": SYS}.get(next((s for s in ("cta", "gl", "sys") if s in sx), ""), scope) \
            if op == "membar" else scope
        if op == "fence" and not sx & {"acq_rel", "sc"}:  # proxy fences and the like order nothing here
            return WEAK, WEAK, WEAK, False
        return WEAK, level, level, False
    atomic = op in ("atom", "red")
    if "volatile" in sx:
        strength = SYS
    elif atomic or sx & STRONG:
        strength = scope
    else:
        strength = WEAK
    release = scope if op in ("st", "atom", "red") and sx & {"release", "acq_rel"} else WEAK
    acquire = scope if op in ("ld", "atom") and sx & {"acquire", "acq_rel"} else WEAK
    return strength, release, acquire, atomic


class _Launch(Check):
    """One launch under the node's race check: the check (hooks.py) that wraps its ops and sees its accesses."""

    def __init__(self, races, lid, machine, sanitizer, gpu, label, facts, stream):
        self.races = races
        self.id = lid
        self.stream = stream  # launches of one stream are ordered: the later starts after the earlier ends
        self.machine = machine
        self.sanitizer = sanitizer
        self.gpu = gpu
        self.label = label
        self.facts = facts
        self.fence = [f[0] == WEAK and f[1] != WEAK for f in facts]  # pc -> a fence instruction
        # pc -> an mbarrier wait: a phase completing hands what its arriving warps acquired to the waiters,
        # taken (leniently) as a barrier of the block
        self.mbar_wait = [(e := effects(p.ins)) is not None and e.async_part == "mbarrier_wait"
                          for p in machine.layout.placed]
        self.pc = 0
        self.prior: list = []  # the earlier launches of its stream (it is ordered after all they did)
        self.base: dict | None = None  # what every block of it is ordered after from the start

    def instrument(self, layout, ops: list) -> list:
        out = []
        for pc, op in enumerate(ops):
            if op.kind == NORMAL and op.fn is not None:
                new = copy.copy(op)
                new.fn = self.races._wrap(op.fn, self, pc)
                out.append(new)
            else:
                out.append(op)
        return out

    def on_access(self, mem, space: str, addr, nbytes: int, lanes, write: bool) -> None:
        self.races._access(self, write, space, addr, nbytes, lanes)

    def on_barrier_all(self, machine) -> None:
        self.races._barrier(self, np.arange(machine.nslots))

    def on_release(self, machine, bid: int, done, rel) -> None:
        self.races._barrier(self, np.flatnonzero(done))

    def on_cluster_release(self, machine, slots) -> None:
        self.races._barrier(self, slots)


class _Pub:
    """What one release makes visible: the releasing block's accesses before `t` and all it was ordered
    after then (`known`, shared and never changed). An acquire that synchronizes with it takes all that."""

    __slots__ = ("uid", "gpu", "key", "t", "known")

    def __init__(self, uid: int, gpu: int, key, t: int, known: dict):
        self.uid, self.gpu, self.key, self.t, self.known = uid, gpu, key, t, known

    def items(self):
        yield from self.known.items()
        if self.key is not None:
            yield self.key, self.t


class _Agent:
    """One block of one launch: what it is ordered after, (launch, block) -> the latest release time of
    that block whose earlier accesses this one follows (through any chain of release/acquire pairs)."""

    def __init__(self, known: dict):
        self.known = dict(known)
        self.version = 0  # bumped whenever `known` grows
        self._frozen: tuple[int, dict] | None = None
        self.seen: set = set()  # uids of the publications already taken (spin loops read one many times)
        # what single warps acquired that the block's other warps follow only after its next barrier:
        # warp -> {who: time}, and the (warp, uid) publications each took
        self.warps: dict = {}
        self.warp_seen: set = set()
        self.narrow: dict = {}  # as `known`, from pairs that only a .gpu scope kept apart across GPUs
        self.narrow_seen: set = set()
        self.fence: dict = {}  # level (GPU, SYS) -> the _Pub of its latest fence of that level
        # strong reads awaiting a fence (or an acquire of the same bytes): sync-set index -> [read level,
        # lowest and highest shadow slot read]
        self.pending: dict = {}

    def frozen(self, warps=()) -> dict:
        """A copy of `known` (with what the warps `warps` acquired) that later acquires leave alone (shared
        by the releases made meanwhile)."""
        extra = [self.warps[w] for w in warps if self.warps.get(w)]
        if extra:
            out = dict(self.known)
            for d in extra:
                for who, t in d.items():
                    if out.get(who, -1) < t:
                        out[who] = t
            return out
        if self._frozen is None or self._frozen[0] != self.version:
            self._frozen = (self.version, dict(self.known))
        return self._frozen[1]

    def merge_warps(self) -> None:
        """A barrier of the block: every warp now follows what any of them acquired."""
        if not self.warps:
            return
        for d in self.warps.values():
            for who, t in d.items():
                if self.known.get(who, -1) < t:
                    self.known[who] = t
        self.warps.clear()
        self.version += 1


class NodeRaces:
    """The node-wide race check (see the module docstring); `attach` each launch before it runs."""

    def __init__(self, memory: M.DeviceMemory):
        self.memory = memory
        self.reset()

    def _alloc(self, n: int) -> None:
        self.size = n
        self.w_launch = np.full(n, -1, np.int32)
        self.w_who = np.zeros(n, np.int64)  # block << 20 | thread
        self.w_time = np.zeros(n, np.int64)
        self.w_pc = np.zeros(n, np.int32)
        self.w_strength = np.full(n, WEAK, np.int8)
        self.w_sync = np.full(n, NONE, np.int32)  # what the last write publishes: an index into `sets`
        self.r_launch = np.full(n, -1, np.int32)
        self.r_who = np.zeros(n, np.int64)
        self.r_time = np.zeros(n, np.int64)
        self.r_pc = np.zeros(n, np.int32)
        self.r_strength = np.full(n, WEAK, np.int8)

    def _grow(self, n: int) -> None:
        old = {k: getattr(self, k) for k in _SHADOW}
        k = self.size
        self._alloc(max(n, 2 * k))
        for name, arr in old.items():
            getattr(self, name)[:k] = arr

    def reset(self) -> None:
        """A new `synchronize`: what ran before it is ordered by the host."""
        self.launches: list[_Launch] = []
        self.t = 0
        self.agents: dict = {}  # (launch id, block) -> _Agent
        self.page_slot: dict = {}  # arena page -> its index in the shadow arrays
        # sync sets: what a write publishes, ((pub, level), ...) with one pub per (GPU, level); interned
        self.sets: list[tuple] = []
        self.set_index: dict = {}
        self._uids = itertools.count()
        self._alloc(0)

    # ------------------------------------------------------------------ hooks
    def attach(self, machine: Any, sanitizer: Any, gpu: int, label: str, stream: Any = None) -> None:
        """Watch `machine`'s global accesses, fences, releases and acquires (its ops are wrapped)."""
        layout = machine.layout
        facts = [access_facts(p.ins) for p in layout.placed]
        launch = _Launch(self, len(self.launches), machine, sanitizer, gpu, label, facts, stream)
        if stream is not None:
            launch.prior = [x for x in self.launches if x.stream is stream]
        self.launches.append(launch)
        machine.add_check(launch)

    def _wrap(self, fn, launch: _Launch, pc: int):
        level = launch.facts[pc][1] if launch.fence[pc] else WEAK
        if launch.mbar_wait[pc]:
            def run_wait(st, m):
                self.t += 1
                launch.pc = pc
                fn(st, m)
                act = st.live_mask() if m is None else m
                lanes = np.flatnonzero(act)
                if lanes.size:
                    mach = launch.machine
                    self._barrier(launch, np.unique(lanes // mach.lanes_per_block))
            return run_wait

        def run(st, m):
            self.t += 1
            launch.pc = pc
            fn(st, m)

        def run_fence(st, m):
            run(st, m)
            self._fence(launch, st, m, pc, level)
        return run_fence if level >= GPU else run  # a .cta fence orders nothing between launches

    def _fence(self, launch, st, m, pc, level) -> None:
        """fence.acq_rel/.sc or membar: the strong reads before it acquire, the strong writes after it release."""
        act = st.live_mask() if m is None else m
        op = launch.machine.ops[pc]
        if op.guard is not None:
            g = np.broadcast_to(np.asarray(st.regs[op.guard[0]], bool), act.shape)
            act = act & (~g if op.guard[1] else g)
        lanes = np.flatnonzero(act)
        if lanes.size == 0:
            return
        mach = launch.machine
        lpb = mach.lanes_per_block
        blocks = mach.block_ids[lanes // lpb]
        warps = mach.lane_tid[lanes % lpb] >> 5
        for b in np.unique(blocks).tolist():
            ws = np.unique(warps[blocks == b]).tolist()
            agent = self._agent(launch, b)
            if agent.pending:
                self._take_pending(agent, launch.gpu, level, warps=ws)
            self._set_fence(agent, self._pub(launch, b, agent, ws), level)

    # ------------------------------------------------------------------ release and acquire
    def _agent(self, launch: _Launch, b: int) -> _Agent:
        key = (launch.id, b)
        agent = self.agents.get(key)
        if agent is None:
            agent = self.agents[key] = _Agent(self._base(launch))
        return agent

    def _base(self, launch: _Launch) -> dict:
        """Stream order: a launch starts after the earlier launches of its stream ended, so each of its
        blocks is ordered after every access of theirs and all they were ordered after."""
        if launch.base is None:
            base: dict = {}
            for p in launch.prior:
                for key, agent in self.agents.items():
                    if key[0] == p.id:
                        for who, t in agent.frozen(tuple(agent.warps)).items():
                            if base.get(who, -1) < t:
                                base[who] = t
                base[(p.id, ALL)] = FOREVER
            launch.base = base
        return launch.base

    def _pub(self, launch: _Launch, b: int, agent: _Agent, warps=()) -> _Pub:
        return _Pub(next(self._uids), launch.gpu, (launch.id, b), self.t, agent.frozen(warps))

    def _barrier(self, launch: _Launch, slots) -> None:
        """Blocks of `launch` in wave slots `slots` released a barrier (or waited on an mbarrier): their
        warps share what each acquired."""
        ids = launch.machine.block_ids[np.asarray(slots, np.int64)]
        for b in np.unique(ids).tolist():
            agent = self.agents.get((launch.id, int(b)))
            if agent is not None:
                agent.merge_warps()

    @staticmethod
    def _set_fence(agent: _Agent, pub: _Pub, level: int) -> None:
        """A fence: later strong writes of the block publish `pub` at `level` (or at their own strength
        when narrower); it supersedes the block's earlier fences of a level up to its own."""
        for lv in [lv for lv in agent.fence if lv <= level]:
            del agent.fence[lv]
        agent.fence[level] = pub

    def _sync(self, agent: _Agent, pub: _Pub, rel_level: int, acq_level: int, gpu: int, warps=()) -> None:
        """An acquire pattern at `acq_level` on `gpu` by the warps `warps` read from `pub`'s release pattern
        at `rel_level` (no warps: the whole block, as stream order)."""
        need = SYS if pub.gpu != gpu else GPU
        if rel_level >= need and acq_level >= need:
            if not warps:
                if pub.uid in agent.seen:
                    return
                agent.seen.add(pub.uid)
                known, grew = agent.known, False
                for who, t in pub.items():
                    if known.get(who, -1) < t:
                        known[who] = t
                        grew = True
                if grew:
                    agent.version += 1
                return
            for w in warps:
                if (w, pub.uid) in agent.warp_seen or pub.uid in agent.seen:
                    continue
                agent.warp_seen.add((w, pub.uid))
                known = agent.warps.setdefault(w, {})
                for who, t in pub.items():
                    if known.get(who, -1) < t and agent.known.get(who, -1) < t:
                        known[who] = t
        elif rel_level >= GPU and acq_level >= GPU and pub.uid not in agent.narrow_seen:
            agent.narrow_seen.add(pub.uid)  # would synchronize on one GPU: remembered for the scope error
            for who, t in pub.items():
                if agent.narrow.get(who, -1) < t:
                    agent.narrow[who] = t

    def _take_pending(self, agent: _Agent, gpu: int, level: int, S=None, warps=()) -> None:
        """A fence at `level` by the warps `warps` (or their acquire operation of the shadow slots `S`): their
        strong reads before it (of those slots) complete acquire patterns."""
        for key, (read_level, lo, hi) in list(agent.pending.items()):
            idx, w = key
            if w not in warps or (S is not None and not ((S >= lo) & (S <= hi)).any()):
                continue
            for pub, rel_level in self.sets[idx]:
                self._sync(agent, pub, rel_level, min(read_level, level), gpu, (w,))
            if read_level <= level:
                del agent.pending[key]

    def _combine(self, old: int, pairs) -> int:
        """The sync set of a write that publishes `pairs` and continues the release sequence `old`."""
        if not pairs:
            return old
        items: dict = {}
        if old != NONE:
            for pub, lv in self.sets[old]:
                items[(pub.gpu, lv)] = pub
        for pub, lv in pairs:
            prev = items.get((pub.gpu, lv))
            items[(pub.gpu, lv)] = pub if prev is None or prev is pub else self._union(prev, pub)
        sig = tuple(sorted((k[1], p.uid) for k, p in items.items()))
        idx = self.set_index.get(sig)
        if idx is None:
            idx = self.set_index[sig] = len(self.sets)
            self.sets.append(tuple((p, k[1]) for k, p in items.items()))
        return idx

    def _union(self, a: _Pub, b: _Pub) -> _Pub:
        """Two releases of one GPU at one level in one release sequence: reading it takes both."""
        who = dict(a.known)
        for src in (a.items(), b.items()):
            for k, t in src:
                if who.get(k, -1) < t:
                    who[k] = t
        return _Pub(next(self._uids), a.gpu, None, 0, who)

    def _read_sync(self, launch: _Launch, S, block, warp, strength: int, acquire: int) -> None:
        """A strong read: with .acquire it synchronizes with what the bytes' last writes publish (and
        completes the block's earlier strong reads of them); without, it waits in `pending` for a fence."""
        ws = self.w_sync[S]
        has = ws != NONE
        any_has = bool(has.any())
        if acquire == WEAK and not any_has:
            return
        if block.size == 0:
            return
        blocks = [int(block[0])] if (block == block[0]).all() else np.unique(block).tolist()
        one = len(blocks) == 1
        for b in blocks:
            inb = None if one else block == b
            sel = has if one else has & inb
            idxs = np.unique(ws[sel]).tolist() if any_has else []
            wb = warp if one else warp[inb]
            warps = [int(wb[0])] if (wb == wb[0]).all() else np.unique(wb).tolist()
            if acquire == WEAK:
                if idxs:
                    pend = self._agent(launch, b).pending
                    for i in idxs:
                        for w in warps:
                            m = sel & (ws == i) & (warp == w)
                            if not m.any():
                                continue
                            Si = S[m]
                            lo, hi = int(Si.min()), int(Si.max())
                            old = pend.get((i, w))
                            pend[(i, w)] = [strength, lo, hi] if old is None else \
                                [max(old[0], strength), min(old[1], lo), max(old[2], hi)]
                continue
            agent = self._agent(launch, b)
            if agent.pending:
                self._take_pending(agent, launch.gpu, acquire, S if one else S[inb], warps)
            for i in idxs:
                for w in warps:
                    if not (sel & (ws == i) & (warp == w)).any():
                        continue
                    for pub, rel_level in self.sets[i]:
                        self._sync(agent, pub, rel_level, acquire, launch.gpu, (w,))

    def _write_sync(self, launch: _Launch, S, block, warp, strength: int, release: int, atomic: bool) -> None:
        """What a strong write publishes: its own release, or the block's fences before it, or (a strong
        write after the block's own release of those bytes) that release; an atomic also continues the
        release sequence of the value it replaced. Any other write ends it."""
        if block.size == 0:
            return
        blocks = [int(block[0])] if (block == block[0]).all() else np.unique(block).tolist()
        one = len(blocks) == 1
        for b in blocks:
            Sb = S if one else S[block == b]
            pairs: list = []
            agent: _Agent | None
            if release >= GPU:
                agent = self._agent(launch, b)
                wb = warp if one else warp[block == b]
                pub = self._pub(launch, b, agent, np.unique(wb).tolist())
                pairs = [(pub, release)]
            else:
                agent = self.agents.get((launch.id, b))
                if agent is not None and agent.fence:
                    best: dict = {}
                    for lv, pub in agent.fence.items():
                        lv = min(lv, strength)
                        if lv >= GPU and (lv not in best or best[lv].uid < pub.uid):
                            best[lv] = pub
                    pairs = [(pub, lv) for lv, pub in best.items()]
            if not atomic and release < GPU:  # a release operation on M, then a strong write of M
                key = (launch.id, b)
                mine = (self.w_launch[Sb] == launch.id) & (self.w_who[Sb] >> 20 == b) & (self.w_sync[Sb] != NONE)
                if mine.any():
                    for i in np.unique(self.w_sync[Sb][mine]).tolist():
                        pairs += [(pub, min(lv, strength)) for pub, lv in self.sets[i]
                                  if pub.key == key and min(lv, strength) >= GPU]
            if atomic:
                old = self.w_sync[Sb]
                if pairs or (old != NONE).any():
                    u, inv = np.unique(old, return_inverse=True)
                    new = np.asarray([self._combine(int(i), pairs) for i in u.tolist()], np.int32)
                    self.w_sync[Sb] = new[inv]
            else:
                self.w_sync[Sb] = self._combine(NONE, pairs)


    def _access(self, launch, stored, space, addr, nbytes, lanes) -> None:
        if space not in ("global", "generic", "const"):
            return
        mach = launch.machine
        a = np.asarray(addr, np.uint64).reshape(-1)
        L = np.arange(mach.st.N, dtype=np.int64) if lanes is None else np.asarray(lanes, np.int64).reshape(-1)
        if a.size == 1 and L.size != 1:
            a = np.broadcast_to(a, L.shape)
        if a.size != L.size or a.size == 0:
            return
        idx = a.astype(np.int64) - M.GLOBAL_BASE
        ok = (a >> np.uint64(M.WINDOW_BITS) == np.uint64(M.GLOBAL_BASE >> M.WINDOW_BITS)) & \
            (idx >= 0) & (idx + nbytes <= self.memory.arena.size)
        if not ok.all():
            idx, L = idx[ok], L[ok]
            if idx.size == 0:
                return
        strength, release, acquire, atomic = launch.facts[launch.pc]
        write = stored or atomic
        B = (idx[:, None] + np.arange(nbytes)).reshape(-1)  # arena bytes
        S = self._slots(B)  # their shadow entries
        lane_of = np.repeat(L, nbytes)
        lpb = mach.lanes_per_block
        block = mach.block_ids[lane_of // lpb].astype(np.int64)
        thread = mach.lane_tid[lane_of % lpb].astype(np.int64)
        warp = thread >> 5
        who = block << 20 | thread
        self._check(launch, B, S, who, strength, write, atomic, nbytes, "w")
        if write:
            self._check(launch, B, S, who, strength, write, atomic, nbytes, "r")
            pre = "w"
        else:
            pre = "r"
        if strength != WEAK:  # atomics read first: an acquiring RMW takes what the value it replaces published
            if not write or atomic:
                self._read_sync(launch, S, block, warp, strength, acquire)
            if write:
                self._write_sync(launch, S, block, warp, strength, release, atomic)
        elif write:
            self.w_sync[S] = NONE  # a weak write publishes nothing and ends any release sequence
        getattr(self, f"{pre}_launch")[S] = launch.id
        getattr(self, f"{pre}_who")[S] = who
        getattr(self, f"{pre}_time")[S] = self.t
        getattr(self, f"{pre}_pc")[S] = launch.pc
        getattr(self, f"{pre}_strength")[S] = strength

    def _slots(self, B) -> np.ndarray:
        """Shadow indices of arena bytes: PAGE-byte pages get shadow space when first touched."""
        pages = B >> PAGE_BITS
        uniq, inv = np.unique(pages, return_inverse=True)
        slots = np.empty(uniq.size, np.int64)
        for i, pg in enumerate(uniq.tolist()):
            k = self.page_slot.get(pg)
            if k is None:
                k = self.page_slot[pg] = len(self.page_slot)
                if (k + 1) << PAGE_BITS > self.size:
                    self._grow((k + 1) << PAGE_BITS)
            slots[i] = k
        return (slots[inv] << PAGE_BITS) | (B & ((1 << PAGE_BITS) - 1))

    # ------------------------------------------------------------------ the rule
    def _check(self, launch, B, S, who, strength, write, atomic, nbytes, prev: str) -> None:
        pl = getattr(self, f"{prev}_launch")[S]
        other = (pl >= 0) & (pl != launch.id)
        if not other.any():
            return
        for lid in np.unique(pl[other]).tolist():
            o = self.launches[lid]
            if o.stream is not None and o.stream is launch.stream:
                continue  # stream order: o ended before this launch began
            sel = np.flatnonzero(pl == lid)
            need = SYS if o.gpu != launch.gpu else GPU
            ps = getattr(self, f"{prev}_strength")[S[sel]]
            strong = (ps >= need) & (strength >= need)
            racy = sel[~strong]
            if racy.size == 0:
                continue
            pwho = getattr(self, f"{prev}_who")[S[racy]]
            ptime = getattr(self, f"{prev}_time")[S[racy]]
            order = self._ordered(o, pwho >> 20, ptime, launch, who[racy] >> 20, (who[racy] & 0xFFFFF) >> 5)
            bad = racy[~order]
            if bad.size == 0:
                continue
            j = int(bad[0])
            scope_err = need == SYS and self._gpu_scope_would_do(o, launch, strength, ps[sel == j][0],
                                                                 pwho[racy == j] >> 20, ptime[racy == j],
                                                                 who[j:j + 1] >> 20)
            count = int(np.unique(bad // nbytes).size)  # accesses (lanes), not bytes
            self._report(launch, o, int(B[j]), int(S[j]), int(who[j]), prev, count, write, atomic, nbytes,
                         scope_err, need)

    def _gpu_scope_would_do(self, o, launch, strength, prev_strength, pblock, ptime, cblock) -> bool:
        """Whether the pair would be fine within one GPU: a scope error rather than a missing order (both
        strong at .gpu, or the later block read a flag the earlier one raised after its access, at .gpu)."""
        if prev_strength >= GPU and strength >= GPU:
            return True
        agent = self.agents.get((launch.id, int(cblock[0])))
        return agent is not None and int(ptime[0]) < agent.narrow.get((o.id, int(pblock[0])), -1)

    def _ordered(self, o: _Launch, pblock, ptime, c: _Launch, cblock, cwarp) -> np.ndarray:
        """Elementwise: the later access's warp is ordered after a release of the earlier block that followed
        its access (directly or through other blocks' release/acquire pairs)."""
        out = np.zeros(pblock.shape, bool)
        for pb, cb, cw in set(zip(pblock.tolist(), cblock.tolist(), cwarp.tolist(), strict=True)):
            agent = self.agents.get((c.id, cb))
            known = self._base(c) if agent is None else agent.known
            t = max(known.get((o.id, pb), -1), known.get((o.id, ALL), -1))
            if agent is not None and agent.warps.get(cw):
                mine = agent.warps[cw]
                t = max(t, mine.get((o.id, pb), -1), mine.get((o.id, ALL), -1))
            sel = (pblock == pb) & (cblock == cb) & (cwarp == cw)
            out[sel] = ptime[sel] < t
        return out

    # ------------------------------------------------------------------ reports
    def _report(self, launch, o, byte, slot, who, prev, count, write, atomic, nbytes, scope_err, need) -> None:
        pc = launch.pc
        opc = int(getattr(self, f"{prev}_pc")[slot])
        other_access = "write" if prev == "w" else "read"
        if o.facts[opc][3]:
            other_access = "atomic"
        access = "atomic" if atomic else ("write" if write else "read")
        log = launch.sanitizer.log
        site = ("node-race", access, launch.id, pc, o.id, opc, other_access)
        if log.bump(site, count):
            return
        m, om = launch.machine, o.machine
        op, oop = m.ops[pc], om.ops[opc]
        pwho = int(getattr(self, f"{prev}_who")[slot])
        addr = M.GLOBAL_BASE + byte
        src = launch.sanitizer.sources.source(pc) if launch.sanitizer.sources else None
        osrc = o.sanitizer.sources.source(opc) if o.sanitizer.sources else None
        rep = SanitizerReport(kind="race", message="", thread=_tid(m, who & 0xFFFFF), block=_cta(m, who >> 20),
                              ptx_line=op.line, ptx_file=op.file, instruction=op.text, source=src, address=addr,
                              size=nbytes, space="global", access=access, count=count, gpu=launch.gpu)
        hit = bounds.nearest_allocation(m.device, addr)
        if hit is not None:
            rep.allocation, base, rep.allocation_size = hit
            rep.offset = addr - base
        rep.other = {"race": f"{other_access}-{access}", "access": other_access, "thread": _tid(om, pwho & 0xFFFFF),
                     "block": _cta(om, pwho >> 20), "ptx_line": oop.line, "ptx_file": oop.file,
                     "instruction": oop.text, "source": osrc, "gpu": o.gpu, "launch": o.label}
        where = (f"GPU {o.gpu} and GPU {launch.gpu}" if o.gpu != launch.gpu else
                 f"two concurrent launches on GPU {launch.gpu}")
        if scope_err:
            rep.other["scope"] = ".sys"  # the scope both sides need (the headline says the scope is too narrow)
            rep.message = (f"scope error: {o.label} and {launch.label} run on {where}; their release/acquire or "
                           f"strong accesses are .gpu scope, which orders only threads of one GPU: use .sys")
        else:
            scope = ".sys" if need == SYS else ".gpu (or .sys)"
            rep.message = (f"the accesses come from {where} ({o.label}; {launch.label}) and no release/acquire "
                           f"pair at {scope} scope orders them (a weak store or load is not a flag)")
        log.add(rep, site)


def _tid(m, t: int):
    bx, by, _ = m.block
    return (t % bx, (t // bx) % by, t // (bx * by))


def _cta(m, b: int):
    gx, gy, _ = m.grid
    return (b % gx, (b // gx) % gy, b // (gx * gy))
