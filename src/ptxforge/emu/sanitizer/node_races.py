"""Races between the concurrent launches of a `Node` (other GPUs, other streams), by the PTX memory model.

Each launch of a `Node(sanitize=True)` keeps its own `Sanitizer` for what happens inside it. `NodeRaces`
sees the global-memory accesses of all of them together (one instance per node, reset by every
`synchronize`): for each byte it keeps the last write and the last read, with the launch, GPU, block,
thread, instruction, node time and strength of the access. A conflicting pair from two launches (one a
write) is fine when
- both are strong (relaxed/acquire/release/volatile or atomic) with a scope that includes the other
  thread: `.sys` when the two run on different GPUs, at least `.gpu` on one GPU (a morally strong pair), or
- the later access's block is ordered after a release that the earlier access's block made after it:
  directly (it acquired, at such a scope, after that release) or through other blocks' release/acquire
  pairs (A releases, B acquires and releases, C acquires), each pair at a scope that holds both sides
  (st/atom/red .release or a fence release; ld/atom .acquire or a fence acquires).
Anything else is a race. When the pair would be ordered, or morally strong, at `.gpu` scope but the two
run on different GPUs, the report says it is a scope error. Blocks are the unit of release and acquire
(a bar.sync before the release or after the acquire carries the order to the block's other threads).

Launches of one stream are ordered (the later starts after the earlier ends), and so are launches of
different `synchronize` calls. A write-write pair is a race even when both store the same value.

The check is coarse where it must be cheap: an acquire observes every publication made before it at its
scope, whichever address it read, so a missing flag check can go unseen (no false alarm, a possible
miss), and it checks only the last write and last read of each byte (about 50 bytes of state per byte of
each 4 KiB page that a concurrent launch touched).
"""

from __future__ import annotations

import copy

import numpy as np

from ptxforge.emu import memory as M
from ptxforge.emu.op import NORMAL
from ptxforge.emu.sanitizer import bounds
from ptxforge.emu.sanitizer.report import SanitizerReport

SCOPES = {"cta": 0, "cluster": 1, "gpu": 2, "sys": 3}
STRONG = {"volatile", "relaxed", "acquire", "release", "acq_rel", "sc", "mmio"}
GPU, SYS = 2, 3
WEAK = -1
ALL = -1  # (launch, ALL): every block of a launch (stream order)
FOREVER = np.iinfo(np.int64).max
PAGE_BITS = 12  # shadow state is kept for the 4 KiB pages of the arena that launches touch


def access_facts(ins) -> tuple[int, int, int, bool]:
    """(strength, release, acquire, atomic) of an instruction: each a scope level 0-3 or WEAK (-1).

    Strength: the scope of a strong or atomic access (volatile counts as .sys, no scope as .gpu)."""
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


class _Launch:
    def __init__(self, lid, machine, sanitizer, gpu, label, facts, stream):
        self.id = lid
        self.stream = stream  # launches of one stream are ordered: the later starts after the earlier ends
        self.machine = machine
        self.sanitizer = sanitizer
        self.gpu = gpu
        self.label = label
        self.facts = facts
        self.pc = 0
        self.prior: list = []  # the earlier launches of its stream (it is ordered after all they did)
        self.base: dict | None = None  # what every block of it is ordered after from the start
        self.releases: dict = {}  # (block, level) -> list of node times (levels GPU and SYS)
        self.acquired: dict = {}  # (block, level) -> latest node time


class _Agent:
    """What one block of one launch is ordered after: (launch, block) -> the latest release time of that
    block whose accesses this one follows (through any chain of release/acquire pairs)."""

    def __init__(self):
        self.known: dict = {}
        self.version = 0  # bumped whenever `known` grows
        self.merged: dict = {}  # log key -> how far this agent has read that publication log
        self.published: dict = {}  # log key -> the version of `known` it last published there


