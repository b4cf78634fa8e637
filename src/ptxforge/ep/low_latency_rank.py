"""One rank's side of the low-latency communication kernels (`ptxforge.kernels.low_latency`), numpy in and out.

`LowLatencyRank.dispatch` / `.combine` are generators of two phases, as `CommRank`'s: the first `next()`
queues the send kernel and yields, the second queues the receive kernel and yields, the third returns the
results. Whoever drives them runs the queued launches in between: a process of a gloo job (`Buffer`'s
kernels backend; a lone emulated IPC GPU runs each launch at once) or one process driving every rank of a
`Cluster` or `Node` (`LowLatencyGroup`, with a synchronize per phase). Between the phases no kernel of the
call is resident: the receive hook is the second phase.

A rank reaches a peer's buffer by pointer when `reachable[peer]` (same node), else by NVSHMEM puts to the same
offset of the symmetric buffer (the fabric's buffers must then be symmetric: `ClusterFabric` for one process's
`Cluster`, `RankGpuFabric` for a `ClusterRank`, one GPU of the cluster a process).
"""

from __future__ import annotations

from collections.abc import Callable, Generator
from typing import TYPE_CHECKING, Any

import ml_dtypes
import numpy as np

from ptxforge.ep.errors import CommTimeout
from ptxforge.errors import KernelFault
from ptxforge.kernels import low_latency as K
from ptxforge.runtime.buffers import DeviceBuffer

if TYPE_CHECKING:
    from ptxforge.dsl.kernel import Kernel
    from ptxforge.emu.cluster import Cluster
    from ptxforge.emu.cluster_procs import ClusterRank
    from ptxforge.runtime.device import Device

DEFAULT_TIMEOUT_S = 100.0
_SPECIAL: dict = {}


def _special(k: Kernel, **consts: Any) -> Kernel:
    key = (k.name, tuple(sorted(consts.items())))
    if key not in _SPECIAL:
        _SPECIAL[key] = k.specialize(**consts)
    return _SPECIAL[key]


class ClusterFabric:
    """The low-latency buffers of every rank of a `Cluster` (or a one-node `Node`'s GPUs, no RDMA): one
    symmetric allocation, so a put names the target's copy by the address of its own."""

    def __init__(self, cluster: Cluster) -> None:
        self.cluster = cluster
        self.buf: Any = None
        self.size = 0

    def ensure(self, rank: int, nbytes: int) -> int:
        if nbytes > self.size:
            self.size = max(nbytes, 2 * self.size)
            self.buf = self.cluster.malloc((self.size,), np.uint8, name="low-latency buffer")
        return 0

    def addresses(self) -> list[int]:
        return [self.buf.address(pe) for pe in range(len(self.cluster.devices))]


class RankGpuFabric:
    """The low-latency buffer of this process's GPU of an emulated cluster (`ClusterRank`, one GPU a process):
    one symmetric allocation (a collective, as nvshmem_malloc: every rank grows at the same call), the same
    node's copies mapped here (pointers) and the other nodes' reached by the NIC's puts. Launches go through
    the rank, so a failing one stops every rank with its message; `push` hands the NIC's queued puts to the
    targets once a send kernel has ended. ClusterRank has no nvshmem_free: a grown buffer's old allocation
    stays until the rank closes (its holder closes it)."""

    def __init__(self, rank: ClusterRank) -> None:
        self.rank = rank
        self.buf: Any = None
        self.size = 0
        self.peer_lost = False
        self.failed = False  # a launch of this rank failed: the cluster stopped

    def ensure(self, rank: int, nbytes: int) -> int:
        if nbytes > self.size:
            self.size = max(nbytes, 2 * self.size)
            self.buf = self.rank.malloc((self.size,), np.uint8,
                                        name=f"low-latency buffer {len(self.rank.heap.objects)}")
        return 0

    def addresses(self) -> list[int]:
        return list(self.buf.bases)

    def launch(self, kern: Kernel, grid: int, block: int, args: list,
               explain: Callable[[Exception], Exception | None]) -> Any:
        try:
            return self.rank.launch(kern, (grid,), (block,), args, explain=explain)
        except Exception:
            self.failed = True  # every rank has been told
            raise

    def push(self) -> None:
        try:
            self.rank.network.push()
        except Exception as e:
            self.failed = True
            self.rank.network.abort(f"{type(e).__name__}: {e}")
            raise

    def release(self) -> None:
        """Every rank is done with the buffers before any goes on to close its rank (a collective over the NIC
        transport: the same node's ranks map this rank's memory, the others' NICs poll it); after a peer was
        lost or the cluster stopped (a failure every rank raised), nothing to wait for."""
        if self.buf is not None and not (self.peer_lost or self.failed or self.rank.closed) \
                and self.rank.network.stopped is None:
            self.rank.synchronize(gather=False)


