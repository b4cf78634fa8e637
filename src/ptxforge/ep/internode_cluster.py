"""`ClusterGroup`: every rank of an expert-parallel group on one emulated `Cluster`, running the internode
communication kernels (`ptxforge.kernels.internode_*`) from one process.

    cluster = Cluster(nodes=2, gpus_per_node=2, sms=8, sanitize=True)
    group = ClusterGroup(cluster)
    outs = group.dispatch(xs, scales, topk_idx, topk_w, num_experts=32, num_sms=4)   # one InternodeDispatch a rank
    again = group.dispatch(xs, scales, handles=[o.handle for o in outs], num_sms=4)   # a cached dispatch
    combined = group.combine(ys, [o.handle for o in outs], topk_w=[o.recv_w ...], biases=[(b0, b1)] * 4)
    group.traffic                                   # bytes per link of the last call (NIC and NVLink models)

Inputs and outputs are numpy arrays: x as bytes (uint8 [T, x_bytes]: BF16 or FP8 values), scales as u32
words (f32 or packed UE8M0) or None. Each call runs its notify on every rank, synchronizes the cluster (the
CPU reads the counts to size the outputs, as DeepEP does), then the dispatch or combine kernels. Received
rows are ordered by source rank, then source token; combine sums each token's copies per node in f32 (local
rank order), rounds to BF16 for the single scale-out send, then sums the nodes' copies in f32 (node order)
plus the biases and rounds to BF16: the torch backend's order, so results are bit-identical to it.

A wait that passes `timeout_s` traps its kernel; `CommTimeout` then names every rank whose wait timed out
(node, GPU, channel, peer, block, warp, counter, wanted and seen), read from each GPU's timeout record.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import ml_dtypes
import numpy as np

from ptxforge.ep.errors import CommTimeout
from ptxforge.errors import KernelFault
from ptxforge.kernels import internode_layout as L
from ptxforge.kernels.comm import copy_unit
from ptxforge.kernels.internode_combine import internode_combine
from ptxforge.kernels.internode_dispatch import internode_dispatch
from ptxforge.kernels.internode_notify import NOTIFY_THREADS, internode_notify
from ptxforge.runtime.buffers import DeviceBuffer

if TYPE_CHECKING:
    from ptxforge.dsl.kernel import Kernel
    from ptxforge.emu.cluster import Cluster, ClusterResult

_SPECIAL: dict = {}


def _special(k: Kernel, **consts: Any) -> Kernel:
    key = (k.name, tuple(sorted(consts.items())))
    if key not in _SPECIAL:
        _SPECIAL[key] = k.specialize(None, **consts)
    return _SPECIAL[key]


@dataclass
class InternodeHandle:
    """What a cached dispatch and the combine reuse (DeepEP's internode handle, in our terms)."""

    is_token_in_rank: np.ndarray   # bool [T, R]
    rank_prefix: np.ndarray        # int32 [R, R]: inclusive prefix over source ranks of tokens to each rank
    chan_prefix: np.ndarray        # int32 [R, C]: this rank's tokens to each rank, inclusive over channels
    node_chan: np.ndarray          # int32 [N, C]: this rank's tokens to each node, inclusive over channels
    recv_chan: np.ndarray          # int32 [R, C]: what each rank sends this rank, inclusive over channels
    rdma_recv_chan: np.ndarray     # int32 [N, C]: what node m's GPU of this local index sends this node
    fwd_bits: np.ndarray           # uint32 [rdma tokens received]: which local GPUs each wanted
    num_recv: int
    num_experts: int
    num_sms: int


@dataclass
class InternodeDispatch:
    recv_x: np.ndarray             # uint8 [n, x_bytes]
    recv_scales: np.ndarray | None
    recv_idx: np.ndarray | None    # int64 [n, K] local expert ids or -1
    recv_w: np.ndarray | None      # f32 [n, K]
    recv_src: np.ndarray           # int32 [n]: source token
    expert_counts: np.ndarray      # int32 [experts per rank]
    handle: InternodeHandle


@dataclass
class _Call:
    """One rank's device arrays of the call in progress."""

    temps: list = field(default_factory=list)

    def buf(self, a: np.ndarray, dev: Any, name: str) -> DeviceBuffer:
        a = np.ascontiguousarray(a)
        b = DeviceBuffer.from_array(a if a.size else np.zeros(1, a.dtype), device=dev, name=name)
        self.temps.append(b)
        return b

    def empty(self, shape: tuple[int, ...], dtype: Any, dev: Any, name: str) -> DeviceBuffer:
        b = DeviceBuffer((max(1, int(np.prod(shape))),), dtype, device=dev, name=name)
        b.logical_shape = tuple(int(s) for s in shape)  # type: ignore[attr-defined]
        self.temps.append(b)
        return b

    def free(self) -> None:
        for b in self.temps:
            b.free()
        self.temps = []


def _by_rank(ranks: list[int], values: Any) -> Any:
    """A list in `ranks`' order as a dict by rank (None stays None): indexed by rank as the list was."""
    if values is None:
        return None
    if len(values) != len(ranks):
        raise ValueError(f"one value per rank run here ({len(ranks)}), got {len(values)}")
    return dict(zip(ranks, values, strict=True))


def _host(b: DeviceBuffer) -> np.ndarray:
    shape = b.logical_shape  # type: ignore[attr-defined]
    return b.to_host()[:int(np.prod(shape))].reshape(shape).copy()


class ClusterGroup:
    """Rank r on `cluster.devices[r]` (node r // G, local GPU r % G). See the module docstring."""

    def __init__(self, cluster: Cluster, timeout_s: float = L.DEFAULT_TIMEOUT_S, rdma_ring: int = 8,
                 nvl_ring: int = 8, chunk: int = 4) -> None:
        self.cluster = cluster
        self._configure(cluster.gpus_per_node, list(range(len(cluster.devices))), len(cluster.devices), timeout_s,
                        rdma_ring, nvl_ring, chunk)

    def _configure(self, gpus_per_node: int, ranks: list[int], world: int, timeout_s: float, rdma_ring: int,
                   nvl_ring: int, chunk: int) -> None:
        """`ranks`: those this process runs (inputs and results come in their order) of `world`."""
        if chunk < 1 or rdma_ring < 2 * chunk or nvl_ring < 1:  # heads come back a chunk at a time
            raise ValueError(f"ClusterGroup: the RDMA ring must hold two chunks and the NVLink ring a slot "
                             f"(chunk={chunk}, rdma_ring={rdma_ring}, nvl_ring={nvl_ring})")
        if not float(timeout_s) > 0:
            raise ValueError(f"timeout_s must be a positive number of seconds, got {timeout_s!r}")
        self.G, self.R = gpus_per_node, world
        self.N = self.R // self.G
        self.ranks = ranks
        self.timeout_s, self.rdma_ring, self.nvl_ring, self.chunk = float(timeout_s), rdma_ring, nvl_ring, chunk
        self.rdma: Any = None  # SymmetricBuffer (a RankBuffer in a process of one rank): RDMA and NVLink buffers
        self.nvl: Any = None
        self.epoch = 0
        self._streams: dict = {}
        self.launches: list[tuple[str, int, str, DeviceBuffer, Any]] = []  # (call, rank, kernel, block_sm, pending)
        self.traffic: list[ClusterResult] = []  # per synchronize of the last call

    # ------------------------------------------------------------------ plumbing (a process of one rank overrides)
    def _device(self, r: int) -> Any:
        return self.cluster.devices[r]

    def _address(self, buf: Any, r: int) -> int:
        """Where rank `r`'s copy of a symmetric buffer lies, as this process's kernels address it."""
        return int(buf.address(r))

    def _own(self, buf: Any, r: int) -> np.ndarray:
        """Rank `r`'s copy of a symmetric buffer (a rank run here)."""
        return buf.read(r)

    def _malloc(self, nbytes: int, name: str) -> Any:
        return self.cluster.malloc(nbytes, np.uint8, name)

    def _stream(self, r: int, num_sms: int) -> Any:
        if (r, num_sms) not in self._streams:
            dev = self.cluster.devices[r]
            self._streams[r, num_sms] = dev.stream(sms=range(0, min(num_sms, dev.num_sms)))
        return self._streams[r, num_sms]

    def _timeout_ns(self) -> np.uint64:
        return np.uint64(min(int(self.timeout_s * 1e9), 2**64 - 1))

    def _grows(self, rdma: L.RdmaLayout, nvl: L.NvlLayout) -> bool:
        """Whether the layouts need larger symmetric buffers than the group has."""
        return self.rdma is None or self.rdma.nbytes < rdma.nbytes or self.nvl is None or \
            self.nvl.nbytes < nvl.nbytes

    def _ensure(self, rdma: L.RdmaLayout, nvl: L.NvlLayout) -> None:
        """Symmetric RDMA and NVLink buffers large enough for both layouts (fresh ones restart the epochs)."""
        if self._grows(rdma, nvl):
            size = max(rdma.nbytes, self.rdma.nbytes if self.rdma else 0)
            self.rdma = self._malloc(size, "internode RDMA buffer")
            size = max(nvl.nbytes, self.nvl.nbytes if self.nvl else 0)
            self.nvl = self._malloc(size, "internode NVLink buffer")
            self.epoch = 0

    def _nvl_peers(self, r: int) -> np.ndarray:
        assert self.nvl is not None
        node = r // self.G
        return np.asarray([self._address(self.nvl, node * self.G + j) for j in range(self.G)], np.uint64)

    def _launch(self, call: str, r: int, kern: Kernel, grid: int, block: int, args: list, num_sms: int,
                calls: dict[int, _Call]) -> None:
        dev = self._device(r)
        block_sm = DeviceBuffer((grid,), np.uint32, device=dev, name="block_sm")  # kept for sm_map
        block_sm.logical_shape = (grid,)  # type: ignore[attr-defined]
        i = next(j for j, a in enumerate(args) if isinstance(a, np.generic))
        args = [*args[:i], block_sm, *args[i:]]
        self.launches.append((call, r, kern.name, block_sm, self._kernel_launch(r, kern, grid, block, args, num_sms)))

    def _kernel_launch(self, r: int, kern: Kernel, grid: int, block: int, args: list, num_sms: int) -> Any:
        """Launch on rank `r`'s stream of `num_sms` SMs (run by the next `_run`)."""
        return kern.launch(grid=(grid,), block=(block,), args=args, device=self._device(r),
                           stream=self._stream(r, num_sms))

    def _run(self) -> None:
        """Synchronize the cluster; a trap that timed-out waits caused is raised as the CommTimeout naming them."""
        try:
            self.traffic.append(self.cluster.synchronize())
        except KernelFault as e:
            found = self.timeouts()
            if not found:
                raise
            raise CommTimeout("; ".join(found) + f"; each wait is bounded by timeout_s = {self.timeout_s:g} s") from e

    def timeouts(self) -> list[str]:
        """The timeout record of every GPU whose wait timed out, as messages."""
        if self.nvl is None:
            return []
        out = []
        for r in self.ranks:
            raw = self._own(self.nvl, r)[L.ERROR_OFF:L.ERROR_OFF + 4 * L.TIMEOUT_WORDS].copy().view(np.uint32)
            line = L.describe_timeout(raw.tolist())
            if line is not None:
                out.append(line)
        return out

    def _notify(self, r: int, call: _Call, in_rank: np.ndarray, per_expert: np.ndarray, topo: L.Topology,
                rdma: L.RdmaLayout, nvl: L.NvlLayout, per_channel: int, exchange: bool, name: str,
                num_sms: int, calls: dict[int, _Call]) -> dict[str, DeviceBuffer]:
        assert self.rdma is not None
        dev = self._device(r)
        R, N, C, E = topo.ranks, topo.nodes, topo.channels, topo.experts
        out = {n: call.empty(s, np.int32, dev, n) for n, s in (
            ("rank_prefix", (R, R)), ("chan_prefix", (R, C)), ("node_chan", (N, C)), ("recv_chan", (R, C)),
            ("rdma_recv_chan", (N, C)), ("expert_recv", (max(1, E // R),)))}
        row = call.empty((topo.notify_words,), np.int32, dev, "notify row")
        zero_off = nvl.local_off
        zero_words = (nvl.ring_off - nvl.local_off) // 4
        args = [call.buf(in_rank.astype(np.uint8), dev, "is_token_in_rank"),
                call.buf(per_expert.astype(np.int32), dev, "tokens per expert"),
                call.buf(self._nvl_peers(r), dev, "NVLink peers"), row, out["rank_prefix"], out["chan_prefix"],
                out["node_chan"], out["recv_chan"], out["rdma_recv_chan"], out["expert_recv"],
                call.buf(np.frombuffer(L.FORMAT_BYTES, np.uint8), dev, "timeout formats"),
                np.uint64(self._address(self.rdma, r)), np.uint32(in_rank.shape[0]), np.uint32(per_channel),
                np.uint32(r), np.uint32(r // self.G), np.uint32(r % self.G), np.uint32(C), np.uint32(E),
                np.uint32(E // R), np.uint32(self.epoch), np.uint32(rdma.notify_off), np.uint32(rdma.counters_off),
                np.uint32(rdma.counters_bytes // 4), np.uint32(nvl.notify_off), np.uint32(zero_off),
                np.uint32(zero_words), self._timeout_ns()]
        kern = _special(internode_notify, N=N, G=self.G, EXCHANGE=exchange)
        self._launch(name, r, kern, 1, NOTIFY_THREADS, args, num_sms, calls)
        return out

    def _layouts(self, experts: int, num_sms: int, slot_bytes: int) -> tuple[L.Topology, L.RdmaLayout, L.NvlLayout]:
        if num_sms < 2 or num_sms % 2:
            raise ValueError(f"num_sms must be a positive even number (num_sms / 2 channels), got {num_sms}")
        topo = L.Topology(self.N, self.G, experts, num_sms // 2)
        return topo, L.RdmaLayout(topo, self.rdma_ring, slot_bytes), L.NvlLayout(topo, self.nvl_ring, slot_bytes)

    def dispatch_layouts(self, x_bytes: int, scale_words: int, k: int, has_weights: bool, num_experts: int,
                         num_sms: int) -> tuple[L.Topology, L.RdmaLayout, L.NvlLayout]:
        """A dispatch's channels and its RDMA and NVLink buffer layouts."""
        slot = L.DispatchSlot(x_bytes, scale_words, k, has_weights, self.G)
        return self._layouts(num_experts, num_sms, slot.nbytes)

    def combine_layouts(self, hidden: int, k: int, num_experts: int,
                        num_sms: int) -> tuple[L.Topology, L.RdmaLayout, L.NvlLayout]:
        """A combine's channels and its RDMA and NVLink buffer layouts."""
        return self._layouts(num_experts, num_sms, L.CombineSlot(hidden, k).nbytes)

    def _start(self, call: str) -> dict[int, _Call]:
        for la in self.launches:
            if la[0] == call:
                la[3].free()
        self.launches = [la for la in self.launches if la[0] != call]
        self.traffic = []
        return {r: _Call() for r in self.ranks}

    # ------------------------------------------------------------------ dispatch
    def dispatch(self, x: list[np.ndarray], scales: list[np.ndarray] | None = None,
                 topk_idx: list[np.ndarray] | None = None, topk_w: list[np.ndarray] | None = None,
                 num_experts: int | None = None, num_sms: int = 4, handles: list[InternodeHandle] | None = None,
                 bug: str = "", in_ranks: list[np.ndarray] | None = None, per_experts: list[np.ndarray] | None = None,
                 on_notified: Callable[[list[dict]], object] | None = None) -> list[InternodeDispatch]:
        """Per rank run here (`self.ranks`): x uint8 [T, x_bytes], scales u32 [T, words] or None, top-k ids int64
        [T, K] and weights f32 [T, K] (or `handles` of an earlier dispatch: a cached dispatch of x and scales
        only); `in_ranks` (bool [T, R]) and `per_experts` (tokens per expert), else counted from the top-k ids.
        `on_notified(counts)`: called with each rank's notified counts (int32 arrays by name) once they are
        known, before the data moves."""
        R, G = self.R, self.G
        calls = self._start("dispatch")
        first = self.ranks[0]
        cached = handles is not None
        x, scales, topk_idx, topk_w, handles, in_ranks, per_experts = (
            _by_rank(self.ranks, a) for a in (x, scales, topk_idx, topk_w, handles, in_ranks, per_experts))
        if handles is not None:
            num_experts = handles[first].num_experts
            num_sms = handles[first].num_sms
            topk_idx = topk_w = None
        if num_experts is None or num_experts % R:
            raise ValueError(f"num_experts must be a multiple of the {R} ranks, got {num_experts}")
        k_ = topk_idx[first].shape[1] if topk_idx is not None else 0
        sw = scales[first].shape[1] if scales is not None else 0
        xb = x[first].shape[1]
        slot = L.DispatchSlot(xb, sw, k_, topk_w is not None, G)
        topo, rdma, nvl = self.dispatch_layouts(xb, sw, k_, topk_w is not None, num_experts, num_sms)
        self._ensure(rdma, nvl)
        self.epoch += 1
        rank_in: dict[int, np.ndarray] = {}
        notified = {}
        epr = num_experts // R
        for r in self.ranks:
            t_ = x[r].shape[0]
            if handles is not None:
                in_rank = handles[r].is_token_in_rank
                per_expert = np.zeros(num_experts, np.int32)
            elif in_ranks is not None and per_experts is not None:
                in_rank, per_expert = in_ranks[r], per_experts[r].astype(np.int32)
            else:
                assert topk_idx is not None
                idx = topk_idx[r]
                in_rank = np.zeros((t_, R), bool)
                rows, cols = np.nonzero(idx >= 0)
                in_rank[rows, idx[rows, cols] // epr] = True
                per_expert = np.bincount(idx[idx >= 0].ravel(), minlength=num_experts).astype(np.int32)
            rank_in[r] = in_rank
            per_channel = max(1, -(-t_ // topo.channels))
            notified[r] = self._notify(r, calls[r], in_rank, per_expert, topo, rdma, nvl, per_channel, not cached,
                                       "dispatch", num_sms, calls)
        self._run()
        if handles is not None:
            prefix = {r: {"rank_prefix": h.rank_prefix, "chan_prefix": h.chan_prefix, "node_chan": h.node_chan,
                          "recv_chan": h.recv_chan, "rdma_recv_chan": h.rdma_recv_chan,
                          "expert_recv": np.zeros(epr, np.int32)} for r in self.ranks for h in [handles[r]]}
        else:
            prefix = {r: {k: _host(v) for k, v in n.items()} for r, n in notified.items()}
        if on_notified is not None:
            on_notified([prefix[r] for r in self.ranks])
        outs = {}
        for r in self.ranks:
            dev = self._device(r)
            c = calls[r]
            p = prefix[r]
            t_ = x[r].shape[0]
            n = int(p["rank_prefix"][-1, r])
            rdma_total = int(p["rdma_recv_chan"][:, -1].sum())
            o = {"recv_x": c.empty((n, xb), np.uint8, dev, "recv_x"),
                 "recv_scales": c.empty((n, max(sw, 1)), np.uint32, dev, "recv_scales"),
                 "recv_idx": c.empty((n, max(k_, 1)), np.int64, dev, "recv_topk_idx"),
                 "recv_w": c.empty((n, max(k_, 1)), np.float32, dev, "recv_topk_weights"),
                 "recv_src": c.empty((n,), np.int32, dev, "recv_src"),
                 "fwd_bits": c.empty((rdma_total,), np.uint32, dev, "forwarded bits")}
            dummy = c.empty((1,), np.uint32, dev, "unused")
            pb = {k: c.buf(v.astype(np.int32), dev, k) for k, v in p.items()}
            kern = _special(internode_dispatch, N=self.N, G=G, UNIT=copy_unit(xb), HAS_SCALES=scales is not None,
                            HAS_TOPK=topk_idx is not None, HAS_W=topk_w is not None, BUG=bug)
            assert self.rdma is not None
            args = [c.buf(x[r], dev, "x"), c.buf(scales[r], dev, "x scales") if scales is not None else dummy,
                    c.buf(topk_idx[r], dev, "topk_idx") if topk_idx is not None else dummy,
                    c.buf(topk_w[r], dev, "topk_weights") if topk_w is not None else dummy,
                    c.buf(rank_in[r].astype(np.uint8), dev, "is_token_in_rank"), pb["rank_prefix"],
                    pb["chan_prefix"], pb["node_chan"], pb["recv_chan"], pb["rdma_recv_chan"],
                    c.buf(self._nvl_peers(r), dev, "NVLink peers"), o["recv_x"], o["recv_scales"], o["recv_idx"],
                    o["recv_w"], o["recv_src"], o["fwd_bits"],
                    c.buf(np.frombuffer(L.FORMAT_BYTES, np.uint8), dev, "timeout formats"),
                    np.uint64(self._address(self.rdma, r)), np.uint32(t_), np.uint32(max(1, -(-t_ // topo.channels))),
                    np.uint32(r), np.uint32(r // G), np.uint32(r % G), np.uint32(xb), np.uint32(sw), np.uint32(k_),
                    np.uint32(self.rdma_ring), np.uint32(self.nvl_ring), np.uint32(self.chunk),
                    np.uint32(slot.nbytes), np.uint32(slot.scales_off), np.uint32(slot.idx_off),
                    np.uint32(slot.w_off), np.uint32(slot.meta_off), np.uint32(rdma.counters_off),
                    np.uint32(rdma.send_off), np.uint32(rdma.recv_off), np.uint32(nvl.local_off),
                    np.uint32(nvl.local_words), np.uint32(nvl.counters_off), np.uint32(nvl.ring_off),
                    np.int64(r * epr), np.int64((r + 1) * epr), self._timeout_ns()]
            self._launch("dispatch", r, kern, num_sms, 32 * (self.N + 1 + G), args, num_sms, calls)
            outs[r] = o
        self._run()
        results = []
        for r in self.ranks:
            o, p = outs[r], prefix[r]
            handle = InternodeHandle(rank_in[r], p["rank_prefix"], p["chan_prefix"], p["node_chan"], p["recv_chan"],
                                     p["rdma_recv_chan"], _host(o["fwd_bits"]), int(p["rank_prefix"][-1, r]),
                                     num_experts, num_sms)
            results.append(InternodeDispatch(
                _host(o["recv_x"]), _host(o["recv_scales"])[:, :sw] if scales is not None else None,
                _host(o["recv_idx"])[:, :k_] if topk_idx is not None else None,
                _host(o["recv_w"])[:, :k_] if topk_w is not None else None, _host(o["recv_src"]),
                p["expert_recv"][:epr].copy(), handles[r] if handles is not None else handle))
            calls[r].free()
        return results

    # ------------------------------------------------------------------ combine
    def combine(self, x: list[np.ndarray], handles: list[InternodeHandle], topk_w: list[np.ndarray] | None = None,
                biases: list[tuple[np.ndarray, ...]] | None = None, num_sms: int | None = None,
                bug: str = "") -> list[tuple[np.ndarray, np.ndarray | None]]:
        """Per rank: x bf16 (ml_dtypes) [num_recv, H] in the dispatch's row order, optional f32 weights
        [num_recv, K] and up to two bf16 biases [T, H]. Returns (bf16 [T, H], f32 [T, K] or None) per rank."""
        G = self.G
        calls = self._start("combine")
        first = self.ranks[0]
        x, handles, topk_w, biases = (_by_rank(self.ranks, a) for a in (x, handles, topk_w, biases))
        num_sms = num_sms or handles[first].num_sms
        h = x[first].shape[1]
        k_ = topk_w[first].shape[1] if topk_w is not None else 0
        nb = len(biases[first]) if biases is not None else 0
        if handles[first].num_sms != num_sms:
            raise ValueError(f"combine runs on the dispatch's channels: num_sms {handles[first].num_sms}, "
                             f"got {num_sms}")
        slot = L.CombineSlot(h, k_)
        topo, rdma, nvl = self.combine_layouts(h, k_, handles[first].num_experts, num_sms)
        self._ensure(rdma, nvl)
        self.epoch += 1
        for r in self.ranks:
            t_ = handles[r].is_token_in_rank.shape[0]
            self._notify(r, calls[r], handles[r].is_token_in_rank, np.zeros(topo.experts, np.int32), topo, rdma, nvl,
                         max(1, -(-t_ // topo.channels)), False, "combine", num_sms, calls)
        outs = {}
        assert self.rdma is not None
        for r in self.ranks:
            dev, c, hd = self._device(r), calls[r], handles[r]
            t_ = hd.is_token_in_rank.shape[0]
            out = c.empty((t_, h), ml_dtypes.bfloat16, dev, "combined_x")
            out_w = c.empty((t_, max(k_, 1)), np.float32, dev, "combined_topk_weights")
            dummy = c.empty((1,), np.uint32, dev, "unused")
            bias = [c.buf(b, dev, f"bias {i}") for i, b in enumerate(biases[r])] if biases is not None else []
            bias += [dummy] * (2 - len(bias))
            kern = _special(internode_combine, N=self.N, G=G, UNIT=copy_unit(2 * h), NUM_BIAS=nb,
                            HAS_W=topk_w is not None, BUG=bug)
            args = [c.buf(np.ascontiguousarray(x[r]).view(np.uint8), dev, "combine x"),
                    c.buf(topk_w[r], dev, "combine weights") if topk_w is not None else dummy, *bias,
                    c.buf(hd.is_token_in_rank.astype(np.uint8), dev, "is_token_in_rank"),
                    c.buf(hd.rank_prefix, dev, "rank_prefix"), c.buf(hd.recv_chan, dev, "recv_chan"),
                    c.buf(hd.rdma_recv_chan, dev, "rdma_recv_chan"), c.buf(hd.fwd_bits, dev, "forwarded bits"),
                    c.buf(self._nvl_peers(r), dev, "NVLink peers"), out, out_w,
                    c.buf(np.frombuffer(L.FORMAT_BYTES, np.uint8), dev, "timeout formats"),
                    np.uint64(self._address(self.rdma, r)), np.uint32(t_), np.uint32(max(1, -(-t_ // topo.channels))),
                    np.uint32(r), np.uint32(r // G), np.uint32(r % G), np.uint32(h), np.uint32(k_),
                    np.uint32(self.rdma_ring), np.uint32(self.nvl_ring), np.uint32(self.chunk),
                    np.uint32(slot.nbytes), np.uint32(slot.w_off), np.uint32(rdma.counters_off),
                    np.uint32(rdma.send_off), np.uint32(rdma.recv_off), np.uint32(nvl.counters_off),
                    np.uint32(nvl.ring_off), self._timeout_ns()]
            self._launch("combine", r, kern, num_sms, 32 * (G + 1), args, num_sms, calls)
            outs[r] = (out, out_w)
        self._run()
        results = []
        for r in self.ranks:
            out, out_w = outs[r]
            results.append((_host(out), _host(out_w)[:, :k_].copy() if topk_w is not None else None))
            calls[r].free()
        return results

    # ------------------------------------------------------------------ what ran where
    def sm_map(self, rank: int | None = None) -> list[dict]:
        """Rank `rank`'s last dispatch and combine (default: the first rank run here): per block its SM, role and
        thread-instructions."""
        rank = self.ranks[0] if rank is None else rank
        rows = []
        for call, r, name, block_sm, pending in self.launches:
            if r != rank:
                continue
            res = pending.result() if hasattr(pending, "result") else pending  # a stream's, or a finished launch
            per_sm = np.asarray(res.per_sm)
            for b, sm in enumerate(_host(block_sm).tolist()):
                if "notify" in name:
                    role = "notify"
                elif call == "dispatch":
                    role = "RDMA sender + coordinator + NVLink receiver" if b % 2 == 0 else "forwarder"
                else:
                    role = "NVLink sender + RDMA receiver" if b % 2 == 0 else "forwarder"
                rows.append({"call": call, "kernel": name, "block": b, "sm": int(sm), "role": role,
                             "thread_instructions": int(per_sm[sm]) if sm < per_sm.size else 0})
        return rows
