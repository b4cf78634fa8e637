# mypy: disable-error-code="valid-type"
# (kernel parameters are annotated with PTX types, `u32` and `ptr(f32)`: DSL values, not Python types; mypy
# takes `ranks: u32` for an unknown type, which an operator refuses on its left: those lines ignore [operator])
"""Intranode expert-parallel communication kernels (notify, dispatch, combine) in DeepEP V1's structure.

Each rank owns one communication buffer in its GPU's memory, which every peer reaches through a plain
pointer (peer memory on an emulated node, an IPC mapping across processes). Its layout (`CommLayout`):

    barrier   u32 counter the notify step's ranks add to (never reset: each call waits for R more), then at
              ERROR_OFF the timeout record (TIMEOUT_WORDS u32) a wait that timed out leaves
    notify    R slots, slot s written by rank s: its tokens per rank [R], per expert [E], and its
              channel prefix counts towards this rank [C]
    counters  (head, tail) u32 per (channel, source rank): tail is written by the sender (release, .sys),
              head by this rank's receiver once it has consumed slots (release, .sys)
    rings     per (channel, source rank) a ring of `ring` slots of `slot_bytes`

Dispatch and combine run `num_sms` blocks: block 2c sends and block 2c+1 receives for channel c, which owns
the contiguous tokens [c * per_channel, (c + 1) * per_channel). Warp w of a block serves peer rank w (one
warp per rank), so the block has 32 * R threads. A sender warp waits for room for a chunk in the peer's
ring (acquiring head), writes up to `chunk` tokens, then publishes tail with `st.release.sys`; a receiver
warp acquires tail, copies the slots out and releases head. Inputs that no one writes while the kernel runs
(x, scales, top-k, is_token_in_rank) are read with `ld.global.nc.L1::no_allocate.L2::256B`, as DeepEP does;
ring slots other GPUs write are read with plain loads after the acquire (the non-coherent path could serve
stale lines there).

Received rows land at rank_prefix[src - 1][me] + channel offset + position: ordered by source rank, then
source token, as `ptxforge.ep`'s torch backend orders them. Combine sums each token's copies in f32 in rank
order (then the biases) and writes BF16, as the torch backend does, so both are bit-identical.

Every wait is bounded: a wait whose first poll fails reads %globaltimer, and on each further failed poll
compares the time waited with the kernel's `timeout_ns`; past it, the first waiting thread of the rank
claims the record at ERROR_OFF of the rank's own buffer (atom.cas), writes which kernel, role, channel and
peer waited and the counter values it saw, prints it with vprintf (`TIMEOUT_FORMATS`, passed in the `formats`
argument; the record is the argument block) and traps (the others exit). The host reads the record after the
trap where the memory survives it (`ptxforge.ep.intranode.CommRank.timeout_error`; on the emulator). A wait
that succeeds at its first poll reads no clock.

`BUG` plants a defect: "early_tail" publishes tail before the payload is written, "gpu_scope" releases tail
at .gpu scope only (both for the sanitizer tests), "no_tail" never publishes tail (a peer that stops: the
receivers' waits time out).
"""

from __future__ import annotations

import functools
from contextlib import contextmanager
from dataclasses import dataclass
from typing import TYPE_CHECKING

from ptxforge.dsl import (
    add,
    atom_cas,
    bf16,
    bra,
    ctaid,
    cvt,
    else_,
    f32,
    guard,
    if_,
    kernel,
    ld,
    mad,
    min_,
    mul_wide,
    nctaid,
    new_label,
    pack,
    place_label,
    ptr,
    range_,
    raw,
    red,
    reg,
    ret,
    s32,
    s64,
    selp,
    shfl_idx,
    smid,
    st,
    syncthreads,
    tid,
    trap,
    u8,
    u16,
    u32,
    u64,
    unpack,
    vprintf,
    while_,
)
from ptxforge.dsl.memory import Pointer
from ptxforge.dsl.types import dtype
from ptxforge.dsl.values import new_reg

