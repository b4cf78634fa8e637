# mypy: disable-error-code="valid-type,operator,arg-type"
# (kernel parameters are annotated with PTX types, `u32`, not Python types: mypy cannot follow arithmetic on them)
"""The internode combine kernel: the dispatch in reverse (NVLink senders, forwarders that sum a node's copies
in f32 before one RDMA send, RDMA receivers).

`num_sms` blocks, channel c = block // 2 (the dispatch's channels: the handle's prefix tables).

Block 2c (G + 1 warps):
  - warp i < G, NVLink sender to this node's GPU i: the rows GPU i forwarded here in the dispatch (source
    ranks (m, i), m = 0 .. N-1, this channel's share of each) go back into GPU i's NVLink ring, in the order
    forwarder i passed them on;
  - warp G, RDMA receiver: for each of the channel's tokens, one node sum from every node the token went
    to (the RDMA receive ring of that node), summed in f32 in node order, plus the biases, rounded to BF16;
    the top-k weights summed in f32. Heads go back to the forwarders a chunk at a time
    (nvshmem_uint64_atomic_add).
Block 2c + 1 (warp 0), forwarder: for each source node m and each token its GPU of this local index sent
this node (in dispatch order; `fwd_bits` says which local GPUs had it), sums the copies from those GPUs'
NVLink rings in f32 (local order), rounds to BF16 into the send ring towards node m, and a chunk at a time
puts the slots, fences, raises the remote tail, and calls nvshmem_quiet before it writes slots a put may
still be reading.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from ptxforge.dsl import (
    add,
    bf16,
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
    ptr,
    range_,
    reg,
    s32,
    smid,
    st,
    tid,
    u8,
    u32,
    u64,
    while_,
)
from ptxforge.dsl.nvshmem import nvshmem_fence, nvshmem_quiet, nvshmem_uint64_atomic_add, nvshmemx_putmem_nbi_warp
from ptxforge.kernels.comm import ANY_BF16, ANY_F32, NC, _load_bf16, _prev, _store_bf16
from ptxforge.kernels.internode_device import bound_waits, copy_row, gptr, late_waits, syncwarp, wait_until_ge

if TYPE_CHECKING:
    from ptxforge.dsl.memory import Pointer
    from ptxforge.dsl.values import Index, Reg


@kernel(arch="sm_90a")
@late_waits
def internode_combine(x: ptr(u8), w: ANY_F32, bias0: ANY_BF16, bias1: ANY_BF16, in_rank: ptr(u8),
                      rank_prefix: ptr(s32), recv_chan: ptr(s32), rdma_recv_chan: ptr(s32), fwd_bits: ptr(u32),
                      nvl_peers: ptr(u64), out: ptr(bf16), out_w: ANY_F32, formats: ptr(u8), block_sm: ptr(u32),
                      rdma_me: u64, tokens: u32, per_channel: u32, rank: u32, node: u32, local: u32, hidden: u32,
                      topk: u32, rdma_ring: u32, nvl_ring: u32, chunk: u32, slot_bytes: u32, w_off: u32,
                      rdma_counters_off: u32, send_off: u32, recv_off: u32, nvl_counters_off: u32,
                      nvl_ring_off: u32, timeout_ns: u64, N: int = 2, G: int = 2, UNIT: int = 16,
                      NUM_BIAS: int = 0, HAS_W: bool = False, BUG: str = "") -> None:
    bound_waits("combine", timeout_ns, nvl_peers, local, formats, node, rank)
    R = N * G
    lane = tid.x & 31
    warp = tid.x >> 5
    channel = ctaid.x >> 1
    channels = nctaid.x >> 1
    with if_(tid.x == 0):
        st(block_sm[ctaid.x], smid.get())
    row_bytes = hidden << 1
    vec = UNIT // 2  # bf16 values per lane per step

    def rdma_counter(n: Index, head: bool) -> Reg:
        return rdma_me + cvt(rdma_counters_off + (channel * N + n) * 16 + (8 if head else 0), u64)

    def count_of(table: Pointer, n: Index) -> tuple[Reg, Reg]:
        before = _prev(table, n * channels + channel - 1, channel > 0)
        return ld(table[n * channels + channel]) - before, before

    with if_((ctaid.x & 1) == 0):
        for i in range(G):  # ---- NVLink sender to this node's GPU i (the forwarder of those rows)
            with if_(warp == i):
                peer = ld(nvl_peers[i])
                ring_at = peer + cvt(nvl_ring_off, u64) + mul_wide((channel * G + local) * nvl_ring, slot_bytes)
                ctr = gptr(peer + cvt(nvl_counters_off + (channel * G + local) * 8, u64)).cast(u32)
                sent = reg.u32(0)
                for m in range(N):
                    src = m * G + i
                    count, before = count_of(recv_chan, src)
                    row0 = add(ld(rank_prefix[(src - 1) * R + rank]) if src > 0 else reg.s32(0), before).view(u32)
                    for q in range_(0, count.view(u32)):
                        with if_(sent >= nvl_ring):
                            wait_until_ge(ctr[0], sent - nvl_ring + 1, lane, "nvl_sender", channel, node * G + i)
                        slot = gptr(ring_at + mul_wide(sent % nvl_ring, slot_bytes))
                        copy_row(slot, x + mul_wide(row0 + q, row_bytes), row_bytes, lane, UNIT, True)
                        if HAS_W:
                            for k in range_(lane, topk, 32):
                                st(slot.byte_offset(0)[w_off].cast(f32)[k], ld(w[(row0 + q) * topk + k], **NC))
                        add(sent, 1, out=sent)
                        syncwarp()
                        with guard(lane == 0):
                            st(ctr[1], sent, sem="release", scope="gpu" if BUG == "gpu_scope" else "sys")
        with if_(warp == G):  # ---- RDMA receiver: the node sums of each of the channel's tokens
            start = min_(channel * per_channel, tokens)
            end = min_(start + per_channel, tokens)
            rings = [rdma_me + cvt(recv_off, u64) + mul_wide((channel * N + n) * rdma_ring, slot_bytes)
                     for n in range(N)]
            consumed = [reg.u32(0) for _ in range(N)]
            returned = [reg.u32(0) for _ in range(N)]
            tails = [reg.u32(0) for _ in range(N)]

            def give_back(n: int, at_least: Index) -> None:
                """Return the consumed slots of node n's ring to its forwarder (a chunk at a time)."""
                with if_((consumed[n] - returned[n]) >= at_least):
                    with if_(lane == 0):
                        nvshmem_uint64_atomic_add(rdma_counter(node, True), cvt(consumed[n] - returned[n], u64),
                                                  n * G + local)
                    syncwarp()
                    returned[n].set(consumed[n])

            for tok in range_(start, end):
                flags = []
                for n in range(N):
                    hit = reg.u32(0)
                    for j in range(G):
                        hit.set(hit | cvt(ld(in_rank[tok * R + n * G + j], **NC), u32))
                    flags.append(hit != 0)
                for n in range(N):
                    with if_(flags[n] & (tails[n] <= consumed[n])):
                        tails[n].set(wait_until_ge(gptr(rdma_counter(n, False)).cast(u64), consumed[n] + 1, lane,
                                                   "rdma_receiver", channel, n * G + local, wide=True))
                slots = [gptr(rings[n] + mul_wide(consumed[n] % rdma_ring, slot_bytes)) for n in range(N)]
                for e in range_(lane * vec, hidden, 32 * vec):
                    acc = [reg.f32(0.0) for _ in range(vec)]
                    for n in range(N):
                        with if_(flags[n]):
                            vals = _load_bf16(slots[n].cast(bf16)[e], vec)
                            for v in range(vec):
                                add(acc[v], vals[v], out=acc[v])
                    for b in (bias0, bias1)[:NUM_BIAS]:
                        vals = _load_bf16(b[mad(tok, hidden, e)], vec, nc=True)
                        for v in range(vec):
                            add(acc[v], vals[v], out=acc[v])
                    _store_bf16(out[mad(tok, hidden, e)], acc)
                if HAS_W:
                    for k in range_(lane, topk, 32):
                        aw = reg.f32(0.0)
                        for n in range(N):
                            with if_(flags[n]):
                                add(aw, ld(slots[n].byte_offset(0)[w_off].cast(f32)[k]), out=aw)
                        st(out_w[tok * topk + k], aw)
                syncwarp()
                for n in range(N):
                    with if_(flags[n]):
                        add(consumed[n], 1, out=consumed[n])
                    give_back(n, chunk)
            for n in range(N):
                give_back(n, 1)
    with else_():
        with if_(warp == 0):  # ---- forwarder: one sum per (token, node), sent once over RDMA
            base = reg.u32(0)
            consumed = [reg.u32(0) for _ in range(G)]
            tails = [reg.u32(0) for _ in range(G)]
            nvl_me = ld(nvl_peers[local])
            nvl_rings = [nvl_me + cvt(nvl_ring_off, u64) + mul_wide((channel * G + j) * nvl_ring, slot_bytes)
                         for j in range(G)]
            nvl_ctrs = [gptr(nvl_me + cvt(nvl_counters_off + (channel * G + j) * 8, u64)).cast(u32) for j in range(G)]
            for m in range(N):
                pe = m * G + local
                count, before = count_of(rdma_recv_chan, m)
                total = count.view(u32)
                first = add(base, before.view(u32))
                send_ring = rdma_me + cvt(send_off, u64) + mul_wide((channel * N + m) * rdma_ring, slot_bytes)
                dst_ring = rdma_me + cvt(recv_off, u64) + mul_wide((channel * N + node) * rdma_ring, slot_bytes)
                done = reg.u32(0)
                quieted = reg.u32(0)
                with while_(lambda done=done, total=total: done < total):  # type: ignore[misc]
                    k = min_(total - done, chunk)
                    with if_((done + k - quieted) > rdma_ring):  # the slots about to be written: still read?
                        if BUG != "reuse":
                            with if_(lane == 0):
                                nvshmem_quiet()
                            syncwarp()
                        quieted.set(done)
                    with if_(done + k > rdma_ring):  # room in node m's receive ring
                        wait_until_ge(gptr(rdma_counter(m, True)).cast(u64), done + k - rdma_ring, lane, "rdma_room",
                                      channel, pe, wide=True)
                    for q in range_(done, done + k):
                        bits = ld(fwd_bits[first + q])
                        has = [((bits >> j) & 1) != 0 for j in range(G)]
                        for j in range(G):
                            with if_(has[j] & (tails[j] <= consumed[j])):
                                tails[j].set(wait_until_ge(nvl_ctrs[j][1], consumed[j] + 1, lane, "forwarder", channel,
                                                           node * G + j))
                        srcs = [gptr(nvl_rings[j] + mul_wide(consumed[j] % nvl_ring, slot_bytes)) for j in range(G)]
                        dst = gptr(send_ring + mul_wide(q % rdma_ring, slot_bytes))
                        for e in range_(lane * vec, hidden, 32 * vec):
                            acc = [reg.f32(0.0) for _ in range(vec)]
                            for j in range(G):
                                with if_(has[j]):
                                    vals = _load_bf16(srcs[j].cast(bf16)[e], vec)
                                    for v in range(vec):
                                        add(acc[v], vals[v], out=acc[v])
                            _store_bf16(dst.cast(bf16)[e], acc)
                        if HAS_W:
                            for kk in range_(lane, topk, 32):
                                aw = reg.f32(0.0)
                                for j in range(G):
                                    with if_(has[j]):
                                        add(aw, ld(srcs[j].byte_offset(0)[w_off].cast(f32)[kk]), out=aw)
                                st(dst.byte_offset(0)[w_off].cast(f32)[kk], aw)
                        syncwarp()
                        for j in range(G):
                            with if_(has[j]):
                                add(consumed[j], 1, out=consumed[j])
                                with guard(lane == 0):
                                    st(nvl_ctrs[j][0], consumed[j], sem="release", scope="sys")
                    for q in range_(done, done + k):
                        off = mul_wide(q % rdma_ring, slot_bytes)
                        nvshmemx_putmem_nbi_warp(dst_ring + off, send_ring + off, cvt(slot_bytes, u64), pe)
                    with if_(lane == 0):
                        if BUG != "no_fence":
                            nvshmem_fence()
                        nvshmem_uint64_atomic_add(rdma_counter(node, False), cvt(k, u64), pe)
                    syncwarp()
                    add(done, k, out=done)
                add(base, ld(rdma_recv_chan[m * channels + channels - 1]).view(u32), out=base)