class LowLatencyRank:
    """Rank `rank` of `world` on `device`, its buffer and its peers' through `fabric` (an `IpcFabric`, or a
    `ClusterFabric` with `rdma` to the ranks not `reachable`)."""

    def __init__(self, rank: int, world: int, device: Device, fabric: Any, timeout_s: float = DEFAULT_TIMEOUT_S,
                 reachable: list[bool] | None = None, rdma: bool = False, num_sms: int = 16) -> None:
        self.rank, self.world, self.device, self.fabric = rank, world, device, fabric
        self.timeout_s, self.rdma, self.num_sms = timeout_s, rdma, num_sms
        self.reachable = reachable if reachable is not None else [True] * world
        self._stream: Any = None
        self.launches: list[dict] = []  # the last launches of this rank: call, phase, kernel, pending result
        self._live: tuple[str, DeviceBuffer] | None = None  # the phase in flight and its status words
        self._local_experts = 1  # of the last call (names a combine flag's owner)

    # ------------------------------------------------------------------ plumbing
    def _buf(self, temps: list, array: np.ndarray, name: str) -> DeviceBuffer:
        a = np.ascontiguousarray(array)
        b = DeviceBuffer.from_array(a if a.size else np.zeros(1, a.dtype), device=self.device, name=name)
        temps.append(b)
        return b

    def _empty(self, temps: list, shape: tuple[int, ...], dtype: Any, name: str) -> DeviceBuffer:
        return self._buf(temps, np.zeros(shape, dtype), name)

    def _peers(self, temps: list) -> DeviceBuffer:
        addresses = [a if ok else 0 for a, ok in zip(self.fabric.addresses(), self.reachable, strict=True)]
        return self._buf(temps, np.asarray(addresses, np.uint64), "low-latency peer buffers")

    def _timeout_ns(self) -> np.uint64:
        if not float(self.timeout_s) > 0:
            raise ValueError(f"timeout_s must be a positive number of seconds, got {self.timeout_s!r}")
        return np.uint64(min(int(float(self.timeout_s) * 1e9), 2**64 - 1))

    def _launch(self, call: str, phase: str, kern: Kernel, grid: int, block: int, args: list) -> None:
        if isinstance(self.fabric, RankGpuFabric):  # a failure stops every rank, with the timeout it was
            p = self.fabric.launch(kern, grid, block, args, lambda e: self.last_timeout
                                   if isinstance(e, KernelFault) else None)
            if phase == "send":
                self.fabric.push()  # the data is on its way when the send phase ends: no SM waits for it
            self.launches.append({"call": call, "phase": phase, "kernel": kern.name, "pending": p})
            del self.launches[:-16]
            return
        kw: dict = {}
        if self.device.streams_supported:
            if self._stream is None:
                self._stream = self.device.stream()
            kw["stream"] = self._stream
        p = kern.launch(grid=(grid,), block=(block,), args=args, device=self.device, **kw)
        self.launches.append({"call": call, "phase": phase, "kernel": kern.name, "pending": p})
        del self.launches[:-16]

    def _send_grid(self, *counts: int) -> int:
        return max(1, min(self.num_sms, -(-max(counts) // K.WARPS)))

    def timeout_error(self, status: DeviceBuffer, call: str) -> CommTimeout | None:
        """The `CommTimeout` a wait of `call` left in `status`, or None (no wait of this rank timed out)."""
        try:
            words = status.to_host().tolist()
        except Exception:  # noqa: BLE001  # a GPU context lost with the trap: nothing to read
            return None
        if not 1 <= words[0] <= len(K.LL_WAITS):
            return None
        what, a, b, seen = K.LL_WAITS[words[0] - 1], words[1], words[2], words[3]
        line = {"dispatch count": f"waited for rank {b}'s count for local expert {a} (saw epoch "
                                  f"{seen if seen else 'none'})",
                "send finished": f"waited for its own warps to finish writing expert {a}'s tokens ({seen} done)",
                "combine flag": f"waited for the flag of expert {a} (owned by rank {a // self._local_experts})"}[what]
        return CommTimeout(f"ptxforge.ep: rank {self.rank}'s {call} timed out: it {line}; each wait is bounded by "
                           f"timeout_s = {self.timeout_s:g} s: a peer that stopped, or a protocol error")

    @property
    def last_timeout(self) -> CommTimeout | None:
        """After a fault of the phase in flight (run by someone else): the timeout its status names, if any."""
        return self.timeout_error(self._live[1], self._live[0]) if self._live is not None else None

    # ------------------------------------------------------------------ dispatch
    def dispatch(self, x: np.ndarray, topk_idx: np.ndarray, num_max: int, num_experts: int, use_fp8: bool,
                 round_scale: bool, use_ue8m0: bool, half: int, epoch: int,
                 bug: str = "") -> Generator[None, None, dict[str, Any]]:
        """x: bf16 rows as uint16 [T, H]; topk_idx int64 [T, K]. Returns recv_x (uint8 [E_local, rows, bytes]),
        scales (f32 [E_local, H/128, rows], UE8M0 bytes [E_local, packs, rows, 4], or None), src_info,
        layout_range, recv_count."""
        t_, h = x.shape
        r_ = self.world
        el = num_experts // r_
        self._local_experts = el
        layout = K.LowLatencyLayout(r_, num_experts, num_max, h)
        self.fabric.ensure(self.rank, layout.nbytes)
        temps: list = []
        base = layout.base(half)
        peers = self._peers(temps)
        status = self._empty(temps, (K.STATUS_WORDS,), np.uint32, "low-latency status")
        kern = _special(K.ll_dispatch_send, R=r_, FP8=use_fp8, ROUND=round_scale, RDMA=self.rdma, BUG=bug)
        k_ = topk_idx.shape[1]
        args = [self._buf(temps, x.view(ml_dtypes.bfloat16), "x"),
                self._buf(temps, topk_idx.astype(np.int64), "topk_idx"),
                self._empty(temps, (max(t_, 1), layout.msg_bytes), np.uint8, "send buffer"),
                self._empty(temps, (num_experts,), np.uint32, "slot counters"),
                self._empty(temps, (num_experts,), np.uint32, "finished counters"), peers, status,
                np.uint32(t_), np.uint32(k_), np.uint32(h), np.uint32(layout.msg_bytes), np.uint32(self.rank),
                np.uint32(el), np.uint32(num_experts), np.uint32(num_max), np.uint32(base),
                np.uint32(base + layout.counts_off), np.uint32(epoch), self._timeout_ns()]
        self._live = ("low_latency_dispatch send", status)
        try:
            self._launch("low_latency_dispatch", "send", kern, self._send_grid(t_, num_experts), 32 * K.WARPS, args)
        except KernelFault as e:
            raise (self.timeout_error(status, "low_latency_dispatch send") or e) from None
        yield
        rows = num_max * r_
        xb = h if use_fp8 else 2 * h
        ns = h // 128
        packs = -(-ns // 4)
        outs = {"recv_x": self._empty(temps, (el, rows, xb), np.uint8, "packed_recv_x"),
                "src_info": self._buf(temps, np.full((el, rows), -1, np.int32), "packed_recv_src_info"),
                "layout_range": self._empty(temps, (el, r_), np.int64, "packed_recv_layout_range"),
                "recv_count": self._empty(temps, (el,), np.int32, "packed_recv_count")}
        scale_shape = (el, packs, rows, 4) if use_ue8m0 else (el, ns, rows, 4)  # bytes (f32: 4 a scale)
        scales = self._empty(temps, scale_shape if use_fp8 else (1,), np.uint8, "packed_recv_x_scales")
        kern = _special(K.ll_dispatch_recv, R=r_, FP8=use_fp8, UE8M0=use_ue8m0)
        args = [peers, outs["recv_x"], scales, outs["src_info"], outs["layout_range"], outs["recv_count"], status,
                np.uint32(self.rank), np.uint32(h), np.uint32(layout.msg_bytes), np.uint32(num_max),
                np.uint32(base), np.uint32(base + layout.counts_off), np.uint32(epoch), self._timeout_ns()]
        self._live = ("low_latency_dispatch receive", status)
        try:
            self._launch("low_latency_dispatch", "receive", kern, el, 32 * r_, args)
        except KernelFault as e:
            raise (self.timeout_error(status, "low_latency_dispatch receive") or e) from None
        yield
        shapes = {"recv_x": (el, rows, xb), "src_info": (el, rows), "layout_range": (el, r_), "recv_count": (el,)}
        result: dict[str, Any] = {k: _read(v, shapes[k]) for k, v in outs.items()}
        result["scales"] = _read(scales, scale_shape) if use_fp8 else None
        if use_fp8 and not use_ue8m0:
            result["scales"] = result["scales"].view(np.float32).reshape(el, ns, rows)
        self._live = None
        for b in temps:
            b.free()
        return result

    # ------------------------------------------------------------------ combine
    def combine(self, x: np.ndarray, layout_range: np.ndarray, src_info: np.ndarray, topk_idx: np.ndarray,
                topk_weights: np.ndarray, num_max: int, num_experts: int, half: int,
                epoch: int) -> Generator[None, None, np.ndarray]:
        """x: bf16 as uint16 [E_local, rows, H] (the experts' outputs in the dispatch's layout). Returns the
        combined rows, bf16 as uint16 [T, H]."""
        el, _, h = x.shape
        r_ = self.world
        self._local_experts = el
        t_, k_ = topk_idx.shape
        layout = K.LowLatencyLayout(r_, num_experts, num_max, h)
        self.fabric.ensure(self.rank, layout.nbytes)
        temps: list = []
        base = layout.base(half)
        peers = self._peers(temps)
        status = self._empty(temps, (K.STATUS_WORDS,), np.uint32, "low-latency status")
        kern = _special(K.ll_combine_send, R=r_, RDMA=self.rdma)
        args = [self._buf(temps, x.view(np.uint8), "combine x"),
                self._buf(temps, layout_range.astype(np.int64), "layout_range"),
                self._buf(temps, src_info.astype(np.int32), "src_info"), peers, np.uint32(self.rank), np.uint32(h),
                np.uint32(el), np.uint32(num_max), np.uint32(base + layout.combine_off),
                np.uint32(base + layout.flags_off), np.uint32(epoch)]
        self._live = ("low_latency_combine send", status)
        self._launch("low_latency_combine", "send", kern, self._send_grid(el * r_), 32 * K.WARPS, args)
        yield
        out = self._empty(temps, (max(t_, 1), h // 2), np.uint32, "combined_x")
        args = [self._buf(temps, topk_idx.astype(np.int64), "topk_idx"),
                self._buf(temps, topk_weights.astype(np.float32), "topk_weights"), peers, out, status,
                np.uint32(t_), np.uint32(k_), np.uint32(self.rank), np.uint32(h), np.uint32(num_experts),
                np.uint32(num_max), np.uint32(base + layout.combine_off), np.uint32(base + layout.flags_off),
                np.uint32(epoch), self._timeout_ns()]
        self._live = ("low_latency_combine receive", status)
        try:
            self._launch("low_latency_combine", "receive", K.ll_combine_recv, self._send_grid(t_), 32 * K.WARPS,
                         args)
        except KernelFault as e:
            raise (self.timeout_error(status, "low_latency_combine receive") or e) from None
        yield
        result = _read(out, (max(t_, 1), h // 2)).view(np.uint16)[:t_].copy()
        self._live = None
        for b in temps:
            b.free()
        return result


def _read(b: DeviceBuffer, shape: tuple[int, ...]) -> np.ndarray:
    n = int(np.prod(shape))
    return b.to_host().reshape(-1)[:n].reshape(shape).copy()