if TYPE_CHECKING:
    from collections.abc import Callable, Iterator, Sequence
    from typing import TypeAlias, TypedDict

    from ptxforge.dsl.types import DTypeLike
    from ptxforge.dsl.values import Index, Pred, Reg, Value

    class LoadHints(TypedDict, total=False):
        """ld's keywords for the read-only path."""

        nc: bool
        L1: str
        L2: str

NC: LoadHints = dict(nc=True, L1="no_allocate", L2="256B")  # DeepEP's read-only path for inputs
BARRIER_BYTES = 64
NOTIFY_THREADS = 128
ERROR_OFF = 16  # the timeout record, inside the barrier bytes
KERNELS = ("notify", "dispatch", "combine")  # record word 0: 1 + the kernel's index
ROLES = ("barrier", "sender", "receiver")    # record word 1
# the rest of the record: the arguments of the role's format, in order (u32 each, as printf packs them)
TIMEOUT_ARGS = {"barrier": ("rank", "seen", "target", "block", "thread"),
                "sender": ("rank", "channel", "peer", "seen", "target", "block", "thread"),
                "receiver": ("rank", "channel", "peer", "seen", "target", "block", "thread")}
TIMEOUT_WORDS = 2 + max(len(a) for a in TIMEOUT_ARGS.values())
TIMEOUT_FORMATS = {
    ("notify", "barrier"): "ptxforge.ep: rank %u's notify kernel timed out at the barrier: %u of %u arrivals "
                           "(a rank did not reach it) (block %u, thread %u)\n",
    **{(k, "sender"): f"ptxforge.ep: rank %u's {k} kernel timed out: the sender of channel %u waited for room in "
                      f"rank %u's ring: head %u released, head %u needed (block %u, thread %u)\n"
       for k in ("dispatch", "combine")},
    **{(k, "receiver"): f"ptxforge.ep: rank %u's {k} kernel timed out: the receiver of channel %u waited for rank "
                        f"%u's sender: tail %u published, tail %u needed (block %u, thread %u)\n"
       for k in ("dispatch", "combine")},
}


def format_table(formats: dict[tuple[str, str], str]) -> tuple[bytes, dict[tuple[str, str], int]]:
    """`formats` as one NUL-separated byte string (the kernels' `formats` argument) and their offsets."""
    data, offsets = b"", {}
    for key, text in formats.items():
        offsets[key] = len(data)
        data += text.encode() + b"\0"
    return data, offsets


FORMAT_BYTES, FORMAT_OFFSETS = format_table(TIMEOUT_FORMATS)
DEFAULT_TIMEOUT_S = 100.0  # DeepEP bounds its waits at 200G cycles, about 100 s
# optional arrays (a 1-element placeholder when absent) are passed without the element-type check
if TYPE_CHECKING:  # to mypy, a pointer parameter is the Pointer the kernel's body receives
    ANY_U32: TypeAlias = Pointer
    ANY_S64: TypeAlias = Pointer
    ANY_F32: TypeAlias = Pointer
    ANY_BF16: TypeAlias = Pointer
else:
    ANY_U32, ANY_S64, ANY_F32, ANY_BF16 = (ptr(t, typed=False) for t in (u32, s64, f32, bf16))


