# mypy: disable-error-code="valid-type,operator,arg-type"
# (kernel parameters are annotated with PTX types, `u32`, not Python types: mypy cannot follow arithmetic on them)
"""The internode dispatch kernel in DeepEP V1's structure: RDMA senders and their coordinator, RDMA-to-NVLink
forwarders, NVLink receivers.

`num_sms` blocks, channel c = block // 2 owns the contiguous tokens [c * per_channel, (c + 1) * per_channel).

Block 2c (N + 1 + G warps):
  - warp n < N, RDMA sender for node n: stages each of the channel's tokens that any GPU of node n wants,
    once, in its send ring towards node n (payload, scales, top-k, weights, source token and rank, the bit
    set of node n's GPUs that want it and its output row on each), publishing how many it staged;
  - warp N, the coordinator: per node, a chunk at a time, waits for the senders' staged count and for room
    in the receive ring of node n's GPU with this local index (the RDMA head it returned), puts the slots
    (nvshmemx_putmem_nbi_warp), fences, raises the remote tail (nvshmem_uint64_atomic_add); when the sender
    may need the slots again it calls nvshmem_quiet and hands them back (retired): each token crosses the
    scale-out link once per destination node;
  - warp N + 1 + i, NVLink receiver from this node's GPU i: takes what forwarder i passes on and copies it
    to its output row (rows ordered by source rank, then source token, as the torch backend orders them).
Block 2c + 1 (G + 1 warps used):
  - warp j < G, forwarder to this node's GPU j: reads the RDMA receive rings source node by source node,
    and copies each token GPU j wants into GPU j's NVLink ring (st.release.sys on its tail); warp 0 records
    each received token's bit set (`fwd_bits`, the combine's forwarder reads it);
  - warp G, the forwarder coordinator: returns RDMA heads to each source once every forwarder warp is done
    with a chunk.

Every wait is bounded (`internode_device.wait_until_ge`). `BUG` plants a defect: "no_fence" (the tail
raised without a fence after the data put), "reuse" (slots handed back before nvshmem_quiet), "gpu_scope"
(the NVLink tail released at .gpu scope).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from ptxforge.dsl import (
    add,
    ctaid,
    cvt,
    else_,
    f32,
    guard,
    if_,
    kernel,
    ld,
    min_,
    mul_wide,
    nctaid,
    ptr,
    range_,
    reg,
    s32,
    s64,
    selp,
    smid,
    st,
    tid,
    u8,
    u32,
    u64,
    while_,
)
from ptxforge.dsl.nvshmem import nvshmem_fence, nvshmem_quiet, nvshmem_uint64_atomic_add, nvshmemx_putmem_nbi_warp
from ptxforge.kernels.comm import ANY_F32, ANY_S64, ANY_U32, NC, _prev
from ptxforge.kernels.internode_device import bound_waits, copy_row, gptr, late_waits, syncwarp, wait_until_ge

if TYPE_CHECKING:
    from ptxforge.dsl.memory import Pointer
    from ptxforge.dsl.values import Index, Pred, Reg


@kernel(arch="sm_90a")
@late_waits
def internode_dispatch(x: ptr(u8), scales: ANY_U32, topk_idx: ANY_S64, topk_w: ANY_F32, in_rank: ptr(u8),
                       rank_prefix: ptr(s32), chan_prefix: ptr(s32), node_chan: ptr(s32), recv_chan: ptr(s32),
                       rdma_recv_chan: ptr(s32), nvl_peers: ptr(u64), recv_x: ptr(u8), recv_scales: ANY_U32,
                       recv_idx: ANY_S64, recv_w: ANY_F32, recv_src: ptr(s32), fwd_bits: ptr(u32),
                       formats: ptr(u8), block_sm: ptr(u32), rdma_me: u64, tokens: u32, per_channel: u32,
                       rank: u32, node: u32, local: u32, x_bytes: u32, scale_words: u32, topk: u32,
                       rdma_ring: u32, nvl_ring: u32, chunk: u32, slot_bytes: u32, scales_off: u32, idx_off: u32,
                       w_off: u32, meta_off: u32, rdma_counters_off: u32, send_off: u32, recv_off: u32,
                       local_off: u32, local_words: u32, nvl_counters_off: u32, nvl_ring_off: u32,
                       expert_lo: s64, expert_hi: s64, timeout_ns: u64, N: int = 2, G: int = 2, UNIT: int = 16,
                       HAS_SCALES: bool = False, HAS_TOPK: bool = True, HAS_W: bool = True, BUG: str = "") -> None:
    bound_waits("dispatch", timeout_ns, nvl_peers, local, formats, node, rank)
    R = N * G
    lane = tid.x & 31
    warp = tid.x >> 5
    channel = ctaid.x >> 1
    channels = nctaid.x >> 1
    with if_(tid.x == 0):
        st(block_sm[ctaid.x], smid.get())
    start = min_(channel * per_channel, tokens)
    end = min_(start + per_channel, tokens)
    nvl_me = ld(nvl_peers[local])
    words = gptr(nvl_me + cvt(local_off, u64) + mul_wide(channel, local_words * 4)).cast(u32)
    staged_at, retired_at = words, words + N
    progress_at = words + 2 * N  # [G forwarder warps][N source nodes]

    def rdma_counter(n: Index, head: bool) -> Reg:
        return rdma_me + cvt(rdma_counters_off + (channel * N + n) * 16 + (8 if head else 0), u64)

    def node_count(table: Pointer, n: Index) -> tuple[Reg, Reg]:
        """(tokens of channel `channel` in row n of a [*, C] prefix table, those of the earlier channels)."""
        before = _prev(table, n * channels + channel - 1, channel > 0)
        return ld(table[n * channels + channel]) - before, before

    with if_((ctaid.x & 1) == 0):
        for n in range(N):  # ---- RDMA sender for node n
            with if_(warp == n):
                pe = n * G + local
                ring_at = rdma_me + cvt(send_off, u64) + mul_wide((channel * N + n) * rdma_ring, slot_bytes)
                rows = [add(_prev(rank_prefix, (rank - 1) * R + n * G + j, rank > 0),
                            _prev(chan_prefix, (n * G + j) * channels + channel - 1, channel > 0)).view(u32)
                        for j in range(G)]
                staged = reg.u32(0)
                for tok in range_(start, end):
                    bits = reg.u32(0)
                    for j in range(G):
                        bits.set(bits | (cvt(ld(in_rank[tok * R + n * G + j], **NC), u32) << j))
                    with if_(bits != 0):
                        with if_(staged >= rdma_ring):
                            wait_until_ge(retired_at[n], staged - rdma_ring + 1, lane, "sender", channel, pe)
                        slot = gptr(ring_at + mul_wide(staged % rdma_ring, slot_bytes))
                        copy_row(slot, x + mul_wide(tok, x_bytes), x_bytes, lane, UNIT, True)
                        if HAS_SCALES:
                            for w in range_(lane, scale_words, 32):
                                st(slot.byte_offset(0)[scales_off].cast(u32)[w],
                                   ld(scales[tok * scale_words + w], **NC))
                        if HAS_TOPK:
                            for k in range_(lane, topk, 32):
                                st(slot.byte_offset(0)[idx_off].cast(s64)[k], ld(topk_idx[tok * topk + k], **NC))
                                if HAS_W:
                                    st(slot.byte_offset(0)[w_off].cast(f32)[k], ld(topk_w[tok * topk + k], **NC))
                        meta = slot.byte_offset(0)[meta_off].cast(u32)
                        with guard(lane == 0):
                            st(meta[0], tok)
                            st(meta[1], rank)
                            st(meta[2], bits)
                        for j in range(G):
                            with if_(((bits >> j) & 1) != 0):
                                with guard(lane == 0):
                                    st(meta[3 + j], rows[j])
                                add(rows[j], 1, out=rows[j])
                        add(staged, 1, out=staged)
                        with if_((staged % chunk) == 0):
                            syncwarp()
                            with guard(lane == 0):
                                st(staged_at[n], staged, sem="release", scope="gpu")
                syncwarp()
                with guard(lane == 0):
                    st(staged_at[n], staged, sem="release", scope="gpu")
        with if_(warp == N):  # ---- the coordinator: chunks of staged slots to each node's receive ring
            totals = [node_count(node_chan, n)[0].view(u32) for n in range(N)]
            put = [reg.u32(0) for _ in range(N)]
            retired = [reg.u32(0) for _ in range(N)]

            def pending() -> Pred:
                p = put[0] < totals[0]
                for n in range(1, N):
                    p = p | (put[n] < totals[n])
                return p

            with while_(pending):
                for n in range(N):
                    with if_(put[n] < totals[n]):
                        pe = n * G + local
                        k = min_(totals[n] - put[n], chunk)
                        # slots go back to the sender after nvshmem_quiet, only when it may need them: then
                        # the sender and this wait cannot block each other (put - retired <= ring - chunk)
                        with if_((put[n] - retired[n]) > (rdma_ring - chunk)):
                            with if_(lane == 0):
                                if BUG != "reuse":
                                    nvshmem_quiet()
                                st(retired_at[n], put[n], sem="release", scope="gpu")
                            syncwarp()
                            retired[n].set(put[n])
                        wait_until_ge(staged_at[n], put[n] + k, lane, "coordinator", channel, pe)
                        with if_(put[n] + k > rdma_ring):
                            wait_until_ge(gptr(rdma_counter(n, True)).cast(u64), put[n] + k - rdma_ring, lane,
                                          "rdma_room", channel, pe, wide=True)
                        src_ring = rdma_me + cvt(send_off, u64) + mul_wide((channel * N + n) * rdma_ring, slot_bytes)
                        dst_ring = rdma_me + cvt(recv_off, u64) + mul_wide((channel * N + node) * rdma_ring,
                                                                           slot_bytes)
                        for q in range_(put[n], put[n] + k):
                            off = mul_wide(q % rdma_ring, slot_bytes)
                            nvshmemx_putmem_nbi_warp(dst_ring + off, src_ring + off, cvt(slot_bytes, u64), pe)
                        with if_(lane == 0):
                            if BUG != "no_fence":
                                nvshmem_fence()
                            nvshmem_uint64_atomic_add(rdma_counter(node, False), cvt(k, u64), pe)
                        syncwarp()
                        add(put[n], k, out=put[n])
        for i in range(G):  # ---- NVLink receiver from this node's GPU i
            with if_(warp == N + 1 + i):
                expected = reg.u32(0)
                for m in range(N):
                    add(expected, node_count(recv_chan, m * G + i)[0].view(u32), out=expected)
                base = ld(nvl_peers[local])
                ring_at = base + cvt(nvl_ring_off, u64) + mul_wide((channel * G + i) * nvl_ring, slot_bytes)
                ctr = gptr(base + cvt(nvl_counters_off + (channel * G + i) * 8, u64)).cast(u32)
                got = reg.u32(0)
                with while_(lambda got=got, expected=expected: got < expected):  # type: ignore[misc]
                    tail = wait_until_ge(ctr[1], got + 1, lane, "nvl_receiver", channel, node * G + i)
                    for s in range_(got, tail):
                        slot = gptr(ring_at + mul_wide(s % nvl_ring, slot_bytes))
                        meta = slot.byte_offset(0)[meta_off].cast(u32)
                        row = ld(meta[local + 3])
                        copy_row(recv_x + mul_wide(row, x_bytes), slot, x_bytes, lane, UNIT, False)
                        if HAS_SCALES:
                            for w in range_(lane, scale_words, 32):
                                st(recv_scales[row * scale_words + w], ld(slot.byte_offset(0)[scales_off].cast(u32)[w]))
                        if HAS_TOPK:
                            for k in range_(lane, topk, 32):
                                g = ld(slot.byte_offset(0)[idx_off].cast(s64)[k])
                                mine = (g >= expert_lo) & (g < expert_hi)
                                st(recv_idx[row * topk + k], selp(g - expert_lo, -1, mine))
                                if HAS_W:
                                    w = ld(slot.byte_offset(0)[w_off].cast(f32)[k])
                                    st(recv_w[row * topk + k], selp(w, 0.0, mine))
                        with guard(lane == 0):
                            st(recv_src[row], ld(meta[0]).view(s32))
                    syncwarp()
                    with guard(lane == 0):
                        st(ctr[0], tail, sem="release", scope="sys")
                    got.set(tail)
    with else_():
        for j in range(G):  # ---- forwarder to this node's GPU j
            with if_(warp == j):
                peer = ld(nvl_peers[j])
                nvl_ring_at = peer + cvt(nvl_ring_off, u64) + mul_wide((channel * G + local) * nvl_ring, slot_bytes)
                nvl_ctr = gptr(peer + cvt(nvl_counters_off + (channel * G + local) * 8, u64)).cast(u32)
                sent = reg.u32(0)
                base = reg.u32(0)
                for m in range(N):
                    count, before = node_count(rdma_recv_chan, m)
                    first = add(base, before.view(u32))
                    ring_at = rdma_me + cvt(recv_off, u64) + mul_wide((channel * N + m) * rdma_ring, slot_bytes)
                    tail = reg.u32(0)
                    for k in range_(0, count.view(u32)):
                        with if_(tail <= k):
                            tail.set(wait_until_ge(gptr(rdma_counter(m, False)).cast(u64), k + 1, lane, "forwarder",
                                                   channel, m * G + local, wide=True))
                        slot = gptr(ring_at + mul_wide(k % rdma_ring, slot_bytes))
                        bits = ld(slot.byte_offset(0)[meta_off].cast(u32)[2])
                        if j == 0:
                            with guard(lane == 0):
                                st(fwd_bits[first + k], bits)
                        with if_(((bits >> j) & 1) != 0):
                            with if_(sent >= nvl_ring):
                                wait_until_ge(nvl_ctr[0], sent - nvl_ring + 1, lane, "nvl_room", channel, node * G + j)
                            dst = gptr(nvl_ring_at + mul_wide(sent % nvl_ring, slot_bytes))
                            copy_row(dst, slot, slot_bytes, lane, 16, False)
                            add(sent, 1, out=sent)
                            syncwarp()
                            with guard(lane == 0):
                                st(nvl_ctr[1], sent, sem="release", scope="gpu" if BUG == "gpu_scope" else "sys")
                        syncwarp()
                        with guard(lane == 0):
                            st(progress_at[j * N + m], k + 1, sem="release", scope="gpu")
                    add(base, ld(rdma_recv_chan[m * channels + channels - 1]).view(u32), out=base)
        with if_(warp == G):  # ---- the forwarder coordinator: RDMA heads back to each source, a chunk at a time
            for m in range(N):
                count = node_count(rdma_recv_chan, m)[0].view(u32)
                returned = reg.u32(0)
                with while_(lambda returned=returned, count=count: returned < count):  # type: ignore[misc]
                    want = min_(returned + chunk, count)
                    for j in range(G):
                        wait_until_ge(progress_at[j * N + m], want, lane, "forward_progress", channel, m * G + local)
                    with if_(lane == 0):
                        nvshmem_uint64_atomic_add(rdma_counter(node, True), cvt(want - returned, u64), m * G + local)
                    syncwarp()
                    returned.set(want)