class NodeRaces:
    """The node-wide race check (see the module docstring); `attach` each launch before it runs."""

    def __init__(self, memory: M.DeviceMemory):
        self.memory = memory
        self.launches: list[_Launch] = []
        self.t = 0
        self.agents: dict = {}  # (launch id, block) -> _Agent
        # publications, visible to acquires of a sufficient scope: ("sys",) for .sys releases, ("gpu", g)
        # for the releases of GPU g at .gpu or wider; entries (agent key, time), in time order
        self.logs: dict = {}
        self.page_slot: dict = {}  # arena page -> its index in the shadow arrays
        self._alloc(0)

    def _alloc(self, n: int) -> None:
        self.size = n
        self.w_launch = np.full(n, -1, np.int32)
        self.w_who = np.zeros(n, np.int64)  # block << 20 | thread
        self.w_time = np.zeros(n, np.int64)
        self.w_pc = np.zeros(n, np.int32)
        self.w_strength = np.full(n, WEAK, np.int8)
        self.r_launch = np.full(n, -1, np.int32)
        self.r_who = np.zeros(n, np.int64)
        self.r_time = np.zeros(n, np.int64)
        self.r_pc = np.zeros(n, np.int32)
        self.r_strength = np.full(n, WEAK, np.int8)

    def _grow(self, n: int) -> None:
        old = {k: getattr(self, k) for k in ("w_launch", "w_who", "w_time", "w_pc", "w_strength", "r_launch",
                                             "r_who", "r_time", "r_pc", "r_strength")}
        k = self.size
        self._alloc(max(n, 2 * k))
        for name, arr in old.items():
            getattr(self, name)[:k] = arr

    def reset(self) -> None:
        """A new `synchronize`: what ran before it is ordered by the host."""
        self.launches = []
        self.t = 0
        self.agents = {}
        self.logs = {}
        self.page_slot = {}
        self._alloc(0)

    # ------------------------------------------------------------------ hooks
    def attach(self, machine, sanitizer, gpu: int, label: str, stream=None) -> None:
        """Watch `machine`'s global accesses, fences, releases and acquires (its ops are wrapped)."""
        layout = machine.layout
        facts = [access_facts(p.ins) for p in layout.placed]
        launch = _Launch(len(self.launches), machine, sanitizer, gpu, label, facts, stream)
        if stream is not None:
            launch.prior = [x for x in self.launches if x.stream is stream]
        self.launches.append(launch)
        ops = []
        for pc, op in enumerate(machine.ops):
            if op.kind == NORMAL and op.fn is not None:
                new = copy.copy(op)
                new.fn = self._wrap(op.fn, launch, pc)
                ops.append(new)
            else:
                ops.append(op)
        machine.ops = ops
        machine.observers.append(lambda kind, space, addr, nbytes, lanes: self._access(
            launch, kind, space, addr, nbytes, lanes))

    def _wrap(self, fn, launch: _Launch, pc: int):
        _, release, acquire, _ = launch.facts[pc]

        def run(st, m):
            self.t += 1
            launch.pc = pc
            fn(st, m)
            if release != WEAK or acquire != WEAK:
                self._order(launch, st, m, pc, release, acquire)
        return run

    def _order(self, launch, st, m, pc, release, acquire) -> None:
        act = st.live_mask() if m is None else m
        op = launch.machine.ops[pc]
        if op.guard is not None:
            g = np.broadcast_to(np.asarray(st.regs[op.guard[0]], bool), act.shape)
            act = act & (~g if op.guard[1] else g)
        lanes = np.flatnonzero(act)
        if lanes.size == 0:
            return
        mach = launch.machine
        blocks = np.unique(mach.block_ids[lanes // mach.lanes_per_block]).tolist()
        self.t += 1
        for b in blocks:
            for level in (GPU, SYS):  # the per-block record, for telling scope errors apart
                if release >= level:
                    launch.releases.setdefault((b, level), []).append(self.t)
                if acquire >= level:
                    launch.acquired[(b, level)] = self.t
            key = (launch.id, b)
            agent = self.agents.get(key)
            if agent is None:
                agent = self.agents[key] = _Agent()
                agent.known.update(self._base(launch))
            if acquire >= GPU:
                self._merge(agent, key, ("gpu", launch.gpu))
            if acquire >= SYS:
                self._merge(agent, key, ("sys",))
            if release >= GPU:
                self._publish(agent, key, ("gpu", launch.gpu))
            if release >= SYS:
                self._publish(agent, key, ("sys",))

    def _base(self, launch: _Launch) -> dict:
        """Stream order: a launch starts after the earlier launches of its stream ended, so each of its
        blocks is ordered after every access of theirs and all they were ordered after."""
        if launch.base is None:
            base: dict = {}
            for p in launch.prior:
                for key, agent in self.agents.items():
                    if key[0] == p.id:
                        for who, t in agent.known.items():
                            if base.get(who, -1) < t:
                                base[who] = t
                base[(p.id, ALL)] = FOREVER
            launch.base = base
        return launch.base

    def _publish(self, agent: _Agent, key, log_key) -> None:
        """A release: the block's accesses so far, and all it is ordered after, become visible."""
        log = self.logs.setdefault(log_key, [])
        log.append((key, self.t))
        if agent.known and agent.published.get(log_key) != agent.version:
            log.extend(agent.known.items())
            agent.published[log_key] = agent.version

    def _merge(self, agent: _Agent, key, log_key) -> None:
        """An acquire observes every publication made before it (coarse: whatever address it read)."""
        log = self.logs.get(log_key)
        if not log:
            return
        known = agent.known
        grew = False
        for who, t in log[agent.merged.get(log_key, 0):]:
            if who != key and known.get(who, -1) < t:
                known[who] = t
                grew = True
        agent.merged[log_key] = len(log)
        if grew:
            agent.version += 1

    def _access(self, launch, kind, space, addr, nbytes, lanes) -> None:
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
        strength, _, _, atomic = launch.facts[launch.pc]
        write = kind == "store" or atomic
        B = (idx[:, None] + np.arange(nbytes)).reshape(-1)  # arena bytes
        S = self._slots(B)  # their shadow entries
        lane_of = np.repeat(L, nbytes)
        lpb = mach.lanes_per_block
        block = mach.block_ids[lane_of // lpb].astype(np.int64)
        thread = mach.lane_tid[lane_of % lpb].astype(np.int64)
        who = block << 20 | thread
        self._check(launch, B, S, who, strength, write, atomic, nbytes, "w")
        if write:
            self._check(launch, B, S, who, strength, write, atomic, nbytes, "r")
            pre = "w"
        else:
            pre = "r"
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
            order = self._ordered(o, pwho >> 20, ptime, launch, who[racy] >> 20)
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
        """Whether the pair would be fine within one GPU: a scope error rather than a missing order."""
        if prev_strength >= GPU and strength >= GPU:
            return True
        return bool(self._paired(o, pblock, ptime, launch, cblock, GPU)[0])

    def _ordered(self, o: _Launch, pblock, ptime, c: _Launch, cblock) -> np.ndarray:
        """Elementwise: the later block is ordered after a release of the earlier block that followed its
        access (directly or through other blocks' release/acquire pairs)."""
        out = np.zeros(pblock.shape, bool)
        for pb, cb in set(zip(pblock.tolist(), cblock.tolist(), strict=True)):
            agent = self.agents.get((c.id, cb))
            known = self._base(c) if agent is None else agent.known
            t = max(known.get((o.id, pb), -1), known.get((o.id, ALL), -1))
            sel = (pblock == pb) & (cblock == cb)
            out[sel] = ptime[sel] < t
        return out

    def _paired(self, o: _Launch, pblock, ptime, c: _Launch, cblock, level: int) -> np.ndarray:
        """Elementwise, ignoring which GPUs the two run on: a direct release/acquire pair at `level`."""
        out = np.zeros(pblock.shape, bool)
        for pb, cb in set(zip(pblock.tolist(), cblock.tolist(), strict=True)):
            rel = o.releases.get((pb, level))
            acq = c.acquired.get((cb, level))
            if not rel or acq is None:
                continue
            rel_a = np.asarray(rel, np.int64)
            sel = (pblock == pb) & (cblock == cb)
            k = np.searchsorted(rel_a, ptime[sel], side="right")
            first = np.where(k < rel_a.size, rel_a[np.minimum(k, rel_a.size - 1)], np.iinfo(np.int64).max)
            out[sel] = first < acq
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