def _align(n: int, a: int = 16) -> int:
    return -(-n // a) * a


@dataclass(frozen=True)
class CommLayout:
    """Byte offsets of one rank's communication buffer (the same on every rank)."""

    ranks: int
    experts: int
    channels: int
    ring: int          # slots per (channel, source rank) ring
    slot_bytes: int    # bytes per slot

    @property
    def notify_words(self) -> int:
        return self.ranks + self.experts + self.channels

    @property
    def notify_off(self) -> int:
        return BARRIER_BYTES

    @property
    def counters_off(self) -> int:
        return _align(self.notify_off + 4 * self.ranks * self.notify_words, 128)

    @property
    def counters_bytes(self) -> int:
        return 8 * self.channels * self.ranks

    @property
    def ring_off(self) -> int:
        return _align(self.counters_off + self.counters_bytes, 128)

    @property
    def nbytes(self) -> int:
        return self.ring_off + self.channels * self.ranks * self.ring * self.slot_bytes


@dataclass(frozen=True)
class DispatchSlot:
    """Where each field of a token sits in a dispatch ring slot."""

    x_bytes: int
    scale_words: int
    topk: int
    weights: bool

    @property
    def scales_off(self) -> int:
        return _align(self.x_bytes)

    @property
    def idx_off(self) -> int:
        return _align(self.scales_off + 4 * self.scale_words, 8)

    @property
    def w_off(self) -> int:
        return self.idx_off + 8 * self.topk

    @property
    def src_off(self) -> int:
        return self.w_off + (4 * self.topk if self.weights else 0)

    @property
    def nbytes(self) -> int:
        return _align(self.src_off + 4)


def combine_slot_bytes(hidden: int, topk: int) -> int:
    return _align(_align(2 * hidden) + 4 * topk)


def copy_unit(nbytes: int) -> int:
    """The widest copy (16, 4, 2 or 1 bytes) that divides a row of `nbytes`."""
    return next(u for u in (16, 4, 2, 1) if nbytes % u == 0)


# --------------------------------------------------------------------------- helpers (emit PTX)

def _gptr(addr: Reg, elem: DTypeLike = u8) -> Pointer:
    """A global pointer from a u64 address register."""
    return Pointer(dtype(elem), "global", addr, 0, True)


def _copy_row(dst: Pointer, src: Pointer, nbytes: Index, lane: Reg, unit: int, nc: bool) -> None:
    """Copy `nbytes` (a register, a multiple of `unit`) from src to dst; the 32 lanes of the warp stride."""
    t = {16: u32, 4: u32, 2: u16, 1: u8}[unit]
    for i in range_(lane * unit, nbytes, 32 * unit):
        s, d = src[i].cast(t), dst[i].cast(t)
        v = ld(s, v=4, **NC) if unit == 16 and nc else ld(s, v=4) if unit == 16 else ld(s, **NC) if nc else ld(s)
        st(d, v)


def _syncwarp() -> None:
    raw("bar.warp.sync -1;")


def _prev(arr: Pointer, index: Index, cond: Pred) -> Reg:
    """arr[index] where cond holds, else 0 (s32)."""
    v = reg.s32(0)
    with if_(cond):
        ld(arr[index], out=v)
    return v


@dataclass
class _Bound:
    """What a kernel's waits need to time out: its bound, where its rank's record is, which kernel it is."""

    timeout_ns: Reg
    peers: Pointer
    rank: Index
    formats: Pointer
    kernel: str
    on_timeout: Callable[..., None] | None = None  # another kernel family's record (internode kernels)


_LATE: list[list] = []  # wait loops of the kernel being traced, placed after its last instruction
_BOUND: list[_Bound] = []  # the kernel being traced's (set by `_bound_waits`)


def _bound_waits(timeout_ns: Reg, peers: Pointer, rank: Index, formats: Pointer, kernel: str,
                 on_timeout: Callable[..., None] | None = None) -> None:
    """Declare the kernel's wait bound (called first in each kernel's body); `on_timeout(role, *values)`
    replaces `_timed_out` for kernels with records of their own."""
    _BOUND[-1] = _Bound(timeout_ns, peers, rank, formats, kernel, on_timeout)


def _now() -> Reg:
    """A fresh read of %globaltimer (ns); the DSL's special registers are read once per function."""
    r = new_reg(u64)
    raw("mov.u64 {r}, %globaltimer;", r=r)
    return r


def _timed_out(role: str, seen: Value, target: Value, channel: Value = 0, peer: Value = 0) -> None:
    """Claim this rank's timeout record (the first thread to get here), fill it, printf it and trap; the
    others exit."""
    b = _BOUND[-1]
    base = ld(b.peers[b.rank]) + ERROR_OFF
    slot = _gptr(base).cast(u32)
    values = {"rank": b.rank, "channel": channel, "peer": peer, "seen": seen, "target": target,
              "block": ctaid.x, "thread": tid.x}
    with if_(atom_cas(slot[0], 0, KERNELS.index(b.kernel) + 1) == 0):
        st(slot[1], ROLES.index(role))
        for i, name in enumerate(TIMEOUT_ARGS[role], start=2):
            st(slot[i], values[name])
        vprintf(b.formats.value() + FORMAT_OFFSETS[b.kernel, role], base + 8)
        trap()
    ret()


@contextmanager
def _waits_at_end() -> Iterator[None]:
    """Collect the kernel's wait loops and place them after its main code (ending it with `ret`): the
    emulator steps the lowest pc of a diverged block first, so a warp waiting there lets working warps go
    first instead of taking their steps (on a GPU the placement makes no difference). Each loop times out
    (see the module's docstring): the clock is read once on entry and once per failed poll."""
    _LATE.append([])
    _BOUND.append(None)  # type: ignore[arg-type]  # set by the body's _bound_waits
    try:
        yield
        ret()
        for go, back, load, not_ready, record in _LATE[-1]:
            poll, check = new_label("poll"), new_label("waited")
            place_label(go)
            t0 = _now()
            place_label(poll)
            load()
            bra(check, when=not_ready())
            bra(back)
            place_label(check)
            bra(poll, when=(_now() - t0) <= _BOUND[-1].timeout_ns)
            role, *values = record()
            (_BOUND[-1].on_timeout or _timed_out)(str(role), *values)
    finally:
        _LATE.pop()
        _BOUND.pop()


def _late_waits(fn: Callable[..., None]) -> Callable[..., None]:
    """A kernel body whose wait loops go after its main code (see `_waits_at_end`)."""
    @functools.wraps(fn)
    def body(**kw: object) -> None:
        with _waits_at_end():
            fn(**kw)
    return body


def _wait(load: Callable[..., object], not_ready: Callable[..., Pred],
          record: Callable[[], tuple[str | Value, ...]]) -> None:
    """Poll once here; while `not_ready()`, poll again in a loop placed at the kernel's end, which times out
    with `record()`: (role, seen, target[, channel, peer]) for the rank's timeout record."""
    load()
    go, back = new_label("wait"), new_label("resume")
    bra(go, when=not_ready())
    place_label(back)
    _LATE[-1].append((go, back, load, not_ready, record))


def _lane0_poll(counter: Pointer, seen: Reg, lane: Reg) -> Callable[[], None]:
    def load() -> None:
        with guard(lane == 0):
            ld(counter, sem="acquire", scope="sys", out=seen)
        shfl_idx(seen, 0, out=seen)
    return load


def _spin_until_gt(counter: Pointer, than: Value, lane: Reg, channel: Value, peer: Value) -> Reg:
    """Lane 0 polls *counter (ld.acquire.sys) until it exceeds `than` (u32); every lane gets the value.
    Timing out records (receiver, channel, peer, tail seen, `than` + 1)."""
    seen = reg.u32(0)
    _wait(_lane0_poll(counter, seen, lane), lambda: seen <= than,
          lambda: ("receiver", seen, than + 1, channel, peer))
    _syncwarp()  # the other lanes read what lane 0's acquire made visible
    return seen


def _wait_room(head: Pointer, sent: Reg, ring: Value, chunk: Value, lane: Reg, channel: Value,
               peer: Value) -> None:
    """Lane 0 polls the receiver's head (ld.acquire.sys) until the ring has room for a chunk:
    sent - head <= ring - chunk. Timing out records (sender, channel, peer, head seen, head needed)."""
    seen = reg.u32(0)
    _wait(_lane0_poll(head, seen, lane), lambda: (sent - seen) > (ring - chunk),
          lambda: ("sender", seen, sent - (ring - chunk), channel, peer))
    _syncwarp()


# --------------------------------------------------------------------------- notify

@kernel(arch="sm_90a")
@_late_waits
def intranode_notify(in_rank: ptr(u8), per_expert: ptr(s32), peers: ptr(u64), rank_prefix: ptr(s32),
                     chan_prefix: ptr(s32), recv_chan_prefix: ptr(s32), expert_recv: ptr(s32),
                     formats: ptr(u8), block_sm: ptr(u32), tokens: u32, per_channel: u32, rank: u32, ranks: u32,
                     channels: u32, experts: u32, experts_per_rank: u32, epoch: u32, notify_off: u32,
                     counters_off: u32, counters_words: u32, timeout_ns: u64) -> None:
    """One block: zero this rank's ring counters, count tokens per (rank, channel), send every peer the
    counts, meet the others at the barrier (release/acquire .sys), then sum what they sent: the rank prefix
    matrix [R, R], this rank's receive counts per local expert, and the receive channel prefix [R, C]."""
    _bound_waits(timeout_ns, peers, rank, formats, "notify")
    t = tid.x
    nt = NOTIFY_THREADS
    with if_(t == 0):
        st(block_sm[ctaid.x], smid.get())
    me = _gptr(ld(peers[rank]))
    for i in range_(t, counters_words, nt):
        st(me.byte_offset(0)[counters_off + (i << 2)].cast(u32), 0)
    with if_(t < TIMEOUT_WORDS):  # a fresh timeout record for this call's kernels
        st(me.byte_offset(0)[ERROR_OFF].cast(u32)[t], 0)
    # channel counts per destination rank, then inclusive prefix over channels (in chan_prefix, [R, C])
    for j in range_(t, ranks * channels, nt):  # type: ignore[operator]
        r, c = j // channels, j % channels
        start = min_(c * per_channel, tokens)
        end = min_(start + per_channel, tokens)
        n = reg.s32(0)
        for tok in range_(start, end):
            add(n, cvt(ld(in_rank[tok * ranks + r], **NC), s32), out=n)
        st(chan_prefix[j], n)
    syncthreads()
    for r in range_(t, ranks, nt):
        run = reg.s32(0)
        for c in range_(0, channels):
            add(run, ld(chan_prefix[r * channels + c]), out=run)
            st(chan_prefix[r * channels + c], run)
    syncthreads()
    # my slot in every peer's notify area: tokens per rank | per expert | channel prefix towards that peer
    words = ranks + experts + channels  # type: ignore[operator]
    for i in range_(t, ranks * words, nt):
        p, w = i // words, i % words
        dst = _gptr(ld(peers[p])).cast(s32)[(notify_off >> 2) + rank * words + w]
        v = reg.s32(0)
        with if_(w < ranks):
            ld(chan_prefix[w * channels + channels - 1], out=v)
        with if_((w >= ranks) & (w < ranks + experts)):  # type: ignore[operator]
            ld(per_expert[w - ranks], out=v)
        with if_(w >= ranks + experts):  # type: ignore[operator]
            ld(chan_prefix[p * channels + (w - ranks - experts)], out=v)
        st(dst, v)
    syncthreads()
    for p in range_(t, ranks, nt):
        red("add", _gptr(ld(peers[p])).cast(u32)[0], 1, sem="release", scope="sys")
    with if_(t == 0):
        target = epoch * ranks  # type: ignore[operator]
        seen = reg.u32(0)
        _wait(lambda: ld(me.cast(u32)[0], sem="acquire", scope="sys", out=seen), lambda: seen < target,
              lambda: ("barrier", seen, target))
    syncthreads()
    mine = me.cast(s32)[notify_off >> 2]
    _notify_prefixes(mine, ranks, words, rank, experts_per_rank, rank_prefix, expert_recv, t, nt)
    for i in range_(t, ranks * channels, nt):  # type: ignore[operator]
        s, c = i // channels, i % channels
        st(recv_chan_prefix[i], ld(mine[s * words + ranks + experts + c]))


def _notify_prefixes(rows: Pointer, ranks: Index, words: Index, rank: Index, experts_per_rank: Index,
                     rank_prefix: Pointer, expert_recv: Pointer, t: Index, nt: int) -> None:
    """From every rank's notify row (`words` s32 from `rows`: its tokens to each rank, then to each expert):
    rank_prefix[s, d], inclusive over source ranks s, and the tokens each of this rank's experts receives."""
    for d in range_(t, ranks, nt):
        run = reg.s32(0)
        for s in range_(0, ranks):
            add(run, ld(rows[s * words + d]), out=run)
            st(rank_prefix[s * ranks + d], run)
    for j in range_(t, experts_per_rank, nt):
        n = reg.s32(0)
        for s in range_(0, ranks):
            add(n, ld(rows[s * words + ranks + rank * experts_per_rank + j]), out=n)
        st(expert_recv[j], n)


# --------------------------------------------------------------------------- dispatch

@kernel(arch="sm_90a")
@_late_waits
def intranode_dispatch(x: ptr(u8), scales: ANY_U32, topk_idx: ANY_S64, topk_w: ANY_F32, in_rank: ptr(u8),
                       rank_prefix: ptr(s32), chan_prefix: ptr(s32), recv_chan_prefix: ptr(s32), peers: ptr(u64),
                       recv_x: ptr(u8), recv_scales: ANY_U32, recv_idx: ANY_S64, recv_w: ANY_F32,
                       recv_src: ptr(s32), send_head: ptr(s32), formats: ptr(u8), block_sm: ptr(u32),
                       tokens: u32, per_channel: u32, rank: u32, x_bytes: u32, scale_words: u32, topk: u32,
                       ring: u32, chunk: u32, slot_bytes: u32, scales_off: u32, idx_off: u32, w_off: u32,
                       src_off: u32, counters_off: u32, ring_off: u32, expert_lo: s64, expert_hi: s64,
                       timeout_ns: u64, R: int = 4, UNIT: int = 16, HAS_SCALES: bool = False, HAS_TOPK: bool = True,
                       HAS_W: bool = True, BUG: str = "") -> None:
    _bound_waits(timeout_ns, peers, rank, formats, "dispatch")
    lane = tid.x & 31
    peer = tid.x >> 5                     # the rank this warp sends to / receives from
    ranks = R
    channel = ctaid.x >> 1
    channels = nctaid.x >> 1
    with if_(tid.x == 0):
        st(block_sm[ctaid.x], smid.get())
    start = min_(channel * per_channel, tokens)
    end = min_(start + per_channel, tokens)
    pair = channel * ranks               # (channel, source rank) index = pair + source
    with if_((ctaid.x & 1) == 0):        # ---- sender: tokens of this channel for rank `peer`
        base = ld(peers[peer])
        ring_at = base + cvt(ring_off, u64) + mul_wide((pair + rank) * ring, slot_bytes)
        ctr = _gptr(base + cvt(counters_off + ((pair + rank) << 3), u64)).cast(u32)
        row = add(_prev(rank_prefix, (rank - 1) * ranks + peer, rank > 0),  # type: ignore[arg-type]
                  _prev(chan_prefix, peer * channels + channel - 1, channel > 0))
        sent = reg.u32(0)
        tok = start.copy()
        with while_(lambda: tok < end):
            _wait_room(ctr, sent, ring, chunk, lane, channel, peer)
            n = reg.u32(0)
            with while_(lambda: (tok < end) & (n < chunk)):
                flag = cvt(ld(in_rank[tok * ranks + peer], **NC), u32)
                with if_(flag != 0):
                    slot = _gptr(ring_at + mul_wide(sent % ring, slot_bytes))
                    if BUG == "early_tail":
                        with guard(lane == 0):
                            st(ctr[1], sent + 1, sem="release", scope="sys")
                    _copy_row(slot, x + mul_wide(tok, x_bytes), x_bytes, lane, UNIT, True)
                    if HAS_SCALES:
                        for i in range_(lane, scale_words, 32):
                            st(slot.byte_offset(0)[scales_off].cast(u32)[i], ld(scales[tok * scale_words + i], **NC))
                    if HAS_TOPK:
                        for k in range_(lane, topk, 32):
                            st(slot.byte_offset(0)[idx_off].cast(s64)[k], ld(topk_idx[tok * topk + k], **NC))
                            if HAS_W:
                                st(slot.byte_offset(0)[w_off].cast(f32)[k], ld(topk_w[tok * topk + k], **NC))
                    with guard(lane == 0):
                        st(slot.byte_offset(0)[src_off].cast(u32), tok)
                        st(send_head[tok * ranks + peer], (row + sent.view(s32)))
                    add(sent, 1, out=sent)
                    add(n, 1, out=n)
                with else_():
                    with guard(lane == 0):
                        st(send_head[tok * ranks + peer], -1)
                add(tok, 1, out=tok)
            if BUG not in ("early_tail", "no_tail"):
                _syncwarp()
                with guard(lane == 0):
                    st(ctr[1], sent, sem="release", scope="gpu" if BUG == "gpu_scope" else "sys")
    with else_():                        # ---- receiver: what rank `peer` sends this rank in this channel
        before = _prev(recv_chan_prefix, peer * channels + channel - 1, channel > 0)
        expected = (ld(recv_chan_prefix[peer * channels + channel]) - before).view(u32)
        row0 = add(_prev(rank_prefix, (peer - 1) * ranks + rank, peer > 0), before)
        base = ld(peers[rank])
        ring_at = base + cvt(ring_off, u64) + mul_wide((pair + peer) * ring, slot_bytes)
        ctr = _gptr(base + cvt(counters_off + ((pair + peer) << 3), u64)).cast(u32)
        got = reg.u32(0)
        with while_(lambda: got < expected):
            tail = _spin_until_gt(ctr[1], got, lane, channel, peer)
            for i in range_(got, tail):
                slot = _gptr(ring_at + mul_wide(i % ring, slot_bytes))
                row = (row0.view(u32) + i)
                _copy_row(recv_x + mul_wide(row, x_bytes), slot, x_bytes, lane, UNIT, False)
                if HAS_SCALES:
                    for j in range_(lane, scale_words, 32):
                        st(recv_scales[row * scale_words + j], ld(slot.byte_offset(0)[scales_off].cast(u32)[j]))
                if HAS_TOPK:
                    for k in range_(lane, topk, 32):
                        g = ld(slot.byte_offset(0)[idx_off].cast(s64)[k])
                        local = (g >= expert_lo) & (g < expert_hi)
                        st(recv_idx[row * topk + k], selp(g - expert_lo, -1, local))
                        if HAS_W:
                            w = ld(slot.byte_offset(0)[w_off].cast(f32)[k])
                            st(recv_w[row * topk + k], selp(w, 0.0, local))
                with guard(lane == 0):
                    st(recv_src[row], ld(slot.byte_offset(0)[src_off].cast(s32)))
            _syncwarp()
            with guard(lane == 0):
                st(ctr[0], tail, sem="release", scope="sys")
            got.set(tail)


# --------------------------------------------------------------------------- combine

def _load_bf16(p: Pointer, vec: int, nc: bool = False) -> list[Reg]:
    """`vec` bf16 values at p as f32 registers (one 16-byte, 4-byte or 2-byte load)."""
    kw: LoadHints = NC if nc else {}
    if vec == 8:
        words = ld(p.cast(u32), v=4, **kw)
        halves = [h for wd in words for h in unpack(wd, type=bf16)]
    elif vec == 2:
        halves = list(unpack(ld(p.cast(u32), **kw), type=bf16))
    else:
        halves = [ld(p, **kw)]
    return [cvt(h, f32) for h in halves]


def _store_bf16(p: Pointer, acc: Sequence[Reg]) -> None:
    vals = [cvt(a, bf16) for a in acc]
    if len(vals) == 8:
        st(p.cast(u32), tuple(pack(vals[i], vals[i + 1]).view(u32) for i in range(0, 8, 2)))
    elif len(vals) == 2:
        st(p.cast(u32), pack(vals[0], vals[1]).view(u32))
    else:
        st(p, vals[0])


@kernel(arch="sm_90a")
@_late_waits
def intranode_combine(x: ptr(u8), w: ANY_F32, bias0: ANY_BF16, bias1: ANY_BF16, in_rank: ptr(u8),
                      rank_prefix: ptr(s32), recv_chan_prefix: ptr(s32), peers: ptr(u64), out: ptr(bf16),
                      out_w: ANY_F32, formats: ptr(u8), block_sm: ptr(u32), tokens: u32, per_channel: u32,
                      rank: u32, hidden: u32,
                      topk: u32, ring: u32, chunk: u32, slot_bytes: u32, w_off: u32, counters_off: u32,
                      ring_off: u32, timeout_ns: u64, R: int = 4, UNIT: int = 16, NUM_BIAS: int = 0,
                      HAS_W: bool = False) -> None:
    _bound_waits(timeout_ns, peers, rank, formats, "combine")
    lane = tid.x & 31
    peer = tid.x >> 5
    channel = ctaid.x >> 1
    channels = nctaid.x >> 1
    with if_(tid.x == 0):
        st(block_sm[ctaid.x], smid.get())
    pair = channel * R
    row_bytes = hidden << 1
    with if_((ctaid.x & 1) == 0):        # ---- sender: rows that came from rank `peer` in this channel go back
        before = _prev(recv_chan_prefix, peer * channels + channel - 1, channel > 0)
        count = (ld(recv_chan_prefix[peer * channels + channel]) - before).view(u32)
        row0 = add(_prev(rank_prefix, (peer - 1) * R + rank, peer > 0), before).view(u32)
        base = ld(peers[peer])
        ring_at = base + cvt(ring_off, u64) + mul_wide((pair + rank) * ring, slot_bytes)
        ctr = _gptr(base + cvt(counters_off + ((pair + rank) << 3), u64)).cast(u32)
        sent = reg.u32(0)
        with while_(lambda: sent < count):
            _wait_room(ctr, sent, ring, chunk, lane, channel, peer)
            n = min_(chunk, count - sent)
            for i in range_(sent, sent + n):
                slot = _gptr(ring_at + mul_wide(i % ring, slot_bytes))
                _copy_row(slot, x + mul_wide(row0 + i, row_bytes), row_bytes, lane, UNIT, True)
                if HAS_W:
                    for k in range_(lane, topk, 32):
                        st(slot.byte_offset(0)[w_off].cast(f32)[k], ld(w[(row0 + i) * topk + k], **NC))
            add(sent, n, out=sent)
            _syncwarp()
            with guard(lane == 0):
                st(ctr[1], sent, sem="release", scope="sys")
    with else_():                        # ---- receiver: every token of this channel, its copies summed in f32
        t = tid.x
        nt = 32 * R
        start = min_(channel * per_channel, tokens)
        end = min_(start + per_channel, tokens)
        base = ld(peers[rank])
        consumed = [reg.u32(0) for _ in range(R)]
        rings = [base + cvt(ring_off, u64) + mul_wide((pair + r) * ring, slot_bytes) for r in range(R)]
        ctrs = [_gptr(base + cvt(counters_off + ((pair + r) << 3), u64)).cast(u32) for r in range(R)]
        tails = [reg.u32(0) for _ in range(R)]
        for tok in range_(start, end):
            flags = [cvt(ld(in_rank[tok * R + r], **NC), u32) != 0 for r in range(R)]
            for r in range(R):           # thread r waits until ring r holds this token's copy
                with if_((t == r) & flags[r]):
                    with if_(tails[r] <= consumed[r]):
                        _wait(lambda r=r: ld(ctrs[r][1], sem="acquire", scope="sys", out=tails[r]),
                              lambda r=r: tails[r] <= consumed[r],
                              lambda r=r: ("receiver", tails[r], consumed[r] + 1, channel, r))  # type: ignore[misc]
            syncthreads()
            slots = [_gptr(rings[r] + mul_wide(consumed[r] % ring, slot_bytes)) for r in range(R)]
            vec = UNIT // 2              # bf16 elements per thread per step
            for e in range_(t * vec, hidden, nt * vec):
                acc = [reg.f32(0.0) for _ in range(vec)]
                for r in range(R):
                    with if_(flags[r]):
                        words = _load_bf16(slots[r].cast(bf16)[e], vec)
                        for j in range(vec):
                            add(acc[j], words[j], out=acc[j])
                for b in (bias0, bias1)[:NUM_BIAS]:
                    words = _load_bf16(b[mad(tok, hidden, e)], vec, nc=True)
                    for j in range(vec):
                        add(acc[j], words[j], out=acc[j])
                _store_bf16(out[mad(tok, hidden, e)], acc)
            if HAS_W:
                for k in range_(t, topk, nt):
                    aw = reg.f32(0.0)
                    for r in range(R):
                        with if_(flags[r]):
                            add(aw, ld(slots[r].byte_offset(0)[w_off].cast(f32)[k]), out=aw)
                    st(out_w[tok * topk + k], aw)
            syncthreads()
            for r in range(R):
                with if_(flags[r]):
                    add(consumed[r], 1, out=consumed[r])
                    with if_(t == r):
                        st(ctrs[r][0], consumed[r], sem="release", scope="sys")
