# mypy: disable-error-code="valid-type"
# (kernel parameters are annotated with PTX types, `u32` and `ptr(f32)`: DSL values, not Python types; mypy
# takes `ranks: u32` for an unknown type, which an operator refuses on its left: those lines ignore [operator])
"""DeepEP's low-latency communication kernels (decode-time dispatch and combine), in four launches.

Every rank owns one buffer that every rank's kernels reach: by a plain pointer (`peers[r]` != 0: the same
node, an IPC mapping or peer memory) or, on an emulated `Cluster`, by NVSHMEM puts to the same offset of the
symmetric buffer (`peers[r]` == 0, specialization RDMA=True). `LowLatencyLayout` gives two halves (DeepEP's
double buffering); each half holds

    dispatch data   [local expert][source rank][num_max] messages: an int32 token index (16 bytes), the
                    token's BF16 row, or its FP8 row then its FP32 scales (one per 128 channels)
    dispatch counts [local expert][source rank] u64 signal: epoch << 32 | tokens sent
    combine data    [global expert][num_max] BF16 rows (the expert's output for that token of this rank)
    combine flags   [global expert] u64 signal: epoch

Signals carry the call's epoch (the Buffer's agreed call number), so no one resets them.

- `ll_dispatch_send`: a warp per token casts it (DeepEP's cast: amax over 128 channels, scale 448 / amax, or
  powers of two with ROUND) into `send`, then per chosen expert claims the next slot of that expert with an
  atomic counter (`claim`), writes the message there and counts it done (`finished`, red.release.sys). A
  warp per expert waits for its count (bounded), then signals it: st.release.sys, or nvshmem_fence and
  nvshmemx_signal_op SET.
- `ll_dispatch_recv`: a block per local expert, a warp per source rank: waits for the count, then copies
  the messages to `recv_x` (rows of source rank 0 first, then 1, ...; within a source by token, whatever
  order the slots were claimed in), the scales column-major (FP32) or as packed UE8M0 bytes, `src_info`,
  `layout_range` = begin << 32 | count and `recv_count`.
- `ll_combine_send`: a warp per (local expert, source rank) puts each row back to the source's combine slot
  [global expert][token], then signals the expert's flag.
- `ll_combine_recv`: every block waits for all flags, then a warp per token sums w * row in FP32 in top-k
  order (mul.rn then add.rn: no fused multiply-add) and rounds once to BF16.

Every wait is bounded by `timeout_ns`: past it the waiting thread writes (LL_WAITS index, expert or flag,
source rank, value seen) to `status` and traps. BUG="no_fence" plants a count signalled without ordering
after its data (a relaxed store over NVLink; no nvshmem_fence before the RDMA signal), for the sanitizer.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import TYPE_CHECKING

from ptxforge.dsl import (
    abs_,
    add,
    atom,
    bf16,
    bitcast,
    cvt,
    cvt_pack,
    div,
    else_,
    f32,
    guard,
    if_,
    kernel,
    ld,
    max_,
    mul,
    mul_wide,
    nctaid,
    pack,
    ptr,
    range_,
    red,
    reg,
    s32,
    s64,
    selp,
    shared,
    shfl_idx,
    shfl_xor,
    st,
    syncthreads,
    tid,
    trap,
    u8,
    u32,
    u64,
    unpack,
    while_,
)
from ptxforge.dsl import ctaid as _ctaid
from ptxforge.dsl.nvshmem import NVSHMEM_SIGNAL_SET, nvshmem_fence, nvshmemx_putmem_nbi_warp, nvshmemx_signal_op
from ptxforge.kernels.comm import _copy_row, _gptr, _now, _syncwarp

if TYPE_CHECKING:
    from ptxforge.dsl.values import Reg

FP8_MAX = 448.0
FP8_MARGIN = 1e-4
INV_FP8_MAX = 1 / 448.0
HEADER = 16         # bytes before a message's row: the token index (int32), padded
WARPS = 4           # warps per block of the send kernels
LL_WAITS = ("dispatch count", "send finished", "combine flag")  # status word 0: 1 + index
STATUS_WORDS = 4


def _align(n: int, a: int = 128) -> int:
    return -(-n // a) * a


@dataclass(frozen=True)
class LowLatencyLayout:
    """Byte offsets of one rank's low-latency buffer (the same on every rank)."""

    ranks: int
    experts: int
    num_max: int
    hidden: int

    @property
    def local_experts(self) -> int:
        return self.experts // self.ranks

    @property
    def msg_bytes(self) -> int:
        """One dispatch message: header, then the BF16 row or the FP8 row and its scales."""
        h = self.hidden
        return _align(HEADER + max(2 * h, h + 4 * (h // 128)), 16)

    @property
    def counts_off(self) -> int:
        return _align(self.local_experts * self.ranks * self.num_max * self.msg_bytes)

    @property
    def combine_off(self) -> int:
        return _align(self.counts_off + 8 * self.local_experts * self.ranks)

    @property
    def flags_off(self) -> int:
        return _align(self.combine_off + self.experts * self.num_max * 2 * self.hidden)

    @property
    def half_bytes(self) -> int:
        return _align(self.flags_off + 8 * self.experts)

    @property
    def nbytes(self) -> int:
        return 2 * self.half_bytes

    def base(self, half: int) -> int:
        return half * self.half_bytes


# --------------------------------------------------------------------------- helpers (emit PTX)

def _bounded(status, timeout_ns, wait: int, what, peer, seen: Reg, not_ready, poll) -> None:
    """Poll (`poll()` refreshes `seen`) while `not_ready()`; past `timeout_ns` record and trap."""
    poll()
    t0 = _now()
    with while_(not_ready):
        with if_((_now() - t0) > timeout_ns):
            st(status[1], what)
            st(status[2], peer)
            st(status[3], cvt(seen, u32, rnd=None))
            st(status[0], wait + 1)
            trap()
        poll()


@contextmanager
def _strided(start, stop, step) -> Iterator[Reg]:
    """A loop i = start, start + step, ... < stop with a register step (range_ takes an int step)."""
    i = reg.u32(0)
    i.set(start)
    with while_(lambda: i < stop):
        yield i
        add(i, step, out=i)


def _warp_sum(v):
    for mask in (16, 8, 4, 2, 1):
        add(v, shfl_xor(v, mask), out=v)
    return v


def _signal(peers_at, own, off, value, dst, rdma: bool, bug: str, lane) -> None:
    """Lane 0 sets the u64 signal at byte `off` of rank `dst`'s buffer to `value`, ordered after this PE's
    earlier writes to it (unless BUG="no_fence")."""
    with if_(lane == 0):
        p = ld(peers_at[dst])
        if rdma:
            with if_(p == 0):
                if bug != "no_fence":
                    nvshmem_fence()
                nvshmemx_signal_op(own + off, value, NVSHMEM_SIGNAL_SET, dst)
            with else_():
                _store_signal(p + off, value, bug)
        else:
            _store_signal(p + off, value, bug)


def _store_signal(addr, value, bug: str) -> None:
    if bug == "no_fence":
        st(_gptr(addr).cast(u64), value)
    else:
        st(_gptr(addr).cast(u64), value, sem="release", scope="sys")


def _send_bytes(peers_at, own, off, src, nbytes, dst, rdma: bool, lane, unit: int) -> None:
    """The warp writes `nbytes` from `src` to byte `off` of rank `dst`'s buffer: plain stores to a peer it
    reaches by pointer, else (RDMA) one warp put."""
    p = ld(peers_at[dst])
    if rdma:
        with if_(p == 0):
            nvshmemx_putmem_nbi_warp(own + off, src, cvt(nbytes, u64), dst)
        with else_():
            _copy_row(_gptr(p + off), src, nbytes, lane, unit, False)
    else:
        _copy_row(_gptr(p + off), src, nbytes, lane, unit, False)


def _cast_row(x, row, msg, hidden, lane, round_scale: bool) -> None:
    """DeepEP's per-token FP8 cast of row `row` of x (bf16) into message `msg`: q at HEADER, scales after."""
    for g in range_(0, hidden >> 7):
        first = (g << 7) + (lane << 2)
        w0, w1 = ld(x[mul_wide(row, hidden) + cvt(first, u64)].cast(u32), v=2)
        v = [cvt(h, f32) for h in unpack(w0, type=bf16) + unpack(w1, type=bf16)]
        amax = max_(max_(abs_(v[0]), abs_(v[1])), max_(abs_(v[2]), abs_(v[3])))
        for mask in (16, 8, 4, 2, 1):
            max_(amax, shfl_xor(amax, mask), out=amax)
        max_(amax, FP8_MARGIN, out=amax)
        if round_scale:
            bits = bitcast(mul(amax, INV_FP8_MAX, rnd="rn"), u32)
            exp = ((bits >> 23) & 0xFF) + selp(1, 0, (bits & 0x7FFFFF) != 0, type=u32)  # biased, rounded up
            scale = bitcast((254 - exp) << 23, f32)
            scale_inv = bitcast(exp << 23, f32)
        else:
            scale = div(FP8_MAX, amax, rnd="rn")
            scale_inv = mul(amax, INV_FP8_MAX, rnd="rn")
        q = [mul(vi, scale, rnd="rn") for vi in v]
        word = pack(cvt_pack(q[0], q[1], "e4m3x2"), cvt_pack(q[2], q[3], "e4m3x2")).view(u32)
        st(msg.byte_offset(0)[HEADER + first].cast(u32), word)
        with guard(lane == 0):
            st(msg.byte_offset(0)[(HEADER + hidden) + (g << 2)].cast(f32), scale_inv)


# --------------------------------------------------------------------------- dispatch

@kernel(arch="sm_90a")
def ll_dispatch_send(x: ptr(bf16), topk_idx: ptr(s64), send: ptr(u8), claim: ptr(u32), finished: ptr(u32),
                     peers: ptr(u64), status: ptr(u32), tokens: u32, topk: u32, hidden: u32, msg_bytes: u32,
                     rank: u32, local_experts: u32, experts: u32, num_max: u32, data_off: u32, counts_off: u32,
                     epoch: u32, timeout_ns: u64, R: int = 4, FP8: bool = True, ROUND: bool = False,
                     RDMA: bool = False, BUG: str = "") -> None:
    lane = tid.x & 31
    gw = _ctaid.x * WARPS + (tid.x >> 5)
    nw = nctaid.x * WARPS
    own = ld(peers[rank])
    row_bytes = hidden + (hidden >> 5) if FP8 else hidden << 1  # FP8 row + f32 scales (4 B / 128), or BF16
    msg_len = HEADER + row_bytes
    with _strided(gw, tokens, nw) as t:
        msg = send + mul_wide(t, msg_bytes)
        if FP8:
            _cast_row(x, t, msg, hidden, lane, ROUND)
        else:
            _copy_row(msg + HEADER, (x.cast(u8) + mul_wide(t, hidden << 1)), hidden << 1, lane, 16,
                      True)
        with guard(lane == 0):
            st(msg.cast(u32), t)
        _syncwarp()
        for k in range_(0, topk):
            e = ld(topk_idx[t * topk + k])
            with if_(e >= 0):
                e32 = cvt(e, u32)
                slot = reg.u32(0)
                with guard(lane == 0):
                    atom("add", claim[e32], 1, out=slot)
                shfl_idx(slot, 0, out=slot)
                dst = e32 // local_experts
                le = e32 - dst * local_experts
                off = cvt(data_off, u64) + mul_wide((le * R + rank) * num_max + slot, msg_bytes)
                _send_bytes(peers, own, off, msg, msg_len, dst, RDMA, lane, 16)
                _syncwarp()
                with guard(lane == 0):
                    red("add", finished[e32], 1, sem="release", scope="sys")
    # a warp per expert: count what this rank sends it, wait until all of it is written, signal the count
    with _strided(gw, experts, nw) as e:
        n = reg.u32(0)
        for i in range_(lane, tokens * topk, 32):  # type: ignore[operator]
            add(n, selp(1, 0, ld(topk_idx[i]) == cvt(e, s64), type=u32), out=n)
        _warp_sum(n)
        seen = reg.u32(0)
        with if_(lane == 0):
            _bounded(status, timeout_ns, 1, e, rank, seen, lambda: seen != n,
                     lambda: ld(finished[e], sem="acquire", scope="sys", out=seen))
        _syncwarp()
        dst = e // local_experts
        le = e - dst * local_experts
        value = (cvt(epoch, u64) << 32) | cvt(n, u64)
        _signal(peers, own, cvt(counts_off, u64) + cvt(((le * R + rank) << 3), u64), value, dst, RDMA, BUG, lane)


@kernel(arch="sm_90a")
def ll_dispatch_recv(peers: ptr(u64), recv_x: ptr(u8), recv_scales: ptr(u8), src_info: ptr(s32),
                     layout_range: ptr(s64), recv_count: ptr(s32), status: ptr(u32), rank: u32, hidden: u32,
                     msg_bytes: u32, num_max: u32, data_off: u32, counts_off: u32, epoch: u32, timeout_ns: u64,
                     R: int = 4, FP8: bool = True, UE8M0: bool = False) -> None:
    lane = tid.x & 31
    src = tid.x >> 5
    le = _ctaid.x
    own = ld(peers[rank])
    counts = shared(u32, R, name="counts")
    seen = reg.u64(0)
    word = _gptr(own + cvt(counts_off, u64) + cvt((le * R + src) << 3, u64)).cast(u64)
    with if_(lane == 0):
        _bounded(status, timeout_ns, 0, le, src, seen, lambda: (seen >> 32) != cvt(epoch, u64),
                 lambda: ld(word, sem="acquire", scope="sys", out=seen))
        st(counts[src], cvt(seen, u32, rnd=None))
    syncthreads()
    begin = reg.u32(0)
    total = reg.u32(0)
    for s in range_(0, R):
        c = ld(counts[s])
        with if_(s < src):
            add(begin, c, out=begin)
        add(total, c, out=total)
    n = ld(counts[src])
    rows = num_max * R
    x_bytes = hidden if FP8 else hidden << 1
    num_scales = hidden >> 7
    packs = (num_scales + 3) >> 2
    base = own + cvt(data_off, u64) + mul_wide((le * R + src) * num_max, msg_bytes)
    for i in range_(0, n):
        msg = _gptr(base + mul_wide(i, msg_bytes))
        token = ld(msg.cast(s32))
        before = reg.u32(0)  # messages of this source with a smaller token index: rows in token order
        for j in range_(lane, n, 32):
            other = ld(_gptr(base + mul_wide(j, msg_bytes)).cast(s32))
            add(before, selp(1, 0, other < token, type=u32), out=before)
        _warp_sum(before)
        row = begin + before
        at = le * rows + row
        _copy_row(recv_x + mul_wide(at, x_bytes), msg + HEADER, x_bytes, lane, 16, False)
        if FP8:
            for g in range_(lane, num_scales, 32):
                sv = ld(msg.byte_offset(0)[(HEADER + hidden) + (g << 2)].cast(u32))
                if UE8M0:
                    byte_at = (((le * packs + (g >> 2)) * rows + row) << 2) + (g & 3)
                    st(recv_scales[byte_at], cvt((sv >> 23) & 0xFF, u8))
                else:
                    st(recv_scales.cast(u32)[(le * num_scales + g) * rows + row], sv)
        with guard(lane == 0):
            st(src_info[at], token)
    with guard(lane == 0):
        st(layout_range[le * R + src], (cvt(begin, s64) << 32) | cvt(n, s64))
    with guard(tid.x == 0):
        st(recv_count[le], total.view(s32))


# --------------------------------------------------------------------------- combine

@kernel(arch="sm_90a")
def ll_combine_send(x: ptr(u8), layout_range: ptr(s64), src_info: ptr(s32), peers: ptr(u64), rank: u32, hidden: u32,
                    local_experts: u32, num_max: u32, combine_off: u32, flags_off: u32, epoch: u32, R: int = 4,
                    RDMA: bool = False) -> None:
    lane = tid.x & 31
    gw = _ctaid.x * WARPS + (tid.x >> 5)
    nw = nctaid.x * WARPS
    own = ld(peers[rank])
    rows = num_max * R
    row_bytes = hidden << 1
    with _strided(gw, local_experts * R, nw) as pair:
        le = pair // R
        s = pair - le * R
        lr = ld(layout_range[pair])
        begin = cvt(lr >> 32, u32)
        n = cvt(lr & 0xFFFFFFFF, u32)
        e = rank * local_experts + le  # type: ignore[operator]
        for i in range_(0, n):
            at = le * rows + begin + i
            token = ld(src_info[at]).view(u32)
            off = cvt(combine_off, u64) + mul_wide(e * num_max + token, row_bytes)
            _send_bytes(peers, own, off, x + mul_wide(at, row_bytes), row_bytes, s, RDMA, lane, 16)
        _syncwarp()
        _signal(peers, own, cvt(flags_off, u64) + cvt(e << 3, u64), cvt(epoch, u64), s, RDMA, "", lane)


@kernel(arch="sm_90a")
def ll_combine_recv(topk_idx: ptr(s64), topk_w: ptr(f32), peers: ptr(u64), out: ptr(u32), status: ptr(u32),
                    tokens: u32, topk: u32, rank: u32, hidden: u32, experts: u32, num_max: u32, combine_off: u32,
                    flags_off: u32, epoch: u32, timeout_ns: u64) -> None:
    lane = tid.x & 31
    gw = _ctaid.x * WARPS + (tid.x >> 5)
    nw = nctaid.x * WARPS
    own = ld(peers[rank])
    for e in range_(tid.x, experts, WARPS * 32):
        seen = reg.u64(0)
        flag = _gptr(own + cvt(flags_off, u64) + cvt(e << 3, u64)).cast(u64)
        _bounded(status, timeout_ns, 2, e, e, seen, lambda seen=seen: seen != cvt(epoch, u64),
                 lambda flag=flag, seen=seen: ld(flag, sem="acquire", scope="sys", out=seen))
    syncthreads()
    half = hidden >> 1
    with _strided(gw, tokens, nw) as t:
        for c in range_(lane, half, 32):
            acc0, acc1 = reg.f32(0.0), reg.f32(0.0)
            for k in range_(0, topk):
                e = ld(topk_idx[t * topk + k])
                with if_(e >= 0):
                    w = ld(topk_w[t * topk + k])
                    row = own + cvt(combine_off, u64) + mul_wide(cvt(e, u32) * num_max + t, hidden << 1)
                    lo, hi = unpack(ld(_gptr(row).cast(u32)[c]), type=bf16)
                    add(acc0, mul(cvt(lo, f32), w, rnd="rn"), rnd="rn", out=acc0)
                    add(acc1, mul(cvt(hi, f32), w, rnd="rn"), rnd="rn", out=acc1)
            st(out[t * half + c], pack(cvt(acc0, bf16), cvt(acc1, bf16)).view(u32))
