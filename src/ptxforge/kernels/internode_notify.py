# mypy: disable-error-code="valid-type,operator,arg-type"
# (kernel parameters are annotated with PTX types, `u32`, not Python types: mypy cannot follow arithmetic on them)
"""The internode notify kernel: counts per node and per rank, exchanged over RDMA, then over NVLink.

One block of NOTIFY_THREADS. It zeroes this GPU's ring counters (RDMA and NVLink) and its timeout record,
then with `EXCHANGE`:

1. counts this rank's tokens per (rank, channel) and per (node, channel) -- a token goes to a node when any
   of the node's GPUs wants it -- and makes them inclusive prefix sums over channels: one notify row
   (layout in `internode_layout`);
2. puts the row into the RDMA buffer of the GPU with its local index on every node (nvshmem_putmem_nbi),
   fences, and raises that GPU's RDMA barrier (nvshmem_uint64_atomic_add); waits for `nodes` arrivals;
3. writes the `nodes` rows it received into every GPU of its node (NVLink, plain stores), raises their
   NVLink barriers (red.release.sys); waits for `gpus` arrivals: it now holds every rank's row;
4. sums them into the rank prefix matrix [R, R], its receive counts per local expert, the per-channel
   prefix of what each rank sends it [R, C], and of what the GPU of its local index on each node sends its
   node [N, C] (the forwarder's share).

Without `EXCHANGE` (combine, a cached dispatch) it zeroes and meets the others at both barriers only.
"""

from __future__ import annotations

from ptxforge.dsl import (
    add,
    ctaid,
    cvt,
    if_,
    kernel,
    ld,
    min_,
    ptr,
    range_,
    red,
    reg,
    s32,
    selp,
    smid,
    st,
    syncthreads,
    tid,
    u8,
    u32,
    u64,
)
from ptxforge.dsl.nvshmem import nvshmem_fence, nvshmem_putmem_nbi, nvshmem_quiet, nvshmem_uint64_atomic_add
from ptxforge.kernels.comm import _notify_prefixes
from ptxforge.kernels.internode_device import bound_waits, gptr, late_waits, wait_until_ge
from ptxforge.kernels.internode_layout import ERROR_OFF, TIMEOUT_WORDS

NOTIFY_THREADS = 128


@kernel(arch="sm_90a")
@late_waits
def internode_notify(in_rank: ptr(u8), per_expert: ptr(s32), nvl_peers: ptr(u64), row: ptr(s32),
                     rank_prefix: ptr(s32), chan_prefix: ptr(s32), node_chan: ptr(s32), recv_chan: ptr(s32),
                     rdma_recv_chan: ptr(s32), expert_recv: ptr(s32), formats: ptr(u8), block_sm: ptr(u32),
                     rdma_me: u64, tokens: u32, per_channel: u32, rank: u32, node: u32, local: u32, channels: u32,
                     experts: u32, experts_per_rank: u32, epoch: u32, rdma_notify_off: u32, rdma_counters_off: u32,
                     rdma_counter_words: u32, nvl_notify_off: u32, nvl_zero_off: u32, nvl_zero_words: u32,
                     timeout_ns: u64, N: int = 2, G: int = 2, EXCHANGE: bool = True) -> None:
    bound_waits("notify", timeout_ns, nvl_peers, local, formats, node, rank)
    t = tid.x
    nt = NOTIFY_THREADS
    R = N * G
    with if_(t == 0):
        st(block_sm[ctaid.x], smid.get())
    nvl_me = gptr(ld(nvl_peers[local]))
    rdma = gptr(rdma_me)
    for i in range_(t, rdma_counter_words, nt):
        st(rdma.byte_offset(0)[rdma_counters_off + (i << 2)].cast(u32), 0)
    for i in range_(t, nvl_zero_words, nt):
        st(nvl_me.byte_offset(0)[nvl_zero_off + (i << 2)].cast(u32), 0)
    with if_(t < TIMEOUT_WORDS):
        st(nvl_me.byte_offset(0)[ERROR_OFF].cast(u32)[t], 0)
    words = R + experts + (R + N) * channels
    rank_word = R + experts
    node_word = rank_word + R * channels
    if EXCHANGE:
        # 1. this rank's row: channel counts per rank, then per node
        for j in range_(t, (R + N) * channels, nt):
            dst, c = j // channels, j % channels
            start = min_(c * per_channel, tokens)
            end = min_(start + per_channel, tokens)
            n = reg.s32(0)
            for tok in range_(start, end):
                with if_(dst < R):
                    add(n, cvt(ld(in_rank[tok * R + dst]), s32), out=n)
                with if_(dst >= R):
                    hit = reg.u32(0)
                    for g in range(G):
                        hit.set(hit | cvt(ld(in_rank[tok * R + (dst - R) * G + g]), u32))
                    add(n, selp(1, 0, hit != 0, type=s32), out=n)
            st(row[rank_word + j], n)
        syncthreads()
        for d in range_(t, R + N, nt):
            run = reg.s32(0)
            for c in range_(0, channels):
                add(run, ld(row[rank_word + d * channels + c]), out=run)
                st(row[rank_word + d * channels + c], run)
            with if_(d < R):
                st(row[d], run)
        for e in range_(t, experts, nt):
            st(row[R + e], ld(per_expert[e]))
        syncthreads()
        for j in range_(t, R * channels, nt):
            st(chan_prefix[j], ld(row[rank_word + j]))
        for j in range_(t, N * channels, nt):
            st(node_chan[j], ld(row[node_word + j]))
    # 2. RDMA: my row to the GPU of my local index on every node, then its barrier
    with if_(t < N):
        pe = t * G + local
        if EXCHANGE:
            nvshmem_putmem_nbi(rdma_me + cvt(rdma_notify_off + node * words * 4, u64), row, cvt(words * 4, u64), pe)
        nvshmem_fence()
        nvshmem_uint64_atomic_add(rdma_me, 1, pe)
    with if_(t == 0):
        wait_until_ge(rdma.cast(u64), epoch * N, None, "rdma_barrier", 0, rank, wide=True)
    syncthreads()
    # 3. NVLink: the rows of my local index's column to every GPU of my node, then its barrier
    if EXCHANGE:
        for i in range_(t, G * N * words, nt):
            j, rest = i // (N * words), i % (N * words)
            m, w = rest // words, rest % words
            v = ld(rdma.byte_offset(0)[rdma_notify_off].cast(s32)[rest])
            peer = gptr(ld(nvl_peers[j]))
            st(peer.byte_offset(0)[nvl_notify_off].cast(s32)[(m * G + local) * words + w], v)
    syncthreads()
    with if_(t < G):
        red("add", gptr(ld(nvl_peers[t])).cast(u32)[0], 1, sem="release", scope="sys")
    with if_(t == 0):
        wait_until_ge(nvl_me.cast(u32), epoch * G, None, "nvl_barrier", 0, rank)
    syncthreads()
    with if_(t == 0):
        nvshmem_quiet()
    if not EXCHANGE:
        return
    # 4. every rank's row is here: the prefix sums this rank needs
    rows = nvl_me.byte_offset(0)[nvl_notify_off].cast(s32)
    _notify_prefixes(rows, R, words, rank, experts_per_rank, rank_prefix, expert_recv, t, nt)
    for i in range_(t, R * channels, nt):
        s, c = i // channels, i % channels
        st(recv_chan[i], ld(rows[s * words + rank_word + rank * channels + c]))
    for i in range_(t, N * channels, nt):
        m, c = i // channels, i % channels
        st(rdma_recv_chan[i], ld(rows[(m * G + local) * words + node_word + node * channels + c]))
